"""DebuggerConfig: the msprobe 1.0.4 config.json schema, defaults, overrides and every bad input (torch-free:
runs in the Python 3.8 pass too, which is why it lives here and not in test/debugger)."""

from __future__ import annotations

import json
import sys

import pytest

from ptdbg_ascend.config import DebuggerConfig, config_from_dict, load_config
from ptdbg_ascend.errors import FileFormatError, ParameterError

pytestmark = pytest.mark.torchfree


def _write(tmp_path, content, name="config.json"):
    path = tmp_path / name
    path.write_text(content if isinstance(content, str) else json.dumps(content), encoding="utf-8")
    return str(path)


def test_defaults_without_a_file():
    config = load_config()
    assert config == DebuggerConfig()
    assert (config.task, config.level, config.dump_path, config.seed) == ("statistics", "L1", "./dump_path", 1234)
    assert config.data_mode == ("all",) and config.step == () and config.rank == ()


def test_full_tensor_config_is_read(tmp_path):
    path = _write(tmp_path, {
        "task": "tensor", "dump_path": "/tmp/x", "rank": [1, 0], "step": [3, 1, 3], "level": "mix",
        "seed": 0, "is_deterministic": True, "enable_dataloader": False, "acl_config": "",
        "tensor": {"scope": ["Functional.conv2d.0.forward", "Tensor.add.2.backward"], "list": ["relu"],
                   "data_mode": ["forward"], "backward_input": [], "file_format": "npy"},
        "statistics": {"summary_mode": "md5"},
    })
    config = load_config(path)
    assert config.task == "tensor" and config.level == "mix" and config.dump_path == "/tmp/x"
    assert config.rank == (1, 0)
    assert config.step == (1, 3)  # sorted, duplicates dropped
    assert config.seed == 0  # 1.0.4 turned 0 into 1234; kept as given here
    assert config.is_deterministic is True
    assert config.scope == ("Functional.conv2d.0.forward", "Tensor.add.2.backward")
    assert config.api_list == ("relu",) and config.data_mode == ("forward",)
    assert config.summary_mode == "statistics"  # the statistics section is not the chosen task's
    assert config.saves_tensors and not config.module_range


def test_constructor_arguments_override_the_file(tmp_path):
    path = _write(tmp_path, {"task": "statistics", "dump_path": "/a", "level": "L1", "step": [0],
                             "tensor": {"list": ["conv"]}, "statistics": {"list": ["relu"]}})
    config = load_config(path, task="tensor", dump_path="/b", level="L0", step=[2])
    assert (config.task, config.dump_path, config.level, config.step) == ("tensor", "/b", "L0", (2,))
    assert config.api_list == ("conv",)  # the section of the overriding task


def test_one_scope_name_becomes_a_range_of_one():
    config = config_from_dict({"task": "tensor", "tensor": {"scope": ["Tensor.add.0.forward"]}})
    assert config.scope == ("Tensor.add.0.forward", "Tensor.add.0.forward")


def test_overflow_section():
    config = config_from_dict({"task": "overflow_check", "overflow_check": {"overflow_nums": -1}})
    assert config.overflow_nums == -1 and config.check_mode == "all"
    assert config_from_dict({"task": "overflow_check"}).overflow_nums == 1


def test_run_ut_section_is_read_and_dumps_as_the_tensor_task(tmp_path):
    raw = {"task": "run_ut", "run_ut": {"white_list": ["conv2d", "gelu"], "black_list": ["dropout"],
                                        "error_data_path": str(tmp_path)}}
    config = config_from_dict(raw)
    assert (config.task, config.dump_task, config.saves_tensors) == ("run_ut", "tensor", True)
    assert config.white_list == ("conv2d", "gelu") and config.black_list == ("dropout",)
    assert config.error_data_path == str(tmp_path)
    assert config.to_dict()["run_ut"] == {"scope": [], "list": [], "data_mode": ["all"], "white_list": ["conv2d", "gelu"],
                                          "black_list": ["dropout"], "error_data_path": str(tmp_path)}
    assert config_from_dict(config.to_dict()) == config
    assert config_from_dict({"task": "run_ut"}).error_data_path == "./"


def test_to_dict_round_trips():
    config = config_from_dict({"task": "tensor", "step": [1], "tensor": {"list": ["a"], "data_mode": ["input"]}})
    assert config_from_dict(config.to_dict()) == config
    assert list(config.to_dict())[:9] == ["task", "dump_path", "rank", "step", "level", "seed", "is_deterministic",
                                          "enable_dataloader", "acl_config"]


@pytest.mark.parametrize("raw, key, fragment", [
    ({"task": "dump"}, "task", "['statistics', 'tensor', 'overflow_check', 'run_ut', 'grad_probe', 'free_benchmark']"),
    ({"task": "grad_probe", "grad_probe": {"grad_level": "L3"}}, "grad_probe.grad_level", "['L0', 'L1', 'L2']"),
    ({"task": "grad_probe", "grad_probe": {"bounds": [0, -1]}}, "grad_probe.bounds", "strictly ascending"),
    ({"task": "grad_probe", "grad_probe": {"bounds": [0, 0]}}, "grad_probe.bounds", "strictly ascending"),
    ({"task": "grad_probe", "grad_probe": {"bounds": ["a"]}}, "grad_probe.bounds", "finite numbers"),
    ({"task": "grad_probe", "grad_probe": {"bounds": [float("nan")]}}, "grad_probe.bounds", "finite numbers"),
    ({"task": "grad_probe", "grad_probe": {"param_list": "fc.weight"}}, "grad_probe.param_list", "list of strings"),
    ({"level": "L3"}, "level", "['L0', 'L1', 'L2', 'mix']"),
    ({"level": 1}, "level", "one of"),
    ({"dump_path": ""}, "dump_path", "non-empty"),
    ({"dump_path": 3}, "dump_path", "non-empty string"),
    ({"step": 3}, "step", "list of integers"),
    ({"step": ["3-5"]}, "step", "integer >= 0"),
    ({"step": [-1]}, "step", "integer >= 0"),
    ({"step": [True]}, "step", "integer >= 0"),
    ({"rank": "0"}, "rank", "list of integers"),
    ({"rank": [0.5]}, "rank", "integer >= 0"),
    ({"seed": "1"}, "seed", "integer"),
    ({"is_deterministic": "yes"}, "is_deterministic", "boolean"),
    ({"enable_dataloader": 1}, "enable_dataloader", "boolean"),
    ({"acl_config": 5}, "acl_config", "string"),
    ({"statistics": {"scope": "Tensor.add.0.forward"}}, "statistics.scope", "list of strings"),
    ({"statistics": {"scope": ["a", "b", "c"]}}, "statistics.scope", "0, 1 or 2 names"),
    ({"statistics": {"scope": ["Module.a.A.forward.0", "Tensor.add.0.forward"]}}, "statistics.scope", "not one of each"),
    ({"statistics": {"list": [1]}}, "statistics.list", "non-empty string"),
    ({"statistics": {"data_mode": ["forwards"]}}, "statistics.data_mode", "['all', 'forward'"),
    ({"statistics": {"summary_mode": "sha"}}, "statistics.summary_mode", "['statistics', 'md5']"),
    ({"task": "tensor", "tensor": {"file_format": "pt"}}, "tensor.file_format", "['npy', 'bin']"),
    ({"task": "overflow_check", "overflow_check": {"overflow_nums": "2"}}, "overflow_check.overflow_nums", "integer"),
    ({"task": "overflow_check", "overflow_check": {"overflow_nums": 0}}, "overflow_check.overflow_nums", "-1"),
    ({"task": "overflow_check", "overflow_check": {"check_mode": "x"}}, "overflow_check.check_mode", "aicore"),
    ({"statistics": []}, "statistics", "JSON object"),
    ({"task": "run_ut", "run_ut": {"is_online": True}}, "run_ut.is_online", "not implemented"),
    ({"task": "run_ut", "run_ut": {"error_data_path": "/nonexistent/errors"}}, "run_ut.error_data_path",
     "existing directory"),
    ({"task": "run_ut", "run_ut": {"white_list": "conv2d"}}, "run_ut.white_list", "list of strings"),
    ({"task": "tensor", "level": "L2"}, "tensor.scope", "exactly one API name"),
    ({"task": "tensor", "level": "L2", "tensor": {"scope": ["a", "b"]}}, "tensor.scope", "exactly one API name"),
    ({"task": "tensor", "level": "L2", "tensor": {"scope": ["Tensor.mul.0.backward"]}}, "tensor.backward_input", ".pt"),
    ({"task": "tensor", "level": "L2", "acl_config": "/nonexistent/acl.json", "tensor": {"scope": ["Tensor.mul.0.forward"]}},
     "acl_config", "existing .json"),
])
def test_bad_values_name_the_key_the_value_and_what_is_allowed(raw, key, fragment):
    with pytest.raises(ParameterError) as caught:
        config_from_dict(raw)
    assert caught.value.parameter == key
    message = str(caught.value)
    assert message.startswith(f"Invalid {key}=")
    assert fragment in message


def test_bad_override_names_the_argument():
    with pytest.raises(ParameterError, match=r"Invalid task='dumps'"):
        load_config(task="dumps")
    with pytest.raises(ParameterError, match=r"Invalid step=5"):
        load_config(step=5)


def test_file_that_is_not_json_names_the_path(tmp_path):
    path = _write(tmp_path, '{"task": "tensor",')
    with pytest.raises(FileFormatError) as caught:
        load_config(path)
    assert path in str(caught.value) and "not valid JSON" in str(caught.value)


def test_file_that_is_a_list_or_missing_names_the_path(tmp_path):
    path = _write(tmp_path, "[1, 2]")
    with pytest.raises(FileFormatError, match="must hold a JSON object"):
        load_config(path)
    missing = str(tmp_path / "absent.json")
    with pytest.raises(FileFormatError, match="absent.json does not exist"):
        load_config(missing)


def test_unknown_keys_warn_with_the_key(tmp_path, capsys):
    path = _write(tmp_path, {"task": "statistics", "dumppath": "/x", "statistics": {"summary": "md5"}})
    config = load_config(path)
    assert config.dump_path == "./dump_path"
    text = capsys.readouterr().out
    assert "Unknown key 'dumppath'" in text and path in text
    assert "Unknown key 'summary' in the 'statistics' section" in text


def test_config_module_does_not_import_torch():
    import subprocess

    code = "import sys, ptdbg_ascend.config; print('torch' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"
