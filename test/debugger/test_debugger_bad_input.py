"""PrecisionDebugger: bad arguments and missing hardware give clear errors, and nothing is written."""

from __future__ import annotations

import os

import pytest

from ptdbg_ascend import PrecisionDebugger
from ptdbg_ascend.errors import DeviceUnavailableError, FileFormatError, ParameterError


def test_level_l0_without_a_model(session, tmp_path):
    with pytest.raises(ParameterError, match=r"Invalid model=None: a torch.nn.Module is required at level L0"):
        PrecisionDebugger(level="L0", dump_path=str(tmp_path / "d"))
    with pytest.raises(ParameterError, match=r"required at level mix"):
        PrecisionDebugger(level="mix", dump_path=str(tmp_path / "d"))
    assert not os.path.exists(str(tmp_path / "d"))


def test_model_of_the_wrong_type(session, tmp_path):
    with pytest.raises(ParameterError, match=r"Invalid model='dict': must be a torch.nn.Module or None"):
        PrecisionDebugger(level="L1", model={}, dump_path=str(tmp_path / "d"))


def test_l2_without_torch_npu(session, tmp_path):
    config = tmp_path / "config.json"
    config.write_text('{"task": "tensor", "level": "L2", "dump_path": "%s", "tensor": {"scope": ["Tensor.mul.0.forward"]}}'
                      % (tmp_path / "d"))
    with pytest.raises(DeviceUnavailableError, match="needs an Ascend NPU with torch_npu"):
        PrecisionDebugger(config_path=str(config))


def test_module_scope_at_l1(session, tmp_path):
    config = tmp_path / "config.json"
    config.write_text('{"task": "statistics", "statistics": {"scope": ["Module.a.A.forward.0", "Module.b.B.forward.0"]}}')
    with pytest.raises(ParameterError, match=r"statistics.scope=.*need level L0 or mix"):
        PrecisionDebugger(config_path=str(config))


def test_unknown_task_and_level_from_the_constructor(session):
    with pytest.raises(ParameterError, match=r"Invalid task='dump'"):
        PrecisionDebugger(task="dump")
    with pytest.raises(ParameterError, match=r"Invalid level='L3'"):
        PrecisionDebugger(level="L3")
    with pytest.raises(ParameterError, match=r"Invalid step='0'"):
        PrecisionDebugger(step="0")


def test_config_that_is_not_json(session, tmp_path):
    config = tmp_path / "config.json"
    config.write_text("task: tensor")
    with pytest.raises(FileFormatError, match="config.json is not valid JSON"):
        PrecisionDebugger(config_path=str(config))


def test_enable_dataloader_is_refused_with_the_alternative(session, tmp_path):
    config = tmp_path / "config.json"
    config.write_text('{"enable_dataloader": true}')
    with pytest.raises(ParameterError, match=r"enable_dataloader=True.*start\(\)/stop\(\)/step\(\)"):
        PrecisionDebugger(config_path=str(config))
