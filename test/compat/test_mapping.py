"""One test per legacy call/argument combination of the user guide: the expected msprobe 1.0.4 config
is written by hand from the reference table (msprobe_1_0_4.md §14, §2-3)."""

import inspect

import pytest

from ptdbg_ascend import legacy
from ptdbg_ascend.compat.mapping import backward_input_path, dotted_selector, map_calls
from ptdbg_ascend.call_log import LegacyCall

pytestmark = pytest.mark.torchfree

MODEL = "Net"


def call(function, *args, **kwargs):
    """The LegacyCall that ``legacy.<function>(*args, **kwargs)`` records (defaults filled in, hook by name)."""
    bound = inspect.signature(getattr(legacy, function)).bind(*args, **kwargs)
    bound.apply_defaults()
    arguments = dict(bound.arguments)
    if "hook" in arguments:
        arguments["hook"] = arguments["hook"].name
    return LegacyCall(function, arguments)


def base_config(**changes):
    config = {
        "task": "tensor", "dump_path": "./dump_path", "rank": [], "step": [], "level": "L1", "seed": 1234,
        "is_deterministic": False, "enable_dataloader": False, "acl_config": "",
    }
    config.update(changes)
    return config


TENSOR = {"scope": [], "list": [], "data_mode": ["all"], "backward_input": [], "file_format": "npy"}


def tensor_section(**changes):
    section = dict(TENSOR)
    section.update(changes)
    return section


def standard(*switch_calls, hook=legacy.acc_cmp_dump, **hook_kwargs):
    """The guide's standard opening: seed_all(rm_dropout=True), set_dump_path, register_hook, then the switches."""
    return [
        call("seed_all", rm_dropout=True),
        call("set_dump_path", "./dump_path/npu_dump.pkl"),
        call("register_hook", MODEL, hook, **hook_kwargs),
    ] + list(switch_calls)


def reasons(result):
    return [caveat.reason for caveat in result.caveats]


# --- seed_all --------------------------------------------------------------------------------------

def test_seed_all_defaults_give_seed_1234_not_deterministic():
    result = map_calls([call("seed_all", rm_dropout=True), call("register_hook", MODEL, legacy.acc_cmp_dump),
                        call("set_dump_switch", "ON", filter_switch="OFF")])
    assert result.config["seed"] == 1234
    assert result.config["is_deterministic"] is False
    assert result.caveats == ()


def test_seed_all_mode_true_gives_is_deterministic():
    result = map_calls([call("seed_all", seed=42, mode=True, rm_dropout=True)])
    assert result.config["seed"] == 42
    assert result.config["is_deterministic"] is True


def test_seed_zero_is_flagged_because_msprobe_turns_it_into_1234():
    result = map_calls([call("seed_all", seed=0, rm_dropout=True)])
    assert result.config["seed"] == 0
    assert any("seed of 0" in reason for reason in reasons(result))


def test_dropout_kept_by_legacy_is_flagged():
    result = map_calls([call("seed_all"), call("register_hook", MODEL, legacy.acc_cmp_dump)])
    assert any("dropout" in reason for reason in reasons(result))


def test_no_seed_all_is_flagged():
    result = map_calls([call("register_hook", MODEL, legacy.acc_cmp_dump)])
    assert result.config["seed"] == 1234
    assert [c.call for c in result.caveats if "never called seed_all" in c.reason] == ["seed_all"]


# --- set_dump_path ---------------------------------------------------------------------------------

def test_set_dump_path_pkl_file_gives_its_directory():
    result = map_calls([call("set_dump_path", "./dump_path/npu_dump.pkl")])
    assert result.config["dump_path"] == "./dump_path"
    assert not any("dump_tag" in c.call for c in result.caveats)


def test_set_dump_path_with_tag_drops_the_tag_with_a_caveat():
    result = map_calls([call("set_dump_path", "./dump_path/myDump.pkl", dump_tag="dump_conv2d")])
    assert result.config["dump_path"] == "./dump_path"
    assert [c.call for c in result.caveats if "dump tag" in c.reason] == ["set_dump_path(dump_tag='dump_conv2d')"]


def test_set_dump_path_directory_form_is_kept():
    result = map_calls([call("set_dump_path", "/data/run1")])
    assert result.config["dump_path"] == "/data/run1"


def test_set_dump_path_none_uses_msprobe_default_with_caveat():
    result = map_calls([call("set_dump_path")])
    assert result.config["dump_path"] == "./dump_path"
    assert any("ASCEND_WORK_PATH" in reason for reason in reasons(result))


def test_bare_pkl_name_maps_to_current_directory():
    assert map_calls([call("set_dump_path", "npu_dump.pkl")]).config["dump_path"] == "."


# --- register_hook ---------------------------------------------------------------------------------

def test_register_hook_acc_cmp_dump_is_tensor_task_level_l1():
    result = map_calls(standard(call("set_dump_switch", "ON", filter_switch="OFF"), call("set_dump_switch", "OFF")))
    assert result.config == dict(base_config(), tensor=TENSOR)
    assert result.caveats == ()


def test_register_hook_overflow_check_with_overflow_nums():
    result = map_calls(standard(hook=legacy.overflow_check, overflow_nums=3))
    assert result.config == dict(base_config(task="overflow_check"), overflow_check={
        "scope": [], "list": [], "data_mode": ["all"], "overflow_nums": 3, "check_mode": "all"})
    assert result.caveats == ()


def test_register_hook_overflow_check_default_nums_is_1_and_minus_1_is_kept():
    assert map_calls(standard(hook=legacy.overflow_check)).config["overflow_check"]["overflow_nums"] == 1
    assert map_calls(standard(hook=legacy.overflow_check, overflow_nums=-1)).config["overflow_check"]["overflow_nums"] == -1


def test_overflow_check_acl_has_no_equivalent():
    result = map_calls(standard(hook=legacy.overflow_check, dump_mode="acl", dump_config="./dump.json"))
    assert result.config["task"] == "overflow_check"
    assert result.config["level"] == "L1"
    assert result.config["acl_config"] == ""
    assert any("ACL-level overflow" in reason for reason in reasons(result))


def test_register_hook_rank_is_not_exported():
    result = map_calls(standard(rank=0))
    assert result.config["rank"] == []
    assert any(c.call == "register_hook(rank=0)" for c in result.caveats)


# --- set_dump_switch -------------------------------------------------------------------------------

def test_mode_list_gives_dotted_list():
    result = map_calls(standard(call("set_dump_switch", "ON", mode="list", filter_switch="OFF", scope=[
        "Tensor_permute_1_forward", "Tensor_transpose_2_forward", "Torch_relu_3_backward"])))
    assert result.config["tensor"] == tensor_section(
        list=["Tensor.permute.1.forward", "Tensor.transpose.2.forward", "Torch.relu.3.backward"])
    assert result.caveats == ()


def test_mode_list_item_without_direction_is_flagged():
    result = map_calls(standard(call("set_dump_switch", "ON", mode="list", scope=["Tensor_add_1"], filter_switch="OFF")))
    assert result.config["tensor"]["list"] == ["Tensor.add.1"]
    assert any("substring" in reason for reason in reasons(result))


def test_mode_range_gives_dotted_scope():
    result = map_calls(standard(call("set_dump_switch", "ON", mode="range", filter_switch="OFF",
                                     scope=["Tensor_abs_1_forward", "Tensor_transpose_3_forward"])))
    assert result.config["tensor"] == tensor_section(scope=["Tensor.abs.1.forward", "Tensor.transpose.3.forward"])
    assert result.caveats == ()


def test_mode_stack_becomes_statistics_over_the_range_with_caveat():
    result = map_calls(standard(call("set_dump_switch", "ON", mode="stack", filter_switch="OFF",
                                     scope=["Tensor_abs_1_forward", "Tensor_transpose_3_forward"])))
    assert result.config == dict(base_config(task="statistics"), statistics={
        "scope": ["Tensor.abs.1.forward", "Tensor.transpose.3.forward"], "list": [], "data_mode": ["all"],
        "summary_mode": "statistics"})
    assert [c.call for c in result.caveats] == ["set_dump_switch(mode='stack')"]


def test_mode_acl_forward_is_level_l2():
    result = map_calls(standard(
        call("set_dump_switch", "ON", mode="acl", scope=["Tensor_permute_1_forward"], filter_switch="OFF"),
        dump_mode="acl", dump_config="./dump.json"))
    assert result.config == dict(base_config(level="L2", acl_config="./dump.json"),
                                 tensor=tensor_section(scope=["Tensor.permute.1.forward"]))
    assert result.caveats == ()


def test_mode_acl_backward_with_set_backward_input():
    result = map_calls(standard(
        call("set_dump_switch", "ON", mode="acl", scope=["Functional_conv2d_1_backward"], filter_switch="OFF"),
        call("set_backward_input", ["acl_dump_xxx/Functional_conv2d_1_backward_input.0.npy"]),
        dump_mode="acl", dump_config="./dump.json"))
    assert result.config["level"] == "L2"
    assert result.config["tensor"] == tensor_section(
        scope=["Functional.conv2d.1.backward"],
        backward_input=["acl_dump_xxx/Functional.conv2d.1.backward.input.0.pt"])
    assert any("ptdbg convert" in reason for reason in reasons(result))


def test_mode_acl_without_acl_register_hook_is_flagged():
    result = map_calls(standard(call("set_dump_switch", "ON", mode="acl", scope=["Tensor_permute_1_forward"],
                                     filter_switch="OFF")))
    assert (result.config["level"], result.config["acl_config"]) == ("L2", "")
    assert [c.call for c in result.caveats] == ["register_hook(dump_mode='acl')"]


def test_mode_api_list_gives_list():
    result = map_calls(standard(call("set_dump_switch", "ON", mode="api_list", api_list=["relu"], filter_switch="OFF")))
    assert result.config["tensor"] == tensor_section(list=["relu"])
    assert result.caveats == ()


def test_mode_api_list_case_difference_is_flagged():
    result = map_calls(standard(call("set_dump_switch", "ON", mode="api_list", api_list=["distributed"], filter_switch="OFF")))
    assert result.config["tensor"]["list"] == ["distributed"]
    assert any("case-sensitive" in reason for reason in reasons(result))


def test_mode_api_stack_is_a_plain_l1_dump():
    result = map_calls(standard(call("set_dump_switch", "ON", mode="api_stack", filter_switch="OFF")))
    assert result.config == dict(base_config(), tensor=TENSOR)
    assert result.caveats == ()


def test_filter_switch_on_is_flagged():
    result = map_calls(standard(call("set_dump_switch", "ON")))
    assert result.config == dict(base_config(), tensor=TENSOR)
    assert [c.call for c in result.caveats] == ["set_dump_switch(filter_switch='ON')"]


def test_dump_mode_single_item_is_data_mode():
    result = map_calls(standard(call("set_dump_switch", "ON", dump_mode=["forward"], filter_switch="OFF")))
    assert result.config["tensor"]["data_mode"] == ["forward"]
    assert result.caveats == ()


def test_dump_mode_string_is_data_mode_list():
    result = map_calls(standard(call("set_dump_switch", "ON", dump_mode="backward", filter_switch="OFF")))
    assert result.config["tensor"]["data_mode"] == ["backward"]


def test_dump_mode_direction_and_side_is_flagged_and_semantics():
    result = map_calls(standard(call("set_dump_switch", "ON", dump_mode=["forward", "input"], filter_switch="OFF")))
    assert result.config["tensor"]["data_mode"] == ["forward", "input"]
    assert any("AND" in reason and "OR" in reason for reason in reasons(result))


def test_summary_only_is_statistics_task():
    result = map_calls(standard(call("set_dump_switch", "ON", summary_only=True, filter_switch="OFF")))
    assert result.config == dict(base_config(task="statistics"), statistics={
        "scope": [], "list": [], "data_mode": ["all"], "summary_mode": "statistics"})


def test_second_window_with_other_selection_is_flagged_first_one_exported():
    result = map_calls(standard(
        call("set_dump_switch", "ON", mode="api_list", api_list=["relu"], filter_switch="OFF"),
        call("set_dump_switch", "OFF"),
        call("set_dump_switch", "ON", mode="api_list", api_list=["conv2d"], filter_switch="OFF"),
    ))
    assert result.config["tensor"]["list"] == ["relu"]
    assert len(result.caveats) == 1 and "first one is exported" in result.caveats[0].reason


def test_same_window_twice_is_exact():
    on = call("set_dump_switch", "ON", filter_switch="OFF")
    result = map_calls(standard(on, call("set_dump_switch", "OFF"), on, call("set_dump_switch", "OFF")))
    assert result.caveats == ()


# --- set_overflow_check_switch ---------------------------------------------------------------------

def test_set_overflow_check_switch_window_is_overflow_task():
    result = map_calls(standard(call("set_overflow_check_switch", "ON", filter_switch="OFF"),
                                call("set_overflow_check_switch", "OFF"), hook=legacy.overflow_check))
    assert result.config["task"] == "overflow_check"
    assert result.caveats == ()


def test_set_overflow_check_switch_filter_on_is_flagged():
    result = map_calls(standard(call("set_overflow_check_switch", "ON"), hook=legacy.overflow_check))
    assert [c.call for c in result.caveats] == ["set_overflow_check_switch(filter_switch='ON')"]


# --- names -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("legacy_name, dotted", [
    ("Tensor_permute_1_forward", "Tensor.permute.1.forward"),
    ("Tensor___add___0_backward", "Tensor.__add__.0.backward"),
    ("Functional_batch_norm_2_forward", "Functional.batch_norm.2.forward"),
])
def test_dotted_selector_full_names_are_exact(legacy_name, dotted):
    assert dotted_selector(legacy_name) == (dotted, None)


def test_backward_input_path_is_the_converted_pt_file():
    assert backward_input_path("d/Functional_conv2d_1_backward_input.0.npy") == "d/Functional.conv2d.1.backward.input.0.pt"
    assert backward_input_path("Torch_relu_0_backward_input.0.npy") == "Torch.relu.0.backward.input.0.pt"


# --- every exported config is accepted by the config loader (ptdbg_ascend.config) ------------------

LOADER_SCENARIOS = {
    "all": standard(call("set_dump_switch", "ON")),
    "list": standard(call("set_dump_switch", "ON", mode="list", scope=["Tensor_permute_1_forward", "Torch_relu_3"])),
    "range": standard(call("set_dump_switch", "ON", mode="range", scope=["Tensor_abs_1_forward", "Tensor_transpose_3_forward"])),
    "stack": standard(call("set_dump_switch", "ON", mode="stack", scope=["Tensor_abs_1_forward", "Tensor_transpose_3_forward"])),
    "api_list": standard(call("set_dump_switch", "ON", mode="api_list", api_list=["relu"])),
    "summary_only": standard(call("set_dump_switch", "ON", summary_only=True, dump_mode=["forward", "input"])),
    "acl_backward": standard(
        call("set_dump_switch", "ON", mode="acl", scope=["Functional_conv2d_1_backward"]),
        call("set_backward_input", ["d/Functional_conv2d_1_backward_input.0.npy"]),
        dump_mode="acl", dump_config="dump.json"),
    "overflow": standard(call("set_overflow_check_switch", "ON"), hook=legacy.overflow_check, overflow_nums=-1),
    "nothing": [],
}


@pytest.mark.parametrize("scenario", sorted(LOADER_SCENARIOS))
def test_exported_config_is_accepted_by_the_loader(scenario, tmp_path, monkeypatch, capsys):
    config_module = pytest.importorskip("ptdbg_ascend.config")
    if not hasattr(config_module, "config_from_dict"):
        pytest.skip("ptdbg_ascend.config has no loader yet")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "dump.json").write_text('{"dump": {"dump_list": [], "dump_path": "./out", "dump_mode": "all"}}')
    exported = map_calls(LOADER_SCENARIOS[scenario]).config
    loaded = config_module.config_from_dict(exported)
    assert loaded.task == exported["task"]
    assert loaded.level == exported["level"]
    assert loaded.dump_path == exported["dump_path"]
    section = exported[exported["task"]]
    assert list(loaded.scope) in (section["scope"], section["scope"] * 2)  # msprobe reads [x] as [x, x]
    assert list(loaded.api_list) == section["list"]
    assert list(loaded.data_mode) == section["data_mode"]
    assert "Unknown key" not in capsys.readouterr().out


@pytest.mark.parametrize("legacy_name, dotted, single_output", [
    ("Tensor_permute_1_forward", "Tensor.permute.1.forward", False),
    ("Tensor___add___0_forward_input.0", "Tensor.__add__.0.forward.input.0", False),
    ("Functional_relu_0_forward_output", "Functional.relu.0.forward.output.0", True),
    ("Torch_split_2_forward_output.1", "Torch.split.2.forward.output.1", False),
    ("Functional_conv2d_1_backward_output.2", "Functional.conv2d.1.backward.output.2", False),
    ("Torch_cat_0_forward_input.0.1", "Torch.cat.0.forward.input.0.1", False),
    ("Aten_add.Tensor_0_forward", "Aten.add.Tensor.0.forward", False),
])
def test_names_map_both_ways(legacy_name, dotted, single_output):
    from ptdbg_ascend.formats.naming import to_dotted, to_legacy

    assert to_dotted(legacy_name) == dotted
    assert to_legacy(dotted, single_output=single_output) == legacy_name
