"""A legacy dump lines up with the original ptdbg_ascend 4.0's dump of the same script.

Golden data: ``data/original_4_0_wrapped_apis.txt``, the original 4.0's list of wrapped APIs (a copy of
``reference/original_4_0_wrapped_apis.txt``: its hook_module/support_wrap_ops.yaml), and the line grammar
of its ``.pkl`` (``reference/legacy_ptdbg_ascend.md`` section 3), written here as structure checks.
The only differences allowed are DESIGN section 4's: rank dir ``rank0`` (not ``rank{pid}``), numeric
statistics of int/bool/0-d tensors (the original: "Nan" norms), backward-output semantics and in-place
inputs before the call (not visible in the structure), and the extra APIs by opt-in only.
"""

from __future__ import annotations

import json
import math
import os
import re

import pytest
import torch

from ptdbg_ascend import acc_cmp_dump, register_hook, set_dump_path, set_dump_switch
from ptdbg_ascend.config import config_from_dict
from ptdbg_ascend.dump.interception import EXTRA_APIS_FILE, read_wrapped_names
from ptdbg_ascend.errors import ParameterError
from ptdbg_ascend.version import __version__

GOLDEN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "original_4_0_wrapped_apis.txt")
# The original's yaml sections -> our name prefixes (its aten section applies to torch.ops.aten, which
# no wrapper of either tool sees in a user script: not wrapped here).
SECTIONS = {"tensor": "Tensor", "torch": "Torch", "functional": "Functional", "_VF": "VF", "torch_npu": "NPU"}
# reference section 4: the original's distributed wrapper list (not in the yaml)
DISTRIBUTED = ("send", "recv", "broadcast", "all_reduce", "reduce", "all_gather", "gather", "isend", "irecv",
               "scatter", "reduce_scatter", "_reduce_scatter_base", "_all_gather_base")

NAME = re.compile(r"^(?P<call>(?P<prefix>Tensor|Torch|Functional|VF|NPU|Distributed)_(?P<api>.+)_(?P<n>\d+)"
                  r"_(?P<direction>forward|backward))(?P<rest>_.+)$")
TENSOR_SUFFIX = re.compile(r"^_(input|output)(\.\d+)+$|^_output$")
DTYPE = re.compile(r"^torch\.[a-z0-9]+$")
SCALAR_DTYPES = ("<class 'int'>", "<class 'float'>", "<class 'bool'>")


def original_names():
    """``{prefix: set of API names}`` of the original 4.0."""
    sections = read_wrapped_names(GOLDEN)
    names = {SECTIONS[section]: set(apis) for section, apis in sections.items() if section in SECTIONS}
    names["Distributed"] = set(DISTRIBUTED)
    return names


class Net(torch.nn.Module):
    """conv -> batch norm -> relu -> leaky_relu -> flatten -> linear."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3)
        self.bn = torch.nn.BatchNorm2d(4)
        self.fc = torch.nn.Linear(4 * 4 * 4, 5)

    def forward(self, x):
        x = torch.relu(self.bn(self.conv(x)))
        x = torch.nn.functional.leaky_relu(x, 0.1)
        return self.fc(x.flatten(1))


def dump_one_step(tmp_path, filter_switch, extra_apis=None, more=None):
    """One AdamW training step of ``Net`` dumped in mode api_stack; the pkl lines and the rank dir."""
    torch.manual_seed(0)
    net = Net()
    optimizer = torch.optim.AdamW(net.parameters(), lr=0.01)
    set_dump_path(str(tmp_path / "npu_dump.pkl"), dump_tag="orig")
    register_hook(net, acc_cmp_dump, extra_apis=extra_apis)
    x = torch.randn(2, 3, 6, 6, generator=torch.Generator().manual_seed(1))
    target = torch.tensor([1, 3])
    set_dump_switch("ON", mode="api_stack", filter_switch=filter_switch)
    try:
        loss = torch.nn.functional.cross_entropy(net(x), target)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if more is not None:
            more(x)
    finally:
        set_dump_switch("OFF")
    rank_dir = tmp_path / f"orig_v{__version__}" / "rank0"  # DESIGN 4: rank0, not rank{pid}
    pkl = rank_dir / "api_stack_npu_dump.pkl"
    with open(str(pkl), encoding="utf-8") as handle:
        text = handle.read()
    assert text.endswith("\n")
    return [json.loads(line) for line in text.splitlines()], rank_dir


def _number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_grammar(lines, filter_switch):
    """Every line follows the original 4.0's grammar; returns the call names in order."""
    calls = []
    last_side = {}
    for line in lines:
        assert isinstance(line, list) and line and isinstance(line[0], str), line
        match = NAME.match(line[0])
        assert match, line[0]
        call, rest = match.group("call"), match.group("rest")
        if not calls or calls[-1] != call:
            assert call not in calls, f"the records of {call} are not consecutive"
            calls.append(call)
        assert last_side.get(call) != "stack", f"{line[0]}: a record after the stack record"
        if rest == "_stack_info":  # [name_stack_info, [[file, "line", func, code], ...]], after the call's tensors
            assert len(line) == 2 and isinstance(line[1], list) and line[1], line
            for frame in line[1]:
                assert isinstance(frame, list) and len(frame) == 4, frame
                path, number, function, code = frame
                assert isinstance(path, str) and isinstance(function, str), frame
                assert isinstance(number, str) and number.isdigit(), frame  # the line number as a string
                assert code is None or isinstance(code, str), frame
            last_side[call] = "stack"
            continue
        # [name, dump_step, [], dtype, shape, [max, min, mean, norm]]
        assert TENSOR_SUFFIX.match(rest), line[0]
        assert len(line) == 6, line
        name, dump_step, reserved, dtype, shape, statistics = line
        assert dump_step == 0 and type(dump_step) is int and reserved == [], line
        assert isinstance(statistics, list) and len(statistics) == 4, line
        side = "input" if rest.startswith("_input") else "output"
        assert not (side == "input" and last_side.get(call) == "output"), f"{name}: an input after an output"
        last_side[call] = side
        if dtype in SCALAR_DTYPES:  # a Python scalar: shape is the string "[]", statistics v, v, v, |v|
            assert filter_switch == "OFF", line
            assert shape == "[]", line
            assert all(_number(value) for value in statistics), line
            value = statistics[0]
            assert statistics[:3] == [value] * 3 and statistics[3] == abs(value), line
            continue
        assert DTYPE.match(dtype), line
        assert isinstance(shape, list) and all(type(size) is int and size >= 0 for size in shape), line
        if math.prod(shape) == 0:
            assert statistics == [None] * 4, line  # an empty tensor: no statistics
            continue
        # DESIGN 4: every non-empty tensor, int/bool/0-d included, has four numbers (the original: "Nan" norms)
        assert all(_number(value) for value in statistics), line
        if filter_switch == "ON":  # the original's filter: float tensors with ndim >= 1 and elements only
            assert shape and dtype in ("torch.float16", "torch.float32", "torch.float64", "torch.bfloat16"), line
    return calls


def test_the_default_list_is_the_original_4_0_list():
    ours = read_wrapped_names()
    golden = original_names()
    assert sorted(ours) == sorted(golden)
    for prefix, names in golden.items():
        assert set(ours[prefix]) == names, prefix
        assert len(ours[prefix]) == len(names), f"{prefix}: a name listed twice"
    extra = read_wrapped_names(EXTRA_APIS_FILE)
    for prefix, names in extra.items():
        assert not set(names) & golden.get(prefix, set()), prefix  # the extra list holds only additions


@pytest.mark.parametrize("filter_switch", ["OFF", "ON"])
def test_a_training_step_dumps_only_original_apis_in_the_original_grammar(tmp_path, dump_session, filter_switch):
    lines, rank_dir = dump_one_step(tmp_path, filter_switch)
    calls = check_grammar(lines, filter_switch)
    golden = original_names()
    for call in calls:
        match = NAME.match(call + "_x")
        assert match.group("api") in golden[match.group("prefix")], f"{call} is not wrapped by the original 4.0"
    # per API, the counters run from 0 in call order (forward names; a backward reuses its forward's n)
    seen = {}
    for call in calls:
        match = NAME.match(call + "_x")
        if match.group("direction") == "forward":
            key = match.group("prefix") + "_" + match.group("api")
            assert int(match.group("n")) == seen.get(key, 0), call
            seen[key] = int(match.group("n")) + 1
    apis = {NAME.match(call + "_x").group("prefix") + "_" + NAME.match(call + "_x").group("api") for call in calls}
    assert {"Functional_conv2d", "Functional_batch_norm", "Torch_relu", "Functional_leaky_relu", "Tensor_flatten",
            "Functional_linear", "Functional_cross_entropy", "Tensor_addcdiv_"} <= apis
    assert any(call.endswith("_backward") for call in calls)
    scalars = [line for line in lines if len(line) == 6 and line[3] in SCALAR_DTYPES]
    assert bool(scalars) == (filter_switch == "OFF")
    # every tensor and scalar record has its npy beside the pkl
    npy_dir = rank_dir / "api_stack_npu_dump"
    for line in lines:
        if len(line) == 6:
            assert (npy_dir / (line[0] + ".npy")).is_file(), line[0]


def _extras(x):
    x.clone()
    torch.zeros_like(x)


def test_extra_apis_are_recorded_only_by_opt_in(tmp_path, dump_session):
    lines, _ = dump_one_step(tmp_path / "default", "OFF", more=_extras)
    names = {line[0] for line in lines}
    assert not any(name.startswith(("Tensor_clone_", "Torch_zeros_like_")) for name in names)
    lines, _ = dump_one_step(tmp_path / "extra", "OFF", extra_apis=True, more=_extras)
    check_grammar(lines, "OFF")
    names = {line[0] for line in lines}
    assert {"Tensor_clone_0_forward_input.0", "Tensor_clone_0_forward_output",
            "Torch_zeros_like_0_forward_input.0", "Torch_zeros_like_0_forward_output"} <= names
    # the extras are wrapped once asked for (None keeps them); False goes back to the original list
    assert dump_session.extra_apis is True
    register_hook(torch.nn.Identity(), acc_cmp_dump)
    assert dump_session.extra_apis is True
    register_hook(torch.nn.Identity(), acc_cmp_dump, extra_apis=False)
    assert dump_session.extra_apis is False
    assert not hasattr(torch.Tensor.clone, "__ptdbg_original__")
    assert hasattr(torch.Tensor.add, "__ptdbg_original__")


@pytest.mark.parametrize("value", ["yes", 1, [True]])
def test_extra_apis_must_be_a_boolean(dump_session, value):
    with pytest.raises(ParameterError, match="extra_apis"):
        register_hook(torch.nn.Identity(), acc_cmp_dump, extra_apis=value)
    with pytest.raises(ParameterError, match="extra_apis"):
        config_from_dict({"extra_apis": value})


def test_the_config_extension_field_round_trips():
    assert config_from_dict({}).extra_apis is False
    assert "extra_apis" not in config_from_dict({}).to_dict()  # a plain 1.0.4 config unless set
    config = config_from_dict({"extra_apis": True})
    assert config.extra_apis is True and config.to_dict()["extra_apis"] is True
    assert config_from_dict(config.to_dict()) == config
