"""In-place APIs: their forward inputs are recorded as they were before the call (pkl statistics and npy
files of the legacy dump, dump.json statistics and .pt files of PrecisionDebugger); outputs after it;
training results never change."""

from __future__ import annotations

import glob
import json
import os

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from ptdbg_ascend import PrecisionDebugger, acc_cmp_dump, register_hook, set_dump_path, set_dump_switch
from ptdbg_ascend.dump.inplace import ALWAYS, KEYWORDS, inplace_call, inplace_rule


# -- helpers ------------------------------------------------------------------------------------------
def read_pkl(path):
    with open(path, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle]


def _legacy_dump(tmp_path, work, extra_apis=None, **switch):
    """Run ``work()`` in one legacy dump window; ``(records by name, npy dir, work's result)``."""
    set_dump_path(str(tmp_path / "dump" / "npu.pkl"), dump_tag="inplace")
    register_hook(torch.nn.Module(), acc_cmp_dump, extra_apis=extra_apis)
    set_dump_switch("ON", **switch)
    try:
        result = work()
    finally:
        set_dump_switch("OFF")
    (rank_dir,) = glob.glob(str(tmp_path / "dump" / "inplace_v*" / "rank0"))
    stem = ("api_stack_" if switch.get("mode") == "api_stack" else "") + "npu"
    records = read_pkl(os.path.join(rank_dir, stem + ".pkl"))
    by_name = {record[0]: record for record in records}
    assert len(by_name) == len(records)  # every name once
    return by_name, os.path.join(rank_dir, stem), result


def _statistics(array):
    values = np.asarray(array, dtype=np.float64).reshape(-1)
    return [values.max(), values.min(), values.mean(), np.linalg.norm(values)]


def _npy(npy_dir, name):
    return np.load(os.path.join(npy_dir, name + ".npy"), allow_pickle=False)


def _check(records, npy_dir, name, expected):
    """The record ``name`` holds exactly ``expected`` (a tensor or array): statistics and npy."""
    expected = expected.detach().numpy() if isinstance(expected, torch.Tensor) else np.asarray(expected)
    assert name in records, name
    np.testing.assert_allclose(records[name][5], _statistics(expected), rtol=1e-6, atol=1e-7, err_msg=name)
    if npy_dir is not None:
        np.testing.assert_array_equal(_npy(npy_dir, name), expected, err_msg=name)


# -- which calls are in place ---------------------------------------------------------------------------
def test_inplace_rule_per_api_and_per_call():
    assert inplace_rule("Tensor", "add_", torch.Tensor.add_) == ALWAYS
    assert inplace_rule("Torch", "relu_", torch.relu_) == ALWAYS
    assert inplace_rule("Tensor", "__iadd__", torch.Tensor.__iadd__) == ALWAYS
    assert inplace_rule("Tensor", "__setitem__", torch.Tensor.__setitem__) == ALWAYS
    assert inplace_rule("Distributed", "all_reduce", None) == ALWAYS
    for dunder in ("__add__", "__invert__", "__getitem__", "__eq__"):  # __invert__: not __i{op}__
        assert inplace_rule("Tensor", dunder, getattr(torch.Tensor, dunder)) == KEYWORDS
    assert inplace_rule("Torch", "add", torch.add) == KEYWORDS
    # the position of the functionals' own `inplace` parameter
    assert inplace_rule("Functional", "relu", F.relu) == 1
    assert inplace_rule("Functional", "leaky_relu", F.leaky_relu) == 2
    assert inplace_rule("Functional", "dropout", F.dropout) == 3
    assert inplace_rule("Functional", "hardtanh", F.hardtanh) == 3
    x = torch.ones(2)
    assert inplace_call(KEYWORDS, (x, x), {"out": x}) and not inplace_call(KEYWORDS, (x, x), {"out": None})
    assert inplace_call(1, (x,), {"inplace": True}) and inplace_call(1, (x, True), {})
    assert not inplace_call(1, (x, False), {}) and not inplace_call(1, (x,), {"inplace": False})
    assert not inplace_call(3, (x, 0.5, True), {})  # training=True is not inplace
    assert not inplace_call(1, (torch.ones(3),  torch.ones(3)), {})  # a tensor is never read as a flag


# -- the legacy dump (pkl + npy) -------------------------------------------------------------------------
def test_tensor_add_inplace_input_is_recorded_before_the_call(tmp_path, dump_session):
    x = torch.tensor([1.0, -2.0, 3.0, 0.5])
    before = x.clone()

    def work():
        x.add_(1)
        return x.clone()

    records, npy_dir, after = _legacy_dump(tmp_path, work)
    _check(records, npy_dir, "Tensor_add__0_forward_input.0", before)
    _check(records, npy_dir, "Tensor_add__0_forward_output", after)
    assert records["Tensor_add__0_forward_input.0"][5] == pytest.approx([3.0, -2.0, 0.625, np.sqrt(14.25)])


def _relu_kw(x):
    F.relu(x, inplace=True)


def _relu_positional(x):
    F.relu(x, True)


def _torch_relu_(x):
    torch.relu_(x)


def _iadd(x):
    x += torch.full_like(x, 0.5)


def _setitem(x):
    x[0] = 5.0


def _dropout_positional(x):
    torch.manual_seed(0)
    F.dropout(x, 0.5, True, True)


def _leaky_relu_kw(x):
    F.leaky_relu(x, 0.1, inplace=True)


def _hardtanh_kw(x):
    F.hardtanh(x, inplace=True)


@pytest.mark.parametrize("call, name", [
    (_relu_kw, "Functional_relu_0"),
    (_relu_positional, "Functional_relu_0"),
    (_torch_relu_, "Torch_relu__0"),
    (_iadd, "Tensor___iadd___0"),
    (_setitem, "Tensor___setitem___0"),
    (_dropout_positional, "Functional_dropout_0"),
    (_leaky_relu_kw, "Functional_leaky_relu_0"),
    (_hardtanh_kw, "Functional_hardtanh_0"),
])
def test_inplace_forms_record_the_input_before_the_call(tmp_path, dump_session, call, name):
    x = torch.linspace(-3.0, 3.0, 16)
    before = x.clone()
    # __setitem__ is not in the original 4.0's list: only wrapped with the extra APIs
    records, npy_dir, _ = _legacy_dump(tmp_path, lambda: call(x), extra_apis=call is _setitem or None)
    assert not torch.equal(x, before)  # the call did change x
    _check(records, npy_dir, name + "_forward_input.0", before)
    if name + "_forward_output" in records:  # __setitem__ returns None
        _check(records, npy_dir, name + "_forward_output", x)


def test_out_keyword_records_the_destination_before_the_call(tmp_path, dump_session):
    a, b = torch.tensor([1.0, 2.0, 3.0]), torch.tensor([10.0, 20.0, 30.0])
    c = torch.tensor([-7.0, 0.0, 7.0])
    before = c.clone()
    records, npy_dir, _ = _legacy_dump(tmp_path, lambda: torch.add(a, b, out=c))
    _check(records, npy_dir, "Torch_add_0_forward_input.0", a)
    _check(records, npy_dir, "Torch_add_0_forward_input.1", b)
    _check(records, npy_dir, "Torch_add_0_forward_input.2", before)  # the out= keyword, after the positionals
    _check(records, npy_dir, "Torch_add_0_forward_output", a + b)


def test_chained_inplace_calls_reuse_no_statistics_across_the_change(tmp_path, dump_session):
    """mul -> add_ -> mul_ -> stack mode: each in-place input is the previous call's output, never
    its own output; the statistics cache links the unchanged ones and recomputes the changed ones."""
    a = torch.tensor([1.0, -2.0, 4.0])

    def work():
        y = torch.mul(a, 2)
        first = y.clone()
        y.add_(1)
        second = y.clone()
        y.mul_(3)
        return first, second, y

    records, npy_dir, (first, second, third) = _legacy_dump(tmp_path, work, mode="api_stack")
    _check(records, npy_dir, "Torch_mul_0_forward_output", first)
    _check(records, npy_dir, "Tensor_add__0_forward_input.0", first)
    _check(records, npy_dir, "Tensor_add__0_forward_output", second)
    _check(records, npy_dir, "Tensor_mul__0_forward_input.0", second)
    _check(records, npy_dir, "Tensor_mul__0_forward_output", third)
    # a call's lines stay together: inputs, outputs, then its stack line
    names = [record[0] for record in read_pkl(npy_dir + ".pkl")]
    start = names.index("Tensor_add__0_forward_input.0")
    assert names[start:start + 3] == ["Tensor_add__0_forward_input.0", "Tensor_add__0_forward_output",
                                      "Tensor_add__0_forward_stack_info"]


def test_large_inplace_input_statistics_deferred_to_the_writer_are_pre_call(tmp_path, dump_session):
    x = torch.randn(70000, generator=torch.Generator().manual_seed(3))  # above the deferred-statistics size
    before = x.clone()
    records, npy_dir, _ = _legacy_dump(tmp_path, lambda: x.mul_(-2.0))
    _check(records, npy_dir, "Tensor_mul__0_forward_input.0", before)
    _check(records, npy_dir, "Tensor_mul__0_forward_output", x)


def test_summary_only_inplace_input_statistics_are_pre_call(tmp_path, dump_session):
    x = torch.tensor([1.0, -2.0, 3.0])
    before = x.clone()
    records, _, _ = _legacy_dump(tmp_path, lambda: x.sub_(5), summary_only=True)
    _check(records, None, "Tensor_sub__0_forward_input.0", before)
    _check(records, None, "Tensor_sub__0_forward_output", x)


def test_failed_inplace_call_writes_nothing_and_later_records_stay_whole(tmp_path, dump_session):
    x = torch.tensor([1.0, 2.0, 3.0, 4.0])
    before = x.clone()

    def work():
        with pytest.raises(RuntimeError):
            x.add_(torch.ones(3))  # shapes do not broadcast: the original raises after before_forward
        torch.mul(x, 2)  # x unchanged: its npy must not be linked to the failed call's (never written) one
        x.add_(1)

    records, npy_dir, _ = _legacy_dump(tmp_path, work)
    assert not any(name.startswith("Tensor_add__0_") for name in records)
    _check(records, npy_dir, "Torch_mul_0_forward_input.0", before)
    _check(records, npy_dir, "Tensor_add__1_forward_input.0", before)
    _check(records, npy_dir, "Tensor_add__1_forward_output", before + 1)


def test_inplace_relu_on_an_activation_keeps_backward(tmp_path, dump_session):
    w = torch.tensor([[1.0, -2.0], [3.0, -4.0]], requires_grad=True)

    def work():
        h = w * 2
        pre = h.detach().clone()
        h.relu_()
        (h * torch.tensor([[1.0, 2.0], [3.0, 4.0]])).sum().backward()
        return pre

    records, npy_dir, pre = _legacy_dump(tmp_path, work)
    _check(records, npy_dir, "Tensor_relu__0_forward_input.0", pre)
    _check(records, npy_dir, "Tensor_relu__0_forward_output", pre.clamp(min=0))
    incoming = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    _check(records, npy_dir, "Tensor_relu__0_backward_input.0", incoming)
    _check(records, npy_dir, "Tensor_relu__0_backward_output.0", incoming * (pre > 0))
    assert torch.equal(w.grad, 2 * incoming * (pre > 0))


class _InplaceNet(torch.nn.Module):
    """linear -> dropout(inplace) -> relu(inplace) -> linear: in-place ops on activations that need grad."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(6, 8)
        self.fc2 = torch.nn.Linear(8, 3)

    def forward(self, x):
        h = F.dropout(self.fc1(x), 0.25, self.training, inplace=True)
        h = F.relu(h, inplace=True)
        return self.fc2(h)


def _plain_adamw_run(session):
    """_adamw_run without the tool's wrappers (then wrapped again, counters from 0)."""
    session.unwrap()
    try:
        return _adamw_run()
    finally:
        session.ensure_wrapped()
        session.reset_counters()


def _adamw_run(steps=2, before_step=None, around_step=None):
    """Train a fresh _InplaceNet with AdamW; the losses (floats) and the final parameters."""
    torch.manual_seed(0)
    net = _InplaceNet()
    optimizer = torch.optim.AdamW(net.parameters(), lr=0.1)
    generator = torch.Generator().manual_seed(5)
    losses = []
    for step in range(steps):
        x = torch.randn(4, 6, generator=generator)
        target = torch.tensor([0, 2, 1, 2])
        if around_step is not None:
            around_step("start", step)
        loss = F.cross_entropy(net(x), target)
        optimizer.zero_grad()
        loss.backward()
        if before_step is not None:
            before_step(step, net, optimizer)
        optimizer.step()
        if around_step is not None:
            around_step("stop", step)
        losses.append(loss.item())
    return losses, [parameter.detach().clone() for parameter in net.parameters()]


def test_adamw_records_pre_call_state_and_keeps_training_bit_identical(tmp_path, dump_session):
    plain_losses, plain_parameters = _plain_adamw_run(dump_session)
    taken = {}

    def before_step(step, net, optimizer):
        if step == 1:  # the second step: the state exists and is not zero
            weight = net.fc1.weight
            state = optimizer.state[weight]
            taken.update(weight=weight.detach().clone(), exp_avg=state["exp_avg"].clone(),
                         exp_avg_sq=state["exp_avg_sq"].clone())

    records, npy_dir, (losses, parameters) = _legacy_dump(
        tmp_path, lambda: _adamw_run(before_step=before_step), mode="api_stack")
    assert losses == plain_losses  # bit-identical, not approximately equal
    assert all(torch.equal(got, want) for got, want in zip(parameters, plain_parameters))
    # fc1.weight is the first of 4 parameters: in step 2 its updates are the 5th lerp_/addcmul_/addcdiv_
    # calls (one per parameter per step) and the 9th and 10th mul_ (two per parameter per step)
    lr, weight_decay, beta2 = 0.1, 0.01, 0.999  # AdamW(lr=0.1) and its defaults
    decayed = taken["weight"] * (1 - lr * weight_decay)
    _check(records, npy_dir, "Tensor_mul__8_forward_input.0", taken["weight"])  # param.mul_(1 - lr * wd)
    _check(records, npy_dir, "Tensor_mul__8_forward_output", decayed)
    _check(records, npy_dir, "Tensor_lerp__4_forward_input.0", taken["exp_avg"])  # exp_avg.lerp_(grad, 1 - b1)
    assert not np.array_equal(_npy(npy_dir, "Tensor_lerp__4_forward_input.0"),
                              _npy(npy_dir, "Tensor_lerp__4_forward_output"))
    _check(records, npy_dir, "Tensor_mul__9_forward_input.0", taken["exp_avg_sq"])  # exp_avg_sq.mul_(b2)
    _check(records, npy_dir, "Tensor_addcmul__4_forward_input.0", taken["exp_avg_sq"] * beta2)
    _check(records, npy_dir, "Tensor_addcdiv__4_forward_input.0", decayed)  # param.addcdiv_(exp_avg, denom)
    _check(records, npy_dir, "Tensor_addcdiv__4_forward_input.1", _npy(npy_dir, "Tensor_lerp__4_forward_output"))
    _check(records, npy_dir, "Tensor_addcdiv__4_forward_output", parameters[0])
    # the in-place activations of the model: relu's input has the negatives it removes
    relu_input = _npy(npy_dir, "Functional_relu_0_forward_input.0")
    assert relu_input.min() < 0 and _npy(npy_dir, "Functional_relu_0_forward_output").min() == 0
    np.testing.assert_array_equal(relu_input, _npy(npy_dir, "Functional_dropout_0_forward_output"))
    dropout_input = _npy(npy_dir, "Functional_dropout_0_forward_input.0")
    np.testing.assert_array_equal(dropout_input, _npy(npy_dir, "Functional_linear_0_forward_output"))
    assert (dropout_input != 0).all() and (relu_input == 0).any()  # dropout's input is the one before it
    assert "Functional_relu_0_backward_output.0" in records  # backward capture through the in-place op


# -- PrecisionDebugger (dump.json + .pt) ---------------------------------------------------------------
def _leaf_statistics(leaf):
    return [leaf["Max"], leaf["Min"], leaf["Mean"], leaf["Norm"]]


@pytest.mark.parametrize("task", ["tensor", "statistics"])
def test_msprobe_inplace_inputs_are_pre_call(tmp_path, session, task):
    config = tmp_path / "config.json"  # the extension key extra_apis: Tensor.__setitem__ is not in the original's list
    config.write_text(json.dumps({"extra_apis": True}))
    debugger = PrecisionDebugger(config_path=str(config), dump_path=str(tmp_path / "dump"), task=task, level="L1")
    x = torch.tensor([1.0, -2.0, 3.0, 0.5])
    a, b, c = torch.tensor([1.0, 2.0]), torch.tensor([10.0, 20.0]), torch.tensor([-7.0, 7.0])
    debugger.start()
    x.add_(1)  # [2, -1, 4, 1.5]
    x[1] = -5.0  # [2, -5, 4, 1.5]
    F.relu(x, inplace=True)  # [2, 0, 4, 1.5]
    torch.add(a, b, out=c)  # c: [11, 22]
    debugger.stop()
    debugger.step()
    rank_dir = tmp_path / "dump" / "step0" / "rank"
    with open(rank_dir / "dump.json", encoding="utf-8") as handle:
        data = json.load(handle)["data"]
    inputs = [  # (entry, block, key, the value as it went in)
        ("Tensor.add_.0.forward", "input_args", 0, [1.0, -2.0, 3.0, 0.5]),
        ("Tensor.__setitem__.0.forward", "input_args", 0, [2.0, -1.0, 4.0, 1.5]),
        ("Functional.relu.0.forward", "input_args", 0, [2.0, -5.0, 4.0, 1.5]),
        ("Torch.add.0.forward", "input_kwargs", "out", [-7.0, 7.0]),
    ]
    for name, block, key, values in inputs:
        leaf = data[name][block][key]
        np.testing.assert_allclose(_leaf_statistics(leaf), _statistics(values), rtol=1e-6, err_msg=name)
        if task == "tensor":
            saved = torch.load(str(rank_dir / "dump_tensor_data" / leaf["data_name"]), weights_only=True)
            assert saved.tolist() == values, name
        else:
            assert "data_name" not in leaf
    outputs = [("Tensor.add_.0.forward", [2.0, -1.0, 4.0, 1.5]), ("Functional.relu.0.forward", [2.0, 0.0, 4.0, 1.5]),
               ("Torch.add.0.forward", [11.0, 22.0])]
    for name, values in outputs:  # after the call
        leaf = data[name]["output"][0]
        np.testing.assert_allclose(_leaf_statistics(leaf), _statistics(values), rtol=1e-6, err_msg=name)
        if task == "tensor":
            saved = torch.load(str(rank_dir / "dump_tensor_data" / leaf["data_name"]), weights_only=True)
            assert saved.tolist() == values, name


def test_msprobe_adamw_pre_call_state_and_bit_identical_training(tmp_path, session):
    debugger = PrecisionDebugger(dump_path=str(tmp_path / "dump"), task="tensor", level="L1")
    plain_losses, plain_parameters = _plain_adamw_run(session)
    taken = {}

    def before_step(step, net, optimizer):
        if step == 1:
            taken["exp_avg"] = optimizer.state[net.fc1.weight]["exp_avg"].clone()
            taken["weight"] = net.fc1.weight.detach().clone()

    def around_step(when, step):
        if when == "start":
            debugger.start()
        else:
            debugger.stop()
            debugger.step()

    losses, parameters = _adamw_run(before_step=before_step, around_step=around_step)
    assert losses == plain_losses
    assert all(torch.equal(got, want) for got, want in zip(parameters, plain_parameters))
    rank_dir = tmp_path / "dump" / "step1" / "rank"
    with open(rank_dir / "dump.json", encoding="utf-8") as handle:
        data = json.load(handle)["data"]
    tensors = rank_dir / "dump_tensor_data"
    load = lambda leaf: torch.load(str(tensors / leaf["data_name"]), weights_only=True)  # noqa: E731
    lerp = data["Tensor.lerp_.0.forward"]  # counters restart each step: fc1.weight's update
    assert torch.equal(load(lerp["input_args"][0]), taken["exp_avg"])
    np.testing.assert_allclose(_leaf_statistics(lerp["input_args"][0]), _statistics(taken["exp_avg"].numpy()),
                               rtol=1e-6, atol=1e-9)
    assert not torch.equal(load(lerp["output"][0]), taken["exp_avg"])
    assert torch.equal(load(data["Tensor.mul_.0.forward"]["input_args"][0]), taken["weight"])
