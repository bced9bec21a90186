"""The one overflow policy through PrecisionDebugger(task="overflow_check"): device flags read in batches
(emulated on CPU with 0-d flag tensors, as in test_device_flags.py) and the one OverflowLimitReached."""

from __future__ import annotations

import json
import os

import pytest
import torch

from ptdbg_ascend import PrecisionDebugger
from ptdbg_ascend.errors import OverflowLimitReached, PtdbgError
from ptdbg_ascend.overflow import detection, policy


def test_overflow_limit_reached_is_caught_by_both_old_styles():
    error = OverflowLimitReached("stop")
    assert isinstance(error, ValueError) and isinstance(error, RuntimeError) and isinstance(error, PtdbgError)


@pytest.fixture
def device_flags(monkeypatch):
    reads = []
    real_flag, real_read = detection.overflow_flag, detection.read_flags

    def as_device_flag(value):
        return torch.tensor(bool(real_flag(value)))

    def counting_read(flags):
        reads.append(len(flags))
        return real_read(flags)

    monkeypatch.setattr(detection, "overflow_flag", as_device_flag)
    monkeypatch.setattr(policy, "read_flags", counting_read)
    return reads


def test_msprobe_overflow_check_reads_device_flags_in_batches(session, tmp_path, device_flags):
    debugger = PrecisionDebugger(task="overflow_check", dump_path=str(tmp_path / "dump"))
    x, big = torch.ones(3), torch.full((2,), 1000.0)
    stopped_at = None
    debugger.start()
    with torch.no_grad():
        for call in range(40):
            try:
                if call == 5:
                    torch.exp(big)  # the 6th checked call overflows
                else:
                    torch.sin(x)
            except ValueError as error:  # the legacy catch style still stops it
                stopped_at, message = call, str(error)
                break
    # no host read per call: the 32nd checked call reads the batch, and the stop comes there
    assert device_flags == [policy.PENDING_CALLS]
    assert stopped_at == policy.PENDING_CALLS - 1
    directory = str(tmp_path / "dump" / "step0" / "rank")
    assert message == ("Overflow check stops training at overflow 1 (overflow_nums=1); the overflowing calls are in "
                       "{}.".format(directory))
    debugger.stop()
    with open(os.path.join(directory, "dump.json"), encoding="utf-8") as handle:
        dump = json.load(handle)
    assert list(dump["data"]) == ["Torch.exp.0.forward"]
    assert dump["data"]["Torch.exp.0.forward"]["output"][0]["Max"] == float("inf")


def test_msprobe_pending_flags_are_read_at_stop(session, tmp_path, device_flags):
    debugger = PrecisionDebugger(task="overflow_check", dump_path=str(tmp_path / "dump"))
    x, big = torch.ones(3), torch.full((2,), 1000.0)
    debugger.start()
    with torch.no_grad():
        torch.sin(x)
        torch.exp(big)
    assert device_flags == []  # both pending
    with pytest.raises(OverflowLimitReached, match="overflow 1 "):
        debugger.stop()
    assert device_flags == [2]
    with open(str(tmp_path / "dump" / "step0" / "rank" / "dump.json"), encoding="utf-8") as handle:
        assert list(json.load(handle)["data"]) == ["Torch.exp.0.forward"]
    assert not os.path.exists(str(tmp_path / "dump" / "step0" / "rank" / ".ptdbg.lock"))  # released
