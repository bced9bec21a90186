"""Every bad argument of the overflow functions gets a clear error naming it, at the call that received it."""

from __future__ import annotations

import pytest
import torch

from ptdbg_ascend import overflow_check, register_hook, set_overflow_check_switch
from ptdbg_ascend.errors import CallOrderError, DeviceUnavailableError, FileFormatError, ParameterError


@pytest.mark.parametrize("value", [0, -2, "3", 1.5, True])
def test_overflow_nums(session, no_npu, value):
    with pytest.raises(ParameterError) as raised:
        register_hook(torch.nn.Linear(2, 2), overflow_check, overflow_nums=value)
    assert str(raised.value) == ("Invalid overflow_nums={!r}: must be an int >= 1 (stop at that overflow) or -1 (never stop). "
                                 "Default: None, meaning 1.".format(value))
    assert not session.observers


def test_hook_must_be_one_of_the_two(session):
    with pytest.raises(ParameterError, match=r"Invalid hook=.*must be acc_cmp_dump or overflow_check"):
        register_hook(torch.nn.Linear(2, 2), print)


@pytest.mark.parametrize("mode, message", [
    ("APL", "Invalid dump_mode='APL': must be 'api' (default) or 'acl'."),
    ("model", "Invalid dump_mode='model': must be 'api' (default) or 'acl'. Overflow check does not support model dump mode."),
])
def test_dump_mode(session, no_npu, mode, message):
    with pytest.raises(ParameterError) as raised:
        register_hook(torch.nn.Linear(2, 2), overflow_check, dump_mode=mode)
    assert str(raised.value) == message


def test_model_must_be_a_module(session):
    with pytest.raises(ParameterError, match=r"Invalid model='function': must be a torch.nn.Module"):
        register_hook(lambda x: x, overflow_check)


def test_rank(session, no_npu):
    with pytest.raises(ParameterError, match=r"Invalid rank=-1"):
        register_hook(torch.nn.Linear(2, 2), overflow_check, rank=-1)


def test_dump_config_only_with_acl(session, no_npu, tmp_path):
    with pytest.raises(ParameterError, match=r"Invalid dump_config='./dump.json': is only used with dump_mode='acl'"):
        register_hook(torch.nn.Linear(2, 2), overflow_check, dump_config="./dump.json")


def test_acl_without_torch_npu_fails_at_register_hook(session, no_npu, tmp_path):
    with pytest.raises(DeviceUnavailableError) as raised:
        register_hook(torch.nn.Linear(2, 2), overflow_check, dump_mode="acl", dump_config=str(tmp_path / "dump.json"))
    message = str(raised.value)
    assert message.startswith("Overflow check with dump_mode='acl' needs an Ascend NPU with torch_npu installed")
    assert "register_hook(model, overflow_check) finds overflowing APIs" in message
    assert not session.observers


def test_acl_without_dump_config(session, fake_npu):
    fake_npu()
    with pytest.raises(ParameterError, match=r"^Invalid dump_config=None: is required with dump_mode='acl'"):
        register_hook(torch.nn.Linear(2, 2), overflow_check, dump_mode="acl")


def test_acl_with_a_missing_dump_config(session, fake_npu, tmp_path):
    fake_npu()
    missing = tmp_path / "nowhere" / "dump.json"
    with pytest.raises(FileFormatError, match=f"The ACL dump config {missing} does not exist"):
        register_hook(torch.nn.Linear(2, 2), overflow_check, dump_mode="acl", dump_config=str(missing))


@pytest.mark.parametrize("switch, filter_switch, parameter", [("on", "ON", "switch"), (True, "ON", "switch"),
                                                              ("ON", "off", "filter_switch")])
def test_switch_values(session, no_npu, switch, filter_switch, parameter):
    register_hook(torch.nn.Linear(2, 2), overflow_check)
    with pytest.raises(ParameterError, match=fr"^Invalid {parameter}=.*must be 'ON' or 'OFF'"):
        set_overflow_check_switch(switch, filter_switch)


def test_switch_before_register_hook(session):
    with pytest.raises(CallOrderError, match=r"needs register_hook\(model, overflow_check\) first"):
        set_overflow_check_switch("ON")
