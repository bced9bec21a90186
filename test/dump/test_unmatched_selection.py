"""A selection whose names match no call is said when its window ends, naming the entries that never matched:
a legacy ``list``/``range``/``api_list`` window at ``set_dump_switch("OFF")``, a PrecisionDebugger ``scope`` /
``list`` at ``stop()``. The model is the tests' TinyNet: conv2d, relu, leaky_relu, flatten, linear."""

from __future__ import annotations

import json
import os

import pytest
import torch

from ptdbg_ascend import PrecisionDebugger, acc_cmp_dump, register_hook, set_dump_path, set_dump_switch


def _warnings(text):
    return [line.split("-[WARNING]", 1)[1] for line in text.splitlines() if "-[WARNING]" in line]


def _window(tmp_path, model, capsys, **switch):
    set_dump_path(str(tmp_path / "dump.pkl"))
    register_hook(model, acc_cmp_dump, rank=0)
    capsys.readouterr()
    set_dump_switch("ON", **switch)
    model(torch.ones(2, 3, 6, 6)).sum().backward()
    set_dump_switch("OFF")
    return _warnings(capsys.readouterr().out)


def _names(tmp_path, stem):
    with open(str(tmp_path / "ptdbg_dump_v1.0" / "rank0" / (stem + ".pkl")), encoding="utf-8") as handle:
        return [json.loads(line)[0] for line in handle]


def test_a_list_item_that_never_ran_is_named_at_off(tmp_path, dump_session, model, capsys):
    warnings = _window(tmp_path, model, capsys, mode="list",
                       scope=["Functional_conv2d_0_forward", "Torch_relu_9_forward", "Tensor_nope_0"])
    assert warnings == ["2 of the 3 scope items (mode 'list') matched no call in this dump window: "
                        "'Torch_relu_9_forward', 'Tensor_nope_0'. Names count each API's calls from 0 "
                        "(Torch_relu_0_forward is the first torch.relu); ptdbg parse shows the names a dump holds."]
    assert {name.rsplit("_", 1)[0] if name.endswith("stack_info") else name for name in _names(tmp_path, "list_dump")} \
        >= {"Functional_conv2d_0_forward_input.0", "Functional_conv2d_0_forward_output"}


def test_a_range_whose_end_never_ran_says_it_dumped_to_the_end(tmp_path, dump_session, model, capsys):
    warnings = _window(tmp_path, model, capsys, mode="range", scope=["Torch_relu_0_forward", "Torch_relu_7_forward"])
    assert warnings == ["The end of the range (mode 'range'), 'Torch_relu_7_forward', matched no call in this dump "
                        "window: every call from 'Torch_relu_0_forward' to the end of the window was dumped. "
                        "Names count each API's calls from 0 (Torch_relu_0_forward is the first torch.relu); "
                        "ptdbg parse shows the names a dump holds."]
    names = _names(tmp_path, "range_dump")
    assert "Functional_linear_0_forward_output" in names and "Functional_conv2d_0_backward_input.0" in names


def test_a_range_whose_start_never_ran_dumps_nothing_and_says_why(tmp_path, dump_session, model, capsys):
    warnings = _window(tmp_path, model, capsys, mode="range", scope=["Torch_relu_5_forward", "Torch_relu_6_forward"])
    assert warnings == ["The start of the range (mode 'range'), 'Torch_relu_5_forward', matched no call in this dump "
                        "window: nothing was dumped. Names count each API's calls from 0 (Torch_relu_0_forward is "
                        "the first torch.relu); ptdbg parse shows the names a dump holds."]
    assert not os.path.exists(str(tmp_path / "ptdbg_dump_v1.0"))


def test_an_api_list_item_that_never_ran_is_named(tmp_path, dump_session, model, capsys):
    warnings = _window(tmp_path, model, capsys, mode="api_list", api_list=["relu", "gelu", "Functional_conv3d"])
    assert warnings == ["2 of the 3 api_list items (mode 'api_list') matched no call in this dump window: 'gelu', "
                        "'functional_conv3d'."]


def test_a_window_that_matched_everything_says_nothing(tmp_path, dump_session, model, capsys):
    assert _window(tmp_path, model, capsys, mode="list", scope=["Torch_relu_0", "Functional_linear_0_forward"]) == []


def _debugger(tmp_path, section):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"task": "statistics", "dump_path": str(tmp_path / "dump"), "level": "L1",
                                  "statistics": section}))
    return PrecisionDebugger(config_path=str(config))


def _step(debugger, model, capsys):
    capsys.readouterr()
    debugger.start()
    model(torch.ones(2, 3, 6, 6)).sum().backward()
    debugger.stop()
    debugger.step()
    return _warnings(capsys.readouterr().out)


def test_msprobe_list_items_that_never_matched_are_named_at_stop(tmp_path, dump_session, model, capsys):
    debugger = _debugger(tmp_path, {"list": ["relu", "Functional.gelu", "conv3d"]})
    expected = ["2 of the 3 statistics.list items matched no call at step 0: 'Functional.gelu', 'conv3d' (an item "
                "selects the calls whose name holds it, e.g. 'relu' or 'Functional.relu.0.forward')."]
    assert _step(debugger, model, capsys) == expected
    # the same at the next step is not said again
    assert _step(debugger, model, capsys) == []
    with open(str(tmp_path / "dump" / "step0" / "rank" / "dump.json"), encoding="utf-8") as handle:
        assert sorted(json.load(handle)["data"]) == ["Functional.leaky_relu.0.backward", "Functional.leaky_relu.0.forward",
                                                     "Torch.relu.0.backward", "Torch.relu.0.forward"]


@pytest.mark.parametrize("scope, said", [
    (["Torch.relu.3.forward", "Functional.linear.0.forward"],
     "The start of statistics.scope, 'Torch.relu.3.forward', matched no call at step 0: nothing was dumped."),
    (["Torch.relu.0.forward", "Torch.relu.3.backward"],
     "The end of statistics.scope, 'Torch.relu.3.backward', matched no call at step 0: every call from its "
     "start to the end of the window was dumped."),
])
def test_msprobe_a_scope_end_that_never_ran_is_named_at_stop(tmp_path, dump_session, model, capsys, scope, said):
    debugger = _debugger(tmp_path, {"scope": scope})
    assert _step(debugger, model, capsys) == [said + " Names count each API's calls from 0 at every step "
                                                     "(Torch.relu.0.forward is the first torch.relu of a step)."]
