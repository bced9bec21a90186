"""A pass means compared: a compare that left part of the NPU run unpaired (a forward-only bench, other
filters) or judged only statistics says so on the advisor's first line, and is not a pass (torch-free,
hand-written dumps)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from ptdbg_ascend.comparison.api import compare

pytestmark = pytest.mark.torchfree

X = np.linspace(-1.0, 1.0, 12, dtype=np.float32).reshape(3, 4)
W = np.linspace(0.5, -0.5, 20, dtype=np.float32).reshape(5, 4)


def forward_and_backward(dump, backward=True, layers=3):
    """``layers`` linear calls forward (input, weight, output) and, with ``backward``, their gradients."""
    y = X
    for index in range(layers):
        out = (y @ W[:4].T).astype(np.float32)
        dump.add_call(f"Functional_linear_{index}_forward", [("input.0", y), ("input.1", W[:4]),
                                                                    ("output", out)])
        y = out
    if backward:
        grad = np.ones_like(y)
        for index in reversed(range(layers)):
            dump.add_call(f"Functional_linear_{index}_backward", [("input.0", grad),
                                                                         ("output.0", grad @ W[:4]),
                                                                         ("output.1", grad.T @ X)])
    return dump


def advice_of(outcome):
    with open(outcome.advisor_path, encoding="utf-8") as handle:
        return handle.read()


def test_a_forward_only_bench_is_incomplete_not_a_pass(legacy_dump, output_dir):
    npu = forward_and_backward(legacy_dump("npu"))
    bench = forward_and_backward(legacy_dump("bench"), backward=False)
    outcome = compare(npu.param(bench), output_dir, xlsx=False)
    counts = outcome.counts
    # 9 forward rows paired and passing; the 9 backward rows (3 calls x 3 tensors) were never paired
    assert (counts.paired_forward, counts.npu_forward, counts.paired_backward, counts.npu_backward) == (9, 9, 0, 9)
    assert counts.failed == 0 and outcome.first_failure is None
    assert not outcome and outcome.status == "incomplete"
    text = advice_of(outcome)
    assert text.splitlines()[0] == ("Incomplete: the bench dump has no backward calls: 9 NPU backward rows were "
                                    "never paired (a forward-only bench dump?). This result does not show that "
                                    "the runs agree.")
    assert "All data" not in text
    assert "nothing failed, but the run was not compared in full" in str(outcome)
    assert "Paired: forward 9 of 9 NPU rows, backward 0 of 9." in text


def test_a_forward_only_npu_dump_is_incomplete_too(legacy_dump, output_dir):
    npu = forward_and_backward(legacy_dump("npu"), backward=False)
    bench = forward_and_backward(legacy_dump("bench"))
    outcome = compare(npu.param(bench), output_dir, xlsx=False)
    assert not outcome and outcome.status == "incomplete"
    assert advice_of(outcome).startswith("Incomplete: the NPU dump has no backward calls: 9 bench backward rows "
                                         "were never paired (a forward-only NPU dump?)")


def test_more_than_five_percent_of_npu_rows_unpaired_is_incomplete(legacy_dump, output_dir):
    npu = forward_and_backward(legacy_dump("npu"), backward=False, layers=3)
    npu.add_call("Torch_exp_0_forward", [("input.0", X), ("output", np.exp(X))])  # the bench never calls it
    bench = forward_and_backward(legacy_dump("bench"), backward=False, layers=3)
    outcome = compare(npu.param(bench), output_dir, xlsx=False)
    assert outcome.counts.npu_unpaired == 2 and outcome.counts.npu_rows == 11
    assert not outcome and outcome.status == "incomplete"
    assert advice_of(outcome).startswith("Incomplete: 2 of 11 NPU rows (18%) have no bench partner")


def test_a_one_sided_cast_is_no_gap(legacy_dump, output_dir):
    npu = forward_and_backward(legacy_dump("npu"), backward=False, layers=3)
    npu.add_call("Tensor_float_0_forward", [("input.0", X), ("output", X)])  # only moves values
    bench = forward_and_backward(legacy_dump("bench"), backward=False, layers=3)
    outcome = compare(npu.param(bench), output_dir, xlsx=False)
    assert outcome.counts.npu_only == 2 and outcome.counts.npu_unpaired == 0
    assert outcome and outcome.status == "passed"


def test_a_failure_in_an_incomplete_compare_is_a_failure_and_says_both(legacy_dump, output_dir):
    npu = legacy_dump("npu")
    npu.add_call("Functional_linear_0_forward", [("input.0", X), ("output", X * 1.05)])
    npu.add_call("Functional_linear_0_backward", [("input.0", X), ("output.0", X)])
    bench = legacy_dump("bench")
    bench.add_call("Functional_linear_0_forward", [("input.0", X), ("output", X)])
    outcome = compare(npu.param(bench), output_dir, xlsx=False)
    assert outcome.status == "failed" and not outcome
    lines = advice_of(outcome).splitlines()
    assert lines[0].startswith("Suspect API: Functional_linear_0_forward (Cause:")
    incomplete = [line for line in lines if line.startswith("Incomplete: ")]
    assert incomplete and lines.index(incomplete[0]) < [i for i, line in enumerate(lines)
                                                        if line.startswith("Next step: ")][0]


def test_statistics_only_is_said_on_the_first_line(legacy_dump, output_dir):
    npu = forward_and_backward(legacy_dump("npu"))
    bench = forward_and_backward(legacy_dump("bench"))
    outcome = compare(npu.param(bench, data=False), output_dir, xlsx=False)
    assert outcome and outcome.counts.statistics_only
    assert advice_of(outcome).splitlines()[0] == (
        "All data in comparison result meets the accuracy requirements. (Statistics only: max, min, mean and norm "
        "were compared, no tensor files.)")
    assert "compared by their statistics" in str(outcome)


def _cli(*arguments, cwd):
    return subprocess.run([sys.executable, "-m", "ptdbg_ascend.cli"] + [str(a) for a in arguments], cwd=str(cwd),
                          capture_output=True, text=True, timeout=120)


def test_cli_exit_status_tells_incomplete_from_failed(legacy_dump, tmp_path):
    npu = forward_and_backward(legacy_dump("npu"))
    bench = forward_and_backward(legacy_dump("bench"), backward=False)
    result = _cli("compare", npu.pkl, bench.pkl, tmp_path / "out", "--npu-dump-data-dir", npu.data_dir,
                  "--bench-dump-data-dir", bench.data_dir, "--quiet", "--no-xlsx", cwd=tmp_path)
    assert result.returncode == 3, result.stderr
    assert "ptdbg compare: incomplete: " in result.stderr and "the bench dump has no backward calls" in result.stderr
    same = forward_and_backward(legacy_dump("same"))
    result = _cli("compare", npu.pkl, same.pkl, tmp_path / "out2", "--npu-dump-data-dir", npu.data_dir,
                  "--bench-dump-data-dir", same.data_dir, "--quiet", "--no-xlsx", cwd=tmp_path)
    assert result.returncode == 0, result.stderr


def test_compare_json_finds_the_npy_folders_beside_legacy_pkls(legacy_dump, tmp_path):
    """msprobe's compare.json has no key for the tensors: the {stem}/ folder beside each {stem}.pkl is used,
    as dump_tensor_data/ is beside a dump.json, so its compare judges the tensors, not only statistics."""
    npu = legacy_dump("npu")
    npu.add_call("Functional_linear_0_forward", [("input.0", X), ("output", X * 1.02)])
    bench = legacy_dump("bench")
    bench.add_call("Functional_linear_0_forward", [("input.0", X), ("output", X)])
    spec = tmp_path / "compare.json"
    spec.write_text(json.dumps({"npu_path": npu.pkl, "bench_path": bench.pkl, "is_print_compare_log": False}))
    result = _cli("-f", "pytorch", "compare", "-i", spec, "-o", tmp_path / "out", "--no-xlsx", cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    (csv_name,) = (name for name in os.listdir(str(tmp_path / "out")) if name.startswith("compare_result_"))
    with open(str(tmp_path / "out" / csv_name), encoding="utf-8") as handle:
        header = handle.readline()
    assert "Cosine" in header and "Max diff" not in header  # a tensor comparison
