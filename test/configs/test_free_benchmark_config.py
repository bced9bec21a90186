"""The free_benchmark section of config.json: 1.0.4's keys and defaults, its run-time refusals made config errors
naming the key, ``if_preheat`` absent meaning false, and the section written back the way it was read."""

from __future__ import annotations

import pytest

from ptdbg_ascend.config import config_from_dict
from ptdbg_ascend.errors import ParameterError

pytestmark = pytest.mark.torchfree


def test_defaults_are_1_0_4s_and_an_absent_if_preheat_is_false():
    config = config_from_dict({"task": "free_benchmark"})
    assert (config.fuzz_device, config.pert_mode, config.handler_type, config.fuzz_level, config.fuzz_stage,
            config.if_preheat, config.preheat_step, config.max_sample) == (
        "npu", "improve_precision", "check", "L1", "forward", False, 15, 20)
    assert config.to_dict()["free_benchmark"] == {
        "scope": [], "list": [], "fuzz_device": "npu", "pert_mode": "improve_precision", "handler_type": "check",
        "fuzz_level": "L1", "fuzz_stage": "forward", "if_preheat": False, "preheat_step": 15, "max_sample": 20}


def test_scope_is_any_number_of_exact_names_and_the_section_round_trips():
    section = {"scope": ["Torch.matmul.0.forward", "Tensor.pow.4.forward", "Functional.softmax.1.forward"],
               "pert_mode": "to_cpu", "fuzz_device": "cpu", "handler_type": "fix"}
    config = config_from_dict({"task": "free_benchmark", "free_benchmark": section})
    assert config.scope == tuple(section["scope"]) and config.pert_mode == "to_cpu"
    assert config_from_dict(config.to_dict()) == config


@pytest.mark.parametrize("raw, key, says", [
    ({"scope": ["Torch.matmul.0.forward"], "list": ["relu"]}, "free_benchmark.scope", "Scope and api_list conflict"),
    ({"scope": ["Module.fc.Linear.forward.0"]}, "free_benchmark.scope", "not modules"),
    ({"pert_mode": "to_cpu"}, "free_benchmark.fuzz_device", "must be 'cpu' with pert_mode 'to_cpu'"),
    ({"fuzz_device": "cpu"}, "free_benchmark.fuzz_device", "pert_mode is 'improve_precision'"),
    ({"handler_type": "fix", "pert_mode": "add_noise"}, "free_benchmark.pert_mode", "with handler_type 'fix'"),
    ({"handler_type": "fix", "fuzz_stage": "backward"}, "free_benchmark.fuzz_stage", "with handler_type 'fix'"),
    ({"handler_type": "fix", "if_preheat": True}, "free_benchmark.if_preheat", "not supported in fix handler type"),
    ({"preheat_step": 0}, "free_benchmark.preheat_step", "integer >= 1"),
    ({"max_sample": True}, "free_benchmark.max_sample", "integer >= 1"),
    ({"if_preheat": "yes"}, "free_benchmark.if_preheat", "boolean"),
    ({"pert_mode": "gaussian"}, "free_benchmark.pert_mode", "add_noise"),
    ({"fuzz_level": "L2"}, "free_benchmark.fuzz_level", "['L1']"),
    ({"fuzz_stage": "both"}, "free_benchmark.fuzz_stage", "['forward', 'backward']"),
])
def test_a_bad_section_names_the_key_and_what_is_allowed(raw, key, says):
    with pytest.raises(ParameterError) as error:
        config_from_dict({"task": "free_benchmark", "free_benchmark": raw})
    assert error.value.parameter == key and says in str(error.value)


def test_free_benchmark_runs_at_level_l1_only():
    with pytest.raises(ParameterError, match="must be 'L1' for task free_benchmark"):
        config_from_dict({"task": "free_benchmark", "level": "L0"})
