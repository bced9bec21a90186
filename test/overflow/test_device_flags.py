"""Device flags read in batches (the CUDA/NPU path, emulated on CPU with 0-d flag tensors) and the NPU
float-status mode (with the recording fake torch_npu)."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

from ptdbg_ascend import overflow_check, register_hook, set_dump_path, set_overflow_check_switch
from ptdbg_ascend.overflow import detection, policy
from ptdbg_ascend.overflow import observer as observer_module


def test_overflow_flag_values():
    assert detection.overflow_flag(torch.tensor([1.0, float("nan")])) is True
    assert detection.overflow_flag([torch.ones(2), (torch.tensor([-float("inf")]),)]) is True
    assert detection.overflow_flag({"a": torch.ones(2, dtype=torch.float16) * 65504}) is True  # saturated fp16
    assert detection.overflow_flag(torch.ones(2) * torch.finfo(torch.float32).max) is False  # float32: not saturation
    assert detection.overflow_flag([torch.tensor([1, 2]), torch.tensor([True]), torch.empty(0), 3, "x"]) is False
    assert detection.overflow_flag(float("inf")) is True and detection.overflow_flag(1e308) is False
    assert detection.overflow_flag(torch.tensor([complex(1, float("inf"))])) is True
    # layouts the reductions do not cover are skipped, never an error that would stop training
    assert detection.overflow_flag([torch.eye(3).to_sparse(), torch.tensor([1.0]).to("meta")]) is False


def test_read_flags_reads_device_flags_together():
    flags = [True, torch.tensor(False), torch.tensor(True), False]
    assert detection.read_flags(flags) == [True, False, True, False]


@pytest.fixture
def device_flags(monkeypatch):
    """Make every check answer with a 0-d tensor, as it does on CUDA, and count the batched reads."""
    reads = []
    real_read = detection.read_flags

    def as_device_flag(value):
        return torch.tensor(bool(detection.overflow_flag(value)))

    def counting_read(flags):
        reads.append(len(flags))
        return real_read(flags)

    monkeypatch.setattr(observer_module, "overflow_flag", as_device_flag)
    monkeypatch.setattr(observer_module, "read_flags", counting_read)
    return reads


def test_device_flags_are_read_once_per_batch(tmp_path, session, no_npu, device_flags):
    set_dump_path(str(tmp_path))
    register_hook(torch.nn.Identity(), overflow_check)
    x = torch.ones(3)
    for _ in range(policy.PENDING_CALLS + 8):
        x = torch.sin(x)
    assert device_flags == [policy.PENDING_CALLS]  # one read for the first 32 calls, 8 still pending
    set_overflow_check_switch("OFF")
    assert device_flags == [policy.PENDING_CALLS, 8]
    assert not (tmp_path / "ptdbg_dump_v1.0").exists()


def test_a_pending_overflow_stops_at_the_next_read(tmp_path, session, no_npu, device_flags, capsys):
    set_dump_path(str(tmp_path))
    register_hook(torch.nn.Identity(), overflow_check)
    big = torch.full((2,), 100.0)
    y = torch.exp(big)  # overflows; the flag stays on the "device"
    y.zero_()  # changed in place before the flag is read
    assert not (tmp_path / "ptdbg_dump_v1.0").exists()
    with pytest.raises(ValueError, match=r"^\[overflow 1 times\]: dump file is saved in '.*Overflow_info_\d+_\d+_1\.pkl'\.$") as raised:
        set_overflow_check_switch("OFF")
    pkl = str(raised.value).split("'")[1]
    assert os.path.isfile(pkl)
    assert "A tensor of Torch_exp_0_forward was changed in place between the call and the overflow check" in capsys.readouterr().out
    saved = np.load(os.path.join(pkl[:-4], "Torch_exp_0_forward_output.npy"), allow_pickle=False)
    np.testing.assert_array_equal(saved, [0.0, 0.0])  # documented: the values at the time of the check


def test_npu_float_status_mode(tmp_path, session, fake_npu):
    npu = fake_npu(support_inf_nan=False)
    set_dump_path(str(tmp_path))
    register_hook(torch.nn.Identity(), overflow_check, overflow_nums=-1)
    assert npu.calls == [("_C._enable_overflow_npu",), ("_C._npu_is_support_inf_nan",), ("_C._clear_overflow_npu",)]
    del npu.calls[:]
    x = torch.ones(2)
    torch.relu(x)
    npu.float_status[0] = True  # a kernel overflowed on the device
    torch.sigmoid(x)
    torch.tanh(x)
    set_overflow_check_switch("OFF")
    assert npu.calls == [("_C._check_overflow_npu",), ("_C._check_overflow_npu",), ("_C._clear_overflow_npu",),
                         ("_C._check_overflow_npu",)]
    rank_dir = tmp_path / "ptdbg_dump_v1.0" / "rank0"
    pkls = sorted(name for name in os.listdir(str(rank_dir)) if name.endswith(".pkl"))
    assert len(pkls) == 1 and pkls[0].endswith("_1.pkl")
    with open(str(rank_dir / pkls[0]), encoding="utf-8") as handle:
        assert handle.readline().startswith('["Torch_sigmoid_0_forward_stack_info"')


def test_npu_inf_nan_mode_checks_values(tmp_path, session, fake_npu):
    npu = fake_npu(support_inf_nan=True)
    set_dump_path(str(tmp_path))
    register_hook(torch.nn.Identity(), overflow_check)
    assert npu.calls == [("_C._enable_overflow_npu",), ("_C._npu_is_support_inf_nan",)]
    with pytest.raises(ValueError, match=r"^\[overflow 1 times\]"):
        torch.log(torch.zeros(2))  # -inf
    assert npu.calls == [("_C._enable_overflow_npu",), ("_C._npu_is_support_inf_nan",)]  # no float status read


def test_old_torch_npu_without_enable_function_is_warned(tmp_path, session, fake_npu, capsys):
    fake_npu(with_enable_overflow=False)
    register_hook(torch.nn.Identity(), overflow_check)
    assert ("Api '_enable_overflow_npu' is not exist, the overflow detection function on milan platform maybe not work! "
            "please check the version of software torch_npu.") in capsys.readouterr().out
