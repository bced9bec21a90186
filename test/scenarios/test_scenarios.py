"""Does the tool name the right API on real models? Each test dumps a clean "bench" run and a planted "npu"
run of a small CPU model (``train_scenario.py``, one process per side), compares them with
``ptdbg_ascend.compare(..., stack_mode=True)`` and checks the advisor's finding: the planted call, as a
cause, at the model line that calls it, and nothing before the plant; or no failure at all for runs that
differ only in how the same math is scheduled.

The planted call's NPU name is read from the npu dump itself (the ``<api>_<n>_forward_output`` whose
statistics the run wrote to plant.json), not assumed.
"""

from __future__ import annotations

import csv
import os
import re
import shutil
import subprocess
import sys

import pytest
from scenario_support import (RECORD, SCRIPT, call_order, parse_user_line, plant_site_line, planted_call, read_pkl,
                              uses)

pytestmark = pytest.mark.slow

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KINDS = ("cause", "propagation", "input")


def advisor_text(outcome) -> str:
    assert outcome.advisor_path, "no advisor file was written"
    with open(outcome.advisor_path, encoding="utf-8") as handle:
        return handle.read()


def csv_rows(outcome):
    with open(outcome.csv_path, encoding="utf-8", newline="") as handle:
        return list(csv.DictReader(handle))


def call_of(record_name: str) -> str:
    """``Functional_linear_1_forward_output`` -> ``Functional_linear_1_forward``."""
    match = RECORD.match(record_name)
    assert match, f"not a record name: {record_name!r}"
    return record_name[: match.end("direction")]


def describe(outcome) -> str:
    finding = outcome.finding
    if finding is None:
        return f"first_failure={outcome.first_failure!r}, finding=None"
    return "first_failure={!r}, finding: call={!r} api={!r} kind={!r} user_line={!r}".format(
        outcome.first_failure, finding.call, finding.api, finding.kind, finding.user_line)


def check_planted(name, dumps, outcome, kind="cause"):
    """The finding is the planted call, as ``kind``, at the plant site; nothing before the plant is named."""
    planted = planted_call(dumps)
    order = call_order(read_pkl(dumps.npu.pkl)[0])
    where = order.index(planted)
    summary = f"{name}: planted {planted} (npu call #{where}); {describe(outcome)}"
    print(summary)
    assert outcome.first_failure is not None, "nothing failed. " + summary
    assert order.index(call_of(outcome.first_failure)) >= where, "the first failure is before the plant. " + summary
    finding = outcome.finding
    assert finding is not None, summary
    assert finding.call in order, "the finding names no call of the npu dump. " + summary
    assert order.index(finding.call) >= where, "the finding is before the plant. " + summary
    assert finding.api == dumps.plant["api"], summary
    assert finding.call == planted, summary
    assert finding.kind == kind, summary
    path, line, code = parse_user_line(finding.user_line)
    assert os.path.basename(path) == os.path.basename(SCRIPT), summary
    assert line == plant_site_line(name), summary
    assert dumps.plant["code"] in code, summary
    text = advisor_text(outcome)
    assert planted in text and kind.capitalize() in text, text
    assert not outcome and outcome.counts.failed >= 1, summary


def check_no_failure(name, outcome):
    print(f"{name}: {describe(outcome)}")
    errors = [row["NPU Name"] for row in csv_rows(outcome) if row.get("Result") == "error"]
    assert outcome.first_failure is None, describe(outcome)
    assert outcome.finding is None, describe(outcome)
    assert errors == []
    assert bool(outcome) is True
    assert outcome.counts.failed == 0 and outcome.counts.compared > 0, outcome.counts


@uses("extra_call")
def test_extra_call_shifts_the_counter(scenario, run_compare):
    """One extra early F.relu on the npu side: every later relu's counter is one higher there; the planted
    one (npu Functional_relu_2, bench Functional_relu_1) is still named."""
    dumps = scenario("extra_call")
    check_planted("extra_call", dumps, run_compare(dumps))


@uses("checkpoint")
def test_checkpoint_is_no_failure(scenario, run_compare):
    """Activation checkpointing re-runs the block's forward during backward (extra forward calls, and
    shifted counters in the next step): the same math, so nothing fails."""
    check_no_failure("checkpoint", run_compare(scenario("checkpoint")))


@uses("checkpoint")
def test_checkpoint_pairs_every_bench_call(scenario, run_compare):
    """Only the npu run's recomputed forward calls stay unpaired: every bench row has its npu row, of the
    same API."""
    dumps = scenario("checkpoint")
    outcome = run_compare(dumps)
    rows = csv_rows(outcome)
    missing = ("", "Nan")
    bench_only = [row["Bench Name"] for row in rows if row["NPU Name"] in missing]
    npu_only = {call_of(row["NPU Name"]) for row in rows if row["Bench Name"] in missing}
    mismatched = [(row["NPU Name"], row["Bench Name"]) for row in rows
                  if row["NPU Name"] not in missing and row["Bench Name"] not in missing
                  and RECORD.match(row["NPU Name"]).group("api") != RECORD.match(row["Bench Name"]).group("api")]
    _, stacks = read_pkl(dumps.npu.pkl)
    recomputed = {call for call, stack in stacks.items() if any(frame[2] == "recompute_fn" for frame in stack)}
    assert recomputed, "no recomputed call in the npu dump"
    assert bench_only == [] and mismatched == [], (bench_only[:10], mismatched[:10])
    assert npu_only == recomputed, (sorted(npu_only - recomputed), sorted(recomputed - npu_only))


@uses("inplace_relu")
def test_inplace_relu_is_the_cause(scenario, run_compare):
    """A buggy in-place relu_ (clamps at 0.05): its input, recorded before the call, still matches, so
    the in-place API itself is the cause."""
    dumps = scenario("inplace_relu")
    planted = planted_call(dumps)
    # The dump records an in-place API's input before the call: it is the linear output it was given.
    for side in (dumps.npu, dumps.bench):
        stats = {record[0]: record[5] for record in read_pkl(side.pkl)[0] if len(record) == 6}
        before, given = stats[planted + "_input.0"], stats["Functional_linear_0_forward_output"]
        assert before == given, "{}: {} recorded {} as its input, the tensor it was given is {}".format(
            side.pkl, planted, before, given)
    check_planted("inplace_relu", dumps, run_compare(dumps))


@uses("scale")
def test_scale(scenario, run_compare):
    """fp32; the second F.linear returns its output x 1.02 (Cosine stays 1.0)."""
    dumps = scenario("scale")
    check_planted("scale", dumps, run_compare(dumps))


@uses("every_fifth")
def test_every_fifth_element(scenario, run_compare):
    """The first F.layer_norm's output has +0.5 in every 5th element."""
    dumps = scenario("every_fifth")
    check_planted("every_fifth", dumps, run_compare(dumps))


@uses("autocast")
def test_autocast_does_not_blame_the_optimizer(scenario, run_compare):
    """Transformer block with AdamW, forward under bfloat16 autocast on the npu side: the first failure,
    if any, is not the input of an optimizer API (its inputs only differ because the gradients do)."""
    dumps = scenario("autocast")
    outcome = run_compare(dumps)
    _, stacks = read_pkl(dumps.npu.pkl)
    optimizer_calls = {call for call, stack in stacks.items()
                       if any("/torch/optim/" in frame[0].replace(os.sep, "/") for frame in stack)}
    assert optimizer_calls, "no optimizer call found in the npu dump"
    print("autocast: " + describe(outcome))
    if outcome.first_failure is not None:
        match = RECORD.match(outcome.first_failure)
        assert not (call_of(outcome.first_failure) in optimizer_calls and match.group("side") == "input"), \
            "an optimizer API's input is named: " + describe(outcome)
        finding = outcome.finding
        assert finding is not None and finding.kind in KINDS, describe(outcome)
        assert not (finding.call in optimizer_calls and finding.kind == "cause"), describe(outcome)


@uses("conv_bn")
def test_conv_bn_bf16_linear(scenario, run_compare):
    """A later F.linear computed in bfloat16 on the npu side (cast in, cast out) against float32: its error is
    within bfloat16's round-off, and every float32 call after it carries no more than that error explains
    through it, so nothing fails; the advisor notes the first call computed in lower precision, the planted
    linear. The conv bias gradient (mathematically zero before BatchNorm: round-off on both sides) passes."""
    dumps = scenario("conv_bn")
    outcome = run_compare(dumps)
    check_no_failure("conv_bn", outcome)
    planted = planted_call(dumps)
    text = advisor_text(outcome)
    assert text.startswith("All data in comparison result meets the accuracy requirements."), text
    assert "Note: {} is the first call that runs in torch.bfloat16 on NPU and torch.float32 on bench".format(
        planted) in text, text
    rows = {row["NPU Name"]: row for row in csv_rows(outcome)}
    bias_gradient = [row for name, row in rows.items() if re.match(r"^Functional_conv2d_\d+_backward_output\.2$", name)]
    assert bias_gradient and {row["Result"] for row in bias_gradient} <= {"pass", "warning"}, bias_gradient
    # the float32 calls after the planted one carry its error in: said in the row, with the class that carried it
    gelu = [row for name, row in rows.items() if name.startswith("Functional_gelu_") and name.endswith("_output")]
    assert gelu and all(row["Carried Through"] == "activation" for row in gelu), gelu


@uses("equal_runs")
def test_equal_runs(scenario, run_compare):
    check_no_failure("equal_runs", run_compare(scenario("equal_runs")))


def _without_npy(dumps, root):
    """The two pkls copied under ``root`` with empty npy directories (as if the npy files were deleted)."""
    param = {"is_print_compare_log": False}
    for side in ("npu", "bench"):
        pkl = getattr(dumps, side).pkl
        directory = root / side / "rank0"
        directory.mkdir(parents=True)
        copy = directory / os.path.basename(pkl)
        shutil.copyfile(pkl, str(copy))
        data_dir = directory / os.path.basename(pkl)[: -len(".pkl")]
        data_dir.mkdir()
        param[side + "_pkl_path"], param[side + "_dump_data_dir"] = str(copy), str(data_dir)
    return param


@uses("equal_runs")
def test_nothing_comparable(scenario, run_compare, tmp_path):
    """Two equal runs whose npy files are gone: nothing can be compared, which is not a pass."""
    param = _without_npy(scenario("equal_runs"), tmp_path / "dumps")
    outcome = run_compare(param)
    print(f"nothing_comparable: {describe(outcome)}, counts={outcome.counts}")
    assert outcome.counts.compared == 0, outcome.counts
    assert bool(outcome) is False
    text = advisor_text(outcome)
    assert "meets the accuracy requirements" not in text, text
    assert re.search(r"\bno(thing)?\b[^.\n]*compar", text, re.IGNORECASE), text

    out = tmp_path / "cli"
    out.mkdir()
    command = [sys.executable, "-m", "ptdbg_ascend.cli", "compare", param["npu_pkl_path"], param["bench_pkl_path"],
               str(out), "--npu-dump-data-dir", param["npu_dump_data_dir"],
               "--bench-dump-data-dir", param["bench_dump_data_dir"]]
    result = subprocess.run(command, capture_output=True, text=True,
                            cwd=REPO, timeout=120)
    assert result.returncode == 3, (result.returncode, result.stderr[-2000:])  # incomplete, not an error
    assert "ptdbg compare: incomplete: " in result.stderr


def _statistics_only(dumps):
    param = dumps.param()
    param.pop("npu_dump_data_dir")
    param.pop("bench_dump_data_dir")
    return param


@uses("conv_bn")
def test_summary_mode_notes_the_bf16_linear_too(scenario, run_compare):
    """Statistics only (no npy): the planted bfloat16 linear is within bfloat16's round-off there too;
    nothing fails, the answer says it compared statistics only and notes the planted linear."""
    dumps = scenario("conv_bn")
    outcome = run_compare(_statistics_only(dumps))
    print(f"conv_bn summary: {describe(outcome)}")
    check_no_failure("conv_bn summary", outcome)
    assert outcome.counts.statistics_only
    text = advisor_text(outcome)
    assert text.splitlines()[0] == ("All data in comparison result meets the accuracy requirements. (Statistics "
                                    "only: max, min, mean and norm were compared, no tensor files.)"), text
    assert f"Note: {planted_call(dumps)} is the first call" in text, text


@uses("equal_runs")
def test_summary_mode_equal_runs(scenario, run_compare):
    check_no_failure("equal_runs summary", run_compare(_statistics_only(scenario("equal_runs"))))


@uses("scale")
def test_summary_mode_scale(scenario, run_compare):
    """A 2 % uniform error shows in max/min/l2norm: statistics alone name the planted API too."""
    dumps = scenario("scale")
    outcome = run_compare(_statistics_only(dumps))
    assert outcome.finding is not None and outcome.finding.call == planted_call(dumps), describe(outcome)
    assert outcome.finding.kind == "cause"
