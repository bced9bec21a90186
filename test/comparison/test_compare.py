"""compare() on hand-written legacy dumps: report files, columns, verdicts, advisor."""

from __future__ import annotations

import csv
import os
import subprocess
import sys

import pytest

from ptdbg_ascend.comparison.api import compare

pytestmark = pytest.mark.torchfree

LEGACY_FULL = ["NPU Name", "Bench Name", "NPU Tensor Dtype", "Bench Tensor Dtype", "NPU Tensor Shape",
               "Bench Tensor Shape", "Cosine", "MaxAbsErr", "MaxRelativeErr", "One Thousandth Err Ratio",
               "Five Thousandths Err Ratio", "NPU max", "NPU min", "NPU mean", "NPU l2norm", "Bench max",
               "Bench min", "Bench mean", "Bench l2norm", "Accuracy Reached or Not", "Err_message"]
NEW = ["Result", "Accumulated Relative Err", "Euclidean Relative Distance", "KL Divergence", "Allowed Rtol",
       "Rtol To Pass", "Greatest Diff Index", "Allowed Relative Err", "Carried Through", "Share Of Allowed"]


def read_csv(path):
    with open(path, newline="") as handle:
        rows = list(csv.reader(handle))
    return rows[0], [dict(zip(rows[0], row)) for row in rows[1:]]


def test_identical_dumps_all_yes_and_columns_in_legacy_order(two_dumps, output_dir):
    npu, bench = two_dumps()
    outcome = compare(npu.param(bench), output_dir, stack_mode=True)
    header, rows = read_csv(outcome.csv_path)
    assert header == LEGACY_FULL + ["NPU_Stack_Info"] + NEW
    assert os.path.basename(outcome.csv_path).startswith("compare_result_2")
    assert [r["NPU Name"] for r in rows] == [
        "Functional_linear_0_forward_input.0", "Functional_linear_0_forward_input.1",
        "Functional_linear_0_forward_output", "Torch_relu_0_forward_input.0", "Torch_relu_0_forward_output",
        "Tensor___mul___0_forward_input.0", "Tensor___mul___0_forward_output"]
    assert {r["Accuracy Reached or Not"] for r in rows} == {"Yes"}
    assert {r["Cosine"] for r in rows} == {"1.000000000000"}
    assert {r["MaxAbsErr"] for r in rows} == {"0.000000000000"}
    # stack only on the first row of each call, the user's innermost frame (the line calling the API) first
    assert rows[0]["NPU_Stack_Info"].splitlines()[:2] == ['File "/work/train.py", line 42, in forward',
                                                          "    x = self.conv(x)"]
    assert rows[1]["NPU_Stack_Info"] == ""
    assert outcome.first_failure is None
    with open(outcome.advisor_path) as handle:
        assert handle.read() == ("All data in comparison result meets the accuracy requirements.\nCompared: 7 of 7 "
                                 "paired tensors (0 failing, 0 warnings, 0 not compared, 0 unmatched); 0 NPU-only and "
                                 "0 bench-only rows. Paired: forward 7 of 7 NPU rows, backward 0 of 0.\nLine: NA\n"
                                 "Suspect Nodes: NA\nExpert Advice: All data in comparison result meets the accuracy "
                                 "requirements.\n")
    assert outcome and str(outcome) == "all compared tensors reached the accuracy (7 of 7 paired tensors compared, " \
        "0 failing)"


def test_planted_difference_is_first_no_and_advisor_suspect(two_dumps, output_dir):
    npu, bench = two_dumps(planted="Functional_linear_0_forward")
    outcome = compare(npu.param(bench), output_dir, stack_mode=False, suffix="run1")
    header, rows = read_csv(outcome.csv_path)
    assert header == LEGACY_FULL + NEW
    assert os.path.basename(outcome.csv_path).startswith("compare_result_run1_")
    first_no = [r["NPU Name"] for r in rows if r["Accuracy Reached or Not"] == "No"][0]
    assert first_no == "Functional_linear_0_forward_output"
    assert outcome.first_failure == "Functional_linear_0_forward_output"
    with open(outcome.advisor_path) as handle:
        text = handle.read()
    assert text.startswith("Suspect API: Functional_linear_0_forward (Cause: its output differs beyond what its "
                           "precision and its inputs explain)\n")
    assert "\nLine: 4\nSuspect Nodes: Functional_linear_0_forward_output\nExpert Advice: The inputs " \
           "of Functional_linear_0_forward are within what their precision explains, but its output is not" in text
    assert os.path.basename(outcome.advisor_path).startswith("advisor_run1_")


def test_xlsx_columns_highlight_and_chart(two_dumps, output_dir):
    openpyxl = pytest.importorskip("openpyxl")
    npu, bench = two_dumps(planted="Functional_linear_0_forward")
    outcome = compare(npu.param(bench), output_dir, stack_mode=True)
    book = openpyxl.load_workbook(outcome.xlsx_path)
    sheet = book["compare_result"]
    # The verdict next to the names (the CSV keeps the legacy order); the rest in the CSV's order.
    csv_order = LEGACY_FULL + ["NPU_Stack_Info"] + NEW
    verdict = ["Accuracy Reached or Not", "Result", "Err_message"]
    assert [c.value for c in sheet[1]] == csv_order[:2] + verdict + [c for c in csv_order[2:] if c not in verdict]
    assert [c.value for c in sheet[4]][:4] == ["Functional_linear_0_forward_output",
                                               "Functional_linear_0_forward_output", "No", "error"]
    assert sheet["A4"].value == "Functional_linear_0_forward_output"
    assert sheet["A4"].fill.fgColor.rgb.endswith("FF7C80")  # the first failure: darker red
    assert sheet["A5"].fill.fgColor.rgb.endswith("FFC7CE")  # the failing rows after it: red
    assert sheet["A2"].fill.fgColor.rgb in (None, "00000000")
    chart_sheet = book["chart"]
    # Each row's error as a share of what it was allowed, by direction and grade; the limit; the first failure.
    assert [c.value for c in chart_sheet[1]] == [
        "CSV line", "forward pass", "forward warning", "forward error", "backward pass", "backward warning",
        "backward error", "allowed (1)", "first failure"]
    failing = [c.value for c in chart_sheet[4]]  # CSV line 4: the linear's output, 2 % off where 1e-3 is allowed
    assert failing[0] == 4 and failing[1] is None and failing[3] > 1 and failing[7] == 1.0 and failing[8] == failing[3]
    first_input = [c.value for c in chart_sheet[2]]  # identical on both sides: drawn on the floor, as a pass
    assert first_input[1] == 1e-3 and first_input[3] is None and first_input[8] is None
    import zipfile
    with zipfile.ZipFile(outcome.xlsx_path) as archive:
        forward_xml = archive.read("xl/charts/chart1.xml").decode()
        backward_xml = archive.read("xl/charts/chart2.xml").decode()
    assert "Forward calls: error / allowed" in forward_xml and "first failure: CSV line 4" in forward_xml
    assert "scatterChart" in forward_xml and '<logBase val="10"' in forward_xml
    assert "Backward calls: error / allowed along execution order: no failure" in backward_xml


def test_extra_api_on_npu_side_keeps_later_pairs(two_dumps, output_dir):
    npu, bench = two_dumps(extra_cast=True)
    outcome = compare(npu.param(bench), output_dir, auto_analyze=False, stack_mode=True)
    _, rows = read_csv(outcome.csv_path)
    extra = [r for r in rows if r["NPU Name"].startswith("Tensor_float_0")]
    assert [(r["Bench Name"], r["Accuracy Reached or Not"], r["Err_message"]) for r in extra] == [
        ("Nan", "Nan", "No bench data matched.")] * 2
    later = [r for r in rows if not r["NPU Name"].startswith("Tensor_float_0")]
    assert [r["NPU Name"] for r in later] == [r["Bench Name"] for r in later]
    assert {r["Accuracy Reached or Not"] for r in later} == {"Yes"}


def test_extra_api_on_bench_side_is_a_row(legacy_dump, model_calls, output_dir):
    npu, bench = legacy_dump("npu"), legacy_dump("bench")
    for call, tensors in model_calls():
        npu.add_call(call, tensors)
    for call, tensors in model_calls(extra_cast=True):
        bench.add_call(call, tensors)
    outcome = compare(npu.param(bench), output_dir, auto_analyze=False, stack_mode=True)
    _, rows = read_csv(outcome.csv_path)
    bench_only = [r for r in rows if r["NPU Name"] == "Nan"]
    assert [r["Bench Name"] for r in bench_only] == ["Tensor_float_0_forward_input.0", "Tensor_float_0_forward_output"]
    assert {r["Err_message"] for r in bench_only} == {"No NPU data matched."}


def test_summary_mode_without_data_dirs(two_dumps, output_dir):
    npu, bench = two_dumps(planted="Functional_linear_0_forward")
    outcome = compare(npu.param(bench, data=False), output_dir, stack_mode=True)
    header, rows = read_csv(outcome.csv_path)
    assert header == ["NPU Name", "Bench Name", "NPU Tensor Dtype", "Bench Tensor Dtype", "NPU Tensor Shape",
                      "Bench Tensor Shape", "Max diff", "Min diff", "Mean diff", "L2norm diff", "NPU max", "NPU min",
                      "NPU mean", "NPU l2norm", "Bench max", "Bench min", "Bench mean", "Bench l2norm",
                      "NPU_Stack_Info", "Result", "Err_message", "Allowed Rtol", "Carried Through",
                      "Share Of Allowed"]
    assert rows[0]["Max diff"] == "0.0" and rows[0]["Result"] == "pass"
    assert outcome.first_failure == "Functional_linear_0_forward_output"


def test_missing_npy_is_a_row_message_not_a_lost_report(two_dumps, output_dir):
    npu, bench = two_dumps()
    missing = os.path.join(bench.data_dir, "Torch_relu_0_forward_output.npy")
    os.remove(missing)
    outcome = compare(npu.param(bench), output_dir, stack_mode=True)
    _, rows = read_csv(outcome.csv_path)
    row = [r for r in rows if r["NPU Name"] == "Torch_relu_0_forward_output"][0]
    assert row["Err_message"] == f"Dump file: {missing} not found."
    assert row["Accuracy Reached or Not"] == "Nan" and row["Cosine"] == "Nan"
    assert len(rows) == 7


def test_shifted_counters_pair_by_default_and_fuzzy_match_keeps_its_message(legacy_dump, output_dir):
    import numpy as np
    a = np.arange(6, dtype=np.float32).reshape(2, 3) + 1
    npu, bench = legacy_dump("npu"), legacy_dump("bench")
    npu.add_call("Torch_add_3_forward", [("input.0", a), ("output", a)])
    bench.add_call("Torch_add_0_forward", [("input.0", a), ("output", a)])
    _, aligned = read_csv(compare(npu.param(bench), output_dir, stack_mode=True, suffix="exact").csv_path)
    assert [r["Bench Name"] for r in aligned] == ["Torch_add_0_forward_input.0", "Torch_add_0_forward_output"]
    assert aligned[0]["Err_message"] == ""
    _, fuzzy = read_csv(compare(npu.param(bench), output_dir, stack_mode=True, fuzzy_match=True, suffix="f").csv_path)
    assert [r["Bench Name"] for r in fuzzy] == ["Torch_add_0_forward_input.0", "Torch_add_0_forward_output"]
    assert fuzzy[0]["Err_message"] == "Fuzzy matching data, the comparison accuracy may be affected."
    assert fuzzy[0]["Accuracy Reached or Not"] == "Yes"


def test_fp16_against_fp32_pairs_and_shape_change_is_unmatched(legacy_dump, output_dir):
    import numpy as np
    a = np.ones((2, 2), dtype=np.float32)
    npu, bench = legacy_dump("npu"), legacy_dump("bench")
    npu.add_call("Torch_mm_0_forward", [("input.0", a.astype(np.float16)), ("output", a)])
    npu.add_call("Torch_cat_0_forward", [("input.0", a), ("output", np.ones((4, 2), np.float32))])
    bench.add_call("Torch_mm_0_forward", [("input.0", a), ("output", a)])
    bench.add_call("Torch_cat_0_forward", [("input.0", a), ("output", np.ones((2, 4), np.float32))])
    _, rows = read_csv(compare(npu.param(bench), output_dir, stack_mode=True, auto_analyze=False).csv_path)
    assert [(r["NPU Tensor Dtype"], r["Bench Tensor Dtype"], r["Accuracy Reached or Not"]) for r in rows[:2]] == [
        ("torch.float16", "torch.float32", "Yes"), ("torch.float32", "torch.float32", "Yes")]
    cat_out = rows[3]
    assert (cat_out["NPU Name"], cat_out["Bench Name"]) == ("Torch_cat_0_forward_output",) * 2
    assert cat_out["Cosine"] == "shape unmatched" and cat_out["Accuracy Reached or Not"] == "Unmatched"
    assert cat_out["Err_message"] == "Shape of NPU and bench Tensor do not match. Skipped."


def test_compare_does_not_import_torch(two_dumps, output_dir):
    npu, bench = two_dumps()
    code = ("import sys\nfrom ptdbg_ascend import *\ncompare({!r}, {!r}, stack_mode=True)\n"
            "assert 'torch' not in sys.modules, 'torch imported'\n"
            "assert 'pandas' not in sys.modules, 'pandas imported'\n").format(npu.param(bench), output_dir)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_many_rows_use_worker_processes_and_keep_order(legacy_dump, output_dir):
    """80 rows: above the process-pool threshold (run in a fresh process, where torch is not loaded)."""
    import numpy as np
    npu, bench = legacy_dump("npu"), legacy_dump("bench")
    rng = np.random.RandomState(3)
    for index in range(20):
        tensors = [(f"input.{i}", rng.randn(5).astype(np.float32)) for i in range(3)]
        output = rng.randn(5).astype(np.float32)
        bench.add_call(f"Torch_add_{index}_forward", tensors + [("output", output)])
        npu.add_call(f"Torch_add_{index}_forward", tensors + [("output", -output if index == 13 else output)])
    pid_log = os.path.join(output_dir, "pids.txt")
    # Each row's metrics append the pid that computed them: worker processes must have done the work.
    code = ("import os, sys\nfrom ptdbg_ascend.comparison import pairs_to_rows as engine\n"
            "from ptdbg_ascend.comparison.api import compare\n"
            "assert engine.PROCESS_MIN_ROWS <= 80\n"
            "original = engine._metrics_of_records\n"
            "def logged(records):\n"
            "    with open({!r}, 'a') as log:\n"
            "        log.write('%d\\n' % os.getpid())\n"
            "    return original(records)\n"
            "engine._metrics_of_records = logged\n"
            "print('PARENT', os.getpid(), 'WORKERS', engine.workers())\n"
            "o = compare({!r}, {!r}, stack_mode=True)\nprint('FIRST', o.first_failure, o.rows)\n"
            ).format(pid_log, npu.param(bench), output_dir)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "FIRST Torch_add_13_forward_output 80" in result.stdout
    _, parent, _, workers = result.stdout.split()[:4]
    with open(pid_log) as log:
        pids = [line.strip() for line in log]
    os.remove(pid_log)
    assert len(pids) == 80
    if int(workers) > 1:  # one CPU: everything runs in the parent, by design
        assert parent not in pids and len(set(pids)) >= 2
    csv_path = [f for f in os.listdir(output_dir) if f.endswith(".csv")][0]
    _, rows = read_csv(os.path.join(output_dir, csv_path))
    assert [r["NPU Name"] for r in rows] == [r["Bench Name"] for r in rows]
    assert [r["Accuracy Reached or Not"] for r in rows].count("No") == 1
