"""Beyond the seed: each failing API of run_ut linked to the compare of the same run (``compare_link``).

The real planted-bug pair: the reference model (``precheck_model.py``) dumped clean ("bench") and with the
planted gelu ("npu"), ``compare()`` of the two, then run_ut on the npu dump with that compare.
"""

from __future__ import annotations

import csv
import math
import os
import shutil

import pytest

torch = pytest.importorskip("torch")

from ptdbg_ascend import compare  # noqa: E402
from ptdbg_ascend.cli import main as ptdbg  # noqa: E402
from ptdbg_ascend.errors import FileFormatError, ParameterError  # noqa: E402
from ptdbg_ascend.precheck import compare_link  # noqa: E402
from ptdbg_ascend.precheck.run_ut import run_ut  # noqa: E402

RESULT_HEADER = ["API name", "Forward Test Success", "Backward Test Success", "Message"]
LINKED_HEADER = RESULT_HEADER + ["Compare Link"]


def read_csv(path):
    with open(path, encoding="utf-8-sig", newline="") as handle:
        return list(csv.reader(handle))


def write_csv(path, rows):
    with open(path, "w", encoding="utf-8-sig", newline="") as handle:
        csv.writer(handle).writerows(rows)
    return str(path)


def compare_dumps(npu, bench, out):
    os.makedirs(str(out), exist_ok=True)
    return compare({"npu_json_path": npu, "bench_json_path": bench, "is_print_compare_log": False}, str(out),
                   xlsx=False)


@pytest.fixture(scope="module")
def planted_compare(model_dumps, tmp_path_factory):
    """compare(npu = planted gelu, bench = clean) of the same training step: the CompareOutcome."""
    return compare_dumps(model_dumps["planted"], model_dumps["clean"], tmp_path_factory.mktemp("compare"))


def test_planted_gelu_is_named_and_linked_as_failing_in_the_compare(model_dumps, planted_compare, tmp_path,
                                                                    planted_gelu):
    # the compare itself blames gelu (the first failing row is its forward output)
    assert planted_compare.finding.call == "Functional_gelu_0_forward"
    outcome = run_ut(model_dumps["planted"], str(tmp_path), progress=False, compare_csv=planted_compare.csv_path)
    print(outcome.summary())
    assert [(f.name, f.forward, f.backward) for f in outcome.failures] == [("Functional.gelu.0", "error", "error")]
    link = outcome.failures[0].link
    assert link.state == "failing" and link.directions == ("forward", "backward")
    assert link.row == "Functional_gelu_0_forward_output" and link.result == "error"
    assert link.message.startswith("Relative error") and "allowed for float32" in link.message
    assert link.position == "is" and link.anchor_kind == "the advisor's suspect"
    assert not link.inputs_failing  # gelu's inputs still match in the compare: it is the cause
    summary = outcome.summary()
    assert "the advisor's suspect is Functional_gelu_0_forward" in summary
    assert "          compare: failing there too: error (Relative error" in summary
    assert summary.rstrip().count("it is the advisor's suspect") == 1
    # severity shown as a multiple of the allowed error: gelu through bfloat16 is far beyond float32's
    gelu_line = [line for line in summary.splitlines() if line.startswith("  error   Functional.gelu.0")][0]
    times = float(gelu_line.split("  ")[-1].split("x the allowed error")[0])
    assert times > 10 and math.isclose(times, outcome.failures[0].severity, rel_tol=1e-2)
    # the result CSV: 1.0.4's four columns, then the link; only the failing API has a cell
    rows = read_csv(outcome.result_csv)
    assert rows[0] == LINKED_HEADER
    cells = {row[0]: row for row in rows[1:]}
    assert all(len(row) == 5 for row in rows)
    assert cells["Functional.gelu.0"][:4] == ["Functional.gelu.0", "error", "error", ""]
    assert cells["Functional.gelu.0"][4].startswith("failing: error: Relative error")
    assert cells["Functional.gelu.0"][4].endswith("; it is the advisor's suspect")
    assert cells["Functional.linear.0"] == ["Functional.linear.0", "pass", "pass", "", ""]
    assert len(rows) - 1 == sum(outcome.counts.values())


def test_compare_outcome_object_and_csv_without_advisor(model_dumps, planted_compare, tmp_path, planted_gelu):
    by_object = run_ut(model_dumps["planted"], str(tmp_path / "a"), progress=False, compare_csv=planted_compare)
    assert by_object.failures[0].link.position == "is"
    assert by_object.compare.anchor == ("Functional.gelu.0", "forward")
    # the CSV alone (no advisor_{ts}.txt beside it): the anchor is the compare's first failing row
    alone = tmp_path / "alone"
    alone.mkdir()
    copied = shutil.copy(planted_compare.csv_path, str(alone))
    outcome = run_ut(model_dumps["planted"], str(tmp_path / "b"), progress=False, compare_csv=copied)
    link = outcome.failures[0].link
    assert (link.state, link.position, link.anchor_kind) == ("failing", "is", "the compare's first failing call")
    assert outcome.compare.anchor_name == "Functional_gelu_0_forward_output"
    assert "compare: failing there too" in outcome.summary()


def test_same_run_compare_says_within_tolerance(model_dumps, tmp_path, planted_gelu):
    """The npu dump against itself: every compare row passes, so gelu is inaccurate in isolation only."""
    same = compare_dumps(model_dumps["planted"], model_dumps["planted"], tmp_path / "compare")
    assert same.first_failure is None
    outcome = run_ut(model_dumps["planted"], str(tmp_path / "ut"), progress=False, compare_csv=same.csv_path)
    assert [f.name for f in outcome.failures] == ["Functional.gelu.0"]
    link = outcome.failures[0].link
    assert (link.state, link.position) == ("passing", None)
    assert ("compare: passing there: inaccurate in isolation, but within tolerance in this run"
            in outcome.summary())
    assert "no failing row" in outcome.summary()
    gelu = [row for row in read_csv(outcome.result_csv) if row[0] == "Functional.gelu.0"][0]
    assert gelu[4] == "passing: inaccurate in isolation, but within tolerance in this run"


def test_msprobe_names_absent_and_position_before_after(tmp_path):
    """A compare CSV with msprobe's dotted names and no advisor file: the anchor is the first failing row."""
    path = write_csv(tmp_path / "compare_result_20240101000000.csv", [
        ["NPU Name", "Bench Name", "Result", "Err_message"],
        ["Functional.linear.0.forward.input.0", "x", "pass", ""],
        ["Functional.linear.0.forward.output.0", "x", "error", "linear differs"],
        ["Functional.gelu.0.forward.input.0", "x", "error", "input differs"],
        ["Functional.gelu.0.forward.input.approximate.0", "x", "pass", ""],
        ["Functional.gelu.0.forward.output.0", "x", "error", "gelu differs"],
        ["Functional.gelu.0.backward.input.0", "x", "pass", ""],
        ["Functional.gelu.0.backward.output.0", "x", "warning", "Passes, but..."],
        ["Functional.conv2d.0.forward.output.0", "x", "not compared", "file missing"],
        ["N/A", "Functional.relu.0.forward.output.0", "unmatched", "bench only"],
    ])
    report = compare_link.read_compare(path)
    assert report.anchor == ("Functional.linear.0", "forward")
    assert report.anchor_kind == "the compare's first failing call"
    forward = compare_link.link("Functional.gelu.0", "error", " ", report)
    assert (forward.state, forward.result, forward.message) == ("failing", "error", "gelu differs")
    assert forward.inputs_failing and forward.position == "follows"
    assert forward.text() == ("failing there too: error (gelu differs) [its inputs already differ there]; it runs "
                              "after the compare's first failing call")
    backward = compare_link.link("Functional.gelu.0", "pass", "warning", report)
    assert (backward.state, backward.row) == ("passing", "Functional.gelu.0.backward.output.0")
    assert not backward.inputs_failing
    assert compare_link.link("Functional.linear.0", "error", "pass", report).position == "is"
    absent = compare_link.link("Functional.relu.0", "error", "error", report)  # a bench-only row is not the NPU's
    assert (absent.state, absent.position, absent.cell()) == ("absent", None, "absent")
    unjudged = compare_link.link("Functional.conv2d.0", "error", " ", report)
    assert (unjudged.state, unjudged.cell()) == ("not judged", "not judged: not compared; it runs after the "
                                                                "compare's first failing call")


def test_legacy_names_accuracy_column_and_advisor_suspect(tmp_path):
    """A tensor-mode CSV judged by ``Accuracy Reached or Not`` only, with an advisor file naming a suspect
    after the failing API: the API runs before the suspect."""
    path = write_csv(tmp_path / "compare_result_x_20240101000000.csv", [
        ["NPU Name", "Accuracy Reached or Not", "Err_message"],
        ["Tensor___add___1_forward_input.0", "Yes", ""],
        ["Tensor___add___1_forward_output", "No", ""],
        ["Torch_matmul_0_forward_output", "No", "big"],
    ])
    (tmp_path / "advisor_x_20240101000000.txt").write_text(
        "Line: 3\nSuspect Nodes: Torch_matmul_0_forward_output\nExpert Advice: ...\n"
        "Suspect API: Torch_matmul_0_forward (Cause: its inputs still match, its output does not)\n")
    report = compare_link.read_compare(tmp_path / "compare_result_x_20240101000000.csv")  # a PathLike too
    assert report.anchor == ("Torch.matmul.0", "forward") and report.anchor_kind == "the advisor's suspect"
    add = compare_link.link("Tensor.__add__.1", "error", " ", report)
    assert (add.state, add.result, add.position) == ("failing", "Accuracy Reached or Not: No", "precedes")
    assert add.cell() == "failing: Accuracy Reached or Not: No: ; it runs before the advisor's suspect"


def test_linked_run_resumes_and_cli_flag(model_dumps, planted_compare, tmp_path, capsys, planted_gelu):
    outcome = run_ut(model_dumps["planted"], str(tmp_path), progress=False, compare_csv=planted_compare.csv_path)
    linked = read_csv(outcome.result_csv)
    # resuming a finished, linked run without --compare: the derived column is dropped, nothing re-run
    again = run_ut(model_dumps["planted"], progress=False, result_csv_path=outcome.result_csv)
    assert again.apis_run == 0 and again.failures[0].link is None
    assert read_csv(outcome.result_csv) == [row[:4] for row in linked]
    assert ptdbg(["run-ut", "-api_info", model_dumps["planted"], "-o", str(tmp_path / "cli"), "--no-progress",
                  "--compare", planted_compare.csv_path]) == 1
    printed = capsys.readouterr().out
    assert "error   Functional.gelu.0  forward error / backward error" in printed
    assert "compare: failing there too: error (Relative error" in printed


def test_bad_compare_input_is_clear_and_writes_nothing(model_dumps, planted_compare, tmp_path):
    out = tmp_path / "out"
    with pytest.raises(ParameterError) as error:
        run_ut(model_dumps["clean"], str(out), progress=False, compare_csv=str(tmp_path / "missing.csv"))
    assert "compare_csv" in str(error.value) and "missing.csv" in str(error.value)
    with pytest.raises(ParameterError) as error:
        run_ut(model_dumps["clean"], str(out), progress=False, compare_csv=str(tmp_path / "compare_result_1.xlsx"))
    assert "not the .xlsx" in str(error.value)
    with pytest.raises(ParameterError):
        run_ut(model_dumps["clean"], str(out), progress=False, compare_csv=42)
    not_a_compare = write_csv(tmp_path / "other.csv", [["API name", "Forward Test Success"], ["a", "pass"]])
    with pytest.raises(FileFormatError) as error:
        run_ut(model_dumps["clean"], str(out), progress=False, compare_csv=not_a_compare)
    assert "other.csv" in str(error.value) and "NPU Name" in str(error.value)
    assert not out.exists()  # validated before anything is written


def test_severity_is_shown_as_times_the_allowed_error():
    assert compare_link.times_allowed(2.978) == "2.98x the allowed error"
    assert compare_link.times_allowed(1.0) == "1x the allowed error"
    assert compare_link.times_allowed(0.25) == "0.25x the allowed error"
    assert compare_link.times_allowed(float("inf")) == "type/shape/dtype mismatch"
    assert compare_link.times_allowed(float("nan")) == "error size not measured"


