"""The pending batch of tensors behind the device statistics (``statistics/fused_batch.py``), on the CPU.

There is no accelerator here: ``planner.DEFAULTS.fused = EMULATED`` queues CPU tensors as an accelerator's
are queued (a reference to each, read by one fused pass at a launch: the numpy emulator of the Triton
kernels), and ``planner.DEFAULTS.defer_cpu`` sends CPU tensors down today's per-tensor device path.
"""

from __future__ import annotations

import json

import pytest
import torch

from ptdbg_ascend.statistics import planner


def _adamw_step_dump(tmp_path, tag):
    """dump.json (PrecisionDebugger, task statistics, L1) of one AdamW step (foreach=False: ``step_t += 1``
    on a 0-d float tensor per parameter)."""
    from ptdbg_ascend import PrecisionDebugger

    torch.manual_seed(0)
    net = torch.nn.Linear(3, 2)
    optimizer = torch.optim.AdamW(net.parameters(), lr=0.1, foreach=False)
    net(torch.ones(1, 3)).sum().backward()
    debugger = PrecisionDebugger(dump_path=str(tmp_path / tag), task="statistics", level="L1")
    debugger.start()
    optimizer.step()
    debugger.stop()
    debugger.step()
    return json.loads((tmp_path / tag / "step0" / "rank" / "dump.json").read_text())["data"]


def test_a_zero_dim_step_count_is_recorded_as_it_was_before_adamw_increments_it(tmp_path, dump_session,
                                                                                 monkeypatch):
    """On the device path a 0-d float tensor was queued as itself: AdamW's ``step_t += 1`` changed it before
    the batch was read back, and dump.json showed the step count after the increment (1.0) as the input of
    the increment. It is queued as a copy now: the input reads 0.0, the output 1.0, as on the eager path."""
    monkeypatch.setattr(planner.DEFAULTS, "defer_cpu", True)
    data = _adamw_step_dump(tmp_path, "deferred")
    increments = [data[name] for name in data if name.startswith("Tensor.__iadd__.")]
    assert len(increments) == 2  # one per parameter
    for entry in increments:
        assert entry["input_args"][0]["shape"] == [] and entry["input_args"][0]["Max"] == 0.0
        assert entry["output"][0]["Max"] == 1.0


def _adamw_step_pkl(tmp_path, tag):
    """The pkl lines (legacy front-end, statistics only, filter_switch OFF: 0-d tensors kept) of one AdamW step
    (foreach=False)."""
    from ptdbg_ascend import acc_cmp_dump, register_hook, set_dump_path, set_dump_switch

    torch.manual_seed(0)
    net = torch.nn.Linear(3, 2)
    optimizer = torch.optim.AdamW(net.parameters(), lr=0.1, foreach=False)
    net(torch.ones(1, 3)).sum().backward()
    set_dump_path(str(tmp_path / tag / "dump.pkl"), dump_tag=tag)
    register_hook(net, acc_cmp_dump)
    set_dump_switch("ON", mode="all", filter_switch="OFF", summary_only=True)
    optimizer.step()
    set_dump_switch("OFF")
    pkl = next((tmp_path / tag / f"{tag}_v1.0" / "rank0").glob("*.pkl"))
    return [json.loads(line) for line in pkl.read_text(encoding="utf-8").splitlines()]


def test_a_zero_dim_step_count_in_the_legacy_pkl_is_the_one_before_the_increment(tmp_path, dump_session,
                                                                                  monkeypatch):
    """The legacy format's device path had the same bug (``device_reductions`` returned the 0-d tensor itself)."""
    monkeypatch.setattr(planner.DEFAULTS, "defer_cpu", True)
    records = {record[0]: record for record in _adamw_step_pkl(tmp_path, "deferred")}
    for index in (0, 1):
        name = f"Tensor___iadd___{index}_forward"
        assert records[name + "_input.0"][5] == [0.0, 0.0, 0.0, 0.0]
        assert records[name + "_output"][5] == [1.0, 1.0, 1.0, 1.0]
