"""The leaves of an msprobe writer whose statistics arrive after the leaf is built (:class:`LateStatistics`):

- those of tensors off the CPU, reduced on their device and read back in batches
  (``statistics/device_batch.DeviceStatisticsBatch``): one host sync per batch instead of one per tensor;
- those of large saved CPU tensors, read by the writer thread from the copy it saves: the training thread
  takes the copy and nothing more.

Which tensors take which way is the writer's ``statistics/planner.StatisticsPlanner``'s choice; their numbers
are ``statistics/pending.PendingStatistics``. An entry holding such a leaf is unfinished until its numbers are
in (``entries.py``).
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Tuple

from ptdbg_ascend.sinks.msprobe.leaves import fill_statistics
from ptdbg_ascend.statistics.pending import PendingStatistics
from ptdbg_ascend.statistics.planner import StatisticsPlanner
from ptdbg_ascend.statistics.rules import MSPROBE

# Deferred statistics read back at once when this many wait (a bound on device memory between rewrites):
# a pending float tensor's six numbers wait as 0-d tensors until 32 tensors of its stream are stacked into one
# (device_batch.DeviceStatisticsBatch), a few KB per 32 tensors with a caching allocator: well under 4 MB.
MAX_PENDING_STATISTICS = 8192

Leaves = List[Tuple[Dict[str, Any], Any]]  # (leaf, its pending numbers)
# ``cached(tensor, reduce)``: the statistics of ``tensor`` from a cache, ``reduce(tensor)``'s when it is new there.
CachedReduce = Callable[[Any, Callable[[Any], Any]], Any]


class LateStatistics(object):
    """The late leaves of one writer.

    Args:
        lock: the writer's lock, under which new leaves are collected (backward hooks may run on autograd's
            threads) and :meth:`take_new` / :meth:`forget_new` are called.
        planner: the writer's statistics planner. Default None: msprobe's rules with the front-ends' defaults
            (``planner.DEFAULTS``), its batch read back at MAX_PENDING_STATISTICS tensors.
    """

    def __init__(self, lock: Any, planner: Optional[StatisticsPlanner] = None) -> None:
        self.planner = planner or StatisticsPlanner(MSPROBE, max_pending=MAX_PENDING_STATISTICS)
        self.batch = self.planner.device_batch()  # its tensors wait until dump.json is next written
        self._lock = lock
        self._new = []  # type: Leaves  # leaves deferred since the last take_new (an entry being built)
        # The recording sink's statistics cache (``cached(tensor, reduce)``), set by it; None: every tensor is reduced.
        self.cached = None  # type: Optional[CachedReduce]
        # id of a tensor just saved -> (tensor, the statistics the writer thread reads from its copy),
        # until its leaf takes them (defer_leaf).
        self._from_copies = {}  # type: Dict[int, Tuple[Any, PendingStatistics]]

    def for_copy(self, tensor: Any) -> Optional[PendingStatistics]:
        """New statistics for the writer thread to read from the copy of ``tensor`` it will save
        (:meth:`from_copy`), or None where they are read from ``tensor`` (the planner's ``takes_writer``)."""
        planner = self.planner
        return planner.for_writer() if planner.takes_writer(tensor) else None

    def from_copy(self, statistics: PendingStatistics, copy: Any) -> None:
        """Fill ``statistics`` from ``copy``, the host copy the writer thread saves (on that thread)."""
        self.planner.from_copy(statistics, copy)

    def expect(self, tensor: Any, statistics: PendingStatistics) -> None:
        """The leaf of ``tensor``, built next (:meth:`defer_leaf`), takes ``statistics``: those the writer
        thread reads from the copy of ``tensor`` it saves (or saved, for a tensor recorded again)."""
        self._from_copies[id(tensor)] = (tensor, statistics)

    def defer_leaf(self, leaf: Dict[str, Any], tensor: Any) -> bool:
        """``leaves.tensor_leaf``'s hook. A tensor just saved whose statistics come from its copy:
        ``leaf`` waits for them. One off the CPU: its reductions are queued on its device and ``leaf`` is
        filled when they are read back (next rewrite or flush: one sync per device). Returns whether
        ``leaf`` was taken (False: its statistics are read now).

        Through :attr:`cached` when the sink set it: see :meth:`pending_of`."""
        taken = self._from_copies.pop(id(tensor), None) if self._from_copies else None
        if taken is not None and taken[0] is tensor:
            with self._lock:
                self._new.append((leaf, taken[1]))
            return True
        if not self.planner.takes_device(tensor):
            return False
        pending = self.pending_of(tensor)
        if type(pending) is not PendingStatistics:  # nothing to read back (no values)
            fill_statistics(leaf, pending)
            return True
        with self._lock:
            self._new.append((leaf, pending))
        return True

    def wait_for(self, leaves: Leaves) -> None:
        """Leaves of the entry being built, filled when their pending numbers are read (an in-place call's
        input texts turned into dicts: ``entry_text.late_text_value``)."""
        with self._lock:
            self._new.extend(leaves)

    def pending_of(self, tensor: Any) -> Any:
        """The statistics of ``tensor`` (the planner's ``takes_device``): pending in the batch until it is read
        back, or read now where there is nothing to read back. With :attr:`cached` set, the same unchanged
        tensor recorded recently (one call's output, the next call's input) shares its pending numbers instead
        of launching its reductions again (7 launches per float tensor on an accelerator)."""
        cached = self.cached
        device = self.planner.device
        return device(tensor) if cached is None else cached(tensor, device)

    def new_count(self) -> int:
        """How many leaves were deferred since the last :meth:`take_new` (the entry being built)."""
        return len(self._new)

    def take_new(self) -> Leaves:
        """The leaves deferred since the last call: those of the entry being added (under the lock)."""
        new = self._new
        if new:
            self._new = []
        if self._from_copies:  # a saved tensor whose leaf read its statistics itself (a special kind)
            self._from_copies.clear()
        return new

    def forget_new(self) -> None:
        """Drop the leaves of an entry still being built: it is never added (a write error; under the lock)."""
        self._new = []
        self._from_copies.clear()
