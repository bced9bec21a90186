"""ACL misuse: each gets a clear error at the call that can name the problem."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ptdbg_ascend import acc_cmp_dump, register_hook, set_backward_input, set_dump_switch
from ptdbg_ascend.errors import CallOrderError, DeviceUnavailableError, FileFormatError, ParameterError


def test_without_torch_npu_register_hook_fails_at_once(session, no_npu, dump_json):
    with pytest.raises(DeviceUnavailableError) as raised:
        register_hook(torch.nn.Identity(), acc_cmp_dump, dump_mode="acl", dump_config=dump_json)
    message = str(raised.value)
    assert message.startswith("dump_mode='acl' needs an Ascend NPU with torch_npu installed (import torch_npu failed).")
    assert "set_dump_switch('ON', mode='list', scope=[...]) dumps the API's inputs and outputs as npy" in message


def test_without_dump_config(session, fake_npu):
    fake_npu()
    with pytest.raises(ParameterError, match=r"^Invalid dump_config=None: is required with dump_mode='acl'"):
        register_hook(torch.nn.Identity(), acc_cmp_dump, dump_mode="acl")


@pytest.mark.parametrize("content, error", [("not json", "is not valid JSON"), ('{"dump": {}}', "are missing")])
def test_bad_dump_config(tmp_path, session, fake_npu, content, error):
    fake_npu()
    path = tmp_path / "dump.json"
    path.write_text(content)
    with pytest.raises(FileFormatError, match=error):
        register_hook(torch.nn.Identity(), acc_cmp_dump, dump_mode="acl", dump_config=str(path))


@pytest.fixture
def acl_registered(session, fake_npu, dump_json):
    npu = fake_npu()
    register_hook(torch.nn.Identity(), acc_cmp_dump, dump_mode="acl", dump_config=dump_json)
    return npu


@pytest.mark.parametrize("scope", [[], ["Tensor_permute_1_forward", "Tensor_permute_2_forward"], None])
def test_scope_needs_exactly_one_name(acl_registered, scope):
    with pytest.raises(ParameterError, match=r"mode 'acl' takes exactly one API name"):
        set_dump_switch("ON", mode="acl", scope=scope)


def test_scope_needs_the_direction(acl_registered):
    with pytest.raises(ParameterError, match=r"mode 'acl' needs the direction in the name. e.g. 'Tensor_permute_1_forward'"):
        set_dump_switch("ON", mode="acl", scope=["Tensor_permute_1"])


def test_acl_switch_before_register_hook(session, fake_npu):
    fake_npu()
    with pytest.raises(CallOrderError, match=r"needs register_hook\(model, acc_cmp_dump, dump_mode='acl'"):
        set_dump_switch("ON", mode="acl", scope=["Tensor_permute_1_forward"])


def _gradient(tmp_path, shape=(2, 3)):
    path = tmp_path / "Torch_exp_0_backward_input.0.npy"
    np.save(str(path), np.ones(shape, dtype=np.float32))
    return str(path)


def test_backward_input_before_the_switch(tmp_path, acl_registered):
    with pytest.raises(CallOrderError, match=r"^set_backward_input must come after .*set_dump_switch\('ON', mode='acl'"):
        set_backward_input([_gradient(tmp_path)])


def test_backward_input_with_a_forward_scope(tmp_path, acl_registered):
    set_dump_switch("ON", mode="acl", scope=["Torch_exp_0_forward"])
    with pytest.raises(CallOrderError):
        set_backward_input([_gradient(tmp_path)])


@pytest.mark.parametrize("make, error, fragment", [
    (lambda tmp_path: [str(tmp_path / "missing.npy")], FileFormatError, "does not exist"),
    (lambda tmp_path: [_gradient(tmp_path), _gradient(tmp_path)], ParameterError, "needs exactly one .npy file"),
    (lambda tmp_path: [], ParameterError, "needs exactly one .npy file"),
    (lambda tmp_path: _gradient(tmp_path), ParameterError, "must be a list of .npy paths"),
    (lambda tmp_path: [str(tmp_path / "x.txt")], ParameterError, "items must be paths of .npy files"),
])
def test_backward_input_files(tmp_path, acl_registered, make, error, fragment):
    set_dump_switch("ON", mode="acl", scope=["Torch_exp_0_backward"])
    with pytest.raises(error, match=fragment):
        set_backward_input(make(tmp_path))


def test_corrupt_backward_input(tmp_path, acl_registered):
    set_dump_switch("ON", mode="acl", scope=["Torch_exp_0_backward"])
    path = tmp_path / "bad.npy"
    path.write_bytes(b"\x93NUMPY garbage")
    with pytest.raises(FileFormatError, match=fr"^The backward input {path} is not a readable .npy file"):
        set_backward_input([str(path)])


def test_gradient_of_the_wrong_shape_is_named_when_the_call_runs(tmp_path, acl_registered):
    set_dump_switch("ON", mode="acl", scope=["Torch_exp_0_backward"])
    path = _gradient(tmp_path, shape=(5,))
    set_backward_input([path])
    with pytest.raises(ParameterError) as raised:
        torch.exp(torch.ones(2, 3, requires_grad=True))
    assert str(raised.value).startswith("Invalid backward_input={!r}: its shape [5] is not the shape [2, 3] of the output "
                                        "of Torch_exp_0_forward.".format(path))
    assert acl_registered.calls == []  # nothing was started on the device


def test_backward_scope_without_backward_input_is_named_when_the_call_runs(acl_registered):
    set_dump_switch("ON", mode="acl", scope=["Torch_exp_0_backward"])
    with pytest.raises(CallOrderError, match=r"^The ACL dump of Torch_exp_0_backward needs the gradient arriving at its output"):
        torch.exp(torch.ones(2, requires_grad=True))


def test_a_collective_cannot_be_rerun(acl_registered):
    with pytest.raises(ParameterError, match=r"collectives cannot be re-run under ACL dump"):
        set_dump_switch("ON", mode="acl", scope=["Distributed_all_reduce_0_forward"])
