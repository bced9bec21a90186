"""``api_precision_compare``: the NPU's pre-check details against the GPU's, both judged against the same
CPU benchmark, with the seed's three-way verdicts (pass / warning / error, SKIP) per output and per API.

The rules (seed §5, msprobe 1.0.4 ``compare/api_precision_compare.py``), chosen per output by the API's
algorithm (standards.standard_of) and the NPU's ``DEVICE Dtype``, in this order:

1. blank ``DEVICE Dtype`` (the output was not computed): SKIP, the NPU row's Message.
2. thousandth (conv1d/conv2d): dual-thousandth ``>= 0.999`` -> pass, else error.
3. binary consistency (the API's standard, or a non-float dtype: ints, bools, builtins): error rate 0 ->
   pass, else error.
4. absolute threshold: inf/nan error rate, relative error rate, absolute error rate all 0 -> pass,
   else error.
5. ULP (float16/bfloat16/float32): NPU share of ULP errors above the threshold at most the GPU's
   (share ratio <= 1, ``ULP_EQUAL_SHARE``) -> pass; else float32: mean ULP error < 64 or share < 0.05 ->
   pass; float16/bfloat16: share < 0.001 -> pass; else error. Inconsistent inf/nan in the ULP metrics ->
   error. The ULP metric itself is 1.0.4's (metrics.ulp_metrics): the ULP of the bench's binade, floored
   only at the format's smallest normal exponent, so a near-zero bench (a bias gradient after
   cancellation) gives huge ULP errors on both devices; the share ratio is what makes that fair.
6. benchmark (float16/bfloat16/float32): each of small-value error share, RMSE, max and mean relative
   error as the NPU/GPU ratio (0/0 -> 1; x/0 -> 10000); ratio > error threshold -> error, > 1 -> warning
   (thresholds: standards.BENCHMARK_RATIO_THRESHOLDS: 2, 2, 10, 2); a NaN/inf on one side only -> error,
   the same NaN/inf on both -> pass. The error-balance ratio is reported but does not count (seed).
7. any other dtype (float64, complex): SKIP, "This data type does not support benchmark compare."

Per API (forward rows, backward rows), as run_ut: no rows -> blank, all SKIP -> SKIP, any error -> error,
any warning -> warning, else pass. ``topk`` forward errors carry the seed's note on ``sorted=False``.

Differences from 1.0.4 (deliberate):

- ``ULP_FLOAT32_RULE``: 1.0.4 compares the dtype *string* of the CSV with ``torch.float32`` (never
  equal), so it applies the float16 rule (share < 0.001) to float32 outputs; we apply the seed's float32
  rule (mean < 64 or share < 0.05 or below the GPU's).
- ``ULP_EQUAL_SHARE``: an NPU whose share of ULP errors equals the GPU's passes (share ratio <= 1); the
  seed and 1.0.4 ask for a share strictly below the GPU's, so an NPU exactly as accurate as the GPU was
  an error wherever both miss the absolute limits (e.g. a float32 bias gradient whose bench is near zero
  after cancellation: share 0.27, mean ULP ~2.4e6 on both). The benchmark ratios need no such change:
  the seed already passes a ratio <= 1 (0/0 counts 1). The two-party rules (binary consistency,
  absolute threshold) judge the NPU against the CPU bench alone, by the seed's design; the GPU row does
  not enter them, so identical NPU and GPU rows can still fail there.
- ``THOUSANDTH_NO_WORSE_THAN_GPU``: a conv1d/conv2d output that misses the dual-thousandth limit passes
  when the GPU's dual-thousandth ratio is no better: both then show the same round-off (a conv bias
  gradient in front of a batch norm is 0 in float64 and float32 residue of ~1e-7 on any device, ratio
  0); the seed judges the NPU alone there, so such an output was an error on every device.
- ``MISSING_GPU_ROW``: an NPU output absent from the GPU CSV is a SKIP row saying so (1.0.4 drops it
  with a log line).
- a metric cell that is not a number makes that row SKIP with a message naming the column (1.0.4 does
  the same through an exception, and may then write the API's result twice); an invalid row name is a
  SKIP row (as 1.0.4).
- duplicate GPU rows of one output: FileFormatError naming the CSV (1.0.4 raises as well).
"""

from __future__ import annotations

import math
from typing import Dict, List, Mapping, Optional, Tuple

from ptdbg_ascend.errors import FileFormatError
from ptdbg_ascend.formats.naming import parse_ut_row_name
from ptdbg_ascend.precheck import columns as col
from ptdbg_ascend.precheck import csv_files
from ptdbg_ascend.precheck import standards as std
from ptdbg_ascend.precheck.columns import ERROR, PASS, SKIP, SPACE, WARNING

RESULT_STEM = "api_precision_compare_result_"
DETAILS_STEM = "api_precision_compare_details_"
UNSUPPORTED_MESSAGE = "This data type does not support benchmark compare."
# the seed's note on topk (compare_utils.CompareMessage)
API_NOTES: Mapping[str, str] = {
    "topk": "在npu上，topk的入参sorted=False时不生效，会返回有序tensor，而cpu上会返回无序tensor。 "
            "如果topk精度不达标，请检查是否是该原因导致的。",
}
BENCHMARK_MESSAGES: Mapping[str, str] = {
    "small_value": "小值域错误比值超过阈值",
    "rmse": "均方根误差比值超过阈值",
    "max_rel_err": "相对误差最大值比值超过阈值",
    "mean_rel_err": "相对误差平均值比值超过阈值",
}


class _BadCell(Exception):
    """A metric cell that is not a number (turned into a SKIP row)."""


def _number(row: Mapping[str, str], title: str) -> float:
    text = (row.get(title) or "").strip()
    try:
        return float(text)
    except ValueError:
        raise _BadCell(f"{title} is not a number: {row.get(title)!r}") from None


def ratio(npu: float, gpu: float) -> Tuple[float, bool, str]:
    """NPU/GPU ratio of one metric: ``(ratio, inf/nan consistent, message)``. NaN/inf on either side:
    ratio NaN, consistent only when both are the same inf or both NaN; 0/0 -> 1; x/0 -> 10000; else |x/y|."""
    if math.isnan(npu) or math.isnan(gpu) or math.isinf(npu) or math.isinf(gpu):
        same = (math.isnan(npu) and math.isnan(gpu)) or (math.isinf(npu) and math.isinf(gpu) and npu == gpu)
        return float("nan"), same, "" if same else "inf或nan不一致"
    if gpu == 0.0:
        return (1.0 if npu == 0.0 else std.RATIO_WHEN_GPU_ZERO), True, ""
    return abs(npu / gpu), True, ""


def _ratio_status(value: float, metric: str) -> str:
    if math.isnan(value) or math.isinf(value):
        return PASS
    limits = std.BENCHMARK_RATIO_THRESHOLDS[metric]
    if value > limits["error"]:
        return ERROR
    if value > limits["warning"]:
        return WARNING
    return PASS


_BENCHMARK_FIELDS = [  # (metric, input column, ratio column, status column)
    ("small_value", col.SMALL_VALUE_ERR_RATIO, col.SMALL_VALUE_ERR_RATIO_RATIO, col.SMALL_VALUE_ERR_STATUS),
    ("rmse", col.RMSE, col.RMSE_RATIO, col.RMSE_STATUS),
    ("max_rel_err", col.MAX_REL_ERR, col.MAX_REL_ERR_RATIO, col.MAX_REL_ERR_STATUS),
    ("mean_rel_err", col.MEAN_REL_ERR, col.MEAN_REL_ERR_RATIO, col.MEAN_REL_ERR_STATUS),
    ("eb", col.EB, col.EB_RATIO, col.EB_STATUS),
]


def _benchmark(npu: Mapping[str, str], gpu: Mapping[str, str], out: Dict[str, object]) -> str:
    statuses, messages = [], []
    for metric, source, ratio_title, status_title in _BENCHMARK_FIELDS:
        value, consistent, note = ratio(_number(npu, source), _number(gpu, source))
        status = _ratio_status(value, metric) if (consistent or metric == "eb") else ERROR
        out[ratio_title], out[status_title] = value, status
        if note:
            messages.append(source + note)
        if metric != "eb":  # the seed: error balance does not count in the result yet
            statuses.append(status)
            if status in (ERROR, WARNING):
                messages.append(f"{status.upper()}: {BENCHMARK_MESSAGES[metric]}")
    out[col.MESSAGE] = "\n".join(messages)
    return col.aggregate_status(statuses)


def _ulp(npu: Mapping[str, str], gpu: Mapping[str, str], dtype: str, out: Dict[str, object]) -> str:
    mean_npu, mean_gpu = _number(npu, col.MEAN_ULP_ERR), _number(gpu, col.MEAN_ULP_ERR)
    share = _number(npu, col.ULP_ERR_PROPORTION)
    share_ratio, consistent, note = ratio(share, _number(gpu, col.ULP_ERR_PROPORTION))
    messages = [col.ULP_ERR_PROPORTION + note] if note else []
    if any(math.isnan(v) or math.isinf(v) for v in (mean_npu, mean_gpu)):
        _, same, mean_note = ratio(mean_npu, mean_gpu)
        consistent = consistent and same
        if mean_note:
            messages.append(col.MEAN_ULP_ERR + mean_note)
    out[col.MEAN_ULP_ERR], out[col.ULP_ERR_PROPORTION], out[col.ULP_ERR_PROPORTION_RATIO] = mean_npu, share, share_ratio
    if not consistent:
        status = ERROR
    elif share_ratio <= 1:  # ULP_EQUAL_SHARE: as accurate as the GPU is not an error
        status = PASS
    elif dtype == std.FLOAT32:  # ULP_FLOAT32_RULE
        status = PASS if (mean_npu < std.ULP_FLOAT32_MEAN_LIMIT or share < std.ULP_FLOAT32_PROPORTION_LIMIT) else ERROR
    else:
        status = PASS if share < std.ULP_HALF_PROPORTION_LIMIT else ERROR
    if status == ERROR and consistent:
        messages.append("ERROR: ULP误差不满足标准")
    out[col.ULP_ERR_STATUS] = status
    out[col.MESSAGE] = "\n".join(messages)
    return status


def _absolute(npu: Mapping[str, str], out: Dict[str, object]) -> str:
    messages, statuses = [], []
    for source, status_title, label in ((col.INF_NAN_ERR_RATIO, col.INF_NAN_STATUS, "inf/nan错误率"),
                                        (col.REL_ERR_RATIO, col.REL_ERR_STATUS, "相对误差错误率"),
                                        (col.ABS_ERR_RATIO, col.ABS_ERR_STATUS, "绝对误差错误率")):
        value = _number(npu, source)
        status = PASS if value == 0 else ERROR
        out[source], out[status_title] = value, status
        statuses.append(status)
        if status == ERROR:
            messages.append(f"ERROR: {label}超过阈值")
    out[col.MESSAGE] = "\n".join(messages)
    return col.aggregate_status(statuses)


def judge_pair(npu: Mapping[str, str], gpu: Optional[Mapping[str, str]]) -> Dict[str, object]:
    """The api_precision_compare details cells (by PRECISION_DETAIL_COLUMNS title) of one output from its
    NPU and GPU details rows (``gpu`` None: not in the GPU CSV). ``FINAL_RESULT`` holds the status."""
    name = npu.get(col.API_NAME) or ""
    out: Dict[str, object] = {col.API_NAME: name}
    parsed = parse_ut_row_name(name)
    dtype = (npu.get(col.DEVICE_DTYPE) or "").strip()

    def finish(status: str, algorithm: str = "", message: Optional[str] = None) -> Dict[str, object]:
        out[col.FINAL_RESULT], out[col.ALGORITHM] = status, algorithm
        if message is not None:
            out[col.MESSAGE] = message
        return out

    if parsed is None:
        return finish(SKIP, message=f"The API name {name} is invalid.")
    key = parsed[0]
    if not dtype:
        return finish(SKIP, message=npu.get(col.MESSAGE) or "")
    if gpu is None:
        return finish(SKIP, message=f"MISSING_GPU_ROW: {name} is not in the GPU details.")
    standard = std.standard_of(key)
    try:
        if standard == std.THOUSANDTH:
            value = _number(npu, col.REL_ERR_THOUSANDTH)
            status = PASS if value >= std.THOUSANDTH_PASS_RATIO else ERROR
            message = "ERROR: 双千指标不达标" if status == ERROR else ""
            if status == ERROR and value >= _number(gpu, col.REL_ERR_THOUSANDTH):
                # THOUSANDTH_NO_WORSE_THAN_GPU: both miss it the same way (round-off of a value that is
                # zero in float64, such as a conv bias gradient in front of a batch norm).
                status, message = PASS, "THOUSANDTH_NO_WORSE_THAN_GPU: the GPU's dual-thousandth ratio is no better."
            out[col.REL_ERR_THOUSANDTH], out[col.REL_ERR_THOUSANDTH_STATUS] = value, status
            return finish(status, std.ALGORITHM_TITLES[std.THOUSANDTH], message)
        if dtype not in std.BINARY_UNSUPPORTED_DTYPES or standard == std.BINARY:
            value = _number(npu, col.ERROR_RATE)
            status = PASS if value == 0 else ERROR
            out[col.ERROR_RATE], out[col.ERROR_RATE_STATUS] = value, status
            message = "ERROR: 二进制一致错误率超过阈值" + ("\n" + API_NOTES[key] if key in API_NOTES else "") \
                if status == ERROR else ""
            return finish(status, std.ALGORITHM_TITLES[std.BINARY], message)
        if dtype in std.PRECISION_COMPARE_UNSUPPORTED_DTYPES:
            return finish(SKIP, message=UNSUPPORTED_MESSAGE)
        if standard == std.ABSOLUTE:
            return finish(_absolute(npu, out), std.ALGORITHM_TITLES[std.ABSOLUTE])
        if standard == std.ULP and dtype in std.ULP_DTYPES:
            return finish(_ulp(npu, gpu, dtype, out), std.ALGORITHM_TITLES[std.ULP])
        if dtype in std.BENCHMARK_DTYPES:
            return finish(_benchmark(npu, gpu, out), std.ALGORITHM_TITLES[std.BENCHMARK])
        return finish(SKIP, message=UNSUPPORTED_MESSAGE)
    except _BadCell as error:
        return finish(SKIP, message=str(error))


def api_precision_compare(npu_csv: str, gpu_csv: str, out_path: str = ".") -> Tuple[str, str]:
    """Compare the NPU's ``accuracy_checking_details_{ts}.csv`` with the GPU's; write
    ``api_precision_compare_result_{ts}.csv`` and ``api_precision_compare_details_{ts}.csv`` into
    ``out_path`` (default: the current directory, created if absent) and return their paths
    ``(result, details)``. Rows are matched by ``API Name``; NPU order is kept.

    Raises ParameterError when a CSV path is not a file, FileFormatError (naming the path) when a CSV
    lacks a needed column or has two GPU rows of one output, DumpPathError when ``out_path`` is a file."""
    npu_rows = csv_files.read_rows(npu_csv, col.PRECISION_REQUIRED_COLUMNS, "npu_csv")
    gpu_rows = csv_files.read_rows(gpu_csv, col.PRECISION_REQUIRED_COLUMNS, "gpu_csv")
    gpu_by_name: Dict[str, Mapping[str, str]] = {}
    for row in gpu_rows:
        name = row.get(col.API_NAME) or ""
        if name in gpu_by_name:
            raise FileFormatError(f"{gpu_csv} has two rows named {name!r}: one per output is expected.")
        gpu_by_name[name] = row
    out_dir = csv_files.ensure_out_dir(out_path)

    details: List[Dict[str, object]] = []
    apis: Dict[str, Dict[str, List[str]]] = {}   # API with counter -> direction -> row statuses (ordered)
    skip_reasons: Dict[str, str] = {}            # API with counter -> the first SKIP row's message
    keys: Dict[str, str] = {}                    # API with counter -> standard key
    for row in npu_rows:
        cells = judge_pair(row, gpu_by_name.get(row.get(col.API_NAME) or ""))
        details.append(cells)
        parsed = parse_ut_row_name(str(cells[col.API_NAME]))
        if parsed is None:  # as 1.0.4: an invalid name is an API of its own, SKIP both ways
            parsed = ("", str(cells[col.API_NAME]), "forward")
            apis.setdefault(parsed[1], {"forward": [], "backward": []})["backward"].append(SKIP)
        key, api_full, direction = parsed
        keys[api_full] = key
        apis.setdefault(api_full, {"forward": [], "backward": []})[direction].append(str(cells[col.FINAL_RESULT]))
        if cells[col.FINAL_RESULT] == SKIP and cells.get(col.MESSAGE):
            skip_reasons.setdefault(api_full, str(cells[col.MESSAGE]))

    result_path, result_file, details_path, details_file = csv_files.claim_pair(out_dir, RESULT_STEM, DETAILS_STEM)
    with result_file, details_file:
        # a UTF-8 BOM first, as 1.0.4 writes (utf-8-sig): Excel then shows the Chinese titles
        result_file.write("\ufeff")
        details_file.write("\ufeff")
        details_writer = csv_files.writer(details_file)
        details_writer.writerow(col.PRECISION_DETAIL_COLUMNS)
        for cells in details:
            details_writer.writerow([col.format_cell(cells.get(title, SPACE))
                                     for title in col.PRECISION_DETAIL_COLUMNS])
        result_writer = csv_files.writer(result_file)
        result_writer.writerow(col.PRECISION_RESULT_COLUMNS)
        for api_full, directions in apis.items():
            forward, backward = col.aggregate_status(directions["forward"]), col.aggregate_status(directions["backward"])
            if forward == ERROR:
                message = API_NOTES.get(keys[api_full], "")
            elif SKIP in (forward, backward):
                message = skip_reasons.get(api_full, "")
            else:
                message = ""
            result_writer.writerow([api_full, forward, backward, message])
    return result_path, details_path
