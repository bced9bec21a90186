"""api_precision_compare: NPU details against GPU details, the seed's three-way verdicts."""

import csv
import os
import subprocess
import sys

import pytest

from ptdbg_ascend.errors import FileFormatError, ParameterError
from ptdbg_ascend.precheck.columns import DETAIL_COLUMNS
from ptdbg_ascend.precheck.device_compare import api_precision_compare, ratio

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
MSPROBE_PYTHON = os.path.join(REPO, ".venv-msprobe", "bin", "python")


def write_details(path, rows):
    """rows: (name, device dtype, {column title: cell}); every other metric cell blank, as run_ut writes."""
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(DETAIL_COLUMNS)
        for name, dtype, cells in rows:
            base = {title: " " for title in DETAIL_COLUMNS}
            base.update({"API Name": name, "Bench Dtype": "torch.float64", "DEVICE Dtype": dtype,
                         "Shape": "(4,)", "Status": "pass", "Message": ""})
            base.update({k: str(v) for k, v in cells.items()})
            writer.writerow([base[title] for title in DETAIL_COLUMNS])
    return path


def read_csv(path):
    with open(path, newline="", encoding="utf-8-sig") as handle:
        return list(csv.DictReader(handle))


BENCH = dict(zip(["小值域错误占比", "均方根误差", "相对误差最大值", "相对误差平均值", "误差均衡性"], [0.0, 1e-7, 1e-5, 2e-6, 0.1]))


def bench_row(**changes):
    cells = dict(BENCH)
    cells.update({{"small": "小值域错误占比", "rmse": "均方根误差", "max_rel": "相对误差最大值",
                   "mean_rel": "相对误差平均值", "eb": "误差均衡性"}[k]: v for k, v in changes.items()})
    return cells


ABS_OK = {"inf/nan错误率": 0.0, "相对误差错误率": 0.0, "绝对误差错误率": 0.0}

NPU = [
    ("Functional.gelu.0.forward.output.0", "torch.float32", bench_row(rmse=3e-7)),        # rmse ratio 3 -> error
    ("Functional.gelu.0.backward.output.0", "torch.float32", bench_row(rmse=1.5e-7)),     # 1.5 -> warning
    ("Functional.gelu.1.forward.output.0", "torch.float32", bench_row(max_rel=5e-5)),     # 5 <= 10 -> warning
    ("Functional.gelu.2.forward.output.0", "torch.float32", bench_row(eb=0.9)),           # eb does not count
    ("Functional.gelu.3.forward.output.0", "torch.float32", bench_row(rmse="inf")),       # inf vs inf -> pass
    ("Functional.gelu.4.forward.output.0", "torch.float32", bench_row(mean_rel="nan")),   # nan vs 2e-6 -> error
    ("Tensor.__add__.0.forward.output.0", "torch.float16", ABS_OK),
    ("Tensor.__add__.1.forward.output.0", "torch.float16", dict(ABS_OK, **{"相对误差错误率": 0.01})),
    ("Functional.linear.0.forward.output.0", "torch.float16",
     {"ULP误差平均值": 0.3, "ULP误差大于阈值占比": 0.002}),                                # 0.002 vs 0.001 -> error
    ("Functional.linear.1.forward.output.0", "torch.float16",
     {"ULP误差平均值": 0.3, "ULP误差大于阈值占比": 0.0005}),                               # < 0.001 -> pass
    ("Functional.linear.2.forward.output.0", "torch.float32",
     {"ULP误差平均值": 100.0, "ULP误差大于阈值占比": 0.2}),                                # below the GPU's -> pass
    ("Functional.linear.3.forward.output.0", "torch.float32",
     {"ULP误差平均值": 100.0, "ULP误差大于阈值占比": 0.2}),                                # above, >= 64, >= 0.05
    ("Functional.conv2d.0.forward.output.0", "torch.float32", {"双千指标": 0.9985}),       # < 0.999, GPU better -> error
    ("Functional.conv2d.1.forward.output.0", "torch.float32", {"双千指标": 0.9995}),
    ("Torch.argmax.0.forward.output.0", "torch.int64", {"二进制一致错误率": 0.0}),
    ("Tensor.relu.0.forward.output.0", "torch.float32", {"二进制一致错误率": 0.25}),
    ("Torch.topk.0.forward.output.1", "torch.int64", {"二进制一致错误率": 0.5}),
    ("Functional.gelu.5.forward.output.0", "torch.float64", bench_row()),                  # unsupported dtype
    ("Functional.gelu.6.forward.output.0", "torch.float32", bench_row()),
    ("Functional.gelu.6.backward.output.0", " ", {"Message": "requires_grad is False"}),
]
GPU_CHANGES = {
    "Functional.gelu.3.forward.output.0": bench_row(rmse="inf"),
    "Functional.linear.0.forward.output.0": {"ULP误差平均值": 0.2, "ULP误差大于阈值占比": 0.001},
    "Functional.linear.1.forward.output.0": {"ULP误差平均值": 0.2, "ULP误差大于阈值占比": 0.001},
    "Functional.linear.2.forward.output.0": {"ULP误差平均值": 90.0, "ULP误差大于阈值占比": 0.3},
    "Functional.linear.3.forward.output.0": {"ULP误差平均值": 90.0, "ULP误差大于阈值占比": 0.1},
    "Functional.conv2d.0.forward.output.0": {"双千指标": 0.9995},
}
GPU = [(name, dtype, GPU_CHANGES.get(name, bench_row() if dtype.startswith("torch.float") and "gelu" in name
                                     else cells)) for name, dtype, cells in NPU]

EXPECTED_ROWS = {  # 比对结果 / 比对算法 of every details row, worked out by hand from the seed's rules
    "Functional.gelu.0.forward.output.0": ("error", "标杆比对法"),
    "Functional.gelu.0.backward.output.0": ("warning", "标杆比对法"),
    "Functional.gelu.1.forward.output.0": ("warning", "标杆比对法"),
    "Functional.gelu.2.forward.output.0": ("pass", "标杆比对法"),
    "Functional.gelu.3.forward.output.0": ("pass", "标杆比对法"),
    "Functional.gelu.4.forward.output.0": ("error", "标杆比对法"),
    "Tensor.__add__.0.forward.output.0": ("pass", "绝对阈值法"),
    "Tensor.__add__.1.forward.output.0": ("error", "绝对阈值法"),
    "Functional.linear.0.forward.output.0": ("error", "ULP误差比对法"),
    "Functional.linear.1.forward.output.0": ("pass", "ULP误差比对法"),
    "Functional.linear.2.forward.output.0": ("pass", "ULP误差比对法"),
    "Functional.linear.3.forward.output.0": ("error", "ULP误差比对法"),
    "Functional.conv2d.0.forward.output.0": ("error", "双千指标法"),
    "Functional.conv2d.1.forward.output.0": ("pass", "双千指标法"),
    "Torch.argmax.0.forward.output.0": ("pass", "二进制一致法"),
    "Tensor.relu.0.forward.output.0": ("error", "二进制一致法"),
    "Torch.topk.0.forward.output.1": ("error", "二进制一致法"),
    "Functional.gelu.5.forward.output.0": ("SKIP", ""),
    "Functional.gelu.6.forward.output.0": ("pass", "标杆比对法"),
    "Functional.gelu.6.backward.output.0": ("SKIP", ""),
}
EXPECTED_APIS = {
    "Functional.gelu.0": ("error", "warning"), "Functional.gelu.1": ("warning", " "),
    "Functional.gelu.2": ("pass", " "), "Functional.gelu.3": ("pass", " "), "Functional.gelu.4": ("error", " "),
    "Tensor.__add__.0": ("pass", " "), "Tensor.__add__.1": ("error", " "),
    "Functional.linear.0": ("error", " "), "Functional.linear.1": ("pass", " "),
    "Functional.linear.2": ("pass", " "), "Functional.linear.3": ("error", " "),
    "Functional.conv2d.0": ("error", " "), "Functional.conv2d.1": ("pass", " "),
    "Torch.argmax.0": ("pass", " "), "Tensor.relu.0": ("error", " "), "Torch.topk.0": ("error", " "),
    "Functional.gelu.5": ("SKIP", " "), "Functional.gelu.6": ("pass", "SKIP"),
}


@pytest.fixture
def details_pair(tmp_path):
    return (write_details(str(tmp_path / "accuracy_checking_details_20240101000000.csv"), NPU),
            write_details(str(tmp_path / "accuracy_checking_details_20240101000001.csv"), GPU))


def test_three_way_verdicts(details_pair, tmp_path):
    result, details = api_precision_compare(*details_pair, out_path=str(tmp_path / "out"))
    assert os.path.basename(result).startswith("api_precision_compare_result_")
    assert os.path.basename(details).startswith("api_precision_compare_details_")
    assert os.path.basename(result)[len("api_precision_compare_result_"):] == \
        os.path.basename(details)[len("api_precision_compare_details_"):]
    rows = read_csv(details)
    assert list(rows[0].keys())[:3] == ["API Name", "小值域错误比值", "小值域判定结果"]
    assert list(rows[0].keys())[-3:] == ["比对结果", "比对算法", "Message"]
    assert {r["API Name"]: (r["比对结果"], r["比对算法"].strip()) for r in rows} == EXPECTED_ROWS
    by_name = {r["API Name"]: r for r in rows}
    gelu0 = by_name["Functional.gelu.0.forward.output.0"]
    assert float(gelu0["均方根误差比值"]) == pytest.approx(3.0)
    assert gelu0["均方根误差判定结果"] == "error" and "均方根误差比值超过阈值" in gelu0["Message"]
    assert float(by_name["Functional.gelu.2.forward.output.0"]["误差均衡性比值"]) == pytest.approx(9.0)
    assert by_name["Functional.gelu.2.forward.output.0"]["误差均衡性判定结果"] == "error"
    assert float(by_name["Functional.linear.0.forward.output.0"]["ULP误差大于阈值占比比值"]) == pytest.approx(2.0)
    assert by_name["Functional.gelu.6.backward.output.0"]["Message"] == "requires_grad is False"
    results = {r["API Name"]: (r["Forward Test Success"], r["Backward Test Success"]) for r in read_csv(result)}
    assert results == EXPECTED_APIS
    messages = {r["API Name"]: r["Message"] for r in read_csv(result)}
    assert "topk" in messages["Torch.topk.0"]
    assert messages["Functional.gelu.5"] == "This data type does not support benchmark compare."


def test_ratio_rules():
    assert ratio(0.0, 0.0) == (1.0, True, "")
    assert ratio(1e-9, 0.0) == (10000.0, True, "")
    assert ratio(3.0, -1.5)[0] == 2.0
    assert ratio(float("inf"), float("-inf"))[1] is False
    assert ratio(float("nan"), float("nan"))[1] is True


def test_missing_gpu_row_and_invalid_name(tmp_path):
    npu = write_details(str(tmp_path / "n.csv"), [("Functional.gelu.0.forward.output.0", "torch.float32", bench_row()),
                                                  ("weird", "torch.float32", bench_row())])
    gpu = write_details(str(tmp_path / "g.csv"), [])
    result, details = api_precision_compare(npu, gpu, str(tmp_path))
    rows = {r["API Name"]: r for r in read_csv(details)}
    assert rows["Functional.gelu.0.forward.output.0"]["比对结果"] == "SKIP"
    assert "MISSING_GPU_ROW" in rows["Functional.gelu.0.forward.output.0"]["Message"]
    assert rows["weird"]["Message"] == "The API name weird is invalid."
    assert {r["API Name"]: (r["Forward Test Success"], r["Backward Test Success"]) for r in read_csv(result)} == \
        {"Functional.gelu.0": ("SKIP", " "), "weird": ("SKIP", "SKIP")}


def test_bad_inputs_name_the_path(tmp_path, details_pair):
    missing = str(tmp_path / "nope.csv")
    with pytest.raises(ParameterError, match="nope.csv"):
        api_precision_compare(missing, details_pair[1], str(tmp_path))
    broken = tmp_path / "broken.csv"
    broken.write_text("API Name,DEVICE Dtype\nFunctional.gelu.0.forward.output.0,torch.float32\n", encoding="utf-8")
    with pytest.raises(FileFormatError) as error:
        api_precision_compare(details_pair[0], str(broken), str(tmp_path))
    assert "broken.csv" in str(error.value) and "均方根误差" in str(error.value)
    empty = tmp_path / "empty.csv"
    empty.write_text("", encoding="utf-8")
    with pytest.raises(FileFormatError, match="empty.csv"):
        api_precision_compare(str(empty), details_pair[1], str(tmp_path))
    duplicated = write_details(str(tmp_path / "dup.csv"), NPU[:1] * 2)
    with pytest.raises(FileFormatError, match="dup.csv"):
        api_precision_compare(details_pair[0], duplicated, str(tmp_path))
    assert not [n for n in os.listdir(tmp_path) if n.startswith("api_precision_compare")]


def test_two_runs_in_one_second_keep_both_reports(details_pair, tmp_path):
    first = api_precision_compare(*details_pair, out_path=str(tmp_path))
    second = api_precision_compare(*details_pair, out_path=str(tmp_path))
    assert len(set(first + second)) == 4 and all(os.path.isfile(p) for p in first + second)


# --- interop: the real msprobe 1.0.4 api_precision_compare reads details written by our detail_row ----

MSPROBE_SCRIPT = """
import sys
import numpy as np
if not hasattr(np, "unicode_"):  # removed in NumPy 2.0; 1.0.4 still names it (as scripts/interop_msprobe.sh does)
    np.unicode_ = np.str_
from msprobe.pytorch.api_accuracy_checker.compare.api_precision_compare import CompareConfig, api_precision_compare
api_precision_compare(CompareConfig(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]))
"""


def _judged_rows(torch, device_scale):
    """Details rows of a few real outputs: the device side scaled by ``device_scale`` per API."""
    from ptdbg_ascend.precheck.judge import judge_output
    torch.manual_seed(0)
    x, w = torch.randn(64, 32), torch.randn(16, 32)
    xi = torch.randint(0, 5, (40,))
    cases = [
        ("Functional.gelu.0", lambda t: torch.nn.functional.gelu(t), x, torch.float32),
        ("Functional.gelu.1", lambda t: torch.nn.functional.gelu(t), x, torch.float16),
        ("Functional.linear.0", lambda t: torch.nn.functional.linear(t, w.to(t.dtype)), x, torch.float16),
        ("Torch.mul.0", lambda t: t * 3.0, x, torch.float32),
        ("Tensor.relu.0", lambda t: t.relu(), x, torch.float32),
        ("Torch.add.0", lambda t: t + 1, xi, torch.int64),
    ]
    rows = []
    for api_full, fn, data, dtype in cases:
        api = api_full.rsplit(".", 1)[0]
        bench = fn(data.to(dtype).double() if dtype.is_floating_point else data)
        device = fn(data.to(dtype))
        scale = device_scale.get(api_full)
        if scale is not None:
            device = (device.double() * scale).to(dtype) if dtype.is_floating_point else device + 1
        rows.append(judge_output(api_full + ".forward.output.0", api, bench, device).detail_row())
    return rows


def _write_rows(path, rows):
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(DETAIL_COLUMNS)
        writer.writerows(rows)
    return path


@pytest.mark.skipif(not os.path.isfile(MSPROBE_PYTHON), reason="the msprobe 1.0.4 venv (.venv-msprobe) is absent")
def test_msprobe_api_precision_compare_reads_our_details_and_agrees(tmp_path):
    torch = pytest.importorskip("torch")
    planted = {"Functional.gelu.0": 1 + 1e-3, "Functional.linear.0": 1 + 1e-2, "Torch.mul.0": 1 + 1e-5,
               "Tensor.relu.0": 1 + 1e-6, "Torch.add.0": 1}
    npu = _write_rows(str(tmp_path / "accuracy_checking_details_20240101000000.csv"), _judged_rows(torch, planted))
    gpu = _write_rows(str(tmp_path / "accuracy_checking_details_20240101000001.csv"), _judged_rows(torch, {}))
    ours_result, ours_details = api_precision_compare(npu, gpu, str(tmp_path / "ours"))
    theirs_result, theirs_details = str(tmp_path / "theirs_result.csv"), str(tmp_path / "theirs_details.csv")
    done = subprocess.run([MSPROBE_PYTHON, "-c", MSPROBE_SCRIPT, npu, gpu, theirs_result, theirs_details],
                          capture_output=True, text=True, timeout=120, cwd=str(tmp_path))
    assert done.returncode == 0, done.stderr[-2000:]

    def verdicts(path, name_column):
        return {r[name_column]: (r["Forward Test Success"].lower(), r["Backward Test Success"].lower())
                for r in read_csv(path)}

    theirs = verdicts(theirs_result, "API Name")
    assert theirs == verdicts(ours_result, "API Name")
    assert theirs == {"Functional.gelu.0": ("error", " "), "Functional.gelu.1": ("pass", " "),
                      "Functional.linear.0": ("error", " "), "Torch.mul.0": ("error", " "),
                      "Tensor.relu.0": ("error", " "), "Torch.add.0": ("error", " ")}
    rows = {r["API Name"]: (r["比对结果"].lower(), r["比对算法"]) for r in read_csv(theirs_details)}
    assert rows == {r["API Name"]: (r["比对结果"].lower(), r["比对算法"]) for r in read_csv(ours_details)}


# --- ULP_EQUAL_SHARE: an NPU exactly as accurate as the GPU is not an error ----------------------------

ULP_CASES = [  # (name, dtype, NPU (mean ULP, share), GPU (mean ULP, share), expected) -- by hand, seed §5
    # the bias gradient of the report: bench near zero after cancellation, the same numbers on both sides
    ("Functional.linear.0.backward.output.2", "torch.float32", (2452139.29, 0.27083333333333),
     (2452139.29, 0.27083333333333), "pass"),
    ("Functional.linear.1.forward.output.0", "torch.float16", (0.9, 0.01), (0.9, 0.01), "pass"),
    ("Functional.linear.2.forward.output.0", "torch.bfloat16", (3.0, 0.002), (2.0, 0.002), "pass"),
    # just above the GPU's share, above every absolute limit: still an error
    ("Functional.linear.3.forward.output.0", "torch.float16", (0.9, 0.0021), (0.9, 0.002), "error"),
    ("Functional.linear.4.forward.output.0", "torch.float32", (100.0, 0.30001), (100.0, 0.3), "error"),
    # both shares 0 (ratio 0/0 = 1)
    ("Functional.linear.5.forward.output.0", "torch.float32", (0.0, 0.0), (0.0, 0.0), "pass"),
]


def test_equal_ulp_share_passes_and_a_larger_one_does_not(tmp_path):
    def rows(side):
        return [(name, dtype, {"ULP误差平均值": values[0], "ULP误差大于阈值占比": values[1]})
                for name, dtype, *sides, _ in ULP_CASES for values in [sides[side]]]

    npu = write_details(str(tmp_path / "n.csv"), rows(0))
    gpu = write_details(str(tmp_path / "g.csv"), rows(1))
    _, details = api_precision_compare(npu, gpu, str(tmp_path / "out"))
    got = {r["API Name"]: (r["比对结果"], r["ULP误差判定结果"], r["比对算法"]) for r in read_csv(details)}
    assert got == {name: (expected, expected, "ULP误差比对法") for name, *_, expected in ULP_CASES}
    by_name = {r["API Name"]: r for r in read_csv(details)}
    assert float(by_name["Functional.linear.0.backward.output.2"]["ULP误差大于阈值占比比值"]) == 1.0
    assert by_name["Functional.linear.0.backward.output.2"]["Message"] == ""
    assert "ULP误差不满足标准" in by_name["Functional.linear.3.forward.output.0"]["Message"]


def test_identical_details_three_way_rules_never_error(tmp_path):
    """The same details as NPU and GPU: every row whose rule consults the GPU (ULP, benchmark, and the
    thousandth through THOUSANDTH_NO_WORSE_THAN_GPU) passes; the two-party rules (binary, absolute
    threshold) keep their NPU-only verdicts."""
    npu = write_details(str(tmp_path / "n.csv"), NPU)
    gpu = write_details(str(tmp_path / "g.csv"), NPU)
    _, details = api_precision_compare(npu, gpu, str(tmp_path / "out"))
    got = {r["API Name"]: r["比对结果"] for r in read_csv(details)}
    two_party_errors = {"Tensor.__add__.1.forward.output.0", "Tensor.relu.0.forward.output.0",
                        "Torch.topk.0.forward.output.1"}
    assert {name for name, status in got.items() if status == "error"} == two_party_errors
    assert {name for name, status in got.items() if status == "SKIP"} == \
        {"Functional.gelu.5.forward.output.0", "Functional.gelu.6.backward.output.0"}
    assert "warning" not in got.values()
    # linear.2 / linear.3 (float32, mean 100, share 0.2 on both): error under the seed's strict "<"
    assert got["Functional.linear.2.forward.output.0"] == got["Functional.linear.3.forward.output.0"] == "pass"
    assert got["Functional.linear.0.forward.output.0"] == "pass"  # float16, share 0.002 on both


def test_reference_model_details_as_npu_and_gpu(model_dumps, tmp_path):
    """run_ut's real details of the clean reference model given as both -npu and -gpu: no error. The
    conv bias gradient (conv2d followed by batch_norm: 0 in float64, float32 round-off residue on the
    device, so its dual-thousandth is 0 on any device) passes as no worse than the GPU."""
    from ptdbg_ascend.precheck.run_ut import run_ut
    outcome = run_ut(model_dumps["clean"], str(tmp_path / "ut"), progress=False)
    _, details = api_precision_compare(outcome.details_csv, outcome.details_csv, str(tmp_path / "out"))
    rows = {r["API Name"]: r for r in read_csv(details)}
    assert len(rows) > 200
    errors = {name: r["比对算法"] for name, r in rows.items() if r["比对结果"] not in ("pass", "SKIP")}
    assert errors == {}
    conv_bias = rows["Functional.conv2d.0.backward.output.2"]
    assert float(conv_bias["双千指标"]) < 0.999 and "THOUSANDTH_NO_WORSE_THAN_GPU" in conv_bias["Message"]
    bias = rows["Functional.linear.0.backward.output.2"]  # the ULP case of the report, now pass
    assert (bias["比对结果"], bias["比对算法"]) == ("pass", "ULP误差比对法")
    assert float(bias["ULP误差大于阈值占比"]) > 0.05 and float(bias["ULP误差平均值"]) > 64
