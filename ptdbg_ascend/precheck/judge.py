"""The verdict of one API output: the device result against the float64 CPU benchmark.

``judge_output`` computes every metric of the seed's details CSV that applies to the output and decides
``Status`` the way msprobe 1.0.4 ``compare/compare.py`` does in a single ``run_ut``:

- builtins (bool/int/float/str): equal -> pass, else error;
- bool/int tensors: binary consistency, error rate 0 -> pass, else error;
- float tensors, whatever the API's standard: cosine <= 0.99 -> error; else max abs error < 0.001 ->
  pass; else the dual ratios by device dtype (float16/bfloat16: dual-hundredth fails -> error,
  dual-thousandth fails -> warning; float32/float64: dual-thousandth fails -> error, dual-ten-thousandth
  fails -> warning). A dual-X ratio is the share of elements with ``|d - b| / (|b| + eps) < X``; it
  passes when it is greater than ``1 - X``.

The standard-specific metrics (binary consistency, absolute threshold, ULP, benchmark small-value / RMSE /
EB / relative errors, thousandth) are filled in as 1.0.4 fills them: they are what ``api_precision_compare``
judges later against the GPU's. A single run has no GPU reference, so 1.0.4 does not let them decide
``Status``; neither do we.

Deliberate differences from 1.0.4 (each named in the message of the rows it changes):

- ``CONSISTENT_NONFINITE``: positions where bench (rounded to the device dtype) and device are both NaN,
  or the same infinity, agree; they are left out of cosine / max-abs / dual ratios. 1.0.4 lets one such
  position turn the cosine into NaN and the row into an error, which fails e.g. ``masked_fill(-inf)`` of
  every attention mask. Non-finite positions that disagree are an error.
- ``BINARY_AT_DEVICE_DTYPE``: the binary-consistency error rate of a float output compares the device
  with the bench rounded to the device dtype (1.0.4 compares with the float64 bench, so
  ``masked_fill(x, m, 0.1)`` in float32 never reaches 0).
- ``SMALL_TENSOR_COSINE``: when every value of bench and device lies in the small-value domain of the
  device dtype (``|x| <= 1e-6`` for float32, ``1e-3`` for float16/bfloat16, standards.SMALL_VALUE), the
  cosine is not used and the max-abs rule decides. 1.0.4 errors when the bench is all zero in float64
  and the device holds float32 round-off residue (``~1e-8``), e.g. the softmax/layer_norm backward of a
  uniform gradient; a device that is all zero next to a bench with values above the small-value
  threshold is still an error.
- ``EMPTY_OUTPUT``: two empty tensors of the same shape pass (1.0.4 errors or raises on them).
- dtype families: float vs float, bool vs bool, integer vs integer (1.0.4 refuses int8/int16/uint8 pairs).

Severity (``OutputJudgement.severity``, used to rank failures; 1.0 = at the error threshold, an error is
>= 1, a pass or warning < 1, nan when nothing was measured):

- float tensors: cosine fails -> ``(1 - cos) / (1 - 0.99)``; max-abs pass -> ``max_abs / 0.001``; else
  ``max over the error-level dual ratio of (1 - ratio) / X`` (X = 0.01 for float16/bfloat16, 0.001 for
  float32/float64), i.e. the share of elements off by more than X relative to the share allowed;
  disagreeing non-finite values -> their count.
- binary consistency (bool/int tensors) and builtins: the number of elements that differ (one differing
  element is exactly the threshold of an error).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace as _replace_fields
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from ptdbg_ascend.precheck import standards as std
from ptdbg_ascend.precheck.columns import (  # noqa: F401  (re-exported: the interface of the pre-check)
    DETAIL_COLUMNS, ERROR, PASS, RESULT_COLUMNS, SKIP, SPACE, WARNING, format_cell)
from ptdbg_ascend.precheck import columns as col
from ptdbg_ascend.precheck.metrics import F64_EPS as _F64_EPS, rel_eps, standard_metrics

_BUILTINS = (bool, int, float, str)


@dataclass(frozen=True)
class OutputJudgement:
    """The verdict of one output (one row of ``accuracy_checking_details``).

    ``name``: the row name (``Functional.linear.0.forward.output.0``); ``api``: the API without counter
    and direction (``Functional.linear``); dtypes as ``str(torch.dtype)`` or ``str(type(x))`` for
    builtins, ``" "`` when there is none; ``shape`` as 1.0.4 writes it (``"(2, 3)"``); ``status`` one of
    PASS / WARNING / ERROR / SKIP; ``standard`` the API's comparison algorithm (standards.py);
    ``metrics`` detail column title -> number (absent: not measured); ``severity`` see the module doc.
    """

    name: str
    api: str
    bench_dtype: str
    device_dtype: str
    shape: str
    status: str
    message: str
    standard: str
    metrics: Mapping[str, Any] = field(default_factory=dict)
    severity: float = float("nan")

    def detail_row(self) -> List[Any]:
        """The cells of this row in DETAIL_COLUMNS order, formatted as 1.0.4 writes them (floats with 14
        decimals, unmeasured metrics as ``" "``); severity with 6 significant digits."""
        cells: List[Any] = [self.name, self.bench_dtype, self.device_dtype, self.shape]
        cells += [format_cell(_plain(self.metrics.get(title))) for title in col.METRIC_COLUMNS]
        severity = SPACE if math.isnan(self.severity) else f"{self.severity:.6g}"
        cells += [self.status, self.message, self.standard, severity]
        return cells


def _plain(value: Any) -> Any:
    """numpy scalars as Python numbers (1.0.4 formats only Python floats; we format every float)."""
    if isinstance(value, np.generic):
        return value.item()
    return value


def skipped(name: str, api: str, reason: str) -> OutputJudgement:
    """A SKIP row: the output was not computed (``reason`` goes to Message; dtypes/shape blank)."""
    return OutputJudgement(name, api, SPACE, SPACE, SPACE, SKIP, reason, std.standard_of(api))


def api_status(judgements: Sequence[OutputJudgement]) -> str:
    """The Forward/Backward Test Success of one API from its rows (seed §4, 1.0.4
    ``get_api_checker_result``): no rows -> ``" "`` (no backward); all SKIP -> SKIP; any error -> error;
    else any warning -> warning; else pass (SKIP rows beside passing ones do not fail the API)."""
    return col.aggregate_status([j.status for j in judgements])


def severity_order(judgements: Sequence[OutputJudgement]) -> List[OutputJudgement]:
    """The judgements worst first: errors, then warnings, then the rest; within a status by severity
    (largest first, nan last), then by name for a stable order."""
    rank = {ERROR: 0, WARNING: 1, PASS: 2, SKIP: 3}

    def key(j: OutputJudgement) -> Tuple[int, float, str]:
        sev = -j.severity if not math.isnan(j.severity) else math.inf
        return rank.get(j.status, 4), sev, j.name

    return sorted(judgements, key=key)


# --- entry point --------------------------------------------------------------------------------------

def judge_output(name: str, api: str, bench: Any, device: Any, computed_in: Any = None) -> OutputJudgement:
    """Judge one output. ``bench``: the value computed on the CPU in float64 (tensor, number, bool, str
    or None); ``device``: the same output in the device dtype (a CPU tensor). Thresholds follow the
    device dtype and ``api``'s standard; ``computed_in`` (default None), a float dtype narrower than a float
    output's: the dtype the call computed in (autocast's bfloat16 for the float32 gradient of a float32
    weight), whose thresholds are used instead. Never raises for ordinary data: type/shape/dtype mismatches,
    NaN, empty tensors give an ERROR/SKIP/PASS judgement with a message."""
    import torch

    standard = std.standard_of(api)
    base = dict(name=name, api=api, standard=standard)
    if bench is None:
        return OutputJudgement(bench_dtype=SPACE, device_dtype=SPACE, shape=SPACE, status=SKIP,
                               message="Bench output is None, skip this test.", **base)
    if isinstance(bench, torch.Tensor):
        if not isinstance(device, torch.Tensor):
            return OutputJudgement(bench_dtype=str(bench.dtype), device_dtype=str(type(device)), shape=SPACE,
                                   status=ERROR, message="bench and npu output type is different.",
                                   severity=math.inf, **base)
        try:
            bench, device = _readable(bench), _readable(device)
        except (RuntimeError, TypeError) as error:  # sparse, quantized, meta...: nothing to read the values from
            return OutputJudgement(bench_dtype=str(bench.dtype), device_dtype=str(device.dtype),
                                   shape=str(tuple(device.shape)), status=SKIP,
                                   message=f"The output's values cannot be read: {error}", **base)
        return _judge_tensors(bench, device, base, computed_in)
    if isinstance(bench, _BUILTINS):
        return _judge_builtin(bench, device, base)
    return OutputJudgement(bench_dtype=str(type(bench)), device_dtype=str(type(device)), shape=SPACE, status=SKIP,
                           message=f"Output of type {type(bench).__name__} is not compared.", **base)


def _readable(tensor: Any) -> Any:
    """A dense CPU tensor numpy can read (views with the conjugate/negative bit resolved)."""
    tensor = tensor.detach()
    if tensor.layout != _torch().strided:
        tensor = tensor.to_dense()
    return tensor.cpu().resolve_conj().resolve_neg()


def _judge_builtin(bench: Any, device: Any, base: Dict[str, Any]) -> OutputJudgement:
    dtypes = dict(bench_dtype=str(type(bench)), device_dtype=str(type(device)), shape=SPACE)
    if not isinstance(device, type(bench)) and not isinstance(bench, type(device)):
        return OutputJudgement(status=ERROR, message="bench and npu output type is different.",
                               severity=1.0, **dtypes, **base)
    if bench != device:
        return OutputJudgement(status=ERROR, message=f"bench {bench!r} != device {device!r}.",
                               metrics={col.ERROR_RATE: 1.0}, severity=1.0, **dtypes, **base)
    return OutputJudgement(status=PASS, message="", metrics={col.ERROR_RATE: 0.0}, severity=0.0, **dtypes, **base)


def _family(dtype: Any) -> str:
    if dtype == _torch().bool:
        return "bool"
    if dtype.is_floating_point:
        return "float"
    if dtype.is_complex:
        return "complex"
    return "int"


def _torch():
    import torch
    return torch


def _judge_tensors(bench: Any, device: Any, base: Dict[str, Any], computed_in: Any = None) -> OutputJudgement:
    torch = _torch()
    heads = dict(bench_dtype=str(bench.dtype), device_dtype=str(device.dtype), shape=str(tuple(device.shape)))
    if bench.shape != device.shape:
        return OutputJudgement(status=ERROR, severity=math.inf, message="The shape of bench{} and npu{} not equal."
                               .format(tuple(bench.shape), tuple(device.shape)), **heads, **base)
    families = (_family(bench.dtype), _family(device.dtype))
    if families[0] != families[1]:
        return OutputJudgement(status=ERROR, severity=math.inf,
                               message="Bench out dtype is {} but npu output dtype is {}, cannot compare."
                               .format(bench.dtype, device.dtype), **heads, **base)
    if families[1] == "complex":
        return OutputJudgement(status=SKIP, message="Complex outputs are not compared.", **heads, **base)
    if device.numel() == 0:
        return OutputJudgement(status=PASS, severity=0.0, message="EMPTY_OUTPUT: both outputs are empty.",
                               **heads, **base)
    if families[1] in ("bool", "int"):
        return _judge_binary(bench.numpy(), device.numpy(), heads, base)
    judged_as = device.dtype
    if computed_in is not None and computed_in.itemsize < device.dtype.itemsize:
        judged_as = computed_in  # its values carry the narrower dtype's precision
    # numpy has no bfloat16: judged in float32, as 1.0.4 does; the bench rounded to the judged dtype
    # (for binary consistency and the non-finite agreement) is made by torch, which has bfloat16.
    carrier = torch.float32 if judged_as == torch.bfloat16 else judged_as
    rounded = bench.to(judged_as).to(carrier).numpy()
    device_np = device.to(carrier).numpy()
    bench_np = bench.to(torch.float64).numpy()
    judgement = _judge_float(bench_np, device_np, rounded, str(judged_as), heads, base)
    if judged_as != device.dtype:
        note = f"Computed in {judged_as} (autocast): judged by its standard."
        judgement = _replace_fields(judgement, message=" ".join(part for part in (note, judgement.message) if part))
    return judgement


def _judge_binary(bench: np.ndarray, device: np.ndarray, heads: Mapping[str, str],
                  base: Dict[str, Any]) -> OutputJudgement:
    differ = int(np.count_nonzero(bench != device))
    rate = differ / bench.size
    message = f"Compare algorithm is not supported for {bench.dtype} data. Only judged by Error Rate."
    if differ:
        message += f" {differ} of {bench.size} elements differ."
    return OutputJudgement(status=ERROR if differ else PASS, message=message, metrics={col.ERROR_RATE: rate},
                           severity=float(differ), **heads, **base)


# --- float tensors ------------------------------------------------------------------------------------

def _judge_float(bench: np.ndarray, device: np.ndarray, rounded: np.ndarray, dtype: str,
                 heads: Mapping[str, str], base: Dict[str, Any]) -> OutputJudgement:
    """bench: float64; device: the device values (float32 for bfloat16); rounded: bench in the device
    dtype (float32 carrying bfloat16 values for bfloat16)."""
    standard = base["standard"]
    metrics: Dict[str, Any] = {}
    notes: List[str] = []
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        bench = bench.reshape(-1)
        device = device.reshape(-1).astype(np.float64) if dtype != std.FLOAT64 else device.reshape(-1)
        rounded = rounded.reshape(-1).astype(np.float64)
        eps = rel_eps(dtype)
        abs_bench = np.abs(bench)
        abs_bench_eps = abs_bench + eps
        abs_err = np.abs(device - bench)
        rel_err_origin = abs_err / abs_bench_eps
        if standard == std.THOUSANDTH:
            metrics[col.REL_ERR_THOUSANDTH] = _ratio_below(rel_err_origin, std.THOUSANDTH_RATIO)
        if dtype in std.BENCHMARK_DTYPES:
            metrics.update(standard_metrics(bench, device, rounded, dtype, standard))

        # CONSISTENT_NONFINITE: agreeing NaN/inf positions are taken out of the verdict chain.
        finite = np.isfinite(device) & np.isfinite(bench)
        agree = (np.isnan(device) & np.isnan(rounded)) | (np.isinf(device) & (device == rounded))
        disagree = int(np.count_nonzero(~finite & ~agree))
        if disagree:
            return OutputJudgement(status=ERROR, severity=float(disagree), metrics=metrics,
                                   message="{} of {} elements are inf/nan on one side only (or differ in sign)."
                                   .format(disagree, bench.size), **heads, **base)
        if not finite.all():
            notes.append(f"CONSISTENT_NONFINITE: {int(np.count_nonzero(~finite))} agreeing inf/nan elements left out.")
            if not finite.any():
                return OutputJudgement(status=PASS, severity=0.0, metrics=metrics, message=" ".join(notes),
                                       **heads, **base)
            bench, device, abs_err, rel_err_origin = bench[finite], device[finite], abs_err[finite], \
                rel_err_origin[finite]
        status, severity, message = _verdict_chain(bench, device, abs_err, rel_err_origin, dtype, metrics)
    return OutputJudgement(status=status, severity=severity, metrics=metrics,
                           message=" ".join(notes + [message]).strip(), **heads, **base)


def _ratio_below(rel_err: np.ndarray, threshold: float) -> float:
    """The dual-X indicator: share of elements with relative error < X (1.0 for no elements)."""
    if rel_err.size == 0:
        return 1.0
    return float(np.count_nonzero(rel_err < threshold)) / rel_err.size


def cosine(bench: np.ndarray, device: np.ndarray) -> Tuple[Optional[float], bool, str]:
    """(cosine or None when not measurable, passes, message), 1.0.4's rule: one element -> not measured,
    pass; both all-zero (max |x| <= float64 eps) -> pass; one side all zero -> fail; else the cosine of
    the max-normalised vectors, passing when > 0.99."""
    if bench.size == 1:
        return None, True, "All the data in device dump data is scalar. Please refer to other compare algorithms."
    bench_max, device_max = float(np.max(np.abs(bench))), float(np.max(np.abs(device)))
    if bench_max <= _F64_EPS and device_max <= _F64_EPS:
        return None, True, "All the data in device and bench outputs are zero."
    if device_max <= _F64_EPS:
        return None, False, "All the data is zero in device dump data."
    if bench_max <= _F64_EPS:
        return None, False, "All the data is zero in bench dump data."
    b, d = bench / bench_max, device / device_max
    value = float(np.dot(d, b) / (np.linalg.norm(d) * np.linalg.norm(b)))
    if math.isnan(value):
        return value, False, "Dump data has NaN when comparing with Cosine Similarity."
    value = min(1.0, max(-1.0, value))
    return value, value > std.COSINE_THRESHOLD, ""


def _verdict_chain(bench: np.ndarray, device: np.ndarray, abs_err: np.ndarray, rel_err: np.ndarray,
                   dtype: str, metrics: Dict[str, Any]) -> Tuple[str, float, str]:
    """1.0.4's cosine -> max-abs -> dual-ratio chain; fills the metrics it measures."""
    small = std.SMALL_VALUE.get(dtype, std.SMALL_VALUE[std.FLOAT32])["small_value"]
    if float(np.max(np.abs(bench))) <= small and float(np.max(np.abs(device))) <= small:
        # SMALL_TENSOR_COSINE: every value on both sides is a small value of the device dtype: the cosine
        # of round-off residue (a float64 zero next to float32 1e-8) says nothing; absolute error decides.
        cos, cos_ok, message = None, True, f"SMALL_TENSOR_COSINE: all values are <= {small:g}, cosine not used."
    else:
        cos, cos_ok, message = cosine(bench, device)
    if cos is not None:
        metrics[col.COSINE] = cos
    if not cos_ok:
        severity = math.inf if cos is None or math.isnan(cos) else (1.0 - cos) / (1.0 - std.COSINE_THRESHOLD)
        return ERROR, severity, (message + " Cosine similarity is less than 0.99, consider as error.").strip()
    max_abs = float(np.max(abs_err))
    metrics[col.MAX_ABS_ERR] = max_abs
    if max_abs < std.MAX_ABS_ERR_THRESHOLD:
        return PASS, max_abs / std.MAX_ABS_ERR_THRESHOLD, (message + " Max abs error is less than 0.001, consider "
                                                                     "as pass.").strip()
    error_level, warning_level = std.DUAL_RATIO_LEVELS.get(dtype, (std.THOUSANDTH_RATIO, std.TEN_THOUSANDTH))
    titles = {std.HUNDREDTH: col.REL_ERR_HUNDREDTH, std.THOUSANDTH_RATIO: col.REL_ERR_THOUSANDTH,
              std.TEN_THOUSANDTH: col.REL_ERR_TEN_THOUSANDTH}
    error_ratio = _ratio_below(rel_err, error_level)
    metrics[titles[error_level]] = error_ratio
    severity = (1.0 - error_ratio) / error_level
    if dtype not in std.HALF_DTYPES:  # 1.0.4 measures both float32/float64 ratios before deciding
        metrics[titles[warning_level]] = _ratio_below(rel_err, warning_level)
    if not error_ratio > 1.0 - error_level:
        return ERROR, max(severity, 1.0), "Relative error is greater than {:g} in more than {:g} of the elements, " \
                                          "consider as error.".format(error_level, error_level)
    warning_ratio = _ratio_below(rel_err, warning_level)
    metrics[titles[warning_level]] = warning_ratio
    if not warning_ratio > 1.0 - warning_level:
        return WARNING, severity, "Relative error is greater than {:g} in more than {:g} of the elements, " \
                                  "consider as warning.".format(warning_level, warning_level)
    return PASS, severity, f"Relative error is less than {warning_level:g}, consider as pass."
