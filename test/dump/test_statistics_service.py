"""The statistics service (``ptdbg_ascend/statistics/``): the planner's choice per tensor and format, the one
pending value, and the device batch's read counter, on CPU tensors (``defer_cpu`` sends them down the
accelerator's path)."""

from __future__ import annotations

import math

import pytest
import torch

from ptdbg_ascend.statistics import eager, msprobe_rules
from ptdbg_ascend.statistics.pending import DEVICE, WRITER, PendingStatistics, is_pending
from ptdbg_ascend.statistics.planner import DEFAULTS, StatisticsPlanner
from ptdbg_ascend.statistics.rules import LEGACY, MSPROBE, WRITER_STATISTICS_MIN_ELEMENTS


def test_a_cpu_tensor_is_eager_unless_its_planner_defers_cpu_tensors():
    small = torch.randn(4, 4)
    assert not StatisticsPlanner(LEGACY, defer_cpu=False).takes_device(small)
    assert StatisticsPlanner(LEGACY, defer_cpu=True).takes_device(small)
    assert StatisticsPlanner(MSPROBE, defer_cpu=True).takes_device(small)
    # msprobe's bool/complex/empty rules are not a device batch's
    assert not StatisticsPlanner(MSPROBE, defer_cpu=True).takes_device(torch.tensor([True]))
    assert StatisticsPlanner(LEGACY, defer_cpu=True).takes_device(torch.tensor([True]))


def test_the_planner_reads_its_defaults_once_when_built(monkeypatch):
    monkeypatch.setattr(DEFAULTS, "defer_cpu", True)
    planner = StatisticsPlanner(LEGACY)
    monkeypatch.setattr(DEFAULTS, "defer_cpu", False)
    assert planner.defer_cpu and not StatisticsPlanner(LEGACY).defer_cpu


@pytest.mark.parametrize("rules", [LEGACY, MSPROBE])
def test_large_cpu_tensors_go_to_the_writer_thread_unless_told_not_to(rules):
    large = torch.randn(WRITER_STATISTICS_MIN_ELEMENTS)
    assert StatisticsPlanner(rules, defer_cpu=False).takes_writer(large)
    assert not StatisticsPlanner(rules, defer_cpu=False, from_copies=False).takes_writer(large)
    assert not StatisticsPlanner(rules, defer_cpu=False).takes_writer(large[:-1])


def test_a_writer_value_is_pending_until_the_writer_fills_it():
    planner = StatisticsPlanner(LEGACY, defer_cpu=False)
    pending = planner.for_writer()
    assert type(pending) is PendingStatistics and pending.source is WRITER and not pending.done()
    assert is_pending(pending) and list(pending) == [None] * 4
    tensor = torch.randn(WRITER_STATISTICS_MIN_ELEMENTS)
    planner.from_copy(pending, tensor.numpy())
    assert pending.done() and not is_pending(pending)
    assert pending.result() == pytest.approx(eager.tensor_statistics(tensor), rel=2e-6)


@pytest.mark.parametrize("rules, expected", [
    (LEGACY, [3.0, -2.0, 0.625, math.sqrt(14.25)]),
    (MSPROBE, [3.0, -2.0, 0.625, math.sqrt(14.25)]),
])
def test_a_device_value_is_filled_when_its_batch_is_read(rules, expected):
    reads = []
    planner = StatisticsPlanner(rules, defer_cpu=True, on_read=reads.append)
    pending = planner.device(torch.tensor([[1.0, -2.0], [3.0, 0.5]]))
    assert pending.source is DEVICE and not pending.done()
    planner.batch.resolve()
    assert pending.done() and pending.result()[:4] == pytest.approx(expected, rel=1e-6)
    assert reads == [1]  # one device->host copy, of one tensor


def test_the_planner_bounds_its_batch():
    planner = StatisticsPlanner(MSPROBE, defer_cpu=True, max_pending=3)
    values = [planner.device(torch.randn(5) + index) for index in range(3)]
    assert all(value.done() for value in values) and not planner.batch.has_pending()


def test_the_formats_differ_only_in_their_rules():
    ints, flags = torch.tensor([1, 2, 6]), torch.tensor([True, False])
    assert LEGACY.eager(ints) == [6.0, 1.0, 3.0, math.sqrt(41.0)]
    assert MSPROBE.eager(flags) == [True, False, None, None]  # any, all
    assert LEGACY.eager(flags) == [1.0, 0.0, 0.5, 1.0]
    assert MSPROBE.eager(torch.tensor(-2.5)) == [-2.5] * 4  # a 0-d value's Norm keeps its sign
    assert LEGACY.eager(torch.tensor(-2.5)) == [-2.5, -2.5, -2.5, 2.5]
    numbers = msprobe_rules.eager_statistics(torch.tensor([1.0, float("inf"), -3.0]))
    assert msprobe_rules.extremes_except_inf_nan(numbers) == [1.0, -3.0]


def test_the_writer_threads_statistics_of_a_large_array_are_those_of_float64():
    """``array_statistics`` (the legacy writer thread's numbers of the npy it saves) of a 64 MB array, 64 of its
    square-sum chunks: max and min exact, the mean numpy's own, the norm within 5e-9 of the float64 value (the
    chunks are added in float64; one float32 sum of the whole array's squares is 2.6e-8 off here); inf and NaN
    still propagate."""
    import numpy

    rng = numpy.random.default_rng(3)
    count = 17 * (64 * eager._SQUARE_CHUNK // 17)  # as a 2-d npy
    array = (rng.standard_normal(count, dtype=numpy.float32) + 0.5).reshape(-1, 17)
    high, low, mean, norm = eager.array_statistics(array)
    flat = array.reshape(-1)
    exact = sum(float(numpy.dot(part, part)) for part in (flat[i:i + (1 << 20)].astype(numpy.float64)
                                                         for i in range(0, count, 1 << 20)))
    assert (high, low) == (float(array.max()), float(array.min()))
    assert mean == float(numpy.add.reduce(flat)) / count
    assert abs(norm - math.sqrt(exact)) <= 5e-9 * norm, abs(norm - math.sqrt(exact)) / norm
    flat[-1] = numpy.inf
    assert eager.array_statistics(array)[3] == math.inf
    flat[5] = numpy.nan
    assert all(math.isnan(value) for value in eager.array_statistics(array)[2:])
