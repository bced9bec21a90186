"""Reports that cannot run and terminal text that cannot act: formula-like cells from a dump are written
with a ``'`` in front (numbers untouched), the xlsx keeps them as text, and control characters from a dump
are printed escaped (parse, the ptdbg one-line errors, the logger)."""

from __future__ import annotations

import csv
import itertools
import json
import logging
import subprocess
import sys

import numpy as np
import pytest

from ptdbg_ascend import parse
from ptdbg_ascend.comparison.api import compare, compare_distributed
from ptdbg_ascend.csv_cells import is_number_text, restore_cell, safe_cell
from ptdbg_ascend.log import logger
from ptdbg_ascend.terminal import printable

pytestmark = pytest.mark.torchfree

# One attack per dangerous first character (OWASP): = + - @ tab CR.
DANGEROUS = ['=HYPERLINK("http://x","y")', "+cmd|' /C calc'!A0", "-2+3+cmd|' /C calc'!A0",
             "@SUM(1+9)*cmd|' /C calc'!A0", "\t=1+2", "\r=1+2"]
TERMINAL_ATTACK = "\x1b[2J\x1b]0;owned\x07"
RAW_CONTROLS = [chr(c) for c in itertools.chain(range(0x00, 0x0A), range(0x0B, 0x20), [0x7F], range(0x80, 0xA0))] + [
    "\u202a", "\u202b", "\u202c", "\u202d", "\u202e", "\u2066", "\u2067", "\u2068", "\u2069"]


def _stats(array):
    data = np.asarray(array, dtype=np.float64)
    return [float(data.max()), float(data.min()), float(data.mean()), float(np.sqrt((data * data).sum()))]


def read_rows(path):
    with open(path, newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


# --- the cell and text functions ------------------------------------------------------------------------

@pytest.mark.parametrize("text, cell", [
    ("=1+2", "'=1+2"), ("+A1", "'+A1"), ("-1_000", "'-1_000"), ("-1+2", "'-1+2"), ("@SUM(A1)", "'@SUM(A1)"),
    ("\tx", "'\tx"), ("\rx", "'\rx"), ("-", "'-"), ("+", "'+"), ("-\u0663", "'-\u0663"), ("- 1", "'- 1"),
    ("'=x", "''=x"), ("''", "'''"),
    ("-0.000123000000", "-0.000123000000"), ("+1e-05", "+1e-05"), ("-.5E+3", "-.5E+3"), ("-inf", "-inf"),
    ("+Infinity", "+Infinity"), ("nan", "nan"), ("-NaN", "-NaN"), ("1e5", "1e5"),
    ("'x", "'x"), ("'", "'"), ("Torch_relu_0_forward_output", "Torch_relu_0_forward_output"), ("", ""),
    (" =1", " =1"), ("a=1", "a=1"),
])
def test_safe_cell_quotes_formulas_not_numbers(text, cell):
    assert safe_cell(text) == cell
    assert restore_cell(cell) == text


def test_safe_cell_leaves_non_text_alone_and_always_restores():
    for value in (-1.5, 3, None, True, float("nan")):
        assert safe_cell(value) is value
    alphabet = "=+-@\t\r'x1.e"
    for size in range(5):
        for text in map("".join, itertools.product(alphabet, repeat=size)):
            cell = safe_cell(text)
            assert restore_cell(cell) == text
            assert cell[:1] not in ("=", "+", "-", "@", "\t", "\r") or is_number_text(cell), text


def test_printable_escapes_every_control_character():
    text = "a" + "".join(RAW_CONTROLS) + "\n\\b"
    shown = printable(text)
    assert not any(c in shown for c in RAW_CONTROLS + ["\n"])
    assert shown.startswith("a\\x00\\x01") and "\\x09\\x0a" not in shown and "\\x1b" in shown and "\\x9b" in shown
    assert shown.endswith("\\u2069\\x0a\\b")  # a backslash of the text stays as it is
    assert printable("line 1\nline\r2", keep_newlines=True) == "line 1\nline\\x0d2"
    assert printable(TERMINAL_ATTACK) == "\\x1b[2J\\x1b]0;owned\\x07"


def test_printable_text_keeps_the_layout_and_escapes_the_rest():
    from ptdbg_ascend.terminal import printable_text

    text = "\tindented\r\nform\x0cfeed\u2028sep\nback\x08\x08" + TERMINAL_ATTACK + "\n"
    assert printable_text(text) == ("\tindented\\x0d\nform\\x0cfeed\\u2028sep\nback\\x08\\x08"
                                    "\\x1b[2J\\x1b]0;owned\\x07\n")
    assert not [c for c in RAW_CONTROLS if c not in "\t\n" and c in printable_text("".join(RAW_CONTROLS))]


# --- compare: the CSV and the xlsx ----------------------------------------------------------------------

def hostile_pkl_pair(root):
    """Two legacy pkls: one record per dangerous name (not on disk: the name is no file name), a float32
    call whose bench is the negation (Cosine -1) and a call whose dtype is a formula."""
    param = {"is_print_compare_log": False}
    for side, sign in (("npu", 1.0), ("bench", -1.0)):
        data = root / side / "data"
        data.mkdir(parents=True)
        array = np.arange(1, 5, dtype=np.float32) * sign
        lines = [json.dumps([name + "_0_forward_output", 0, [], "torch.float32", [4], _stats(array)])
                 for name in DANGEROUS]
        lines.append(json.dumps(["Torch_neg_0_forward_output", 0, [], "torch.float32", [4], _stats(array)]))
        np.save(str(data / "Torch_neg_0_forward_output.npy"), array)
        lines.append(json.dumps(["Torch_abs_0_forward_output", 0, [], "@SUM(1+9)", [4], _stats(array)]))
        np.save(str(data / "Torch_abs_0_forward_output.npy"), array)
        (root / side / "dump.pkl").write_text("\n".join(lines) + "\n")
        param.update({side + "_pkl_path": str(root / side / "dump.pkl"), side + "_dump_data_dir": str(data)})
    return param


def test_compare_csv_quotes_formula_names_and_dtypes_from_a_pkl(tmp_path, output_dir):
    outcome = compare(hostile_pkl_pair(tmp_path), output_dir)
    rows = read_rows(outcome.csv_path)
    assert [row["NPU Name"] for row in rows] == ["'" + name + "_0_forward_output" for name in DANGEROUS] + [
        "Torch_neg_0_forward_output", "Torch_abs_0_forward_output"]
    assert [row["Bench Name"] for row in rows[:6]] == ["'" + name + "_0_forward_output" for name in DANGEROUS]
    neg, absolute = rows[6], rows[7]
    assert (absolute["NPU Tensor Dtype"], absolute["Bench Tensor Dtype"]) == ("'@SUM(1+9)", "'@SUM(1+9)")
    # numbers stay numbers: the negative Cosine (12 decimals) and the negative bench statistics
    assert (neg["Cosine"], neg["MaxAbsErr"], neg["Accuracy Reached or Not"]) == ("-1.000000000000", "8.000000000000", "No")
    assert (neg["Bench max"], neg["Bench min"], neg["Bench mean"]) == ("-1.0", "-4.0", "-2.5")
    # an Err_message quoting the name starts with our words: left as it is
    assert rows[0]["Err_message"].startswith("Not compared: the record's file name '=HYPERLINK(")


def test_xlsx_keeps_a_formula_name_as_text(tmp_path, output_dir):
    openpyxl = pytest.importorskip("openpyxl")
    outcome = compare(hostile_pkl_pair(tmp_path), output_dir)
    sheet = openpyxl.load_workbook(outcome.xlsx_path)["compare_result"]
    name = sheet["A2"]
    assert name.value == '=HYPERLINK("http://x","y")_0_forward_output' and name.data_type == "s"
    dtypes = [cell for cell in sheet[9] if cell.value == "@SUM(1+9)"]
    assert len(dtypes) == 2 and all(cell.data_type == "s" for cell in dtypes)
    assert not any(cell.data_type == "f" for row in sheet.iter_rows() for cell in row)


def test_compare_csv_quotes_formula_dtypes_from_a_dump_json(tmp_path, output_dir):
    """A dump.json's names follow the dotted grammar; its dtype strings are free text."""
    leaves = [{"type": "torch.Tensor", "dtype": dtype, "shape": [2], "Max": -1.0, "Min": -2.0, "Mean": -1.5,
               "Norm": 2.236, "requires_grad": False} for dtype in DANGEROUS]
    paths = {}
    for side in ("npu", "bench"):
        (tmp_path / side).mkdir()
        path = tmp_path / side / "dump.json"
        path.write_text(json.dumps({"task": "statistics", "level": "L1", "dump_data_dir": None, "data": {
            "Torch.relu.0.forward": {"input_args": leaves, "input_kwargs": {}, "output": [leaves[0]]}}}))
        paths[side + "_pkl_path"] = str(path)
    outcome = compare(dict(paths, is_print_compare_log=False), output_dir)
    rows = read_rows(outcome.csv_path)
    assert [row["NPU Tensor Dtype"] for row in rows] == ["'" + dtype for dtype in DANGEROUS] + ["'" + DANGEROUS[0]]
    assert [row["Bench Tensor Dtype"] for row in rows][:6] == ["'" + dtype for dtype in DANGEROUS]
    assert {(row["NPU max"], row["NPU min"], row["Max diff"]) for row in rows} == {("-1.0", "-2.0", "0.0")}


def test_compare_distributed_csv_quotes_too(tmp_path, output_dir):
    for side, sign in (("npu", 1.0), ("bench", -1.0)):
        rank = tmp_path / side / "tag" / "rank0"
        rank.mkdir(parents=True)
        array = np.arange(1, 5, dtype=np.float32) * sign
        (rank / "dump.pkl").write_text(json.dumps(["-1+2_0_forward_output", 0, [], "=1+2", [4], _stats(array)]) + "\n")
    (outcome,) = compare_distributed(str(tmp_path / "npu" / "tag"), str(tmp_path / "bench" / "tag"), output_dir,
                                     is_print_compare_log=False)
    (row,) = read_rows(outcome.csv_path)
    assert (row["NPU Name"], row["NPU Tensor Dtype"], row["Bench min"]) == ("'-1+2_0_forward_output", "'=1+2", "-4.0")


# --- the terminal ---------------------------------------------------------------------------------------

def hostile_stack_pkl(root):
    """A pkl whose stack line, dtype and record name hold terminal escapes and a carriage return."""
    root.mkdir(parents=True, exist_ok=True)
    frames = [["/work/train" + TERMINAL_ATTACK + ".py", "42", "forward", "x = conv(x)\rrm -rf ~"],
              ["/work/train.py", "90", "<module>", "model(x)" + TERMINAL_ATTACK]]
    lines = [json.dumps(["Torch_relu_0_forward_input.0", 0, [], "torch.float32" + TERMINAL_ATTACK + "\r", [2],
                         [1.0, 0.0, 0.5, 1.0]]),
             json.dumps(["Torch_relu_0_forward_stack_info", frames])]
    (root / "dump.pkl").write_text("\n".join(lines) + "\n")
    return str(root / "dump.pkl")


def assert_no_raw_control(text):
    assert not [c for c in RAW_CONTROLS if c in text], repr(text)


def test_parse_prints_dump_text_escaped(tmp_path, capsys):
    parse(hostile_stack_pkl(tmp_path / "npu"), "Torch_relu_0_forward")
    out = capsys.readouterr().out
    assert_no_raw_control(out)
    assert out == ("\nTrace back(Torch_relu_0_forward):\n"
                   '  File "/work/train.py", line 90, in <module>\n'
                   "      model(x)\\x1b[2J\\x1b]0;owned\\x07\n"
                   '  File "/work/train\\x1b[2J\\x1b]0;owned\\x07.py", line 42, in forward\n'
                   "      x = conv(x)\\x0drm -rf ~\n"
                   "\nStatistic Info:\n"
                   "  [Torch_relu_0_forward_input.0][dtype: torch.float32\\x1b[2J\\x1b]0;owned\\x07\\x0d][shape: [2]]"
                   "[max: 1.0][min: 0.0][mean: 0.5][l2norm: 1.0]\n")


def test_ptdbg_parse_in_a_real_process(tmp_path):
    pkl = hostile_stack_pkl(tmp_path / "npu")
    result = subprocess.run([sys.executable, "-m", "ptdbg_ascend.cli", "parse", pkl, "Torch_relu_0_forward"],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert_no_raw_control(result.stdout + result.stderr)
    assert "      x = conv(x)\\x0drm -rf ~\n" in result.stdout
    assert "[dtype: torch.float32\\x1b[2J\\x1b]0;owned\\x07\\x0d]" in result.stdout


def test_ptdbg_one_line_error_escapes_a_path(tmp_path):
    missing = str(tmp_path / ("dump" + TERMINAL_ATTACK + ".pkl"))
    result = subprocess.run([sys.executable, "-m", "ptdbg_ascend.cli", "parse", missing, "Torch_relu_0_forward"],
                            capture_output=True, text=True)
    assert result.returncode == 2
    assert_no_raw_control(result.stderr.rstrip("\n"))
    assert result.stderr.startswith("ptdbg parse: error: ")
    assert "dump\\x1b[2J\\x1b]0;owned\\x07.pkl" in result.stderr and result.stderr.count("\n") == 1


def test_logger_escapes_controls_but_keeps_newlines(tmp_path, capsys):
    """A warning quoting a file name from a dump (compare's missing-npy warning names the record)."""
    logger.warning("first line\nsecond" + TERMINAL_ATTACK + "\b\x7f\u202e end")
    out = capsys.readouterr().out
    assert out.endswith("-[WARNING]first line\nsecond\\x1b[2J\\x1b]0;owned\\x07\\x08\\x7f\\u202e end\n")
    assert_no_raw_control(out.replace("\n", ""))
    assert logging.getLogger("ptdbg_ascend") is logger


def test_ptdbg_acl_config_check_prints_the_files_values_escaped(tmp_path):
    config = tmp_path / "acl.json"
    config.write_text(json.dumps({"dump": {"dump_list": [], "dump_path": "/tmp/acl" + TERMINAL_ATTACK,
                                           "dump_mode": "all", "dump_op_switch": "on"}}))
    result = subprocess.run([sys.executable, "-m", "ptdbg_ascend.cli", "acl-config", str(config), "--check"],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout == ("{} is a valid ACL dump config: dump_path=/tmp/acl\\x1b[2J\\x1b]0;owned\\x07, dump_mode=all, "
                             "dump_op_switch=on.\n".format(config))
