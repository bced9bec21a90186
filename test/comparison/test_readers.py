"""Readers: legacy pkl quirks (truncated/corrupt lines, "Nan"/[] statistics) and msprobe dump.json."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ptdbg_ascend.comparison.api import compare
from ptdbg_ascend.readers import read_dump
from ptdbg_ascend.errors import FileFormatError

pytestmark = pytest.mark.torchfree


def write(path, text):
    with open(path, "w") as handle:
        handle.write(text)
    return str(path)


def test_truncated_last_line_is_skipped_with_a_warning(tmp_path, capsys):
    pkl = write(tmp_path / "dump.pkl",
                '["Torch_relu_0_forward_input.0", 0, [], "torch.float32", [2], [1.0, -1.0, 0.0, 1.4142]]\n'
                '["Torch_relu_0_forward_output", 0, [], "torch.float32", [2], [1.0, 0.0, 0.5, NaN]]\n'
                '["Torch_relu_1_forward_input.0", 0, [], "torch.fl')
    calls = read_dump(pkl)
    assert [c.name for c in calls] == ["Torch_relu_0_forward"]
    assert calls[0].records[1].statistics[:3] == (1.0, 0.0, 0.5)
    assert f"Skipped corrupt line 3 of {pkl} (truncated last line" in capsys.readouterr().out


def test_a_last_line_cut_inside_a_multibyte_character_spoils_that_line_only(tmp_path, capsys):
    # A SIGKILL stops a write at a page boundary, which can fall inside a character of a user's code line
    # (a Chinese comment in a stack line): the lines before it are read, the cut one is skipped.
    stack = '["Torch_relu_0_forward_stack_info", [["train.py", "7", "f", "x = relu(x)  # 激活"]]]\n'
    whole = ('["Torch_relu_0_forward_input.0", 0, [], "torch.float32", [2], [1.0, -1.0, 0.0, 1.4142]]\n'
             '["Torch_relu_0_forward_output", 0, [], "torch.float32", [2], [1.0, 0.0, 0.5, 1.0]]\n' + stack)
    cut = stack.replace("relu_0", "relu_1").encode("utf-8")
    cut = cut[:cut.index("活".encode()) + 1]  # the first of the character's three bytes
    pkl = tmp_path / "dump.pkl"
    pkl.write_bytes(whole.encode("utf-8") + cut)
    (call,) = read_dump(str(pkl))
    assert call.name == "Torch_relu_0_forward"
    assert call.stack == (("train.py", "7", "f", "x = relu(x)  # 激活"),)
    assert f"Skipped corrupt line 4 of {pkl} (truncated last line" in capsys.readouterr().out


def test_legacy_statistics_forms(tmp_path):
    pkl = write(tmp_path / "dump.pkl",
                '["Torch_x_0_forward_input.0", 0, [], "torch.bool", [2], [[], [], [], "Nan"]]\n'
                '["Torch_x_0_forward_input.1", 0, [], "<class \'int\'>", "[]", [3, 3, 3, 3]]\n'
                '["Torch_x_0_forward_output", 0, [], "torch.float32", [1], [null, 2.5, 1.0]]\n'
                '["Torch_x_0_forward_stack_info", [["a.py", "3", "f", null]]]\n')
    (call,) = read_dump(pkl)
    assert [r.statistics for r in call.records] == [
        (None, None, None, None), (3.0, 3.0, 3.0, 3.0), (None, 2.5, 1.0, None)]
    assert call.records[1].shape == ()
    assert call.stack == (("a.py", "3", "f", None),)


def test_empty_and_missing_pkl(tmp_path):
    empty = write(tmp_path / "empty.pkl", "\n")
    with pytest.raises(FileFormatError, match="holds no records"):
        read_dump(empty)
    with pytest.raises(FileFormatError, match="missing.pkl does not exist"):
        read_dump(str(tmp_path / "missing.pkl"))


def test_corrupt_middle_line_keeps_the_rest(tmp_path, capsys):
    pkl = write(tmp_path / "dump.pkl",
                '["Torch_a_0_forward_output", 0, [], "torch.float32", [1], [1, 1, 1, 1]]\n'
                'garbage\n'
                '["Torch_b_0_forward_output", 0, [], "torch.float32", [1], [1, 1, 1, 1]]\n')
    assert [c.name for c in read_dump(pkl)] == ["Torch_a_0_forward", "Torch_b_0_forward"]
    assert f"Skipped corrupt line 2 of {pkl}." in capsys.readouterr().out


def msprobe_dump(root, values, stack=True):
    """A dump.json (reference §6) with one conv2d and one __add__ call; tensors saved as .npy-free json only."""
    root.mkdir()
    leaf = lambda name, array: {  # noqa: E731
        "type": "torch.Tensor", "dtype": "torch.float32", "shape": list(array.shape), "Max": float(array.max()),
        "Min": float(array.min()), "Mean": float(array.mean()), "Norm": float(np.linalg.norm(array)),
        "requires_grad": False, "data_name": name}
    x, w, y = values
    dump = {"task": "statistics", "level": "L1", "dump_data_dir": None, "data": {
        "Functional.conv2d.0.forward": {
            "input_args": [leaf("Functional.conv2d.0.forward.input.0.pt", x), leaf("w", w), None,
                           [{"type": "int", "value": 1}]],
            "input_kwargs": {"bias": None}, "output": [leaf("Functional.conv2d.0.forward.output.0.pt", y)]},
        "Tensor.__add__.0.forward": {"input_args": [leaf("a", y), {"type": "float", "value": 1.0}],
                                     "input_kwargs": {}, "output": [leaf("b", y + 1)]},
    }}
    write(root / "dump.json", json.dumps(dump))
    write(root / "stack.json", json.dumps({"Functional.conv2d.0.forward": [
        "File /work/train.py, line 42, in forward, \n x = self.conv(x)"]}))
    return str(root / "dump.json"), str(root / "stack.json")


def test_msprobe_names_map_to_legacy(tmp_path):
    x, w = np.ones((1, 1, 2, 2), np.float32), np.ones((1, 1, 1, 1), np.float32)
    dump, stack = msprobe_dump(tmp_path / "ms", (x, w, x))
    calls = read_dump(dump, None, stack)
    assert [c.name for c in calls] == ["Functional_conv2d_0_forward", "Tensor___add___0_forward"]
    assert [r.name for r in calls[0].records] == [
        "Functional_conv2d_0_forward_input.0", "Functional_conv2d_0_forward_input.1",
        "Functional_conv2d_0_forward_output"]
    assert calls[0].stack == (("/work/train.py", "42", "forward", "x = self.conv(x)"),)
    assert [r.name for r in calls[1].records] == ["Tensor___add___0_forward_input.0", "Tensor___add___0_forward_output"]


def test_legacy_pkl_against_dump_json_summary(tmp_path, legacy_dump, output_dir):
    x, w = np.ones((1, 1, 2, 2), np.float32), np.full((1, 1, 1, 1), 2.0, np.float32)
    y = x * 2
    npu = legacy_dump("npu")
    npu.add_call("Functional_conv2d_0_forward", [("input.0", x), ("input.1", w), ("output", y)])
    npu.add_call("Tensor___add___0_forward", [("input.0", y), ("output", y + 5)])
    bench_json, _ = msprobe_dump(tmp_path / "ms", (x, w, y))
    param = {"npu_pkl_path": npu.pkl, "bench_json_path": bench_json, "is_print_compare_log": False}
    outcome = compare(param, output_dir, stack_mode=True)
    import csv
    with open(outcome.csv_path) as handle:
        rows = list(csv.DictReader(handle))
    assert [(r["NPU Name"], r["Bench Name"]) for r in rows] == [
        ("Functional_conv2d_0_forward_input.0",) * 2, ("Functional_conv2d_0_forward_input.1",) * 2,
        ("Functional_conv2d_0_forward_output",) * 2, ("Tensor___add___0_forward_input.0",) * 2,
        ("Tensor___add___0_forward_output",) * 2]
    assert [r["Result"] for r in rows] == ["pass"] * 4 + ["error"]  # max 7 against 3
    assert outcome.first_failure == "Tensor___add___0_forward_output"


def test_msprobe_input_keys(tmp_path, output_dir):
    x = np.ones((1, 1, 2, 2), np.float32)
    npu_json, stack = msprobe_dump(tmp_path / "npu", (x, x, x))
    bench_json, _ = msprobe_dump(tmp_path / "bench", (x, x, x))
    outcome = compare({"npu_path": npu_json, "bench_path": bench_json, "stack_path": stack,
                       "is_print_compare_log": False}, output_dir, stack_mode=True)
    assert outcome.rows == 5 and outcome.first_failure is None


def test_corrupt_dump_json(tmp_path):
    bad = write(tmp_path / "dump.json", '{"task": "tensor", "data": {"Functional.relu.0.forward": ')
    with pytest.raises(FileFormatError, match="dump.json is not valid JSON"):
        read_dump(bad)
