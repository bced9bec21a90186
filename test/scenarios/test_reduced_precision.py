"""Reduced precision at the same dtype (issue 19, items 1-3), on real small models trained on CPU.

The "NPU" run emulates TF32/HF32 (``precision_runs.py --tf32``: conv2d, linear and matmul compute from inputs
rounded to a 10-bit mantissa, inside the dumped call); the bench run is plain float32. The advisor must name
the first conv/matmul-class call as the cause, computing below float32 precision ("TF32/HF32-like"), not the
BatchNorm/softmax that amplifies its error; say so as a warning when nothing fails; and raise no alarm on
two equal runs (bit-identical, or differing only in the number of threads).
"""

from __future__ import annotations

import glob
import csv
import json
import os
import subprocess
import sys

import pytest
from scenario_support import call_order, parse_user_line, read_pkl

pytestmark = pytest.mark.slow

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "precision_runs.py")
LABEL = "TF32/HF32-like"
MATMUL_CLASS = ("Functional_conv2d_", "Functional_linear_", "Torch_matmul_", "Tensor_matmul_")
# name -> (model, npu options, bench options)
RUNS = {
    "resnet": ("resnet", ["--tf32"], []),
    "gpt": ("gpt", ["--tf32"], []),
    "mlp": ("mlp", ["--tf32"], []),
    "mlp_equal": ("mlp", [], []),
    "bn_threads": ("bn_block", ["--threads", "2"], ["--threads", "1"]),
}


def _side(directory, side):
    pkls = glob.glob(os.path.join(directory, "ptdbg_dump_v*", "rank0", f"api_stack_{side}_dump.pkl"))
    assert len(pkls) == 1, (directory, pkls)
    return pkls[0], pkls[0][: -len(".pkl")]


@pytest.fixture(scope="module")
def dumps(tmp_path_factory):
    """``{name: param dict}``: both sides of every run, dumped two processes at a time."""
    root = tmp_path_factory.mktemp("precision")
    jobs = []
    for name, (model, npu_options, bench_options) in RUNS.items():
        for side, options in (("npu", npu_options), ("bench", bench_options)):
            out = str(root / name / side)
            jobs.append((out, [sys.executable, SCRIPT, "--model", model, "--side", side, "--out", out] + options))
    for start in range(0, len(jobs), 2):
        running = [(out, subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
                   for out, command in jobs[start:start + 2]]
        for out, process in running:
            log, _ = process.communicate(timeout=180)
            assert process.returncode == 0, f"{out} failed:\n{log.decode(errors='replace')[-3000:]}"
    params = {}
    for name in RUNS:
        npu, bench = _side(str(root / name / "npu"), "npu"), _side(str(root / name / "bench"), "bench")
        params[name] = {"npu_pkl_path": npu[0], "bench_pkl_path": bench[0], "npu_dump_data_dir": npu[1],
                        "bench_dump_data_dir": bench[1], "is_print_compare_log": False}
    return params


def _text(path):
    with open(path, encoding="utf-8") as handle:
        return handle.read()


def _site_line(name):
    marker = "# root site: " + name
    lines = [n for n, text in enumerate(_text(SCRIPT).splitlines(), 1) if text.rstrip().endswith(marker)]
    assert len(lines) == 1, (name, lines)
    return lines[0]


def _first_matmul_class(param):
    order = call_order(read_pkl(param["npu_pkl_path"])[0])
    return next(call for call in order if call.startswith(MATMUL_CLASS) and call.endswith("_forward"))


def check_root(name, param, outcome):
    """The first conv/matmul-class call is named, computing below float32 precision, at its model line: a
    warning, since every call after it (BatchNorm, softmax) carries no more than that reduced precision
    explains through it, so nothing fails."""
    finding = outcome.finding
    summary = f"{name}: {outcome}; {finding}"
    assert outcome and outcome.first_failure is None and finding is not None, summary
    assert finding.call == _first_matmul_class(param), summary
    assert (finding.kind, finding.level, finding.precision) == ("cause", "warning", LABEL), summary
    path, line, code = parse_user_line(finding.user_line)
    assert (os.path.basename(path), line) == (os.path.basename(SCRIPT), _site_line(name)), summary
    text = _text(outcome.advisor_path)
    assert f"Warning: {finding.call} computes below float32 precision ({LABEL}): its inputs match" in text, \
        text
    assert "torch.npu.matmul.allow_hf32" in text, text  # a conv/matmul class: the HF32/TF32 switches
    assert f"computing below its dtype's precision ({LABEL})" in str(outcome)
    return text


def test_resnet_tf32_names_the_first_conv_not_batch_norm(dumps, run_compare):
    """BatchNorm removes the convolutions' mean and so shows their TF32 error; the first conv2d made it."""
    outcome = run_compare(dumps["resnet"])
    text = check_root("resnet", dumps["resnet"], outcome)
    assert outcome.finding.call == "Functional_conv2d_0_forward", outcome.finding
    assert "batch_norm" not in outcome.finding.call and "seed_all" not in text


def test_gpt_tf32_names_the_first_matmul_class_call(dumps, run_compare):
    """Softmax of sharp attention logits shows the projections' TF32 error; the first linear made it."""
    outcome = run_compare(dumps["gpt"])
    check_root("gpt", dumps["gpt"], outcome)
    assert outcome.finding.call == "Functional_linear_0_forward", outcome.finding


def test_mlp_tf32_passes_with_a_warning(dumps, run_compare):
    """Nothing fails, but the first linear computes below float32 precision: said, and the compare passes."""
    outcome = run_compare(dumps["mlp"])
    finding = outcome.finding
    assert bool(outcome) and outcome.first_failure is None and outcome.counts.failed == 0, outcome
    assert finding is not None and (finding.call, finding.kind, finding.level, finding.precision) == (
        "Functional_linear_0_forward", "cause", "warning", LABEL), finding
    assert str(outcome).startswith("all compared tensors reached the accuracy"), str(outcome)
    assert "warning: cause at Functional_linear_0_forward, computing below its dtype's precision ({})".format(
        LABEL) in str(outcome)
    text = _text(outcome.advisor_path)
    assert "Expert Advice: All data in comparison result meets the accuracy requirements." in text, text
    assert f"Warning: Functional_linear_0_forward computes below float32 precision ({LABEL})" in text, text
    path, line, _ = parse_user_line(finding.user_line)
    assert line == _site_line("mlp") and f"Code: {finding.user_line}" in text
    finding_path = os.path.join(os.path.dirname(outcome.csv_path),
                                os.path.basename(outcome.csv_path).replace("compare_result_", "compare_finding_")
                                .replace(".csv", ".json"))
    record = json.loads(_text(finding_path))
    assert (record["version"], record["level"], record["precision"]) == (4, "warning", LABEL), record
    assert record["rerun"] is None and "Re-run:" not in text  # nothing failed: nothing to prove


def _check_quiet(outcome):
    assert bool(outcome) and outcome.first_failure is None, str(outcome)
    assert outcome.finding is None, outcome.finding
    assert outcome.counts.failed == 0 and outcome.counts.compared > 0, outcome.counts


def test_equal_runs_have_no_finding(dumps, run_compare):
    """Two bit-identical runs: nothing fails, no warning, no reduced precision."""
    outcome = run_compare(dumps["mlp_equal"])
    _check_quiet(outcome)
    assert outcome.counts.warnings == 0, outcome.counts


def test_bn_block_with_other_thread_counts_does_not_fail(dumps, run_compare):
    """BN -> 1x1 conv -> BN, 1 thread against 2: the first BN's bias gradient (and the convs' bias gradients)
    are mathematically zero, round-off on both sides. Judged within round-off where they are made, they keep
    that verdict in the optimizer's calls that read them (no "changed in between", no failure)."""
    outcome = run_compare(dumps["bn_threads"])
    _check_quiet(outcome)
    with open(outcome.csv_path, encoding="utf-8", newline="") as handle:
        rows = list(csv.DictReader(handle))
    bias_gradients = [row for row in rows if row["NPU Name"].endswith("_backward_output.2")
                      and row["NPU Name"].startswith(("Functional_conv2d_", "Functional_batch_norm_"))]
    assert bias_gradients and {row["Result"] for row in bias_gradients} <= {"pass", "warning"}, bias_gradients
