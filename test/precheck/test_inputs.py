"""Rebuilding calls from a dump (api_inputs) and running them (execution), on small hand-written dumps."""

from __future__ import annotations

import json
import os

import pytest

torch = pytest.importorskip("torch")

from ptdbg_ascend.dump.interception import original_of  # noqa: E402
from ptdbg_ascend.errors import FileFormatError  # noqa: E402
from ptdbg_ascend.precheck import api_inputs, call_values, execution  # noqa: E402
from ptdbg_ascend.precheck.call_values import MissingInput, Source  # noqa: E402


def tensor_leaf(name, tensor, requires_grad=False):
    return {"type": "torch.Tensor", "dtype": str(tensor.dtype), "shape": list(tensor.shape),
            "Max": float(tensor.max()), "Min": float(tensor.min()), "requires_grad": requires_grad,
            "data_name": name}


def write_dump(root, data, tensors, task="tensor"):
    """A dump.json + dump_tensor_data/ in ``root``; returns the dump.json path."""
    data_dir = root / "dump_tensor_data"
    data_dir.mkdir(parents=True, exist_ok=True)
    for name, tensor in tensors.items():
        torch.save(tensor, str(data_dir / name))
    path = root / "dump.json"
    path.write_text(json.dumps({"task": task, "level": "L1", "dump_data_dir": str(data_dir), "data": data}))
    return str(path)


# --- rebuilding values -----------------------------------------------------------------------------------

def test_rebuild_every_recorded_kind(tmp_path):
    source = Source(str(tmp_path))
    assert call_values.rebuild({"type": "int", "value": 3}, source, "a") == 3
    assert call_values.rebuild({"type": "float", "value": 1e-05}, source, "a") == 1e-05
    assert call_values.rebuild({"type": "bool", "value": True}, source, "a") is True
    assert call_values.rebuild({"type": "str", "value": "tanh"}, source, "a") == "tanh"
    assert call_values.rebuild({"type": "slice", "value": [None, 4, 2]}, source, "a") == slice(None, 4, 2)
    assert call_values.rebuild({"type": "ellipsis", "value": "..."}, source, "a") is Ellipsis
    assert call_values.rebuild({"type": "torch.Size", "value": [2, 3]}, source, "a") == torch.Size([2, 3])
    assert call_values.rebuild({"type": "torch.dtype", "value": "torch.bfloat16"}, source, "a") is torch.bfloat16
    device = call_values.rebuild({"type": "torch.device", "value": "npu:0"}, source, "a")
    assert isinstance(device, call_values.DeviceArg) and device.recorded == "npu:0"
    value = call_values.rebuild({"type": "float32", "value": 1.5}, source, "a")
    assert type(value).__name__ == "float32" and value == 1.5
    assert call_values.rebuild([{"type": "int", "value": 1}, None, [{"type": "int", "value": 2}]], source, "a") \
        == [1, None, [2]]


def test_unrecorded_argument_is_missing_not_guessed(tmp_path):
    with pytest.raises(MissingInput, match=r"x\.input\.1: the dump did not record this argument"):
        call_values.rebuild({}, Source(str(tmp_path)), "x.input.1")
    with pytest.raises(MissingInput, match="values of type 'torch.memory_format' are not rebuilt"):
        call_values.rebuild({"type": "torch.memory_format", "value": "x"}, Source(str(tmp_path)), "x")


def test_tensor_loaded_with_dtype_and_requires_grad(tmp_path):
    torch.save(torch.tensor([1.0, 2.0], dtype=torch.bfloat16), str(tmp_path / "a.pt"))
    leaf = {"type": "torch.Tensor", "dtype": "torch.bfloat16", "shape": [2], "requires_grad": True,
            "data_name": "a.pt"}
    tensor = call_values.rebuild(leaf, Source(str(tmp_path)), "x")
    assert tensor.dtype == torch.bfloat16 and tensor.tolist() == [1.0, 2.0] and tensor.requires_grad


def test_tensor_files_are_confined_and_never_unpickled(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    torch.save(torch.ones(2), str(tmp_path / "outside.pt"))
    os.symlink(str(tmp_path / "outside.pt"), str(data / "link.pt"))
    torch.save({"not": "a tensor"}, str(data / "dict.pt"))
    torch.save(torch.nn.Linear(1, 1), str(data / "module.pt"))  # needs unpickling of a class
    source = Source(str(data))

    def leaf(name):
        return {"type": "torch.Tensor", "dtype": "torch.float32", "shape": [2], "data_name": name}

    with pytest.raises(MissingInput, match="not a plain file name"):
        call_values.rebuild(leaf("../outside.pt"), source, "x")
    with pytest.raises(MissingInput, match="outside"):
        call_values.rebuild(leaf("link.pt"), source, "x")
    with pytest.raises(MissingInput, match="does not hold a tensor"):
        call_values.rebuild(leaf("dict.pt"), source, "x")
    with pytest.raises(MissingInput, match="cannot be read safely"):
        call_values.rebuild(leaf("module.pt"), source, "x")
    with pytest.raises(MissingInput, match=r"tensor file .*gone\.pt is missing from the dump"):
        call_values.rebuild(leaf("gone.pt"), source, "x")


# --- random data -----------------------------------------------------------------------------------------

def test_random_tensor_shape_dtype_range_and_seed():
    leaf = {"type": "torch.Tensor", "dtype": "torch.float16", "shape": [3, 50], "Max": 2.5, "Min": -1.0}
    first = call_values.random_tensor(leaf, 7, "Torch.add.0.forward.input.0")
    again = call_values.random_tensor(leaf, 7, "Torch.add.0.forward.input.0")
    other_seed = call_values.random_tensor(leaf, 8, "Torch.add.0.forward.input.0")
    other_place = call_values.random_tensor(leaf, 7, "Torch.add.0.forward.input.1")
    assert first.dtype == torch.float16 and tuple(first.shape) == (3, 50)
    assert float(first.min()) == -1.0 and float(first.max()) == 2.5
    assert torch.equal(first, again)
    assert not torch.equal(first, other_seed) and not torch.equal(first, other_place)
    ints = call_values.random_tensor({"dtype": "torch.int64", "shape": [100], "Max": 4.0, "Min": 1.0}, 1, "w")
    assert set(ints.tolist()) <= {1, 2, 3, 4} and ints.min() == 1 and ints.max() == 4
    # bool statistics: Max = any, Min = all
    assert call_values.random_tensor({"dtype": "torch.bool", "shape": [4], "Max": True, "Min": True}, 1, "b").all()
    assert not call_values.random_tensor({"dtype": "torch.bool", "shape": [4], "Max": False, "Min": False}, 1,
                                        "b").any()
    # an inf Max: the finite extreme recorded beside it is used
    leaf = {"dtype": "torch.float32", "shape": [10], "Max": float("inf"), "Min": 0.0, "Max_except_inf_nan": 3.0}
    assert float(call_values.random_tensor(leaf, 1, "z").max()) == 3.0
    with pytest.raises(MissingInput, match="no finite Max/Min"):
        call_values.random_tensor({"dtype": "torch.float32", "shape": [2], "Max": None, "Min": None}, 1, "n")


# --- opening dumps ---------------------------------------------------------------------------------------

def test_open_dump_pairs_forward_and_backward_and_skips_modules(tmp_path):
    x = torch.randn(2, 3)
    data = {
        "Module.fc.Linear.forward.0": {"input_args": []},
        "Functional.relu.0.forward": {"input_args": [tensor_leaf("r.in.pt", x, True)], "input_kwargs": {},
                                      "output": [tensor_leaf("r.out.pt", x.relu())]},
        "Aten.add.Tensor.2.forward": {"input_args": [], "input_kwargs": {}, "output": []},
        "Functional.relu.0.backward": {"input": [tensor_leaf("r.gin.pt", torch.ones(2, 3))],
                                       "output": [tensor_leaf("r.gout.pt", torch.ones(2, 3))]},
    }
    dump = api_inputs.open_dump(write_dump(tmp_path, data, {"r.in.pt": x}))
    assert [c.full_name for c in dump.calls] == ["Functional.relu.0", "Aten.add.Tensor.2"]
    relu, aten = dump.calls
    assert relu.api_key == "Functional.relu" and relu.backward == data["Functional.relu.0.backward"]
    assert aten.prefix == "Aten" and aten.api == "add.Tensor" and aten.backward is None
    assert dump.has_tensors and dump.data_dir == str(tmp_path / "dump_tensor_data")


def test_legacy_pkl_is_refused_with_the_way_out(tmp_path):
    pkl = tmp_path / "api_stack_npu_dump.pkl"
    pkl.write_text('["Functional_relu_0_forward_input.0", 0, [], "torch.float32", [2], [1, 0, 0.5, 1]]\n')
    renamed = tmp_path / "dump.json"
    renamed.write_text(pkl.read_text())
    for path in (pkl, renamed):
        with pytest.raises(FileFormatError) as caught:
            api_inputs.open_dump(str(path))
        message = str(caught.value)
        assert "legacy pkl" in message and "ptdbg convert" in message and "PrecisionDebugger" in message


@pytest.mark.parametrize("content, expected", [
    (None, "does not exist"),
    ('{"task": "tensor", "data": {"Functional.relu.0.forward": {', "not valid JSON"),
    ('{"task": "tensor"}', "has no \"data\" object"),
    ('{"task": "tensor", "data": {"Module.a.A.forward.0": {}}}', "holds no forward API call"),
])
def test_bad_dump_json(tmp_path, content, expected):
    path = tmp_path / "dump.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(FileFormatError, match=expected):
        api_inputs.open_dump(str(path))


def test_missing_tensor_directory_is_an_error_up_front(tmp_path):
    x = torch.randn(2)
    path = write_dump(tmp_path, {"Torch.relu.0.forward": {"input_args": [tensor_leaf("a.pt", x)],
                                                          "input_kwargs": {}}}, {"a.pt": x})
    for name in os.listdir(str(tmp_path / "dump_tensor_data")):
        os.remove(str(tmp_path / "dump_tensor_data" / name))
    os.rmdir(str(tmp_path / "dump_tensor_data"))
    with pytest.raises(FileFormatError,
                       match=r"names tensor files, but their directory \S+dump_tensor_data is missing"):
        api_inputs.open_dump(path)


# --- execution ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("prefix, api, words", [
    ("Functional", "dropout", "Random API"), ("Torch", "randn_like", "Random API"),
    ("Tensor", "bernoulli_", "Random API"), ("Torch", "multinomial", "Random API"),
    ("Distributed", "all_reduce", "communicates with the other ranks"), ("Tensor", "resize_", "view/metadata"),
    ("Torch", "empty_like", "uninitialised memory"),
])
def test_static_skip_reasons(prefix, api, words):
    assert words in execution.static_skip_reason(prefix, api)


def test_ordinary_apis_are_not_skipped():
    for prefix, api in (("Functional", "linear"), ("Tensor", "add_"), ("Torch", "matmul"), ("Tensor", "__add__")):
        assert execution.static_skip_reason(prefix, api) is None


def test_resolve_names_and_unknown():
    import torch.nn.functional as F

    assert execution.resolve("Functional", "linear") is original_of(F.linear)
    assert execution.resolve("Torch", "matmul")(torch.eye(2), torch.ones(2, 2)).tolist() == [[1, 1], [1, 1]]
    assert execution.resolve("Tensor", "__add__")(torch.ones(1), 2).tolist() == [3.0]
    with pytest.raises(execution.Unrunnable, match=r"Aten.add.Tensor is not an API of the wrap list"):
        execution.resolve("Aten", "add.Tensor")  # reachable in torch, but not a wrapped API: never run
    with pytest.raises(execution.Unrunnable, match=r"Torch.no_such_api is not an API of the wrap list"):
        execution.resolve("Torch", "no_such_api")


def test_execute_bench_float64_device_dumped_dtype_forward_and_backward(tmp_path):
    x = torch.randn(4, 3).to(torch.bfloat16)
    w = torch.randn(2, 3).to(torch.bfloat16)
    grad = torch.randn(4, 2).to(torch.bfloat16)
    data = {
        "Functional.linear.0.forward": {
            "input_args": [tensor_leaf("x.pt", x, True), tensor_leaf("w.pt", w, True)],
            "input_kwargs": {"bias": None}, "output": [tensor_leaf("y.pt", x @ w.t())]},
        "Functional.linear.0.backward": {"input": [tensor_leaf("g.pt", grad)], "output": [None, None]},
    }
    dump = api_inputs.open_dump(write_dump(tmp_path, data, {"x.pt": x, "w.pt": w, "g.pt": grad}))
    runs = execution.execute(dump.calls[0], Source(dump.data_dir))
    assert runs.forward_skip is None and runs.backward_skip is None
    (bench,), (device,) = runs.forward_bench, runs.forward_device
    assert bench.dtype == torch.float64 and device.dtype == torch.bfloat16
    assert torch.allclose(bench, x.double() @ w.double().t())
    assert sorted(runs.backward_bench) == [0, 1]
    assert torch.allclose(runs.backward_bench[0], grad.double() @ w.double())  # d(x W^T)/dx = g W
    assert runs.backward_device[1].dtype == torch.bfloat16


def test_execute_missing_tensor_is_a_skip_naming_the_file(tmp_path):
    x = torch.randn(3)
    path = write_dump(tmp_path, {"Torch.relu.0.forward": {"input_args": [tensor_leaf("a.pt", x)],
                                                          "input_kwargs": {}}}, {"b.pt": x})
    dump = api_inputs.open_dump(path)
    runs = execution.execute(dump.calls[0], Source(dump.data_dir))
    assert "Torch.relu.0.forward.input.0" in runs.forward_skip and "a.pt is missing from the dump" in \
        runs.forward_skip


def test_execute_api_raising_for_the_dtype_is_a_skip(tmp_path):
    x = torch.tensor([1, 2, 3])
    path = write_dump(tmp_path, {"Torch.erfinv.0.forward": {"input_args": [tensor_leaf("a.pt", x)],
                                                            "input_kwargs": {"out": {"type": "int", "value": 3}}}},
                      {"a.pt": x})
    dump = api_inputs.open_dump(path)
    runs = execution.execute(dump.calls[0], Source(dump.data_dir))
    assert runs.forward_skip.startswith("The float64 benchmark run on the CPU raises TypeError")


def test_getitem_index_recorded_as_a_list_is_a_tuple_again(tmp_path):
    x = torch.arange(12.0).reshape(3, 4)
    index = [{"type": "slice", "value": [None, None, None]}, {"type": "slice", "value": [1, None, None]}]
    path = write_dump(tmp_path, {
        "Tensor.__getitem__.0.forward": {"input_args": [tensor_leaf("x.pt", x), index], "input_kwargs": {}},
        "Tensor.__getitem__.1.forward": {"input_args": [tensor_leaf("x.pt", x),
                                                        [{"type": "int", "value": 0}, {"type": "int", "value": 2}]],
                                         "input_kwargs": {}}}, {"x.pt": x})
    dump = api_inputs.open_dump(path)
    sliced, fancy = (execution.execute(call, Source(dump.data_dir)) for call in dump.calls)
    assert sliced.forward_bench[0].tolist() == [[1, 2, 3], [5, 6, 7], [9, 10, 11]]  # x[:, 1:]
    assert fancy.forward_device[0].tolist() == [[0, 1, 2, 3], [8, 9, 10, 11]]  # x[[0, 2]]: rows 0 and 2
