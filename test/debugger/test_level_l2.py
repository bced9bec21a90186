"""Level L2 (ACL dump) through PrecisionDebugger, with the recording fake torch_npu of test/."""

from __future__ import annotations

import json
import os

import pytest
import torch

from fake_torch_npu.fixtures import fake_npu, no_npu  # noqa: F401 - fixtures
from ptdbg_ascend import PrecisionDebugger
from ptdbg_ascend.errors import DeviceUnavailableError, FileFormatError, ParameterError

WINDOW = [("npu.init_dump",), ("npu.set_dump", "CONFIG"), ("npu.synchronize",), ("npu.synchronize",),
          ("npu.finalize_dump",)]


@pytest.fixture
def npu(fake_npu):
    """The fake torch_npu, with the seeding functions PrecisionDebugger's seed_all calls (recorded)."""

    def install():
        module = fake_npu()
        module.seeds = []
        module.npu.manual_seed = module.seeds.append
        module.npu.manual_seed_all = module.seeds.append
        return module

    return install


@pytest.fixture
def acl_json(tmp_path):
    from ptdbg_ascend.acl import write_acl_dump_config

    path = str(tmp_path / "acl_config.json")
    write_acl_dump_config(path, str(tmp_path / "acl_out"))
    return path


def _config(tmp_path, scope, acl_config, backward_input=()):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"task": "tensor", "level": "L2", "dump_path": str(tmp_path / "dump"),
                                "acl_config": acl_config,
                                "tensor": {"scope": scope, "backward_input": list(backward_input)}}))
    return str(path)


def test_forward_api_is_rerun_under_acl_dump(session, tmp_path, npu, acl_json):
    npu = npu()
    debugger = PrecisionDebugger(config_path=_config(tmp_path, ["Tensor.permute.1.forward"], acl_json))
    x = torch.randn(2, 3, 4)
    debugger.start()
    x.permute(2, 0, 1)
    second = x.permute(1, 0, 2)  # Tensor.permute.1: the selected call
    x.permute(0, 2, 1)
    debugger.stop()
    x.permute(1, 0, 2)
    assert npu.calls == [call if call[0] != "npu.set_dump" else ("npu.set_dump", os.path.abspath(acl_json))
                         for call in WINDOW]
    assert npu.dumped_ops.count("permute") == 1 and second.shape == (3, 2, 4)
    assert npu.seeds == [1234, 1234]  # seed_all(seed) at construction seeds the NPU too
    assert not os.path.exists(str(tmp_path / "dump"))  # no dump.json at L2


def test_backward_needs_a_readable_pt_gradient(session, tmp_path, npu, acl_json):
    install = npu
    install()
    missing = str(tmp_path / "absent.pt")
    with pytest.raises(ParameterError, match="backward_input"):
        PrecisionDebugger(config_path=_config(tmp_path, ["Torch.sort.0.backward"], acl_json))
    with pytest.raises(FileFormatError, match="absent.pt does not exist"):
        PrecisionDebugger(config_path=_config(tmp_path, ["Torch.sort.0.backward"], acl_json, [missing]))
    gradient = str(tmp_path / "Torch.sort.0.backward.input.0.pt")
    torch.save(torch.ones(2, 3), gradient)
    npu = install()
    debugger = PrecisionDebugger(config_path=_config(tmp_path, ["Torch.sort.0.backward"], acl_json, [gradient]))
    debugger.start()
    torch.sort(torch.randn(2, 3, requires_grad=True), dim=1)
    debugger.stop()
    assert "run_backward" in npu.dumped_ops


def test_without_torch_npu_and_without_acl_config(session, tmp_path, no_npu, acl_json):
    with pytest.raises(DeviceUnavailableError, match="Level L2 .* needs an Ascend NPU with torch_npu"):
        PrecisionDebugger(config_path=_config(tmp_path, ["Tensor.permute.1.forward"], acl_json))


def test_l2_without_acl_config(session, tmp_path, npu):
    npu()
    with pytest.raises(ParameterError, match=r"Invalid acl_config='': must name the ACL dump config"):
        PrecisionDebugger(config_path=_config(tmp_path, ["Tensor.permute.1.forward"], ""))
