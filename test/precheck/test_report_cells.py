"""The pre-check's CSVs cannot run and its terminal output cannot act: formula-like cells get a ``'`` in
front (numbers untouched) and are read back without it (resume, api_precision_compare); names, code lines
and reasons from a dump are printed with their control characters escaped."""

from __future__ import annotations

import csv
import itertools
import json
import os
import re
import subprocess
import sys

import pytest

from ptdbg_ascend import csv_cells
from ptdbg_ascend.precheck import columns as col
from ptdbg_ascend.precheck.device_compare import api_precision_compare

DANGEROUS = ['=HYPERLINK("http://x","y")', "+cmd|' /C calc'!A0", "-2+3+cmd|' /C calc'!A0",
             "@SUM(1+9)*cmd|' /C calc'!A0", "\t=1+2", "\r=1+2"]
TERMINAL_ATTACK = "\x1b[2J\x1b]0;owned\x07"
RAW_CONTROLS = [chr(c) for c in itertools.chain(range(0x00, 0x0A), range(0x0B, 0x20), [0x7F], range(0x80, 0xA0))] + [
    "\u202a", "\u202b", "\u202c", "\u202d", "\u202e", "\u2066", "\u2067", "\u2068", "\u2069"]
BENCH = {col.SMALL_VALUE_ERR_RATIO: 0.0, col.RMSE: 1e-7, col.MAX_REL_ERR: 1e-5, col.MEAN_REL_ERR: 2e-6, col.EB: 0.1}


def details_csv(path, rows, writer=csv.writer):
    """An accuracy_checking_details CSV: ``rows`` of (name, device dtype, message, {title: cell})."""
    with open(path, "w", newline="", encoding="utf-8-sig") as handle:
        out = writer(handle)
        out.writerow(col.DETAIL_COLUMNS)
        for name, dtype, message, cells in rows:
            base = {title: " " for title in col.DETAIL_COLUMNS}
            base.update({col.API_NAME: name, col.BENCH_DTYPE: "torch.float64", col.DEVICE_DTYPE: dtype,
                         col.SHAPE: "(4,)", col.STATUS: "pass", col.MESSAGE: message})
            base.update({title: str(value) for title, value in cells.items()})
            out.writerow([base[title] for title in col.DETAIL_COLUMNS])
    return str(path)


def read_rows(path):
    with open(path, newline="", encoding="utf-8-sig") as handle:
        return list(csv.DictReader(handle))


# --- api_precision_compare ------------------------------------------------------------------------------

@pytest.mark.torchfree
def test_api_precision_compare_quotes_names_and_messages_from_the_npu_csv(tmp_path):
    """A foreign NPU details CSV: a row per dangerous name (invalid names: SKIP rows quoting them), a SKIP
    row whose message is a formula, and a float32 row with a negative metric."""
    rows = [(name, "torch.float32", "", BENCH) for name in DANGEROUS]
    rows.append(("Functional.relu.0.forward.output.0", " ", "@SUM(1+9)*cmd|' /C calc'!A0", {}))
    rows.append(("Functional.gelu.0.forward.output.0", "torch.float32", "", dict(BENCH, **{col.RMSE: -3e-7})))
    npu = details_csv(tmp_path / "npu.csv", rows)
    gpu = details_csv(tmp_path / "gpu.csv", [("Functional.gelu.0.forward.output.0", "torch.float32", "", BENCH)])
    result, details = api_precision_compare(npu, gpu, str(tmp_path / "out"))
    result_rows, detail_rows = read_rows(result), read_rows(details)
    assert [row[col.API_NAME] for row in detail_rows] == ["'" + name for name in DANGEROUS] + [
        "Functional.relu.0.forward.output.0", "Functional.gelu.0.forward.output.0"]
    assert [row[col.API_NAME] for row in result_rows] == ["'" + name for name in DANGEROUS] + [
        "Functional.relu.0", "Functional.gelu.0"]
    assert detail_rows[6][col.MESSAGE] == "'@SUM(1+9)*cmd|' /C calc'!A0"
    assert result_rows[6][col.MESSAGE] == "'@SUM(1+9)*cmd|' /C calc'!A0"
    # a negative ratio input stays a number: the ratio column holds 3.0 in 1.0.4's 14 decimals
    assert detail_rows[7][col.RMSE_RATIO] == "3.00000000000000"
    assert detail_rows[0][col.MESSAGE].startswith("The API name =HYPERLINK(")


@pytest.mark.torchfree
def test_api_precision_compare_reads_our_quoted_cells_back(tmp_path):
    """An NPU CSV written as run_ut writes (through csv_cells): the ``'`` is stripped on reading, so the name
    matches the GPU row and the message is quoted once, not twice."""
    name = "Functional.gelu.0.forward.output.0"
    npu = details_csv(tmp_path / "npu.csv", [(name, " ", "-1+2 from the dump", {}),
                                             ("=x.y.0.forward.output.0", "torch.float32", "", BENCH)],
                      writer=csv_cells.writer)
    with open(npu, encoding="utf-8-sig") as handle:
        assert "'-1+2 from the dump" in handle.read()
    gpu = details_csv(tmp_path / "gpu.csv", [(name, "torch.float32", "", BENCH),
                                             ("=x.y.0.forward.output.0", "torch.float32", "", BENCH)],
                      writer=csv_cells.writer)
    result, details = api_precision_compare(npu, gpu, str(tmp_path / "out"))
    detail_rows = read_rows(details)
    assert [row[col.MESSAGE] for row in detail_rows][0] == "'-1+2 from the dump"
    assert detail_rows[1][col.API_NAME] == "'=x.y.0.forward.output.0"
    assert detail_rows[1][col.FINAL_RESULT] == "pass"  # found in the GPU CSV under its own name


@pytest.mark.torchfree
def test_cli_api_precision_compare_prints_names_escaped(tmp_path, child_env):
    bad = "Functional.ge" + TERMINAL_ATTACK + "lu.0.forward.output.0"
    npu = details_csv(tmp_path / "npu.csv", [(bad, "torch.float32", "", dict(BENCH, **{col.RMSE: 3e-7}))])
    gpu = details_csv(tmp_path / "gpu.csv", [(bad, "torch.float32", "", BENCH)])
    result = subprocess.run([sys.executable, "-m", "ptdbg_ascend.cli", "api-precision-compare", "-npu", npu,
                             "-gpu", gpu, "-o", str(tmp_path / "out")], capture_output=True, text=True,
                            env=child_env)
    assert result.returncode == 1, result.stderr
    assert not [c for c in RAW_CONTROLS if c in result.stdout]
    assert "  error  Functional.ge\\x1b[2J\\x1b]0;owned\\x07lu.0\n" in result.stdout


# --- run_ut: a small dump with a hostile stack.json, and a resume CSV with hostile cells -------------------

@pytest.fixture
def hostile_dump(tmp_path):
    """dump.json + dump_tensor_data/ + stack.json: relu (its dumped output wrong, so it fails with
    ``dumped_outputs``), whose stack line holds terminal escapes and a CR, and a call whose name holds an
    escape sequence."""
    torch = pytest.importorskip("torch")
    root = tmp_path / "dump"
    data = root / "dump_tensor_data"
    data.mkdir(parents=True)
    x = torch.tensor([-1.0, 0.5, 2.0, 3.0])
    torch.save(x, str(data / "Functional.relu.0.forward.input.0.pt"))
    torch.save(x * 2, str(data / "Functional.relu.0.forward.output.0.pt"))

    def leaf(name, tensor):
        return {"type": "torch.Tensor", "dtype": "torch.float32", "shape": [4], "Max": float(tensor.max()),
                "Min": float(tensor.min()), "Mean": float(tensor.mean()), "Norm": float(tensor.norm()),
                "requires_grad": False, "data_name": name + ".pt"}

    entry = {"input_args": [leaf("Functional.relu.0.forward.input.0", x)], "input_kwargs": {},
             "output": [leaf("Functional.relu.0.forward.output.0", x * 2)]}
    odd = "Functional.re" + TERMINAL_ATTACK + "lu.0.forward"
    (root / "dump.json").write_text(json.dumps({"task": "tensor", "level": "L1", "dump_data_dir": str(data),
                                                "data": {"Functional.relu.0.forward": entry, odd: entry}}))
    (root / "stack.json").write_text(json.dumps({"Functional.relu.0.forward": [
        "File /work/train" + TERMINAL_ATTACK + ".py, line 42, in forward,\n x = relu(x)\rrm -rf ~ " + TERMINAL_ATTACK]}))
    return str(root / "dump.json")


def test_run_ut_summary_prints_dump_text_escaped(hostile_dump, tmp_path, child_env):
    result = subprocess.run([sys.executable, "-m", "ptdbg_ascend.cli", "run-ut", "-api_info", hostile_dump, "-o",
                             str(tmp_path / "out"), "--no-progress", "--dumped-outputs"],
                            capture_output=True, text=True, env=child_env, timeout=120)
    assert result.returncode == 1, result.stdout + result.stderr
    assert not [c for c in RAW_CONTROLS if c in result.stdout + result.stderr], result.stdout
    assert ("          /work/train\\x1b[2J\\x1b]0;owned\\x07.py:42  x = relu(x)\\x0drm -rf ~ "
            "\\x1b[2J\\x1b]0;owned\\x07\n") in result.stdout
    assert "Functional.relu.0  forward error" in result.stdout


def test_run_ut_resume_quotes_hostile_cells_once_and_reads_them_back(hostile_dump, tmp_path):
    """A resume CSV passed around with formula cells: rows a foreign writer appended (unquoted) are not the
    run's own, so run_ut refuses to resume it; the pair's rewrite itself (read_pair, resume_pair) reads the
    cells back as the text they stand for and quotes them once, however often it is done."""
    from ptdbg_ascend.errors import ParameterError
    from ptdbg_ascend.precheck import ut_files
    from ptdbg_ascend.precheck.run_ut import run_ut

    first = run_ut(hostile_dump, str(tmp_path / "out"), progress=False, dumped_outputs=True,
                   white_list=["relu"])
    with open(first.result_csv, "a", newline="", encoding="utf-8") as handle:  # a foreign writer: no quoting
        writer = csv.writer(handle)
        for name in DANGEROUS:
            writer.writerow([name, "SKIP", "SKIP", name])
    before = open(first.result_csv, "rb").read()
    with pytest.raises(ParameterError, match=r"APIs 2 to 7 of the result CSV \(=HYPERLINK\(.* are not recorded in "
                                             r"its run file"):
        run_ut(hostile_dump, progress=False, dumped_outputs=True, result_csv_path=first.result_csv,
               white_list=["relu"])
    assert open(first.result_csv, "rb").read() == before
    for _ in range(2):
        results, details = ut_files.read_pair(first.result_csv)
        assert results[1:] == [[name, "SKIP", "SKIP", name] for name in DANGEROUS]  # as written, without a quote
        ut_files.resume_pair(first.result_csv, results, details).close()
        rows = read_rows(first.result_csv)
        assert [row[col.RESULT_API_NAME] for row in rows] == ["Functional.relu.0"] + ["'" + name for name in DANGEROUS]
        assert [row[col.MESSAGE] for row in rows][1:] == ["'" + name for name in DANGEROUS]
    details = read_rows(first.details_csv)
    assert details[0][col.API_NAME] == "Functional.relu.0.forward.output.0" and details[0][col.STATUS] == "error"


def test_multi_run_ut_summary_prints_dump_text_escaped(hostile_dump, tmp_path):
    from ptdbg_ascend.precheck.multi_run_ut import multi_run_ut

    outcome = multi_run_ut(hostile_dump, n=2, out_path=str(tmp_path / "out"), progress=False, dumped_outputs=True)
    summary = outcome.summary()
    assert not [c for c in RAW_CONTROLS if c in summary], summary
    assert summary.startswith("multi_run_ut: 2 APIs: 0 pass, 0 warning, 1 error, 1 SKIP")
    # one item per line: the summary's own line ends stay line ends (not the escape of one)
    lines = summary.split("\n")
    assert "\\x0a" not in summary, summary
    assert lines[1:3] == ["  result:  " + outcome.result_csv, "  details: " + outcome.details_csv]
    assert lines[3] == "Failing APIs, worst first (by error size; 1x = at the error threshold of the dtype):"
    assert re.match(r"  2 workers \(forkserver, ready after \d+\.\d s\); peak RSS: parent \d+ MiB, one worker "
                    r"\d+ MiB$", lines[-1]), lines
    assert "/work/train\\x1b[2J\\x1b]0;owned\\x07.py:42  x = relu(x)\\x0drm -rf ~" in summary
    assert "SKIP reasons: 1x Functional.re\\x1b[2J\\x1b]0;owned\\x07lu" in summary
    # a call that killed its worker, named as the dump names it
    import dataclasses
    crashed = dataclasses.replace(outcome, crashed=[("Functional.re" + TERMINAL_ATTACK + "lu.0", "SIGKILL")]).summary()
    assert crashed.endswith("\n  error   Functional.re\\x1b[2J\\x1b]0;owned\\x07lu.0: killed its worker on both "
                            "attempts (SIGKILL); not judged")


def test_cli_multi_run_ut_summary_shows_one_item_per_line_on_a_terminal(hostile_dump, tmp_path, child_env):
    """What a terminal shows of ``ptdbg multi-run-ut``: the summary as lines, the dump's escapes as text."""
    from terminal_screen import run_on_terminal

    out = tmp_path / "out"
    shown = run_on_terminal([sys.executable, "-m", "ptdbg_ascend.cli", "multi-run-ut", "-api_info", hostile_dump,
                             "-o", str(out), "-n", "2", "--no-progress", "--dumped-outputs"], env=child_env)
    assert shown.returncode == 1, shown.lines
    assert shown.controls == [], shown.lines  # nothing from the dump acts on the terminal
    first = next(i for i, line in enumerate(shown.lines) if line.startswith("multi_run_ut: 2 APIs: "))
    summary = shown.lines[first:]
    assert not [line for line in summary if "\\x0a" in line], summary
    (result,) = (name for name in os.listdir(str(out)) if name.startswith("accuracy_checking_result_"))
    assert summary[0].startswith("multi_run_ut: 2 APIs: 0 pass, 0 warning, 1 error, 1 SKIP (2 run now in ")
    assert summary[1] == "  result:  " + str(out / result)
    assert summary[2] == "  details: " + str(out / result.replace("_result_", "_details_"))
    assert summary[3] == "Failing APIs, worst first (by error size; 1x = at the error threshold of the dtype):"
    assert summary[4].startswith("  error   Functional.relu.0  forward error / backward -  ")
    assert summary[5] == ("          /work/train\\x1b[2J\\x1b]0;owned\\x07.py:42  x = relu(x)\\x0drm -rf ~ "
                          "\\x1b[2J\\x1b]0;owned\\x07")
    assert summary[6].startswith("SKIP reasons: 1x Functional.re\\x1b[2J\\x1b]0;owned\\x07lu")
    assert re.match(r"  2 workers \(forkserver, ready after \d+\.\d s\); peak RSS: parent \d+ MiB, one worker "
                    r"\d+ MiB$", summary[7]), summary
    assert summary[8:] == [""]  # the last line end, then nothing


def test_compare_link_column_rewrite_keeps_hostile_cells_quoted_once(hostile_dump, tmp_path):
    from ptdbg_ascend.precheck import ut_files
    from ptdbg_ascend.precheck.run_ut import run_ut

    def resume(cells=None):
        """The one rewrite a resume makes: with the Compare Link cells (a linked run), or without them."""
        results, details = ut_files.read_pair(outcome.result_csv)
        if cells is not None:
            results = [row + [cells.get(row[0], "")] for row in results]
        ut_files.resume_pair(outcome.result_csv, results, details, linked=cells is not None).close()

    outcome = run_ut(hostile_dump, str(tmp_path / "out"), progress=False, dumped_outputs=True, white_list=["relu"])
    with open(outcome.result_csv, "a", newline="", encoding="utf-8") as handle:
        csv_cells.writer(handle).writerow(["=x", "SKIP", "SKIP", "-1+2"])
    for _ in range(2):
        resume({"Functional.relu.0": "failing: error: -1", "=x": "-2+3"})
        rows = read_rows(outcome.result_csv)
        assert [(row[col.RESULT_API_NAME], row[col.MESSAGE], row[col.LINK_COLUMN]) for row in rows] == [
            ("Functional.relu.0", "", "failing: error: -1"), ("'=x", "'-1+2", "'-2+3")]
    resume()
    assert col.LINK_COLUMN not in read_rows(outcome.result_csv)[0]
    rows = read_rows(outcome.result_csv)
    assert [(row[col.RESULT_API_NAME], row[col.MESSAGE]) for row in rows][1] == ("'=x", "'-1+2")
