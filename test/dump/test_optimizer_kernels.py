"""The optimizer's foreach and fused kernels (torch._foreach_*, torch._fused_adamw_) are recorded by default,
each list element on its own, with the lists they write as their outputs (dump/wrapped_apis_optimizer.txt)."""

from __future__ import annotations

import glob
import json
import os

import numpy as np
import pytest
import torch

from ptdbg_ascend import acc_cmp_dump, register_hook, set_dump_path, set_dump_switch
from ptdbg_ascend.dump.capture import written_arguments
from ptdbg_ascend.formats.naming import parse_record_name


class _Block(torch.nn.Module):
    """linear -> layer_norm -> linear, biases zero at start as GPT-like models initialise them."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(6, 8)
        self.norm = torch.nn.LayerNorm(8)
        self.fc2 = torch.nn.Linear(8, 3)
        for linear in (self.fc1, self.fc2):
            torch.nn.init.zeros_(linear.bias)

    def forward(self, x):
        return self.fc2(torch.relu(self.norm(self.fc1(x))))


def _train(steps, **optimizer_options):
    """AdamW steps of a fresh _Block; the parameters after each step and the optimizer."""
    torch.manual_seed(0)
    net = _Block()
    optimizer = torch.optim.AdamW(net.parameters(), lr=1e-3, **optimizer_options)
    generator = torch.Generator().manual_seed(3)
    after = []
    for _ in range(steps):
        loss = torch.nn.functional.cross_entropy(net(torch.randn(4, 6, generator=generator)),
                                                 torch.tensor([0, 2, 1, 2]))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        after.append([parameter.detach().clone() for parameter in net.parameters()])
    return after, optimizer, list(net.parameters())


def _dump(tmp_path, work):
    set_dump_path(str(tmp_path / "dump" / "npu.pkl"), dump_tag="optim")
    register_hook(torch.nn.Module(), acc_cmp_dump)
    set_dump_switch("ON", mode="api_stack")
    try:
        result = work()
    finally:
        set_dump_switch("OFF")
    (rank_dir,) = glob.glob(str(tmp_path / "dump" / "optim_v*" / "rank0"))
    with open(os.path.join(rank_dir, "api_stack_npu.pkl"), encoding="utf-8") as handle:
        records = {record[0]: record for record in (json.loads(line) for line in handle)}
    return records, os.path.join(rank_dir, "api_stack_npu"), result


def _npy(npy_dir, name):
    return np.load(os.path.join(npy_dir, name + ".npy"), allow_pickle=False)


def test_foreach_adamw_records_each_list_element_and_the_updated_list(tmp_path, dump_session):
    dump_session.unwrap()  # the plain run: without the tool's wrappers, counting nothing
    try:
        plain, _, _ = _train(2, foreach=True)
    finally:
        dump_session.ensure_wrapped()
        dump_session.reset_counters()
    records, npy_dir, (after, _, _) = _dump(tmp_path, lambda: _train(2, foreach=True))
    assert all(torch.equal(got, want) for got, want in zip(after[-1], plain[-1]))  # training unchanged
    # params.addcdiv_(exp_avgs, denominators): the 4th parameter (norm.bias) of step 1, before and after
    parsed = parse_record_name("Torch__foreach_addcdiv__0_forward_input.0.3")
    assert (parsed.prefix, parsed.api, parsed.index, parsed.path) == ("Torch", "_foreach_addcdiv_", 0, (0, 3))
    for index, parameter in enumerate(after[0]):
        np.testing.assert_array_equal(_npy(npy_dir, f"Torch__foreach_addcdiv__0_forward_output.{index}"),
                                      parameter.numpy())
        np.testing.assert_array_equal(_npy(npy_dir, f"Torch__foreach_addcdiv__1_forward_output.{index}"),
                                      after[1][index].numpy())
    assert not np.array_equal(_npy(npy_dir, "Torch__foreach_addcdiv__0_forward_input.0.3"),
                              _npy(npy_dir, "Torch__foreach_addcdiv__0_forward_output.3"))
    assert "Torch__foreach_lerp__0_forward_input.1.0" in records  # exp_avgs.lerp_(grads, 1 - beta1): the grads
    assert "Torch__foreach_addcdiv__0_forward_stack_info" in records


@pytest.mark.skipif(not hasattr(torch, "_fused_adamw_"), reason="this torch has no fused AdamW")
def test_fused_adamw_records_the_step_with_its_written_states_as_outputs(tmp_path, dump_session):
    records, npy_dir, (after, optimizer, parameters) = _dump(tmp_path, lambda: _train(1, fused=True))
    # The fused kernel does not bump version counters: the outputs must be the values after the step,
    # not the statistics of the same tensors taken as inputs.
    for index, parameter in enumerate(parameters):
        name = f"Torch__fused_adamw__0_forward_output.0.{index}"
        np.testing.assert_array_equal(_npy(npy_dir, name), after[0][index].numpy())
        assert records[name][5][0] == pytest.approx(float(after[0][index].double().max()), rel=1e-6)
        state = optimizer.state[parameter]
        np.testing.assert_array_equal(_npy(npy_dir, f"Torch__fused_adamw__0_forward_output.2.{index}"),
                                      state["exp_avg"].numpy())
        np.testing.assert_array_equal(_npy(npy_dir, f"Torch__fused_adamw__0_forward_output.3.{index}"),
                                      state["exp_avg_sq"].numpy())
        assert f"Torch__fused_adamw__0_forward_input.1.{index}" in records  # the gradients, read only
        assert f"Torch__fused_adamw__0_forward_output.1.{index}" not in records
    assert not any(name.startswith("Tensor_addcdiv_") for name in records)  # one kernel, no single-tensor path


def test_written_arguments_of_foreach_and_fused_calls_only():
    params, grads, states = [torch.zeros(2)], [torch.ones(2)], [torch.ones(2)]
    assert written_arguments("_foreach_add_", (params, grads)) is params
    assert written_arguments("_fused_sgd_", (params, grads, states)) == [params, None, states]
    assert written_arguments("__setitem__", (params[0], 0, 1.0)) is None  # other in-place APIs: as before
