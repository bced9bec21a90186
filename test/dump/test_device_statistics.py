"""Statistics of accelerator tensors read back in batches (issue 11 part 6), run on the CPU.

There is no accelerator here: ``statistics.planner.DEFAULTS.defer_cpu`` sends CPU tensors down the same deferred
path an accelerator's take (reductions queued on the tensor's device, four numbers per tensor kept
there, read back with one copy per batch). The dumps must be the dumps of the synchronous path, with
far fewer read-backs than records.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from ptdbg_ascend.statistics import device_batch as device_statistics, eager, planner
from ptdbg_ascend.statistics.device_batch import DeviceStatisticsBatch
from ptdbg_ascend.statistics.pending import PendingStatistics as PendingDeviceStatistics
from fake_torch_npu.fixtures import clean_session
from dump_json_names import tensor_leaves
from inf_net import InfNet
from legacy_pkl_dump import legacy_pkl_lines


@pytest.fixture
def deferred(monkeypatch):
    """The deferred path on CPU tensors; returns the list of batch sizes read back (one per transfer)."""
    monkeypatch.setattr(planner.DEFAULTS, "defer_cpu", True)
    sizes = []
    original = DeviceStatisticsBatch.resolve

    def counting(self):
        if self._pending:
            sizes.append(len(self._pending))
        original(self)

    monkeypatch.setattr(DeviceStatisticsBatch, "resolve", counting)
    return sizes


@pytest.mark.parametrize("tensor, expected", [
    (torch.tensor([[1.0, -2.0], [3.0, 0.5]]), [3.0, -2.0, 0.625, math.sqrt(14.25)]),
    (torch.tensor(-2.5), [-2.5, -2.5, -2.5, 2.5]),
    (torch.tensor(1e30), [1e30, 1e30, 1e30, 1e30]),  # the norm of a value is its magnitude (no v*v overflow)
    (torch.tensor([1, 2, 6]), [6.0, 1.0, 3.0, math.sqrt(41.0)]),
    (torch.tensor([True, False]), [1.0, 0.0, 0.5, 1.0]),
    (torch.tensor([3 + 4j, 0j]), [5.0, 0.0, 2.5, 5.0]),  # complex: of the magnitude
    (torch.tensor([1.5, -0.5], dtype=torch.bfloat16), [1.5, -0.5, 0.5, math.sqrt(2.5)]),
])
def test_a_batch_gives_the_statistics_of_each_tensor_after_one_read(deferred, tensor, expected):
    batch = DeviceStatisticsBatch()
    pending = batch.add(tensor)
    assert type(pending) is PendingDeviceStatistics and list(pending) == [None] * 4  # nothing read yet
    assert batch.has_pending()
    batch.resolve()
    np.testing.assert_allclose(list(pending), expected, rtol=1e-6)
    assert deferred == [1] and not batch.has_pending()


def test_an_empty_or_meta_tensor_needs_no_read(deferred):
    batch = DeviceStatisticsBatch()
    assert batch.add(torch.zeros(0, 3)) == [None, None, None, None]
    assert batch.add(torch.empty(3, device="meta")) == [None, None, None, None]  # no values: never read back
    assert not batch.has_pending()


def test_a_batch_is_due_when_full_or_old(deferred, monkeypatch):
    batch = DeviceStatisticsBatch()
    for _ in range(DeviceStatisticsBatch.BATCH_RECORDS - 1):
        batch.add(torch.ones(3))
    assert not batch.due()
    batch.add(torch.ones(3))
    assert batch.due()
    batch.resolve()
    monkeypatch.setattr(DeviceStatisticsBatch, "BATCH_SECONDS", 0.0)
    batch.add(torch.ones(3))
    assert batch.due()


def _same_dump(reference, candidate, pkl_records_of):
    """Same lines in the same order; statistics equal to float32 rounding (the device path divides
    the sum on the device, the CPU path in float64)."""
    assert len(candidate) == len(reference)
    for expected, got in zip(pkl_records_of(reference), pkl_records_of(candidate)):
        assert got[0] == expected[0]
        if got[0].endswith("_stack_info"):
            continue  # the frames name this test's two call lines
        assert got[:5] == expected[:5]
        np.testing.assert_allclose(np.array(got[5], dtype=float), np.array(expected[5], dtype=float),
                                   rtol=2e-6, atol=1e-7, err_msg=got[0])


def _records(lines):
    import json

    return [json.loads(line) for line in lines]


@pytest.mark.parametrize("switch", [
    dict(mode="all", summary_only=True),  # statistics only: lines held until their batch is read
    dict(mode="api_stack"),  # npy files: the writer thread reads the batch
])
def test_a_real_dump_is_the_same_with_batched_statistics(tmp_path, dump_session, model, train, deferred, switch,
                                                          monkeypatch):
    initial = {key: value.clone() for key, value in model.state_dict().items()}
    monkeypatch.setattr(planner.DEFAULTS, "defer_cpu", False)
    reference = legacy_pkl_lines(tmp_path, model, train, "sync", **switch)
    assert deferred == []  # the CPU path reads nothing back in batches
    monkeypatch.setattr(planner.DEFAULTS, "defer_cpu", True)
    clean_session(dump_session)  # counters from 0 again: the same names
    model.load_state_dict(initial)
    batched = legacy_pkl_lines(tmp_path, model, train, "batched", **switch)
    _same_dump(reference, batched, _records)
    tensors = sum(1 for line in batched if not line.startswith('["') or "_stack_info" not in line.split(",")[0])
    assert sum(deferred) >= tensors // 2  # most tensor records went through a batch
    if switch.get("summary_only"):
        # On the training thread, a read-back serves many tensors (with npy files the writer thread reads
        # whatever is pending when it gets to a call: off the training thread, its batch size is timing).
        assert len(deferred) < sum(deferred) / 4


@pytest.mark.parametrize("mode", ["api_stack", "all"])
def test_a_tensor_recorded_again_after_its_batch_was_read_is_written(tmp_path, dump_session, model, train, deferred,
                                                                      monkeypatch, mode):
    """Seen on a GPU (CUDA, statistics only): a tensor recorded by one call (a layer's output) and again by a
    later one (the next layer's input) after the batch holding its statistics was read took its filled-in
    statistics from the cache, and the writer joined that record as text: a TypeError in the user's backward.
    Small batches make every read come early; the dump must equal the one without batches."""
    monkeypatch.setattr(DeviceStatisticsBatch, "BATCH_RECORDS", 3)
    initial = {key: value.clone() for key, value in model.state_dict().items()}
    monkeypatch.setattr(planner.DEFAULTS, "defer_cpu", False)
    reference = legacy_pkl_lines(tmp_path, model, train, "sync", mode=mode, summary_only=True)
    monkeypatch.setattr(planner.DEFAULTS, "defer_cpu", True)
    clean_session(dump_session)
    model.load_state_dict(initial)
    batched = legacy_pkl_lines(tmp_path, model, train, "batched", mode=mode, summary_only=True)
    _same_dump(reference, batched, _records)
    assert len(deferred) > 3  # the batches were read many times during the run


def test_lines_wait_for_their_batch_and_are_all_written_at_off(tmp_path, dump_session, model, train, deferred):
    """Statistics only: nothing is lost at OFF even when the batch never filled up."""
    lines = legacy_pkl_lines(tmp_path, model, train, "held", mode="all", summary_only=True)
    assert len(lines) > 20 and all(line.endswith("]") for line in lines)
    assert all("null" not in line for line in lines if "_stack_info" not in line)
    assert max(deferred) <= DeviceStatisticsBatch.BATCH_RECORDS + 16  # bounded: read when full (plus one call)


# -- the PrecisionDebugger (msprobe-format) dump -----------------------------------------------------
def _debugger_dump(tmp_path, tag, task):
    from ptdbg_ascend import PrecisionDebugger
    from ptdbg_ascend.jsonfile import load_json

    torch.manual_seed(0)
    net = InfNet()
    debugger = PrecisionDebugger(dump_path=str(tmp_path / tag), task=task, level="L1")
    debugger.start()
    net(torch.randn(3, 6)).backward()
    debugger.stop()
    debugger.step()
    return load_json(str(tmp_path / tag / "step0" / "rank" / "dump.json"), "dump.json")["data"]


@pytest.mark.parametrize("task", ["statistics", "tensor"])
def test_a_precision_debugger_dump_is_the_same_with_batched_statistics(tmp_path, dump_session, deferred,
                                                                        monkeypatch, task):
    monkeypatch.setattr(planner.DEFAULTS, "defer_cpu", False)
    reference = _debugger_dump(tmp_path, "sync", task)
    assert deferred == []
    monkeypatch.setattr(planner.DEFAULTS, "defer_cpu", True)
    clean_session(dump_session)
    batched = _debugger_dump(tmp_path, "batched", task)
    assert list(batched) == list(reference)
    expected_leaves, got_leaves = list(tensor_leaves(reference)), list(tensor_leaves(batched))
    assert len(got_leaves) == len(expected_leaves) > 10
    for expected, got in zip(expected_leaves, got_leaves):
        assert list(got) == list(expected)  # the same keys in the same order (*_except_inf_nan included)
        for key in ("Max", "Min", "Mean", "Norm", "Max_except_inf_nan", "Min_except_inf_nan"):
            if key in expected and expected[key] is not None and not isinstance(expected[key], bool):
                np.testing.assert_allclose(got[key], expected[key], rtol=2e-6, atol=1e-7, err_msg=key)
            elif key in expected:
                assert got[key] == expected[key], key
    assert any("Max_except_inf_nan" in leaf for leaf in got_leaves)  # the division's output: inf/nan
    assert sum(deferred) >= len(got_leaves) // 2 and len(deferred) <= 3  # read back at the stop, not per tensor


# -- what the deferred path launches, and its finite extremes --------------------------------------
_INF, _NAN = float("inf"), float("nan")


@pytest.mark.parametrize("values", [
    [1.0, _INF, -3.0],  # finite elements: their extremes
    [_NAN, 2.0, -_INF],
    [-_INF, -_INF],  # none finite: over the non-NaN ones
    [_INF, _NAN],
    [_INF, -_INF, _NAN],
    [_NAN, _NAN],  # all NaN: NaN
    [_INF],
    [-_INF, _NAN, _NAN],
    # The dtype's largest finite values, which the deferred pair uses as stand-ins for infinities: a
    # finite element equal to one is still a finite element.
    ["lowest", _INF],
    ["highest", -_INF, _NAN],
    ["lowest", "highest", _INF, -_INF],
    ["highest", "lowest", _NAN],
])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
def test_a_deferred_leaf_has_the_finite_extremes_of_the_eager_path(deferred, values, dtype):
    from ptdbg_ascend.statistics.device_batch import finite_pair as deferred_reductions
    from ptdbg_ascend.statistics.msprobe_rules import (finite_extremes as _finite_extremes,
                                             msprobe_reduced)

    # float64 is reduced in float32 (msprobe's rule): its stand-ins are float32's largest values
    largest = torch.finfo(torch.float32 if dtype == torch.float64 else dtype).max
    tensor = torch.tensor([{"lowest": -largest, "highest": largest}.get(value, value) for value in values],
                          dtype=dtype)
    batch = DeviceStatisticsBatch()
    pending = batch.add(msprobe_reduced(tensor), extra=deferred_reductions)
    batch.resolve()
    leaf = _leaf(list(pending))
    expected = _finite_extremes(tensor)
    got = [leaf["Max_except_inf_nan"], leaf["Min_except_inf_nan"]]
    np.testing.assert_array_equal(np.array(got), np.array(expected), err_msg=str(values))


def _leaf(numbers):
    """The dump.json leaf of a tensor with these read-back numbers (``leaves.leaf_text``)."""
    import json

    from ptdbg_ascend.sinks.msprobe.leaves import leaf_text

    return json.loads(leaf_text(0, "torch.float32", [2], False, numbers))


_ALLOCATIONS = (torch.ops.aten.empty.memory_format, torch.ops.aten.empty_strided.default)


class _CountOps(torch.utils._python_dispatch.TorchDispatchMode):
    """Counts the aten operators run under it that compute (on an accelerator, each is a kernel launch;
    a view (detach, select, view) and an allocation (empty) launch no kernel)."""

    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if not (func.is_view or func in _ALLOCATIONS):
            self.ops.append(str(func))
        return func(*args, **(kwargs or {}))


def test_a_deferred_tensor_launches_few_operators(deferred):
    """On an accelerator the host pays per launch (~14 us on an H200), not per element: a deferred tensor
    launches the three reductions of its statistics (aminmax, sum, vector_norm; half types accumulate in
    float32 inside them, with no float32 copy) and four more for msprobe's finite extremes; a batch stacks
    the numbers of every STACK_EVERY tensors (test below), not each tensor's; the mean's division and the
    joining happen once per batch."""
    from ptdbg_ascend.statistics.device_batch import finite_pair as deferred_reductions

    for tensor, extra, most in ((torch.randn(64, 64), None, 3), (torch.randn(64, 64).bfloat16(), None, 3),
                                (torch.randn(64, 64), deferred_reductions, 7)):
        batch = DeviceStatisticsBatch()
        with _CountOps() as adding:
            batch.add(tensor, extra=extra)
            pending = batch.add(tensor * 2, extra=extra)
        assert len(adding.ops) <= 2 * most + 1, adding.ops  # (+1: the multiplication)
        with _CountOps() as reading:
            batch.resolve()
        # For the whole batch: one stack of the parts not stacked yet (bf16 extremes promoted), one copy.
        assert len(reading.ops) <= 2, reading.ops
        expected = eager.tensor_statistics(tensor * 2)
        np.testing.assert_allclose(pending[:4], expected, rtol=2e-6, atol=1e-6)


def test_a_stacked_batch_stacks_the_numbers_of_each_stream_once_per_run(deferred, monkeypatch):
    """The PrecisionDebugger's batch keeps the numbers of STACK_EVERY tensors queued on one stream as one
    tensor, stacked by the add that fills the run, on that stream (so the stack reads its parts in order):
    tensors queued on another stream form their own run. Every tensor reads back its own numbers, whether
    it ended in a stack or in a run not full yet: float32, bf16 (float32 statistics, bf16 extremes) and a
    0-d int queued as its float64 value (2**40 + 1: exact only if nothing narrows it)."""
    from ptdbg_ascend.statistics.device_batch import finite_pair as deferred_reductions
    from ptdbg_ascend.statistics.msprobe_rules import finite_extremes as _finite_extremes

    monkeypatch.setattr(DeviceStatisticsBatch, "STACK_EVERY", 3)
    stream = ["a"]
    real_note = device_statistics.LAUNCH_STREAMS.note
    monkeypatch.setattr(device_statistics.LAUNCH_STREAMS, "note", lambda device: (real_note(device), stream[0]))
    batch = DeviceStatisticsBatch()
    queued, stacked_at = [], []
    for index in range(8):
        stream[0] = "b" if index % 3 == 0 else "a"  # b: 0, 3, 6; a: 1, 2, 4, 5, 7
        with _CountOps() as adding:
            if index == 5:
                value = torch.tensor(2 ** 40 + 1, dtype=torch.float64)
                pending = batch.enqueue([value, value, value, value], 1, value.device)
                tensor = value
            else:
                tensor = torch.randn(6, 5) * (index + 1)
                tensor[0, 0] = float("inf") if index == 4 else tensor[0, 0]
                tensor = tensor.bfloat16() if index in (2, 3) else tensor
                pending = batch.add(tensor, extra=deferred_reductions)
        queued.append((tensor, pending))
        if "aten.stack.default" in adding.ops:
            stacked_at.append(index)
    assert stacked_at == [4, 6]  # a's run 1, 2, 4 is full at 4; b's 0, 3, 6 at 6; 5 and 7 wait in a's run
    assert all(pending.values is not None for _, pending in queued)  # pending until read
    # A full run keeps one tensor for its tensors' numbers, not their 0-d parts.
    kept = [pending.values for index, (_, pending) in enumerate(queued) if index in (1, 2, 4)]
    assert all(type(values) is torch.Tensor and values.dim() == 1 and values is kept[0] for values in kept)
    batch.resolve()
    assert deferred == [8]
    for tensor, pending in queued:
        if tensor.dim() == 0:
            assert list(pending) == [2.0 ** 40 + 1] * 4
            continue
        np.testing.assert_allclose(pending[:4], eager.tensor_statistics(tensor), rtol=2e-6)
        leaf = _leaf(list(pending))
        expected = _finite_extremes(tensor) if not math.isfinite(pending[0]) else [None, None]
        assert [leaf.get("Max_except_inf_nan"), leaf.get("Min_except_inf_nan")] == expected


def test_a_device_without_fused_half_reductions_reads_the_same_numbers(deferred, monkeypatch):
    """The deferred path reduces bf16/fp16 in float32 inside the kernels (no float32 copy); a device or
    torch build without such a kernel gets the float32 copy's launches instead, and the same numbers (not
    the synchronous special path, which would read every tensor back)."""
    real = torch.linalg.vector_norm

    def refusing(tensor, *args, **kwargs):
        if tensor.dtype == torch.bfloat16:
            raise RuntimeError('"norm_cpu" not implemented for \'BFloat16\'')
        return real(tensor, *args, **kwargs)

    monkeypatch.setattr(torch.linalg, "vector_norm", refusing)
    tensor = (torch.randn(64, 64) * 3).bfloat16()
    batch = DeviceStatisticsBatch()
    pending = batch.add(tensor)
    assert type(pending) is PendingDeviceStatistics  # still deferred
    batch.resolve()
    np.testing.assert_allclose(pending, eager.tensor_statistics(tensor), rtol=2e-6)


def test_a_precision_debugger_reduces_a_tensor_recorded_twice_once(tmp_path, dump_session, deferred, monkeypatch):
    """On an accelerator each deferred float tensor costs the host 8 launches. A tensor recorded as one
    call's output and the next call's input, unchanged, shares its pending numbers (as the legacy dump's
    cache does); one changed in place in between (a new version) is reduced again, and its leaves hold
    the numbers of each moment."""
    from ptdbg_ascend import PrecisionDebugger
    from ptdbg_ascend.jsonfile import load_json

    reduced = []
    original = DeviceStatisticsBatch.add

    def counting(self, tensor, extra=None):
        reduced.append(tuple(tensor.shape))
        return original(self, tensor, extra)

    monkeypatch.setattr(DeviceStatisticsBatch, "add", counting)
    x = torch.tensor([[1.0, -2.0], [3.0, 4.0]])
    debugger = PrecisionDebugger(dump_path=str(tmp_path), task="statistics", level="L1")
    debugger.start()
    y = torch.relu(x)  # x in, y out: 2 reductions
    z = torch.mul(y, 2.0)  # y again (shared), z out: 1
    z.add_(1.0)  # z again before the change (shared), then z changed in place: 1
    torch.neg(z)  # z again (shared), its output: 1
    debugger.stop()
    assert len(reduced) == 5, reduced  # 8 tensors recorded
    data = load_json(str(tmp_path / "step0" / "rank" / "dump.json"), "dump.json")["data"]
    relu, mul = data["Torch.relu.0.forward"], data["Torch.mul.0.forward"]
    add, neg = data["Tensor.add_.0.forward"], data["Torch.neg.0.forward"]
    numbers = ("Max", "Min", "Mean", "Norm")

    def read(leaf):
        return [leaf[key] for key in numbers]

    # float32 norms: to float32's rounding
    assert read(relu["output"][0]) == read(mul["input_args"][0]) == pytest.approx([4, 0, 2, math.sqrt(26)], 1e-6)
    assert read(mul["output"][0]) == read(add["input_args"][0]) == pytest.approx([8, 0, 4, math.sqrt(104)], 1e-6)
    assert read(add["output"][0]) == read(neg["input_args"][0]) == pytest.approx([9, 1, 5, math.sqrt(140)], 1e-6)
    assert read(neg["output"][0]) == pytest.approx([-1, -9, -5, math.sqrt(140)], 1e-6)


def test_a_new_step_never_waits_for_numbers_of_the_last(tmp_path, dump_session, deferred, monkeypatch):
    """A step whose numbers were never read back (its last flush failed: simulated by a read that does
    nothing) must not hand them to the next step: a tensor recorded at the end of one step and again at
    the start of the next is reduced again, so the next step's dump.json shows every entry."""
    from ptdbg_ascend import PrecisionDebugger
    from ptdbg_ascend.jsonfile import load_json

    original = DeviceStatisticsBatch.resolve
    failing = []

    def first_never_read(self):
        if not failing:
            failing.append(self)
        if self is not failing[0]:
            original(self)

    monkeypatch.setattr(DeviceStatisticsBatch, "resolve", first_never_read)
    x = torch.tensor([1.0, -2.0])
    debugger = PrecisionDebugger(dump_path=str(tmp_path), task="statistics", level="L1")
    debugger.start()
    torch.relu(x)
    debugger.stop()
    debugger.step()
    debugger.start()
    torch.neg(x)  # x again, unchanged, one call later
    debugger.stop()
    first = load_json(str(tmp_path / "step0" / "rank" / "dump.json"), "dump.json")["data"]
    second = load_json(str(tmp_path / "step1" / "rank" / "dump.json"), "dump.json")["data"]
    assert first == {}  # its numbers never came: its entry is left out, not written with nulls
    assert second["Torch.neg.0.forward"]["input_args"][0]["Max"] == 1.0


def _zero_dim_dump(tmp_path, tag):
    from ptdbg_ascend import PrecisionDebugger

    debugger = PrecisionDebugger(dump_path=str(tmp_path / tag), task="statistics", level="L1")
    debugger.start()
    torch.neg(torch.tensor(-2.5))  # msprobe's Norm of a 0-d tensor is its value, sign and all
    torch.add(torch.tensor(2 ** 40 + 1), 1)  # int64: exact, not through float32
    torch.mul(torch.tensor(1 / 3, dtype=torch.float64), 1.0)  # float64: exact, not through float32
    torch.relu(torch.tensor(1.5, dtype=torch.bfloat16))
    torch.div(torch.tensor(1.0), torch.tensor(0.0))  # inf: the *_except_inf_nan keys
    torch.log(torch.tensor(-1.0))  # NaN
    torch.neg(torch.tensor(float("inf")))
    torch.sum(torch.tensor([[3.0, 0.0], [0.0, -4.0]]))  # a loss-like reduction to 0-d (a norm exact in float32)
    debugger.stop()
    return (tmp_path / tag / "step0" / "rank" / "dump.json").read_text()


def test_a_zero_dim_tensor_is_read_back_with_its_batch_not_at_once(tmp_path, dump_session, deferred, monkeypatch):
    """A 0-d tensor off the CPU (a loss, a scale, a step count) was read at once: a host sync each, on a
    device that must then catch up with everything queued before it. It is queued with the others now, and
    dump.json is byte for byte the one the eager path writes (msprobe's 0-d rule: the value four times,
    exact, its Norm signed; inf/NaN with their *_except_inf_nan keys)."""
    monkeypatch.setattr(planner.DEFAULTS, "defer_cpu", False)
    eager = _zero_dim_dump(tmp_path, "eager")
    assert deferred == []
    monkeypatch.setattr(planner.DEFAULTS, "defer_cpu", True)
    clean_session(dump_session)
    queued = []
    original = DeviceStatisticsBatch.enqueue

    def counting(self, parts, count, device):
        if parts[0].dim() == 0 and count == 1 and len(parts) >= 4 and parts[0] is parts[3]:
            queued.append(parts[0].dtype)
        return original(self, parts, count, device)

    monkeypatch.setattr(DeviceStatisticsBatch, "enqueue", counting)
    batched = _zero_dim_dump(tmp_path, "batched")
    assert batched == eager
    assert len(queued) >= 12 and torch.int64 not in queued  # an int goes as float64 (exact)
    data = json.loads(batched)["data"]
    assert data["Torch.neg.0.forward"]["input_args"][0]["Norm"] == -2.5
    assert data["Torch.add.0.forward"]["output"][0]["Max"] == 2 ** 40 + 2
    assert data["Torch.mul.0.forward"]["input_args"][0]["Mean"] == 1 / 3
    assert data["Torch.div.0.forward"]["output"][0]["Max_except_inf_nan"] == float("inf")


def test_a_zero_dim_tensor_launches_no_reduction(deferred):
    """A 0-d value is its own max, min, sum and norm: queuing it launches its copy (the tensor may change before
    the read: AdamW's ``step_t += 1``) and the two ``nan_to_num`` of msprobe's finite pair, no reduction (an int:
    its float64 copy)."""
    from ptdbg_ascend.sinks.msprobe.late_statistics import LateStatistics

    late = LateStatistics()
    for value, most in ((torch.tensor(-3.0), 3), (torch.tensor(7), 2)):
        with _CountOps() as adding:
            pending = late.pending_of(value)
        assert len(adding.ops) <= most, adding.ops
        late.batch.resolve()
        assert pending[:4] == [float(value)] * 4
