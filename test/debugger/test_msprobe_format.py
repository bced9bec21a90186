"""The msprobe 1.0.4 format on synthetic values: tensor leaves, non-tensor values, the JSON files."""

from __future__ import annotations

import json
import os
import zlib

import numpy as np
import pytest
import torch

from ptdbg_ascend.sinks.msprobe import json_text
from ptdbg_ascend.sinks.msprobe.encoder import EntryEncoder
from ptdbg_ascend.formats.layout import step_rank_dir
from ptdbg_ascend.sinks.msprobe.json_writer import MsprobeJsonWriter

KEYS = ["type", "dtype", "shape", "Max", "Min", "Mean", "Norm", "requires_grad"]


def value_leaf(value, path, save=None, md5=False):
    """The dump.json form of ``value`` as the sink's encoder writes it (``save(stem, tensor)`` -> data_name)."""
    encoder = EntryEncoder(md5=md5)
    if save is not None:
        encoder.bind(lambda stem, tensor: (save(stem, tensor), None), None, None)
    return json.loads(encoder.value(value, 0, path, None, []))


def tensor_leaf(tensor, data_name=None, md5=False):
    return value_leaf(tensor, "X", (lambda stem, _: data_name) if data_name else None, md5)


def dump_json_text(task, level, dump_data_dir, data):
    """dump.json's text of ``data`` (entries as dicts), as the writer joins its member texts."""
    members = [json_text.member_text(name, entry, 1) for name, entry in data.items()]
    return str(json_text.document_pieces(task, level, dump_data_dir, json_text.members_pieces(members, 1)))


def _stats(leaf):
    return [leaf["Max"], leaf["Min"], leaf["Mean"], leaf["Norm"]]


def test_float_tensor_leaf():
    leaf = tensor_leaf(torch.tensor([[3.0, -4.0], [0.0, 1.0]], requires_grad=True))
    assert list(leaf) == KEYS
    assert leaf["type"] == "torch.Tensor" and leaf["dtype"] == "torch.float32" and leaf["shape"] == [2, 2]
    assert _stats(leaf) == pytest.approx([3.0, -4.0, 0.0, (9 + 16 + 1) ** 0.5])
    assert leaf["requires_grad"] is True


@pytest.mark.parametrize("tensor, expected", [
    (torch.tensor([True, False]), [True, False, None, None]),          # bool: any, all
    (torch.tensor([True, True]), [True, True, None, None]),
    (torch.tensor(-2.5), [-2.5, -2.5, -2.5, -2.5]),                    # 0-d: the value four times
    (torch.zeros(0, 3), [None, None, None, None]),                     # empty
    (torch.tensor([3 + 4j, 0j]), [5.0, 0.0, 2.5, None]),               # complex: |x|, no Norm
    (torch.tensor([1, -3], dtype=torch.int64), [1.0, -3.0, -1.0, 10 ** 0.5]),
    (torch.tensor([1.5, 2.5], dtype=torch.bfloat16), [2.5, 1.5, 2.0, (1.5 ** 2 + 2.5 ** 2) ** 0.5]),
])
def test_special_tensor_statistics(tensor, expected):
    actual = _stats(tensor_leaf(tensor))
    for got, want in zip(actual, expected):
        if want is None or isinstance(want, bool):
            assert got is want, (actual, expected)
        else:
            assert got == pytest.approx(want, rel=1e-6), (actual, expected)


def test_inf_and_nan_add_the_finite_extremes():
    leaf = tensor_leaf(torch.tensor([1.0, float("inf"), -2.0, float("nan")]))
    assert list(leaf) == KEYS + ["Max_except_inf_nan", "Min_except_inf_nan"]
    assert leaf["Max_except_inf_nan"] == 1.0 and leaf["Min_except_inf_nan"] == -2.0
    only_inf = tensor_leaf(torch.tensor([float("inf"), float("-inf")]))
    assert only_inf["Max_except_inf_nan"] == float("inf") and only_inf["Min_except_inf_nan"] == float("-inf")


def test_md5_is_crc32_of_the_bytes_and_data_name_comes_last():
    tensor = torch.arange(6, dtype=torch.float32)
    leaf = tensor_leaf(tensor, data_name="X.forward.input.0.pt", md5=True)
    assert list(leaf) == KEYS + ["md5", "data_name"]
    assert leaf["md5"] == f"{zlib.crc32(np.arange(6, dtype=np.float32).tobytes()):08x}"
    bf16 = tensor_leaf(torch.ones(2, dtype=torch.bfloat16), md5=True)  # bf16 hashed as float32
    assert bf16["md5"] == f"{zlib.crc32(np.ones(2, dtype=np.float32).tobytes()):08x}"


def test_non_tensor_values():
    saved = []

    def save(path, tensor):
        saved.append(path)
        return path + ".pt"

    value = [1, 2.5, True, "mean", slice(1, None, 2), Ellipsis, torch.Size([2, 3]), np.float32(1.5), None,
             torch.float16, {"dtype": torch.bfloat16, "device": torch.device("cpu"), "w": torch.ones(1)}, object()]
    leaves = value_leaf(value, "Torch.f.0.forward.input", save)
    assert leaves[:8] == [
        {"type": "int", "value": 1}, {"type": "float", "value": 2.5}, {"type": "bool", "value": True},
        {"type": "str", "value": "mean"}, {"type": "slice", "value": [1, None, 2]},
        {"type": "ellipsis", "value": "..."}, {"type": "torch.Size", "value": [2, 3]},
        {"type": "float32", "value": 1.5}]
    assert leaves[8] is None and leaves[9] == {}  # a positional dtype is {}
    assert leaves[10]["dtype"] == {"type": "torch.dtype", "value": "torch.bfloat16"}
    assert leaves[10]["device"] == {"type": "torch.device", "value": "cpu"}
    assert leaves[10]["w"]["data_name"] == "Torch.f.0.forward.input.10.w.pt"
    assert leaves[11] is None  # unsupported type
    assert saved == ["Torch.f.0.forward.input.10.w"]


def test_dump_json_text_order_indent_and_tokens():
    text = dump_json_text("tensor", "L1", "d/step0/rank/dump_tensor_data",
                          {"Torch.exp.0.forward": {"output": [{"Max": float("inf"), "Min": float("nan")}]}})
    assert text.startswith('{\n "task": "tensor",\n "level": "L1",\n "framework": "pytorch",\n '
                           '"dump_data_dir": "d/step0/rank/dump_tensor_data",\n "data": {')
    assert '"Max": Infinity' in text and '"Min": NaN' in text
    assert list(json.loads(text)) == ["task", "level", "framework", "dump_data_dir", "data"]


def test_step_rank_dir():
    assert step_rank_dir("out", 3, None) == os.path.join("out", "step3", "rank")
    assert step_rank_dir("out", 0, 12) == os.path.join("out", "step0", "rank12")


def test_writer_files_modes_and_pt_keeps_dtype(tmp_path):
    directory = str(tmp_path / "step0" / "rank")
    writer = MsprobeJsonWriter(directory, "tensor", "L1", saves_tensors=True, flush_every=2)
    tensor = torch.tensor([1.0, 2.0], dtype=torch.bfloat16)
    name = writer.save_tensor("Torch.exp.0.forward.output.0", tensor)
    tensor.add_(1)  # changed after the call: the file keeps the value at call time
    assert name == "Torch.exp.0.forward.output.0.pt"
    writer.add_entry("Torch.exp.0.forward", {"output": [{"data_name": name}]})
    writer.add_stack("Torch.exp.0.forward", ["File a.py, line 1, in f, \n x()"])
    writer.add_construct("Torch.exp.0.forward", None)
    writer.flush()
    saved = torch.load(os.path.join(directory, "dump_tensor_data", name), weights_only=True)
    assert saved.dtype == torch.bfloat16 and saved.tolist() == [1.0, 2.0]
    with open(os.path.join(directory, "dump.json")) as handle:
        dump = json.load(handle)
    assert dump["dump_data_dir"] == os.path.join(directory, "dump_tensor_data")
    assert json.load(open(os.path.join(directory, "stack.json"))) == {"Torch.exp.0.forward": ["File a.py, line 1, in f, \n x()"]}
    assert json.load(open(os.path.join(directory, "construct.json"))) == {"Torch.exp.0.forward": None}
    assert oct(os.stat(os.path.join(directory, "dump.json")).st_mode & 0o777) == "0o640"
    assert oct(os.stat(os.path.join(directory, "dump_tensor_data")).st_mode & 0o777) == "0o750"
    assert not [item for item in os.listdir(directory) if item.endswith(".tmp")]


def test_writer_flushes_dump_json_every_n_entries(tmp_path):
    directory = str(tmp_path / "rank")
    writer = MsprobeJsonWriter(directory, "statistics", "L1", saves_tensors=False, flush_every=2)
    writer.add_entry("A.a.0.forward", {})
    assert not os.path.exists(os.path.join(directory, "dump.json"))
    writer.add_entry("A.a.1.forward", {})
    with open(os.path.join(directory, "dump.json")) as handle:
        dump = json.load(handle)
    assert list(dump["data"]) == ["A.a.0.forward", "A.a.1.forward"] and dump["dump_data_dir"] is None
    assert writer.save_tensor("A.a.0.forward.input.0", torch.ones(1)) is None


@pytest.mark.parametrize("data", [
    {},
    {"A.a.0.forward": {"input_args": [{"type": "int", "value": 1}, None, [1, {"x": []}]], "input_kwargs": {},
                       "output": [{"Max": float("nan"), "s": "\u00e9\n"}]},
     "A.a.0.backward": {"input": [], "output": [None]}},
])
def test_dump_json_text_is_exactly_json_dumps_indent_1(data):
    document = {"task": "statistics", "level": "mix", "framework": "pytorch", "dump_data_dir": None, "data": data}
    assert dump_json_text("statistics", "mix", None, data) == json.dumps(document, indent=1)


@pytest.mark.parametrize("entries", [0, 1, 2, 3, 4, 7])
def test_files_written_a_chunk_at_a_time_are_exactly_json_dumps_indent_1(tmp_path, monkeypatch, entries):
    # Three members per chunk: 0..7 entries put the chunk boundaries everywhere (none, at the end, inside).
    monkeypatch.setattr(json_text, "MEMBERS_PER_CHUNK", 3)
    directory = str(tmp_path / "rank")
    writer = MsprobeJsonWriter(directory, "statistics", "L1", saves_tensors=False)
    data, stacks, construct = {}, {}, {}
    for index in range(entries):
        name = f"Torch.exp.{index}.forward"
        data[name] = {"input_args": [{"type": "int", "value": index}], "input_kwargs": {},
                      "output": [{"type": "float", "value": float("nan") if index == 4 else index / 3}]}
        stacks[name] = [f"File a.py, line {index}, in f, \n x()"]
        construct[name] = None if index % 2 else f"Module.block.{index}"
        writer.add_entry(name, data[name])
        writer.add_stack(name, stacks[name])
        writer.add_construct(name, construct[name])
    writer.flush()
    document = {"task": "statistics", "level": "L1", "framework": "pytorch", "dump_data_dir": None, "data": data}
    for file_name, expected in (("dump.json", document), ("stack.json", stacks), ("construct.json", construct)):
        with open(os.path.join(directory, file_name), encoding="utf-8") as handle:
            assert handle.read() == json.dumps(expected, indent=1), file_name


def test_json_pieces_length_and_text():
    pieces = json_text.members_pieces(['  "a": 1', '  "b": [\n   2\n  ]'], 1)
    assert str(pieces) == '{\n  "a": 1,\n  "b": [\n   2\n  ]\n }'
    assert len(pieces) == len(str(pieces))
    assert str(json_text.members_pieces([], 1)) == "{}" and len(json_text.members_pieces([], 1)) == 2
    assert str(pieces.wrapped("[", "]")) == "[" + str(pieces) + "]"
