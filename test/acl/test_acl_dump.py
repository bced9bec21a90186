"""ACL dumps with the recording fake torch_npu: the exact call sequence, the config passed, the API
really re-executed inside the dump window, and the files a preceding dump wrote as backward input."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

from ptdbg_ascend import (acc_cmp_dump, overflow_check, register_hook, set_backward_input, set_dump_path,
                          set_dump_switch)

DUMP_WINDOW = [("npu.init_dump",), ("npu.set_dump", "CONFIG"), ("npu.synchronize",), ("npu.synchronize",),
               ("npu.finalize_dump",)]


def _window(config):
    """The sequence of one ACL dump, with the absolute config path ``set_dump`` must receive."""
    return [call if call[0] != "npu.set_dump" else ("npu.set_dump", os.path.abspath(config)) for call in DUMP_WINDOW]


class ConvNet(torch.nn.Module):
    """conv -> relu -> mean; step s calls ``Functional_conv2d_{s}``."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(2, 3, 3)

    def forward(self, x):
        return torch.relu(self.conv(x)).mean()


def _steps(net, steps=2):
    """Forward + backward per step (no update: both runs of a test see the same weights); the conv
    weight gradient of each step."""
    grads = []
    for step in range(steps):
        x = torch.randn(2, 2, 5, 5, generator=torch.Generator().manual_seed(step))
        net.zero_grad()
        net(x).backward()
        grads.append(net.conv.weight.grad.clone())
    return grads


def test_forward_api_is_rerun_once_under_acl_dump(session, fake_npu, dump_json, capsys):
    npu = fake_npu()
    register_hook(torch.nn.Identity(), acc_cmp_dump, dump_mode="acl", dump_config=dump_json)
    set_dump_switch("ON", mode="acl", scope=["Tensor_permute_1_forward"])
    x = torch.randn(2, 3, 4)
    x.permute(2, 0, 1)
    second = x.permute(1, 0, 2)  # Tensor_permute_1: the selected call
    x.permute(0, 2, 1)
    assert npu.calls == _window(dump_json)
    assert npu.dumped_ops.count("permute") == 1  # re-executed inside the window, once
    assert second.shape == (3, 2, 4)
    assert "Dump Tensor_permute_1_forward op file." in capsys.readouterr().out
    assert "Tensor_permute_2" not in str(npu.calls)


def test_nested_api_is_not_dumped_twice(session, fake_npu, dump_json):
    npu = fake_npu()
    register_hook(torch.nn.Identity(), acc_cmp_dump, dump_mode="acl", dump_config=dump_json)
    set_dump_switch("ON", mode="acl", scope=["Functional_batch_norm_0_forward"])
    x = torch.randn(4, 3)
    torch.nn.functional.batch_norm(x, torch.zeros(3), torch.ones(3), training=False)  # calls torch.batch_norm inside
    assert npu.calls == _window(dump_json)  # one init_dump: the inner torch.batch_norm did not start another
    assert "batch_norm" in npu.dumped_ops
    assert "Torch_batch_norm" not in session.counters  # the inner call is neither counted nor dumped


def test_backward_api_uses_the_gradient_of_a_previous_dump(tmp_path, session, fake_npu, dump_json, capsys):
    torch.manual_seed(0)
    net = ConvNet()
    # run 1: an ordinary dump of the backward of Functional_conv2d_1 gives the incoming gradient
    set_dump_path(str(tmp_path / "dump_path" / "npu_dump.pkl"))
    register_hook(net, acc_cmp_dump)
    set_dump_switch("ON", mode="list", scope=["Functional_conv2d_1_backward"])
    first_run = _steps(net)
    set_dump_switch("OFF")
    npy = str(tmp_path / "dump_path" / "ptdbg_dump_v1.0" / "rank0" / "list_npu_dump" / "Functional_conv2d_1_backward_input.0.npy")
    assert np.load(npy, allow_pickle=False).shape == (2, 3, 3, 3)
    # run 2 (same script, counters from 0): the ACL dump of that backward
    session.reset_counters()
    npu = fake_npu()
    register_hook(net, acc_cmp_dump, dump_mode="acl", dump_config=dump_json)
    set_dump_switch("ON", mode="acl", scope=["Functional_conv2d_1_backward"])
    set_backward_input([npy])
    second_run = _steps(net)
    assert npu.calls == _window(dump_json)
    assert "run_backward" in npu.dumped_ops and "conv2d" not in npu.dumped_ops  # only the backward inside the window
    # the re-run works on detached inputs: the model's own gradients are untouched
    for before, after in zip(first_run, second_run):
        torch.testing.assert_close(before, after, rtol=0, atol=0)
    assert "Dump Functional_conv2d_1_backward op file." in capsys.readouterr().out


def test_backward_of_sort_uses_its_first_output(tmp_path, session, fake_npu, dump_json):
    npu = fake_npu()
    gradient = tmp_path / "Torch_sort_0_backward_input.0.npy"
    np.save(str(gradient), np.ones((2, 3), dtype=np.float32))
    register_hook(torch.nn.Identity(), acc_cmp_dump, dump_mode="acl", dump_config=dump_json)
    set_dump_switch("ON", mode="acl", scope=["Torch_sort_0_backward"])
    set_backward_input([str(gradient)])
    torch.sort(torch.randn(2, 3, requires_grad=True), dim=1)
    assert npu.calls == _window(dump_json)
    assert "run_backward" in npu.dumped_ops


def test_backward_of_a_non_tensor_output_is_warned_not_dumped(tmp_path, session, fake_npu, dump_json, capsys):
    npu = fake_npu()
    gradient = tmp_path / "g.npy"
    np.save(str(gradient), np.ones(3, dtype=np.float32))
    register_hook(torch.nn.Identity(), acc_cmp_dump, dump_mode="acl", dump_config=dump_json)
    set_dump_switch("ON", mode="acl", scope=["Torch_max_0_backward"])
    set_backward_input([str(gradient)])
    torch.max(torch.randn(2, 3, requires_grad=True), dim=0)  # (values, indices)
    assert npu.calls == []
    assert ("[WARNING]The output of Torch_max_0_backward is not of tensor type and cannot be automatically derived. "
            "you can manually construct a single API backward case for ACL dump.") in capsys.readouterr().out


def test_overflow_with_acl_reruns_the_overflowing_forward(tmp_path, session, fake_npu, dump_json, capsys):
    npu = fake_npu(support_inf_nan=True)
    set_dump_path(str(tmp_path / "dump_path"))
    register_hook(torch.nn.Identity(), overflow_check, overflow_nums=3, dump_mode="acl", dump_config=dump_json)
    del npu.calls[:]
    x = torch.full((3,), 100.0, requires_grad=True)
    y = torch.exp(x)  # overflow 1: a forward, re-run under ACL dump
    assert npu.calls == _window(dump_json)
    assert npu.dumped_ops.count("exp") == 1
    loss = y.sum()  # overflow 2: inf, re-run too
    assert npu.calls == _window(dump_json) * 2
    with pytest.raises(ValueError, match=r"^\[overflow 3 times\]: dump file is saved in '.*_3\.pkl'\.$"):
        loss.backward()  # overflow 3: the backward of exp (1 * inf), not re-run
    log = capsys.readouterr().out
    assert "Dump Torch_exp_0_forward op file." in log and "Dump Tensor_sum_0_forward op file." in log
    assert ("The overflow is caused by backward operator Torch_exp_0_backward. You can use reverse acl dump(mode='acl') "
            "to get operator dump data.") in log
    assert npu.calls == _window(dump_json) * 2
    rank_dir = tmp_path / "dump_path" / "ptdbg_dump_v1.0" / "rank0"  # set_dump_path is honoured for the pkl
    assert len([name for name in os.listdir(str(rank_dir)) if name.endswith(".pkl")]) == 3


def test_switch_off_disarms_the_dump(session, fake_npu, dump_json, capsys):
    npu = fake_npu()
    register_hook(torch.nn.Identity(), acc_cmp_dump, dump_mode="acl", dump_config=dump_json)
    set_dump_switch("ON", mode="acl", scope=["Tensor_permute_0_forward"])
    assert f"Dump data will be saved according to dump config {os.path.abspath(dump_json)}. " in capsys.readouterr().out
    set_dump_switch("OFF", mode="acl", scope=["Tensor_permute_0_forward"])
    torch.randn(2, 3).permute(1, 0)
    assert npu.calls == []


def test_overflow_with_acl_in_float_status_mode(tmp_path, session, fake_npu, dump_json):
    npu = fake_npu(support_inf_nan=False)
    set_dump_path(str(tmp_path))
    register_hook(torch.nn.Identity(), overflow_check, overflow_nums=-1, dump_mode="acl", dump_config=dump_json)
    del npu.calls[:]
    npu.float_status[0] = True  # the device reports an overflow during the next call
    torch.sigmoid(torch.ones(2))
    assert npu.calls == ([("_C._check_overflow_npu",), ("_C._clear_overflow_npu",)] + _window(dump_json)
                         + [("_C._clear_overflow_npu",)])  # the re-run's own status is cleared too
    assert npu.dumped_ops.count("sigmoid") == 1


def test_rerun_changes_no_training_state(session, fake_npu, dump_json):
    npu = fake_npu()
    register_hook(torch.nn.Identity(), acc_cmp_dump, dump_mode="acl", dump_config=dump_json)
    set_dump_switch("ON", mode="acl", scope=["Functional_batch_norm_0_forward"])
    x = torch.randn(4, 3, generator=torch.Generator().manual_seed(0))
    running_mean, running_var = torch.zeros(3), torch.ones(3)
    torch.nn.functional.batch_norm(x, running_mean, running_var, training=True, momentum=0.5)
    assert npu.calls == _window(dump_json)
    # updated once by the real call, not a second time by the re-run
    torch.testing.assert_close(running_mean, 0.5 * x.mean(0))
    set_dump_switch("ON", mode="acl", scope=["Tensor_add__0_forward"])
    y = torch.ones(3)
    y.add_(1.0)
    assert y.tolist() == [2.0, 2.0, 2.0]  # the in-place re-run worked on a copy
    assert npu.dumped_ops.count("add_") == 1


def test_backward_of_an_in_place_api(tmp_path, session, fake_npu, dump_json):
    npu = fake_npu()
    gradient = tmp_path / "Tensor_mul__0_backward_input.0.npy"
    np.save(str(gradient), np.full((3,), 2.0, dtype=np.float32))
    register_hook(torch.nn.Identity(), acc_cmp_dump, dump_mode="acl", dump_config=dump_json)
    set_dump_switch("ON", mode="acl", scope=["Tensor_mul__0_backward"])
    set_backward_input([str(gradient)])
    weight = torch.ones(3, requires_grad=True)
    hidden = weight * 1.0
    hidden.mul_(3.0)
    assert npu.calls == _window(dump_json)
    assert hidden.tolist() == [3.0, 3.0, 3.0] and weight.grad is None


def test_overflow_with_acl_and_no_dump_path_writes_under_the_acl_dump_path(tmp_path, session, fake_npu, dump_json):
    fake_npu()
    register_hook(torch.nn.Identity(), overflow_check, dump_mode="acl", dump_config=dump_json)
    with pytest.raises(ValueError) as raised:
        torch.exp(torch.full((2,), 100.0))
    pkl = str(raised.value).split("'")[1]
    assert os.path.dirname(pkl) == str(tmp_path / "acl_out" / "ptdbg_dump_v1.0" / "rank0")
