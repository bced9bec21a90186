"""``ptdbg convert``: legacy pkl+npy <-> msprobe dump.json+stack.json+dump_tensor_data/*.pt, on a dump written
by hand and on a real dump of a small CNN."""

import csv
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

torch = pytest.importorskip("torch")  # .pt files (the run without torch skips this module)

from ptdbg_ascend.cli import main as ptdbg_main  # noqa: E402
from ptdbg_ascend.compat.convert import convert  # noqa: E402
from ptdbg_ascend.errors import FileFormatError, ParameterError  # noqa: E402

X = np.array([[1.0, -2.0, 0.5], [3.0, 0.25, -1.0]], dtype=np.float32)
W = np.array([[0.5, 0.5, 0.5], [-1.0, 2.0, 0.0]], dtype=np.float32)
Y = X @ W.T
GRAD_Y = np.ones((2, 2), dtype=np.float32)
GRAD_W = GRAD_Y.T @ X
BF16 = np.array([1.5, -2.0, 0.375], dtype=np.float32)  # exactly representable in bfloat16

PKL_LINES = [
    ["Functional_linear_0_forward_input.0", 0, [], "torch.float32", [2, 3], [3.0, -2.0, 0.2916666567325592, 4.0]],
    ["Functional_linear_0_forward_input.1", 0, [], "torch.float32", [2, 3], [2.0, -1.0, 0.4166666567325592, 2.5]],
    ["Functional_linear_0_forward_input.2", 0, [], "<class 'int'>", "[]", [1.0, 1.0, 1.0, 1.0]],
    ["Functional_linear_0_forward_output", 0, [], "torch.float32", [2, 2], [2.0, -4.0, -0.5, 5.0]],
    ["Functional_linear_0_forward_stack_info", [["/w/train.py", "12", "forward", "y = F.linear(x, w)"]]],
    ["Functional_linear_0_backward_input.0", 0, [], "torch.float32", [2, 2], [1.0, 1.0, 1.0, 2.0]],
    ["Functional_linear_0_backward_output.1", 0, [], "torch.float32", [2, 3], [4.0, -1.75, 0.4583333432674408, 6.0]],
    ["Tensor___add___0_forward_input.0", 0, [], "torch.bfloat16", [3], [1.5, -2.0, -0.0416666679084301, 2.5739]],
    ["Torch_cat_0_forward_input.0.0", 0, [], "torch.float32", [2, 3], [3.0, -2.0, 0.2916666567325592, 4.0]],
    ["Torch_cat_0_forward_input.0.1", 0, [], "torch.float32", [2, 3], [2.0, -1.0, 0.4166666567325592, 2.5]],
    ["Torch_cat_0_forward_output", 0, [], "torch.float32", [4, 3], [3.0, -2.0, 0.3541666567325592, 4.7]],
]
NPY = {
    "Functional_linear_0_forward_input.0": X, "Functional_linear_0_forward_input.1": W,
    "Functional_linear_0_forward_input.2": np.asarray(1), "Functional_linear_0_forward_output": Y,
    "Functional_linear_0_backward_input.0": GRAD_Y, "Functional_linear_0_backward_output.1": GRAD_W,
    "Tensor___add___0_forward_input.0": BF16,
    "Torch_cat_0_forward_input.0.0": X, "Torch_cat_0_forward_input.0.1": W,
    "Torch_cat_0_forward_output": np.concatenate([X, W]),
}


def write_legacy_dump(directory):
    directory.mkdir(parents=True)
    pkl = directory / "npu_dump.pkl"
    pkl.write_text("".join(json.dumps(line) + "\n" for line in PKL_LINES))
    (directory / "npu_dump").mkdir()
    for name, array in NPY.items():
        np.save(str(directory / "npu_dump" / (name + ".npy")), array)
    return pkl


def test_legacy_to_msprobe_layout_and_values(tmp_path):
    pkl = write_legacy_dump(tmp_path / "rank0")
    result = convert(str(pkl), str(tmp_path / "json"))
    assert result.tensor_files == 9  # the int scalar is a value in dump.json, not a .pt
    dump = json.loads((tmp_path / "json" / "dump.json").read_text())
    assert (dump["task"], dump["level"]) == ("tensor", "L1")
    assert dump["dump_data_dir"] == str(tmp_path / "json" / "dump_tensor_data")
    assert list(dump["data"]) == ["Functional.linear.0.forward", "Functional.linear.0.backward",
                                  "Tensor.__add__.0.forward", "Torch.cat.0.forward"]
    forward = dump["data"]["Functional.linear.0.forward"]
    assert forward["input_args"][0] == {
        "type": "torch.Tensor", "dtype": "torch.float32", "shape": [2, 3], "Max": 3.0, "Min": -2.0,
        "Mean": 0.2916666567325592, "Norm": 4.0, "data_name": "Functional.linear.0.forward.input.0.pt"}
    assert forward["input_args"][2] == {"type": "int", "value": 1}
    assert forward["input_kwargs"] == {}
    assert forward["output"][0]["data_name"] == "Functional.linear.0.forward.output.0.pt"
    backward = dump["data"]["Functional.linear.0.backward"]
    assert backward["output"][0] is None  # no gradient for input 0 in the pkl
    assert backward["output"][1]["data_name"] == "Functional.linear.0.backward.output.1.pt"
    cat_inputs = dump["data"]["Torch.cat.0.forward"]["input_args"]
    assert [leaf["data_name"] for leaf in cat_inputs[0]] == ["Torch.cat.0.forward.input.0.0.pt",
                                                             "Torch.cat.0.forward.input.0.1.pt"]
    stack = json.loads((tmp_path / "json" / "stack.json").read_text())
    assert stack == {"Functional.linear.0.forward": ["File /w/train.py, line 12, in forward, \n y = F.linear(x, w)"]}
    assert json.loads((tmp_path / "json" / "construct.json").read_text()) == {}
    tensors = tmp_path / "json" / "dump_tensor_data"
    grad_w = torch.load(str(tensors / "Functional.linear.0.backward.output.1.pt"), weights_only=True)
    assert torch.equal(grad_w, torch.from_numpy(GRAD_W))
    bf16 = torch.load(str(tensors / "Tensor.__add__.0.forward.input.0.pt"), weights_only=True)
    assert bf16.dtype == torch.bfloat16  # the pkl dtype wins over the float32 npy
    assert bf16.float().tolist() == [1.5, -2.0, 0.375]


def test_round_trip_legacy_json_legacy_is_identical(tmp_path):
    pkl = write_legacy_dump(tmp_path / "rank0")
    convert(str(pkl), str(tmp_path / "json"))
    back = convert(str(tmp_path / "json"), str(tmp_path / "back"), name="npu_dump")
    assert back.metadata == str(tmp_path / "back" / "npu_dump.pkl")
    assert (tmp_path / "back" / "npu_dump.pkl").read_text() == pkl.read_text()
    assert sorted(os.listdir(str(tmp_path / "back" / "npu_dump"))) == sorted(name + ".npy" for name in NPY)
    for name, array in NPY.items():
        again = np.load(str(tmp_path / "back" / "npu_dump" / (name + ".npy")), allow_pickle=False)
        assert again.dtype == array.dtype and again.shape == array.shape, name
        assert np.array_equal(again, array), name


def test_a_multi_rank_tree_converts_rank_by_rank(tmp_path):
    tag = tmp_path / "ptdbg_dump_v1.0"
    originals = [write_legacy_dump(tag / rank) for rank in ("rank0", "rank1")]
    result = convert(str(tag), str(tmp_path / "json"))
    assert result.written == (str(tmp_path / "json" / "step0" / "rank0" / "dump.json"),
                              str(tmp_path / "json" / "step0" / "rank1" / "dump.json"))
    assert result.tensor_files == 18
    back = convert(str(tmp_path / "json" / "step0"), str(tmp_path / "back"), name="npu_dump")
    assert back.written == (str(tmp_path / "back" / "rank0" / "npu_dump.pkl"),
                            str(tmp_path / "back" / "rank1" / "npu_dump.pkl"))
    for original, converted in zip(originals, back.written):
        assert open(converted).read() == original.read_text()


def test_msprobe_values_without_a_legacy_form_are_counted(tmp_path):
    rank = tmp_path / "rank"
    (rank / "dump_tensor_data").mkdir(parents=True)
    torch.save(torch.tensor([1.0, 2.0]), str(rank / "dump_tensor_data" / "Tensor.view.0.forward.input.0.pt"))
    leaf = {"type": "torch.Tensor", "dtype": "torch.float32", "shape": [2], "Max": 2.0, "Min": 1.0, "Mean": 1.5,
            "Norm": 2.23606797749979, "requires_grad": False, "data_name": "Tensor.view.0.forward.input.0.pt"}
    (rank / "dump.json").write_text(json.dumps({"task": "tensor", "level": "L1", "dump_data_dir": None, "data": {
        "Tensor.view.0.forward": {"input_args": [leaf, {"type": "torch.Size", "value": [2]}],
                                  "input_kwargs": {"dtype": {"type": "torch.dtype", "value": "torch.float32"}},
                                  "output": [{"type": "str", "value": "x"}]}}}))
    dump = json.loads((rank / "dump.json").read_text())
    dump["data"]["Module.fc.Linear.forward.0"] = {"input_args": [leaf], "input_kwargs": {}, "output": [leaf]}
    (rank / "dump.json").write_text(json.dumps(dump))
    result = convert(str(rank), str(tmp_path / "legacy"))
    assert result.dropped == {"torch.Size": 1, "torch.dtype": 1, "str": 1, "Module entry (L0/mix)": 1}
    assert (tmp_path / "legacy" / "dump.pkl").read_text() == json.dumps(
        ["Tensor_view_0_forward_input.0", 0, [], "torch.float32", [2], [2.0, 1.0, 1.5, 2.23606797749979]]) + "\n"
    assert np.load(str(tmp_path / "legacy" / "dump" / "Tensor_view_0_forward_input.0.npy")).tolist() == [1.0, 2.0]


def test_target_that_is_not_empty_is_refused_and_untouched(tmp_path):
    pkl = write_legacy_dump(tmp_path / "rank0")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "keep.txt").write_text("x")
    with pytest.raises(ParameterError, match="target"):
        convert(str(pkl), str(tmp_path / "out"))
    assert os.listdir(str(tmp_path / "out")) == ["keep.txt"]


def test_missing_tensor_file_names_the_file_and_writes_nothing(tmp_path):
    pkl = write_legacy_dump(tmp_path / "rank0")
    convert(str(pkl), str(tmp_path / "json"))
    os.remove(str(tmp_path / "json" / "dump_tensor_data" / "Torch.cat.0.forward.output.0.pt"))
    with pytest.raises(FileFormatError, match="Torch.cat.0.forward.output.0.pt"):
        convert(str(tmp_path / "json" / "dump.json"), str(tmp_path / "back"))
    assert not (tmp_path / "back").exists()
    assert [name for name in os.listdir(str(tmp_path)) if name.startswith(".ptdbg-convert")] == []


def test_corrupt_pkl_line_names_the_file_and_line(tmp_path):
    pkl = write_legacy_dump(tmp_path / "rank0")
    with open(str(pkl), "a") as handle:
        handle.write('["not_a_record_name", 0, [], "torch.float32", [1], [1, 1, 1, 1]]\n')
    with pytest.raises(FileFormatError, match=r"Line 12 of .*npu_dump.pkl"):
        convert(str(pkl), str(tmp_path / "json"))
    assert not (tmp_path / "json").exists()


def test_unknown_source_is_refused(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(ParameterError, match="source"):
        convert(str(tmp_path / "empty"), str(tmp_path / "out"))
    with pytest.raises(FileFormatError, match="does not exist"):
        convert(str(tmp_path / "missing.pkl"), str(tmp_path / "out"))


LEGACY_SCRIPT = textwrap.dedent("""
    import torch, torch.nn as nn, torch.nn.functional as F
    from ptdbg_ascend import *
    seed_all(seed=7, rm_dropout=True)
    set_dump_path("./dump/npu_dump.pkl")
    model = nn.Sequential(nn.Conv2d(1, 2, 3), nn.ReLU(), nn.Flatten(), nn.Linear(8, 2))
    register_hook(model, acc_cmp_dump, rank=0)
    set_dump_switch("ON", mode="api_stack")
    x = torch.randn(2, 1, 4, 4)
    model(x).sum().backward()
    set_dump_switch("OFF")
""")


def test_real_dump_converts_and_compares_equal_both_ways(tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "train.py").write_text(LEGACY_SCRIPT)
    subprocess.run([sys.executable, "train.py"], cwd=str(tmp_path / "run"), check=True, stdout=subprocess.DEVNULL)
    rank = tmp_path / "run" / "dump" / "ptdbg_dump_v1.0" / "rank0"
    pkl = rank / "api_stack_npu_dump.pkl"
    assert ptdbg_main(["convert", str(rank), str(tmp_path / "json")]) == 0
    assert ptdbg_main(["convert", str(tmp_path / "json"), str(tmp_path / "back"), "--name", "api_stack_npu_dump"]) == 0
    assert (tmp_path / "back" / "api_stack_npu_dump.pkl").read_text() == pkl.read_text()

    from ptdbg_ascend.comparison.api import compare
    (tmp_path / "cmp").mkdir()
    outcome = compare({"npu_pkl_path": str(pkl), "npu_dump_data_dir": str(rank / "api_stack_npu_dump"),
                       "bench_json_path": str(tmp_path / "json" / "dump.json"), "is_print_compare_log": False},
                      str(tmp_path / "cmp"))
    with open(outcome.csv_path, newline="") as handle:
        rows = list(csv.DictReader(handle))
    tensor_lines = [line for line in pkl.read_text().splitlines() if "_stack_info" not in line]
    assert len(rows) == len(tensor_lines)
    assert [row["NPU Name"] for row in rows] == [row["Bench Name"] for row in rows]
    assert {row["Accuracy Reached or Not"] for row in rows} == {"Yes"}
    assert {float(row["Cosine"]) for row in rows} == {1.0}
