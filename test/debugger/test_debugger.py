"""PrecisionDebugger on real small models: the msprobe 1.0.4 layout, names, key order, statistics."""

from __future__ import annotations

import os
import zlib

import numpy as np
import pytest
import torch

from ptdbg_ascend import PrecisionDebugger
from dump_json_names import tensor_leaves

FORWARD_L1 = ["Functional.conv2d.0.forward", "Torch.relu.0.forward", "Functional.leaky_relu.0.forward",
              "Tensor.flatten.0.forward", "Functional.linear.0.forward", "Tensor.sum.0.forward"]
BACKWARD_L1 = ["Tensor.sum.0.backward", "Functional.linear.0.backward", "Tensor.flatten.0.backward",
               "Functional.leaky_relu.0.backward", "Torch.relu.0.backward", "Functional.conv2d.0.backward"]
TENSOR_KEYS = ["type", "dtype", "shape", "Max", "Min", "Mean", "Norm", "requires_grad"]


def _dump_once(tmp_path, net, one_step, **kwargs):
    debugger = PrecisionDebugger(dump_path=str(tmp_path / "dump"), **kwargs)
    debugger.start()
    one_step(net)
    debugger.stop()
    debugger.step()
    return str(tmp_path / "dump" / "step0" / "rank")


def test_tensor_task_l1_layout_names_and_statistics(session, tmp_path, tiny, one_step, read_dump):
    rank_dir = _dump_once(tmp_path, tiny, one_step, task="tensor", level="L1")
    dump, stack, construct = read_dump(rank_dir)
    assert list(dump) == ["task", "level", "framework", "dump_data_dir", "data"]
    assert dump["task"] == "tensor" and dump["level"] == "L1" and dump["framework"] == "pytorch"
    assert dump["dump_data_dir"] == os.path.join(str(tmp_path / "dump"), "step0", "rank", "dump_tensor_data")
    names = list(dump["data"])
    # backward's own torch.ones_like (the seed gradient) is an API call too, as in msprobe
    assert names == FORWARD_L1 + ["Torch.ones_like.0.forward"] + BACKWARD_L1
    conv = dump["data"]["Functional.conv2d.0.forward"]
    assert list(conv) == ["input_args", "input_kwargs", "output"]
    assert [leaf["shape"] for leaf in conv["input_args"][:3]] == [[2, 3, 6, 6], [4, 3, 3, 3], [4]]
    assert conv["input_args"][3] == [{"type": "int", "value": 1}, {"type": "int", "value": 1}]  # stride
    assert conv["input_args"][0]["requires_grad"] is False and conv["input_args"][1]["requires_grad"] is True
    assert conv["output"][0]["data_name"] == "Functional.conv2d.0.forward.output.0.pt"
    leaky = dump["data"]["Functional.leaky_relu.0.forward"]
    assert leaky["input_args"][1] == {"type": "float", "value": 0.1}
    conv_backward = dump["data"]["Functional.conv2d.0.backward"]
    assert list(conv_backward) == ["input", "output"]
    assert conv_backward["output"][0] is None  # the image needs no gradient
    assert conv_backward["output"][1]["data_name"] == "Functional.conv2d.0.backward.output.1.pt"
    # every tensor leaf: key order, a file that holds exactly the described tensor
    leaves = list(tensor_leaves(dump["data"]))
    assert len(leaves) > 20
    for leaf in leaves:
        assert list(leaf) == TENSOR_KEYS + ["data_name"]
        saved = torch.load(os.path.join(dump["dump_data_dir"], leaf["data_name"]), weights_only=True)
        assert str(saved.dtype) == leaf["dtype"] and list(saved.shape) == leaf["shape"]
        values = saved.double().numpy()
        expected = [values.max(), values.min(), values.mean(), np.linalg.norm(values.ravel())]
        if saved.dim() == 0:  # msprobe: a 0-d tensor's four statistics are all its value (Norm too)
            expected = [float(values)] * 4
        np.testing.assert_allclose([leaf["Max"], leaf["Min"], leaf["Mean"], leaf["Norm"]], expected,
                                   rtol=1e-5, atol=1e-6, err_msg=leaf["data_name"])
    files = set(os.listdir(dump["dump_data_dir"]))
    assert files == {leaf["data_name"] for leaf in leaves}
    # stack.json: forward calls only, msprobe's line form, the user's code first
    assert set(stack) == set(FORWARD_L1 + ["Torch.ones_like.0.forward"])
    conftest = os.path.join(os.path.dirname(__file__), "conftest.py")
    assert stack["Torch.relu.0.forward"][0].startswith(f"File {conftest}, line ")
    assert ", in forward, \n x = torch.relu(self.conv(x))" in stack["Torch.relu.0.forward"][0]
    assert construct == {}


def test_statistics_task_writes_no_tensors_and_md5_is_crc32(session, tmp_path, tiny, one_step, read_dump):
    rank_dir = _dump_once(tmp_path, tiny, one_step, task="statistics", level="L1")
    dump, _, _ = read_dump(rank_dir)
    assert dump["dump_data_dir"] is None
    assert not os.path.exists(os.path.join(rank_dir, "dump_tensor_data"))
    for leaf in tensor_leaves(dump["data"]):
        assert list(leaf) == TENSOR_KEYS

    config = tmp_path / "md5.json"
    config.write_text('{"task": "statistics", "dump_path": "%s", "statistics": {"summary_mode": "md5", '
                      '"list": ["Functional.conv2d.0.forward"]}}' % (tmp_path / "md5"))
    torch.manual_seed(0)
    debugger = PrecisionDebugger(config_path=str(config))
    x = torch.randn(2, 3, 6, 6, generator=torch.Generator().manual_seed(1))
    debugger.start()
    tiny(x).sum().backward()
    debugger.stop()
    dump, _, _ = read_dump(str(tmp_path / "md5" / "step0" / "rank"))
    assert list(dump["data"]) == ["Functional.conv2d.0.forward"]
    image = dump["data"]["Functional.conv2d.0.forward"]["input_args"][0]
    assert list(image) == TENSOR_KEYS + ["md5"]
    assert image["md5"] == f"{zlib.crc32(x.numpy().tobytes()):08x}"


def test_steps_only_listed_ones_counters_restart(session, tmp_path, tiny, one_step, read_dump):
    debugger = PrecisionDebugger(task="statistics", dump_path=str(tmp_path / "dump"), step=[1, 2])
    for _ in range(4):  # steps 0..3: start() after the last listed step must not raise (1.0.4 did)
        debugger.start()
        one_step(tiny)
        debugger.stop()
        debugger.step()
    assert sorted(os.listdir(str(tmp_path / "dump"))) == ["step1", "step2"]
    for step in ("step1", "step2"):
        dump, _, _ = read_dump(str(tmp_path / "dump" / step / "rank"))
        assert list(dump["data"])[:6] == FORWARD_L1  # counters restart at 0 every step


def test_two_windows_in_one_step_are_both_kept(session, tmp_path, tiny, read_dump):
    debugger = PrecisionDebugger(task="statistics", dump_path=str(tmp_path / "dump"))
    x = torch.ones(2, 3)
    debugger.start()
    torch.exp(x)
    debugger.stop()
    torch.exp(x)  # not dumped, still counted
    debugger.start()
    torch.exp(x)
    debugger.stop()
    dump, _, _ = read_dump(str(tmp_path / "dump" / "step0" / "rank"))
    assert list(dump["data"]) == ["Torch.exp.0.forward", "Torch.exp.2.forward"]


def test_l0_module_names_and_construct(session, tmp_path, nested, read_dump):
    debugger = PrecisionDebugger(task="tensor", level="L0", model=nested, dump_path=str(tmp_path / "dump"))
    x = torch.randn(3, 4, requires_grad=True)
    for _ in range(2):
        debugger.start()
        nested(x).sum().backward()
        debugger.stop()
        debugger.step()
    dump, stack, construct = read_dump(str(tmp_path / "dump" / "step1" / "rank"))
    assert list(dump["data"]) == [
        "Module.block.0.Linear.forward.0", "Module.block.1.Tanh.forward.0", "Module.block.Sequential.forward.0",
        "Module.head.Linear.forward.0",
        "Module.head.Linear.backward.0", "Module.block.1.Tanh.backward.0", "Module.block.0.Linear.backward.0",
        "Module.block.Sequential.backward.0"]
    assert construct["Module.block.0.Linear.forward.0"] == "Module.block.Sequential.forward.0"
    assert construct["Module.block.Sequential.forward.0"] is None
    assert construct["Module.block.1.Tanh.backward.0"] == "Module.block.Sequential.backward.0"
    tanh = dump["data"]["Module.block.1.Tanh.forward.0"]
    expected = torch.tanh(nested.block[0](x)).detach()
    saved = torch.load(os.path.join(dump["dump_data_dir"], tanh["output"][0]["data_name"]), weights_only=True)
    torch.testing.assert_close(saved, expected)
    head_backward = dump["data"]["Module.head.Linear.backward.0"]
    assert head_backward["input"][0]["shape"] == [3, 2] and head_backward["input"][0]["Max"] == 1.0
    assert head_backward["output"][0]["shape"] == [3, 3]
    assert "Module.head.Linear.forward.0" in stack


def test_mix_links_apis_to_their_module(session, tmp_path, tiny, one_step, read_dump):
    rank_dir = _dump_once(tmp_path, tiny, one_step, task="statistics", level="mix", model=tiny)
    dump, _, construct = read_dump(rank_dir)
    names = list(dump["data"])
    assert names[:2] == ["Functional.conv2d.0.forward", "Module.conv.Conv2d.forward.0"]
    assert "Module.fc.Linear.backward.0" in names and "Tensor.view_as.0.forward" not in names
    assert construct["Functional.conv2d.0.forward"] == "Module.conv.Conv2d.forward.0"
    assert construct["Torch.relu.0.forward"] is None
    assert construct["Functional.linear.0.backward"] == "Module.fc.Linear.backward.0"


@pytest.mark.parametrize("section, expected", [
    ({"list": ["relu"]}, ["Torch.relu.0.forward", "Functional.leaky_relu.0.forward",
                          "Functional.leaky_relu.0.backward", "Torch.relu.0.backward"]),
    ({"list": ["Functional.conv2d.0.forward"]}, ["Functional.conv2d.0.forward"]),
    ({"scope": ["Torch.relu.0.forward", "Tensor.flatten.0.forward"]},
     ["Torch.relu.0.forward", "Functional.leaky_relu.0.forward", "Tensor.flatten.0.forward"]),
    ({"scope": ["Torch.relu.0.forward", "Tensor.flatten.0.forward"], "list": ["relu"]},
     ["Torch.relu.0.forward", "Functional.leaky_relu.0.forward"]),
    ({"data_mode": ["backward"]}, BACKWARD_L1),
])
def test_scope_and_list_selection(session, tmp_path, tiny, one_step, read_dump, section, expected):
    import json

    config = tmp_path / "config.json"
    config.write_text(json.dumps({"task": "statistics", "dump_path": str(tmp_path / "dump"), "statistics": section}))
    debugger = PrecisionDebugger(config_path=str(config))
    debugger.start()
    one_step(tiny)
    debugger.stop()
    dump, _, _ = read_dump(str(tmp_path / "dump" / "step0" / "rank"))
    assert list(dump["data"]) == expected


def test_data_mode_input_is_or_of_direction_and_side(session, tmp_path, tiny, one_step, read_dump):
    rank_dir = None
    import json

    config = tmp_path / "config.json"
    config.write_text(json.dumps({"task": "statistics", "dump_path": str(tmp_path / "dump"),
                                  "statistics": {"data_mode": ["input"], "list": ["linear"]}}))
    debugger = PrecisionDebugger(config_path=str(config))
    debugger.start()
    one_step(tiny)
    debugger.stop()
    rank_dir = str(tmp_path / "dump" / "step0" / "rank")
    dump, _, _ = read_dump(rank_dir)
    assert list(dump["data"]["Functional.linear.0.forward"]) == ["input_args", "input_kwargs"]
    assert list(dump["data"]["Functional.linear.0.backward"]) == ["input"]


def test_overflow_check_dumps_only_overflows_and_stops_at_overflow_nums(session, tmp_path, read_dump):
    from ptdbg_ascend.errors import OverflowLimitReached

    debugger = PrecisionDebugger(task="overflow_check", dump_path=str(tmp_path / "dump"))
    x = torch.tensor([[1e30, 2.0], [1e30, -3.0]])
    debugger.start()
    torch.add(x, 1)  # finite
    with pytest.raises(OverflowLimitReached, match="overflow_nums=1"):
        torch.mul(x, x)  # 1e60 overflows float32
    torch.mul(x, x)  # after the limit nothing more is recorded (the training script is stopping)
    dump, stack, _ = read_dump(str(tmp_path / "dump" / "step0" / "rank"))
    assert list(dump["data"]) == ["Torch.mul.0.forward"]
    out = dump["data"]["Torch.mul.0.forward"]["output"][0]
    assert out["Max"] == float("inf") and out["data_name"] == "Torch.mul.0.forward.output.0.pt"
    # x * x = [[inf, 4], [inf, 9]]: the extremes over the finite elements
    assert (out["Max_except_inf_nan"], out["Min_except_inf_nan"]) == (9.0, 4.0)
    saved = torch.load(os.path.join(dump["dump_data_dir"], out["data_name"]), weights_only=True)
    assert saved.tolist() == [[float("inf"), 4.0], [float("inf"), 9.0]]
    assert list(stack) == ["Torch.mul.0.forward"]
    with open(os.path.join(str(tmp_path / "dump" / "step0" / "rank"), "dump.json")) as handle:
        assert '"Max": Infinity' in handle.read()  # the bare token, as msprobe writes it
    debugger.stop()


def test_forward_backward_dump_end_stops_api_dumping_for_the_step(session, tmp_path, read_dump):
    debugger = PrecisionDebugger(task="statistics", dump_path=str(tmp_path / "dump"))
    x = torch.ones(2)
    debugger.start()
    torch.exp(x)
    debugger.forward_backward_dump_end()
    torch.exp(x)  # neither dumped nor counted
    debugger.stop()
    debugger.step()
    debugger.start()  # wraps again
    torch.exp(x)
    debugger.stop()
    assert list(read_dump(str(tmp_path / "dump" / "step0" / "rank"))[0]["data"]) == ["Torch.exp.0.forward"]
    assert list(read_dump(str(tmp_path / "dump" / "step1" / "rank"))[0]["data"]) == ["Torch.exp.0.forward"]


def test_module_range_scope_at_mix(session, tmp_path, nested, read_dump):
    import json

    config = tmp_path / "config.json"
    config.write_text(json.dumps({"task": "statistics", "level": "mix", "dump_path": str(tmp_path / "dump"),
                                  "statistics": {"scope": ["Module.block.1.Tanh.forward.0", "Module.head.Linear.forward.0"],
                                                 "data_mode": ["forward"]}}))
    debugger = PrecisionDebugger(config_path=str(config), model=nested)
    debugger.start()
    nested(torch.randn(3, 4)).sum().backward()
    debugger.stop()
    dump, _, construct = read_dump(str(tmp_path / "dump" / "step0" / "rank"))
    assert list(dump["data"]) == ["Torch.tanh.0.forward", "Module.block.1.Tanh.forward.0",
                                  "Module.block.Sequential.forward.0", "Functional.linear.1.forward",
                                  "Module.head.Linear.forward.0"]
    # construct.json covers every call seen while on, even outside the scope (as 1.0.4)
    assert construct["Functional.linear.0.forward"] == "Module.block.0.Linear.forward.0"


class ResidualBlock(torch.nn.Module):
    """conv -> bn, ``out += x``, ReLU(inplace): full backward hooks (1.0.4's way) break this pattern."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 3, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(3)
        self.relu = torch.nn.ReLU(inplace=True)

    def forward(self, x):
        out = self.bn(self.conv(x))
        out += x
        return self.relu(out)


def test_l0_residual_block_with_in_place_ops_and_exact_gradients(session, tmp_path, read_dump):
    torch.manual_seed(0)
    model = torch.nn.Sequential(ResidualBlock(), ResidualBlock())
    debugger = PrecisionDebugger(task="tensor", level="L0", model=model, dump_path=str(tmp_path / "dump"))
    x = torch.randn(2, 3, 5, 5, requires_grad=True)
    debugger.start()
    model(x).sum().backward()
    debugger.stop()
    dump, _, construct = read_dump(str(tmp_path / "dump" / "step0" / "rank"))
    assert list(dump["data"])[:4] == ["Module.0.conv.Conv2d.forward.0", "Module.0.bn.BatchNorm2d.forward.0",
                                      "Module.0.relu.ReLU.forward.0", "Module.0.ResidualBlock.forward.0"]
    assert construct["Module.0.bn.BatchNorm2d.forward.0"] == "Module.0.ResidualBlock.forward.0"
    block0 = dump["data"]["Module.0.ResidualBlock.backward.0"]
    gradient = torch.load(os.path.join(dump["dump_data_dir"], block0["output"][0]["data_name"]), weights_only=True)
    torch.testing.assert_close(gradient, x.grad)  # x feeds block 0 only: its gradient is x.grad
    incoming = torch.load(os.path.join(dump["dump_data_dir"], dump["data"]["Module.1.ResidualBlock.backward.0"]["input"][0]["data_name"]),
                          weights_only=True)
    torch.testing.assert_close(incoming, torch.ones(2, 3, 5, 5))  # d(sum)/d(output)


def test_run_ut_task_dumps_what_the_precheck_reruns(session, tmp_path, tiny, one_step, read_dump):
    """task="run_ut" (its section configures `ptdbg run-ut`) dumps as the L1 tensor task: every argument
    with its type and one .pt per tensor, under task "tensor" in dump.json (what run_ut reads)."""
    rank_dir = _dump_once(tmp_path, tiny, one_step, task="run_ut", level="L1")
    dump, _stack, _construct = read_dump(rank_dir)
    assert dump["task"] == "tensor"
    assert list(dump["data"]) == FORWARD_L1 + ["Torch.ones_like.0.forward"] + BACKWARD_L1
    leaky = dump["data"]["Functional.leaky_relu.0.forward"]
    assert leaky["input_args"][1] == {"type": "float", "value": 0.1}
    files = set(os.listdir(dump["dump_data_dir"]))
    assert files == {leaf["data_name"] for leaf in tensor_leaves(dump["data"])} and len(files) > 20
