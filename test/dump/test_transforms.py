"""Dumps under torch.func transforms (vmap, grad, jvp, functional_call, functionalize): training with the
tool gives bit-identical results to training without it, and the records hold the underlying values
(a vmap record: the batch, batch dims first)."""

from __future__ import annotations

import json
import math
import os

import numpy as np
import pytest
import torch

from ptdbg_ascend import PrecisionDebugger, acc_cmp_dump, register_hook, set_dump_path, set_dump_switch

T, D, HEADS, VOCAB = 6, 8, 2, 11


def causal_mask(length):
    """An additive causal mask built the way transformers builds GPT-2's: a per-(query, key) predicate
    vmapped over the key positions, inside a vmap over the query positions (one row per query)."""
    positions = torch.arange(length)

    def row(q):
        allowed = torch.vmap(lambda kv: kv <= q)(positions)  # nested vmap: a 0-d bool per (q, kv)
        return torch.where(allowed, torch.zeros(length), torch.full((length,), -1e9))

    return torch.vmap(row)(positions)


class GPT2Block(torch.nn.Module):
    """Embedding -> pre-LN causal self-attention -> pre-LN MLP -> LM head (a GPT-2 block, small)."""

    def __init__(self) -> None:
        super().__init__()
        self.wte = torch.nn.Embedding(VOCAB, D)
        self.wpe = torch.nn.Embedding(T, D)
        self.ln_1 = torch.nn.LayerNorm(D)
        self.c_attn = torch.nn.Linear(D, 3 * D)
        self.c_proj = torch.nn.Linear(D, D)
        self.ln_2 = torch.nn.LayerNorm(D)
        self.mlp_fc = torch.nn.Linear(D, 4 * D)
        self.mlp_proj = torch.nn.Linear(4 * D, D)
        self.head = torch.nn.Linear(D, VOCAB, bias=False)

    def forward(self, ids):
        batch, length = ids.shape
        x = self.wte(ids) + self.wpe(torch.arange(length))
        q, k, v = self.c_attn(self.ln_1(x)).split(D, dim=2)
        q, k, v = (t.view(batch, length, HEADS, D // HEADS).transpose(1, 2) for t in (q, k, v))
        scores = q @ k.transpose(-1, -2) / math.sqrt(D // HEADS) + causal_mask(length)
        attention = torch.softmax(scores, dim=-1) @ v
        x = x + self.c_proj(attention.transpose(1, 2).reshape(batch, length, D))
        x = x + self.mlp_proj(torch.nn.functional.gelu(self.mlp_fc(self.ln_2(x))))
        return self.head(x)


def new_gpt2():
    torch.manual_seed(0)
    return GPT2Block()


def train_gpt2(model, steps=2):
    """The losses of ``steps`` SGD steps of ``model`` (as tensors, compared bit for bit)."""
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    generator = torch.Generator().manual_seed(1)
    losses = []
    for _ in range(steps):
        ids = torch.randint(0, VOCAB, (2, T), generator=generator)
        logits = model(ids)
        loss = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, VOCAB), ids[:, 1:].reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.detach().clone())
    return losses


SWITCHES = [
    dict(mode="all"),
    dict(mode="all", filter_switch="OFF"),
    dict(mode="api_stack"),
    dict(mode="api_stack", filter_switch="OFF", dump_mode=["forward"]),
    dict(mode="list", scope=["Torch_where_0_forward", "Functional_linear_1"]),
    dict(mode="range", scope=["Torch_arange_0_forward", "Functional_linear_2_forward"]),
    dict(mode="stack", scope=["Torch_where_0_forward"]),
    dict(mode="api_list", api_list=["where", "softmax"], filter_switch="OFF"),
    dict(mode="all", summary_only=True),
]


@pytest.fixture
def read_dump():
    def read(rank_dir):
        with open(os.path.join(rank_dir, "dump.json"), encoding="utf-8") as handle:
            return json.load(handle), None, None

    return read


def _pkl_of(rank_dir):
    return [name for name in os.listdir(rank_dir) if name.endswith(".pkl")][0]


def test_gpt2_block_with_vmap_mask_dumps_in_every_legacy_mode(tmp_path, dump_session, pkl_records, check_npy):
    reference = train_gpt2(new_gpt2())
    for number, switch in enumerate(SWITCHES):
        _dump_gpt2(tmp_path / str(number), dump_session, pkl_records, check_npy, reference, switch)


def _dump_gpt2(tmp_path, dump_session, pkl_records, check_npy, reference, switch):
    dump_session.reset_counters()
    set_dump_path(str(tmp_path / "gpt2.pkl"), dump_tag="gpt2")
    model = new_gpt2()
    register_hook(model, acc_cmp_dump)
    set_dump_switch("ON", **switch)
    losses = train_gpt2(model)
    set_dump_switch("OFF")
    for dumped, plain in zip(losses, reference):
        assert torch.equal(dumped, plain), (switch, dumped.item(), plain.item())
    rank_dir = tmp_path / "gpt2_v1.0" / "rank0"
    pkl = _pkl_of(rank_dir)
    records = [record for record in pkl_records(rank_dir / pkl) if not record[0].endswith("_stack_info")]
    npy_dir = rank_dir / pkl[: -len(".pkl")]
    if os.path.isdir(npy_dir):
        for record in records:
            check_npy(record, str(npy_dir))
    by_name = {record[0]: record for record in records}
    where = by_name.get("Torch_where_0_forward_output")
    if switch["mode"] != "stack":
        assert where is not None, switch
    if where is not None:  # the call under vmap: the whole batch of rows
        assert where[3:5] == ["torch.float32", [T, T]], switch
        if os.path.isdir(npy_dir):
            expected = np.where(np.tril(np.ones((T, T))) > 0, 0.0, -1e9).astype(np.float32)
            np.testing.assert_array_equal(np.load(str(npy_dir / "Torch_where_0_forward_output.npy")), expected)
    if switch.get("filter_switch") == "OFF":
        # the condition, from the nested vmap: (query, key) batch dims, outer vmap first
        assert by_name["Torch_where_0_forward_input.0"][3:5] == ["torch.bool", [T, T]], switch


def test_gpt2_block_with_vmap_mask_under_precision_debugger(tmp_path, dump_session, read_dump):
    reference = train_gpt2(new_gpt2())
    dump_session.reset_counters()
    model = new_gpt2()
    debugger = PrecisionDebugger(task="tensor", level="L1", dump_path=str(tmp_path / "dump"))
    debugger.start()
    losses = train_gpt2(model, steps=1)
    debugger.stop()
    debugger.step()
    assert torch.equal(losses[0], reference[0])
    rank_dir = str(tmp_path / "dump" / "step0" / "rank")
    dump, _, _ = read_dump(rank_dir)
    where = dump["data"]["Torch.where.0.forward"]
    leaf = where["output"][0]
    assert leaf["shape"] == [T, T] and leaf["tensor_kind"] == "vmap" and leaf["dtype"] == "torch.float32"
    assert leaf["Max"] == 0.0 and leaf["Min"] == -1e9
    saved = torch.load(os.path.join(rank_dir, "dump_tensor_data", leaf["data_name"]), weights_only=True)
    assert saved.shape == (T, T) and torch.equal(saved, causal_mask(T))


class MLP(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(5, 7)
        self.fc2 = torch.nn.Linear(7, 3)

    def forward(self, x):
        return self.fc2(torch.tanh(self.fc1(x)))


def per_sample_gradients():
    """Per-sample gradients of a small MLP: vmap(grad(loss)) over a batch, with functional_call."""
    torch.manual_seed(0)
    model = MLP()
    params = {name: value.detach() for name, value in model.named_parameters()}
    x = torch.randn(4, 5, generator=torch.Generator().manual_seed(2))
    y = torch.tensor([0, 2, 1, 2])

    def loss_fn(parameters, sample, target):
        logits = torch.func.functional_call(model, parameters, (sample.unsqueeze(0),))
        return torch.nn.functional.cross_entropy(logits, target.unsqueeze(0))

    grads = torch.func.vmap(torch.func.grad(loss_fn), in_dims=(None, 0, 0))(params, x, y)
    return x, grads


@pytest.mark.parametrize("switch", [dict(mode="all"), dict(mode="api_stack", filter_switch="OFF"),
                                    dict(mode="all", summary_only=True)], ids=["all", "api_stack-filter-off", "summary"])
def test_per_sample_gradients_vmap_grad_functional_call(tmp_path, dump_session, pkl_records, check_npy, switch):
    _, reference = per_sample_gradients()
    dump_session.reset_counters()
    set_dump_path(str(tmp_path / "mlp.pkl"), dump_tag="mlp")
    register_hook(MLP(), acc_cmp_dump)
    set_dump_switch("ON", **switch)
    x, grads = per_sample_gradients()
    set_dump_switch("OFF")
    assert set(grads) == set(reference)
    for name in grads:
        assert grads[name].shape[0] == 4 and torch.equal(grads[name], reference[name]), name
    rank_dir = tmp_path / "mlp_v1.0" / "rank0"
    pkl = _pkl_of(rank_dir)
    records = [record for record in pkl_records(rank_dir / pkl) if not record[0].endswith("_stack_info")]
    by_name = {record[0]: record for record in records}
    # the first linear inside vmap(grad): its input is the whole batch (batch dim first)
    linear_input = by_name["Functional_linear_0_forward_input.0"]
    assert linear_input[3:5] == ["torch.float32", [4, 1, 5]]
    np.testing.assert_allclose(linear_input[5][0], float(x.max()), rtol=1e-6)
    npy_dir = rank_dir / pkl[: -len(".pkl")]
    if not switch.get("summary_only"):
        for record in records:
            check_npy(record, str(npy_dir))
        np.testing.assert_array_equal(np.load(str(npy_dir / "Functional_linear_0_forward_input.0.npy")),
                                      x.unsqueeze(1).numpy())


def test_per_sample_gradients_under_precision_debugger(tmp_path, dump_session, read_dump):
    _, reference = per_sample_gradients()
    for task in ("tensor", "statistics"):
        dump_session.reset_counters()
        debugger = PrecisionDebugger(task=task, level="L1", dump_path=str(tmp_path / task))
        debugger.start()
        _, grads = per_sample_gradients()
        debugger.stop()
        debugger.step()
        for name in grads:
            assert torch.equal(grads[name], reference[name]), name
        dump, _, _ = read_dump(str(tmp_path / task / "step0" / "rank"))
        leaf = dump["data"]["Functional.linear.0.forward"]["input_args"][0]
        assert leaf["shape"] == [4, 1, 5] and leaf["tensor_kind"] == "vmap"


def test_jvp_and_functionalize_do_not_break_and_match(tmp_path, dump_session, pkl_records):
    def f(x):
        y = x.sin() * 2.0
        y.add_(1.0)
        return y.exp()

    x, tangent = torch.linspace(-1, 1, 5), torch.ones(5)
    expected = torch.func.jvp(f, (x,), (tangent,))
    expected_functional = torch.func.functionalize(f)(x)
    set_dump_path(str(tmp_path / "jvp.pkl"), dump_tag="jvp")
    register_hook(MLP(), acc_cmp_dump)
    set_dump_switch("ON", mode="all", filter_switch="OFF")
    primal, derivative = torch.func.jvp(f, (x,), (tangent,))
    functional = torch.func.functionalize(f)(x)
    set_dump_switch("OFF")
    assert torch.equal(primal, expected[0]) and torch.equal(derivative, expected[1])
    assert torch.equal(functional, expected_functional)
    rank_dir = tmp_path / "jvp_v1.0" / "rank0"
    records = pkl_records(rank_dir / "jvp.pkl")
    by_name = {}
    for record in records:
        by_name.setdefault(record[0], record)
    # the in-place add_ under functionalize: its recorded input is the synced value (not garbage memory)
    sin_times_two = (x.sin() * 2.0).numpy()
    functional_add = [record for record in records if record[0].startswith("Tensor_add__") and
                      record[0].endswith("_forward_input.0")][-1]
    np.testing.assert_allclose(functional_add[5][:2], [sin_times_two.max(), sin_times_two.min()], rtol=1e-6)
    array = np.load(str(rank_dir / "jvp" / (functional_add[0] + ".npy")))
    np.testing.assert_allclose(array, sin_times_two, rtol=1e-6)


def test_overflow_check_under_vmap_sees_the_batch(tmp_path, dump_session, pkl_records):
    from ptdbg_ascend import overflow_check

    def per_sample(row):
        return torch.exp(row * 100.0).sum()  # overflows for the second sample only

    x = torch.tensor([[0.0, 0.1], [1.0, 2.0]])
    expected = torch.vmap(per_sample)(x)
    set_dump_path(str(tmp_path / "overflow.pkl"))
    register_hook(MLP(), overflow_check, overflow_nums=-1)
    result = torch.vmap(per_sample)(x)
    assert torch.equal(result, expected)
    rank_dir = tmp_path / "ptdbg_dump_v1.0" / "rank0"
    pkls = sorted(name for name in os.listdir(rank_dir) if name.endswith(".pkl"))
    assert pkls, "the overflowing call under vmap was not detected"
    records = [record for name in pkls for record in pkl_records(rank_dir / name)
               if record[0].startswith("Torch_exp_") and record[0].endswith("_forward_output")]
    assert records and records[0][4] == [2, 2] and records[0][5][0] == float("inf")
