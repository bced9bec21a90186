"""The selection protocol of the one recorder: the legacy window's whole-name matching and the msprobe
scope/list matching answer the same questions (forward event, backward armed, backward event, reset)."""

from __future__ import annotations

import json

from ptdbg_ascend.config import load_config
from ptdbg_ascend.dump.observers import ApiCall
from ptdbg_ascend.dump.selection import LegacySelection, SelectionPolicy, make_switch_config
from ptdbg_ascend.msprobe.selection import MsprobeSelection


def _call(prefix, api, index):
    return ApiCall(prefix, api, index, None)


def _legacy(mode, scope=None, api_list=None, dump_mode=None):
    return LegacySelection(make_switch_config(mode, scope, api_list, "ON", dump_mode, False))


def test_legacy_range_is_walked_in_time_order_and_reset_restarts_it():
    selection = _legacy("range", scope=["Torch_add_1_forward", "Torch_add_1_backward"])
    assert isinstance(selection, SelectionPolicy)
    add0, add1, mul0 = _call("Torch", "add", 0), _call("Torch", "add", 1), _call("Torch", "mul", 0)
    assert selection.forward_event(add0) is False
    assert selection.forward_event(add1) is True  # the start
    assert selection.backward_armed(mul0) is True  # inside a range: only the event can tell
    assert selection.forward_event(mul0) is True
    assert selection.backward_event(mul0) is True  # mul's backward comes first (reverse order)
    assert selection.backward_event(add1) is True  # the end, included
    assert selection.forward_event(_call("Torch", "add", 2)) is False  # closed for good
    selection.reset()
    assert selection.forward_event(add0) is False and selection.forward_event(add1) is True


def test_legacy_list_is_whole_name_and_decided_when_armed():
    selection = _legacy("list", scope=["Tensor_add_1"], dump_mode=["backward"])
    assert (selection.forward, selection.backward) == (False, True)
    assert selection.forward_event(_call("Tensor", "add", 1)) is True
    assert selection.forward_event(_call("Tensor", "add", 10)) is False  # not a prefix match
    assert selection.backward_armed(_call("Tensor", "add", 1)) is True
    assert selection.backward_armed(_call("Tensor", "add", 10)) is False
    assert selection.backward_event(_call("Tensor", "add", 1)) is True


def test_msprobe_list_is_substring_and_scope_is_a_time_range(tmp_path):
    config_path = tmp_path / "config.json"
    config_path.write_text(json.dumps({"task": "statistics", "dump_path": str(tmp_path), "level": "L1",
                                       "statistics": {"list": ["relu"], "data_mode": ["forward"]}}))
    listed = MsprobeSelection(load_config(str(config_path)))
    assert (listed.forward, listed.backward) == (True, False)
    assert listed.forward_event(_call("Functional", "leaky_relu", 0)) is True  # substring, as msprobe 1.0.4
    assert listed.forward_event(_call("Functional", "gelu", 0)) is False
    config_path.write_text(json.dumps({"task": "statistics", "dump_path": str(tmp_path), "level": "L1",
                                       "statistics": {"scope": ["Torch.mul.0.forward", "Torch.mul.0.backward"]}}))
    scoped = MsprobeSelection(load_config(str(config_path)))
    mul0, add0 = _call("Torch", "mul", 0), _call("Torch", "add", 0)
    assert scoped.forward_event(add0) is False
    assert scoped.forward_event(mul0) is True
    assert scoped.backward_armed(add0) is True  # a scope: decided when the gradients arrive
    assert scoped.forward_event(add0) is True
    assert scoped.backward_event(mul0) is True  # the end, included
    assert scoped.backward_event(add0) is False  # after the end
    scoped.reset()  # a new step
    assert scoped.forward_event(add0) is False and scoped.forward_event(mul0) is True
