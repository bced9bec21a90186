"""Beyond the seed: each failing API of run_ut linked to the compare of the same run (``compare_link``).

The real planted-bug pair: the reference model (``precheck_model.py``) dumped clean ("bench") and with the
planted gelu ("npu"), ``compare()`` of the two, then run_ut on the npu dump with that compare.
"""

from __future__ import annotations

import csv
import json
import math
import os
import shutil

import pytest

torch = pytest.importorskip("torch")

from ptdbg_ascend import compare  # noqa: E402
from ptdbg_ascend.cli import main as ptdbg  # noqa: E402
from ptdbg_ascend.errors import FileFormatError, ParameterError  # noqa: E402
from ptdbg_ascend.formats import finding  # noqa: E402
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
    assert backward.inputs_failing  # a backward reads its forward inputs too, and gelu's already differ
    assert compare_link.link("Functional.linear.0", "error", "pass", report).position == "is"
    absent = compare_link.link("Functional.relu.0", "error", "error", report)  # a bench-only row is not the NPU's
    assert (absent.state, absent.position, absent.cell()) == ("absent", None, "absent")
    unjudged = compare_link.link("Functional.conv2d.0", "error", " ", report)
    assert (unjudged.state, unjudged.cell()) == ("not judged", "not judged: not compared; it runs after the "
                                                                "compare's first failing call")


def test_inputs_failing_is_of_the_direction_shown(tmp_path):
    """Before: any failing input row of the call, in either direction, marked its failing forward output
    "[its inputs already differ there]": a backward incoming gradient that differs (from later calls)
    made a forward cause look like propagation."""
    path = write_csv(tmp_path / "compare_result_20240101000000.csv", [
        ["NPU Name", "Bench Name", "Result", "Err_message"],
        ["Functional.gelu.0.forward.input.0", "x", "pass", ""],
        ["Functional.gelu.0.forward.output.0", "x", "error", "gelu differs"],
        ["Functional.gelu.0.backward.input.0", "x", "error", "gradient differs"],
        ["Functional.gelu.0.backward.output.0", "x", "error", "gelu grad differs"],
        ["Functional.relu.0.forward.input.0", "x", "pass", ""],
        ["Functional.relu.0.forward.output.0", "x", "pass", ""],
        ["Functional.relu.0.backward.input.0", "x", "pass", ""],
        ["Functional.relu.0.backward.output.0", "x", "error", "relu grad differs"],
    ])
    report = compare_link.read_compare(path)
    forward = compare_link.link("Functional.gelu.0", "error", "error", report)
    assert (forward.row, forward.inputs_failing) == ("Functional.gelu.0.forward.output.0", False)
    assert forward.cell() == "failing: error: gelu differs; it is the compare's first failing call"
    backward = compare_link.link("Functional.gelu.0", "pass", "error", report)
    assert (backward.row, backward.inputs_failing) == ("Functional.gelu.0.backward.output.0", True)
    assert "; inputs already differ" in backward.cell()
    relu = compare_link.link("Functional.relu.0", "pass", "error", report)  # its gradient in and forward match
    assert (relu.row, relu.inputs_failing) == ("Functional.relu.0.backward.output.0", False)


def test_legacy_names_accuracy_column_and_advisor_suspect(tmp_path):
    """A tensor-mode CSV judged by ``Accuracy Reached or Not`` only, with a finding file naming the first
    failing row's call as the suspect: an API before it (failing in run_ut, passing here) runs before it."""
    path = write_csv(tmp_path / "compare_result_x_20240101000000.csv", [
        ["NPU Name", "Accuracy Reached or Not", "Err_message"],
        ["Tensor___add___1_forward_input.0", "Yes", ""],
        ["Tensor___add___1_forward_output", "Yes", ""],
        ["Torch_matmul_0_forward_input.0", "Yes", ""],
        ["Torch_matmul_0_forward_output", "No", "big"],
    ])
    (tmp_path / "compare_finding_x_20240101000000.json").write_text(finding.encode(finding.Finding(
        "Torch_matmul_0_forward_output", 5, "cause", "Torch_matmul_0_forward", "Torch_matmul", None, None, ())))
    report = compare_link.read_compare(tmp_path / "compare_result_x_20240101000000.csv")  # a PathLike too
    assert report.anchor == ("Torch.matmul.0", "forward") and report.anchor_kind == "the advisor's suspect"
    assert report.anchor_order == 2  # its first row
    add = compare_link.link("Tensor.__add__.1", "error", " ", report)
    assert (add.state, add.result, add.position) == ("passing", "Accuracy Reached or Not: Yes", "precedes")
    assert add.cell() == ("passing: inaccurate in isolation, but within tolerance in this run; it runs before the "
                          "advisor's suspect")
    matmul = compare_link.link("Torch.matmul.0", "error", " ", report)
    assert (matmul.state, matmul.result, matmul.position) == ("failing", "Accuracy Reached or Not: No", "is")
    assert matmul.cell() == "failing: Accuracy Reached or Not: No: big; it is the advisor's suspect"


def finding_path_of(csv_path):
    directory, name = os.path.split(csv_path)
    return os.path.join(directory, "compare_finding_" + name[len("compare_result_"):-len(".csv")] + ".json")


def test_compare_writes_its_finding_as_versioned_json_beside_the_prose(planted_compare):
    """The advisor's answer as data beside its prose: what the link reads (never the prose)."""
    path = finding_path_of(planted_compare.csv_path)
    with open(path, encoding="utf-8") as handle:
        record = json.load(handle)
    assert (record["format"], record["version"]) == ("ptdbg_ascend.finding", 4)
    # version 4's field: the advisor re-ran gelu from the planted dump's own inputs and proved it inaccurate
    assert record["rerun"]["verdict"] == "reproduced" and record["rerun"]["ratio"] > 1, record["rerun"]
    # version 2's fields: the planted gelu computes float32 inputs in bfloat16, and the finding says so
    assert (record["level"], record["precision"]) == ("error", "bfloat16-like")
    assert (record["call"], record["kind"], record["record"]) == ("Functional_gelu_0_forward", "cause",
                                                                  "Functional_gelu_0_forward_output")
    assert compare_link.read_finding(path) == planted_compare.finding
    with open(planted_compare.advisor_path, encoding="utf-8") as handle:
        assert "Suspect API: Functional_gelu_0_forward (Cause:" in handle.read()  # the prose is unchanged


def test_finding_of_another_format_or_version_is_refused_naming_it(model_dumps, planted_compare, tmp_path):
    copied = shutil.copy(planted_compare.csv_path, str(tmp_path))
    path = finding_path_of(copied)
    with open(finding_path_of(planted_compare.csv_path), encoding="utf-8") as handle:
        good = json.load(handle)
    out = tmp_path / "out"
    for bad, expected in ((dict(good, version=1), "it says format 'ptdbg_ascend.finding' version 1"),
                          (dict(good, format="other"), "it says format 'other' version 4"),
                          ({k: v for k, v in good.items() if k != "call"}, "the field 'call' is missing"),
                          (dict(good, kind="blame"), "the kind 'blame' is none of cause, propagation, input"),
                          (dict(good, level="info"), "the level 'info' is none of error, warning"),
                          (dict(good, line="3"), "the field 'line' is '3', not a int"),
                          ([good], "it holds a JSON list, not an object")):
        with open(path, "w", encoding="utf-8") as handle:
            json.dump(bad, handle)
        with pytest.raises(FileFormatError) as error:
            run_ut(model_dumps["planted"], str(out), progress=False, compare_csv=copied)
        assert str(error.value).startswith("{} is not a compare finding of format 'ptdbg_ascend.finding' version 4: "
                                           .format(path)) and expected in str(error.value)
        assert "Re-run compare" in str(error.value)
    with open(path, "w", encoding="utf-8") as handle:
        handle.write("{\"format\": ")
    with pytest.raises(FileFormatError, match="is not valid JSON"):
        run_ut(model_dumps["planted"], str(out), progress=False, compare_csv=copied)
    assert not out.exists()  # refused before anything is written


def test_compare_from_before_the_finding_file_is_linked_to_its_first_failure(model_dumps, planted_compare, tmp_path,
                                                                              capsys):
    """An advisor report without its finding file (an older compare): the prose is not parsed; the position
    is given to the first failing row, and a warning says to re-run compare."""
    copied = shutil.copy(planted_compare.csv_path, str(tmp_path))
    shutil.copy(planted_compare.advisor_path, str(tmp_path))
    capsys.readouterr()
    report = compare_link.read_compare(copied)
    assert report.anchor_kind == "the compare's first failing call"
    assert report.anchor_name == "Functional_gelu_0_forward_output"
    printed = capsys.readouterr().out
    assert f"has an advisor report but no {os.path.basename(finding_path_of(copied))}" in printed
    assert "Re-run compare to link to the suspect." in printed


def test_a_linked_run_writes_each_file_once(model_dumps, planted_compare, tmp_path, monkeypatch, planted_gelu):
    """The Compare Link cells are written with their rows, and the summary comes from memory: a fresh linked
    run neither rewrites nor reads back its CSVs."""
    from ptdbg_ascend.precheck import ut_files

    def refuse(*args, **kwargs):
        raise AssertionError("a fresh run rewrote or re-read its CSVs")

    monkeypatch.setattr(ut_files, "rewrite_csv", refuse)
    monkeypatch.setattr(ut_files, "_complete_rows", refuse)
    outcome = run_ut(model_dumps["planted"], str(tmp_path), progress=False, compare_csv=planted_compare.csv_path)
    assert [f.name for f in outcome.failures] == ["Functional.gelu.0"]
    assert read_csv(outcome.result_csv)[0] == LINKED_HEADER
    assert len(read_csv(outcome.result_csv)) - 1 == sum(outcome.counts.values())


def test_a_linked_run_cut_short_resumes_to_the_whole_linked_file(model_dumps, planted_compare, tmp_path,
                                                                  planted_gelu):
    """Killed after two APIs, a linked run has the Compare Link column already; resumed with the same compare
    it ends as the uninterrupted run's file, resumed without a compare the column goes."""
    whole = run_ut(model_dumps["planted"], str(tmp_path / "whole"), progress=False,
                   compare_csv=planted_compare.csv_path)
    expected = read_csv(whole.result_csv)
    for compare_csv, rows in ((planted_compare.csv_path, expected), (None, [row[:4] for row in expected])):
        cut = run_ut(model_dumps["planted"], str(tmp_path / str(compare_csv is None)), progress=False,
                     compare_csv=planted_compare.csv_path)
        write_csv(cut.result_csv, read_csv(cut.result_csv)[:3])
        resumed = run_ut(model_dumps["planted"], progress=False, result_csv_path=cut.result_csv,
                         compare_csv=compare_csv)
        assert (resumed.apis_resumed, resumed.apis_run) == (2, len(expected) - 3)
        assert read_csv(cut.result_csv) == rows
        assert [f.name for f in resumed.failures] == ["Functional.gelu.0"]
        assert (resumed.failures[0].link is None) == (compare_csv is None)


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




# --- a finding file that is not this CSV's -------------------------------------------------------------------

def finding_of(csv_path):
    with open(finding_path_of(csv_path), encoding="utf-8") as handle:
        return json.load(handle)


def write_finding(csv_path, value):
    with open(finding_path_of(csv_path), "w", encoding="utf-8") as handle:
        handle.write(value if isinstance(value, str) else json.dumps(value))


@pytest.fixture(scope="module")
def sample_compare(tmp_path_factory):
    """The README's compare: sample/legacy_train.py with and without its bfloat16 layer (another model)."""
    import subprocess
    import sys

    from conftest import REPO, subprocess_env

    root = tmp_path_factory.mktemp("sample")
    for side, extra in (("npu", ["--bf16-layer"]), ("gpu", [])):
        (root / side).mkdir()
        subprocess.run([sys.executable, os.path.join(REPO, "sample", "legacy_train.py")] + extra, cwd=str(root / side),
                       env=subprocess_env(), check=True, stdout=subprocess.DEVNULL, timeout=300)
    os.makedirs(str(root / "out"))
    return compare({"npu_pkl_path": str(root / "npu/ptdbg_dump_v1.0/rank0/api_stack_dump.pkl"),
                    "bench_pkl_path": str(root / "gpu/ptdbg_dump_v1.0/rank0/api_stack_dump.pkl"),
                    "is_print_compare_log": False}, str(root / "out"), xlsx=False)


def test_a_finding_copied_from_another_compare_is_refused(model_dumps, planted_compare, sample_compare, tmp_path):
    """The compare of the planted run, with the finding of another compare beside it under its name: its
    suspect (another call, another row) must not become the anchor of the links."""
    other = sample_compare  # another model: another first failure, another suspect (a bfloat16 linear)
    copied = shutil.copy(planted_compare.csv_path, str(tmp_path))
    good = finding_of(planted_compare.csv_path)
    assert other.finding.call.startswith("Functional_linear_") and other.finding.record != good["record"]
    moved = dict(good, record="Functional_linear_0_forward_output", line=good["line"] + 7,
                 call="Functional_linear_0_forward")  # another run's answer: a later row, another suspect
    out = tmp_path / "out"
    for foreign in (moved, finding_of(other.csv_path)):
        write_finding(copied, foreign)
        with pytest.raises(FileFormatError) as error:
            run_ut(model_dumps["planted"], str(out), progress=False, compare_csv=copied)
        message = str(error.value)
        assert message.startswith(f"{finding_path_of(copied)} is not the finding of {copied}: "), message
        assert "Re-run compare to write both again" in message
    assert f"but line {good['line'] + 7} of the CSV is " in message or "first failing row" in message
    assert not out.exists()  # refused before anything is written
    # the finding that belongs to it is linked as before
    write_finding(copied, good)
    assert compare_link.read_compare(copied).anchor_name == "Functional_gelu_0_forward"


@pytest.mark.parametrize("change, expected", [
    (lambda good: dict(good, record="Functional_gelu_0_forward_input.0"),
     "its first failing row is Functional_gelu_0_forward_input.0 at line {line}, but line {line} of the CSV is "
     "Functional_gelu_0_forward_output"),
    (lambda good: dict(good, record="Functional_layer_norm_0_forward_input.0", line=2),  # the first row: it passes
     "its first failing row is Functional_layer_norm_0_forward_input.0 at line 2, but the CSV's first failing row is "
     "Functional_gelu_0_forward_output at line {line}"),
    (lambda good: dict(good, line=10 ** 6), "but the CSV has rows on lines 2 to"),
    (lambda good: dict(good, call="Functional_relu_99_forward"),
     "its suspect Functional_relu_99_forward has no row at or before line {line} in the CSV"),
    (lambda good: dict(good, call="Torch_softmax_3_forward"),  # a call of the run, but after the failure
     "its suspect Torch_softmax_3_forward has no row at or before line {line} in the CSV"),
    (lambda good: dict(good, level="warning"), "it says nothing fails, but Functional_gelu_0_forward_output fails "
                                               "at line {line}"),
])
def test_a_forged_finding_is_refused_naming_what_the_csv_says(model_dumps, planted_compare, tmp_path, change,
                                                              expected):
    copied = shutil.copy(planted_compare.csv_path, str(tmp_path))
    good = finding_of(planted_compare.csv_path)
    write_finding(copied, change(good))
    with pytest.raises(FileFormatError) as error:
        compare_link.read_compare(copied)
    assert expected.format(line=good["line"]) in str(error.value), str(error.value)


def test_a_truncated_oversized_or_special_finding_is_refused(model_dumps, planted_compare, tmp_path):
    copied = shutil.copy(planted_compare.csv_path, str(tmp_path))
    text = json.dumps(finding_of(planted_compare.csv_path))
    write_finding(copied, text[:len(text) // 2])  # cut short
    with pytest.raises(FileFormatError, match=r"is not valid JSON \(cut short\?\)"):
        compare_link.read_compare(copied)
    write_finding(copied, text[:-1] + ", " + json.dumps({"padding": "x" * (2 * 1024 * 1024)})[1:])  # 2 MiB
    with pytest.raises(FileFormatError, match=r"The compare finding .* holds \d+ bytes, more than the "
                                              r"1048576 bytes such a file can hold; it is not read"):
        compare_link.read_compare(copied)
    os.remove(finding_path_of(copied))
    os.mkfifo(finding_path_of(copied))  # nobody writes it: opening it blocking would hang the run
    with pytest.raises(FileFormatError, match="does not exist \\(or is not a file\\)"):
        compare_link.read_compare(copied)


def test_a_compare_csv_of_one_endless_line_is_refused_without_reading_it_whole(tmp_path):
    """A line is read up to the longest a compare CSV can hold (8 Mi characters), not to its end."""
    from ptdbg_ascend.precheck import compare_report

    path = tmp_path / "compare_result_20240101000000.csv"
    with open(str(path), "w", encoding="utf-8") as handle:
        handle.write("NPU Name,Result,Err_message\n")
        handle.write("x" * (compare_report.MAX_LINE_CHARACTERS + 10))  # no newline, no comma: one endless cell
    with pytest.raises(FileFormatError) as error:
        compare_link.read_compare(str(path))
    assert str(error.value) == ("{}, line 2: longer than 8388608 characters, which no compare CSV line is (its cells "
                                "hold at most 128 KiB each); it is read no further.".format(path))
