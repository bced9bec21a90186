"""The statistics of an msprobe writer that arrive after the leaf is written (:class:`LateStatistics`):

- those of tensors off the CPU, reduced on their device and read back in batches
  (``statistics/device_batch.DeviceStatisticsBatch``): one host sync per batch instead of one per tensor;
- those of large saved CPU tensors, read by the writer thread from the copy it saves: the training thread
  takes the copy and nothing more.

Which tensors take which way is the writer's ``statistics/planner.StatisticsPlanner``'s choice; their numbers
are ``statistics/pending.PendingStatistics``, held by the entry's late leaves (``encoder.py``). An entry holding
such a leaf is unfinished until its numbers are in (``entries.py``).
"""

from __future__ import annotations

from typing import Any, Callable, Optional

from ptdbg_ascend.statistics.pending import PendingStatistics
from ptdbg_ascend.statistics.planner import StatisticsPlanner
from ptdbg_ascend.statistics.rules import MSPROBE

# Deferred statistics read back at once when this many wait (a bound on device memory between rewrites):
# a pending float tensor's six numbers wait as 0-d tensors until 32 tensors of its stream are stacked into one
# (device_batch.DeviceStatisticsBatch), a few KB per 32 tensors with a caching allocator: well under 4 MB.
MAX_PENDING_STATISTICS = 8192

# ``cached(tensor, reduce)``: the statistics of ``tensor`` from a cache, ``reduce(tensor)``'s when it is new there.
CachedReduce = Callable[[Any, Callable[[Any], Any]], Any]


class LateStatistics:
    """The late statistics of one writer.

    Args:
        planner: the writer's statistics planner. Default None: msprobe's rules with the front-ends' defaults
            (``planner.DEFAULTS``), its batch read back at MAX_PENDING_STATISTICS tensors.
    """

    def __init__(self, planner: Optional[StatisticsPlanner] = None) -> None:
        self.planner = planner or StatisticsPlanner(MSPROBE, max_pending=MAX_PENDING_STATISTICS)
        self.batch = self.planner.device_batch()  # its tensors wait until dump.json is next written
        # takes_device(tensor): whether the statistics of ``tensor`` are read back later (the planner's test).
        self.takes_device = self.planner.takes_device
        # The recording sink's statistics cache (``cached(tensor, reduce)``), set by it; None: every tensor is reduced.
        self.cached: Optional[CachedReduce] = None

    def for_copy(self, tensor: Any) -> Optional[PendingStatistics]:
        """New statistics for the writer thread to read from the copy of ``tensor`` it will save
        (:meth:`from_copy`), or None where they are read from ``tensor`` (the planner's ``takes_writer``)."""
        planner = self.planner
        return planner.for_writer() if planner.takes_writer(tensor) else None

    def from_copy(self, statistics: PendingStatistics, copy: Any) -> None:
        """Fill ``statistics`` from ``copy``, the host copy the writer thread saves (on that thread)."""
        self.planner.from_copy(statistics, copy)

    def pending_of(self, tensor: Any) -> Any:
        """The statistics of ``tensor`` (:attr:`takes_device`): pending in the batch until it is read back, or read
        now where there is nothing to read back. With :attr:`cached` set, the same unchanged tensor recorded
        recently (one call's output, the next call's input) shares its pending numbers instead of launching its
        reductions again (7 launches per float tensor on an accelerator)."""
        cached = self.cached
        device = self.planner.device
        return device(tensor) if cached is None else cached(tensor, device)
