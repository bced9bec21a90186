"""The leaves of an msprobe writer whose statistics arrive after the leaf is built (:class:`LateStatistics`):

- those of tensors off the CPU, reduced on their device and read back in batches
  (``dump/device_statistics.DeviceStatisticsBatch``): one host sync per batch instead of one per tensor;
- those of large saved CPU tensors, read by the writer thread from the copy it saves (:class:`CopyStatistics`):
  the training thread takes the copy and nothing more.

An entry holding such a leaf is unfinished until its numbers are in (``entries.py``).
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Tuple

import torch

from ptdbg_ascend.dump.interception import Inside
from ptdbg_ascend.dump.device_statistics import DeviceStatisticsBatch, PendingDeviceStatistics
from ptdbg_ascend.dump.statistics import DEFERRAL, WRITER_STATISTICS_MIN_ELEMENTS
from ptdbg_ascend.log import logger
from ptdbg_ascend.msprobe.leaves import (defer_candidate, deferred_reductions, eager_statistics, fill_statistics,
                                         msprobe_reduced)

# Deferred statistics read back at once when this many wait (a bound on device memory between rewrites):
# a pending float tensor's six numbers wait as 0-d tensors until 32 tensors of its stream are stacked into one
# (device_statistics.DeviceStatisticsBatch), a few KB per 32 tensors with a caching allocator: well under 4 MB.
MAX_PENDING_STATISTICS = 8192

Leaves = List[Tuple[Dict[str, Any], Any]]  # (leaf, its pending numbers)
# ``cached(tensor, reduce)``: the statistics of ``tensor`` from a cache, ``reduce(tensor)``'s when it is new there.
CachedReduce = Callable[[Any, Callable[[Any], Any]], Any]


class CopyStatistics(list):
    """The statistics of a saved CPU tensor, read by the writer thread from the copy it saves
    (:meth:`compute`), so the training thread takes the copy and nothing more, as the legacy writer does
    for npy files. Pending until then (``values`` is not None): ``entries.py`` waits for it as for
    statistics still on a device, and then fills the leaf with the list (:func:`eager_statistics`' numbers,
    the same the training thread would have read: only a contiguous tensor is handed over, whose copy
    has its layout, so every reduction runs in the same order)."""

    __slots__ = ("values",)

    def __init__(self) -> None:
        super().__init__([None, None, None, None])
        self.values = True

    @staticmethod
    def wanted(tensor: Any) -> bool:
        """Whether the statistics of ``tensor`` (about to be saved) are read from its copy: a contiguous CPU
        tensor of a real or integer dtype (not bool) with a dimension and at least
        ``WRITER_STATISTICS_MIN_ELEMENTS`` elements (smaller ones cost less at the call than on the writer
        thread)."""
        return (tensor.is_cpu and tensor.dim() > 0 and tensor.numel() >= WRITER_STATISTICS_MIN_ELEMENTS
                and not tensor.is_complex() and tensor.dtype is not torch.bool and tensor.is_contiguous())

    def compute(self, copy: Any) -> None:
        """Read the statistics of ``copy`` (on the writer thread); never raises (a failure gives nulls)."""
        try:
            with Inside():  # the tool's own torch calls are not API calls of the script
                numbers = eager_statistics(copy)
        except Exception as error:  # noqa: BLE001 - a dump must never stop training
            numbers = [None, None, None, None]
            if not _WARNED:
                _WARNED.append(error)
                logger.warning("Statistics of a {} tensor cannot be computed ({}: {}); its leaf holds null "
                               "statistics.".format(copy.dtype, type(error).__name__, error))
        self[:] = numbers
        self.values = None  # last: entries.py reads the numbers once this is None


_WARNED = []  # type: List[BaseException]


class LateStatistics(object):
    """The late leaves of one writer.

    Args:
        lock: the writer's lock, under which new leaves are collected (backward hooks may run on autograd's
            threads) and :meth:`take_new` / :meth:`forget_new` are called.
    """

    def __init__(self, lock: Any) -> None:
        self.batch = DeviceStatisticsBatch()  # its tensors wait until dump.json is next written
        self._lock = lock
        self._defer_cpu = DEFERRAL.on_cpu  # read once, as the sink does
        self._new = []  # type: Leaves  # leaves deferred since the last take_new (an entry being built)
        # The recording sink's statistics cache (``cached(tensor, reduce)``), set by it; None: every tensor is reduced.
        self.cached = None  # type: Optional[CachedReduce]
        # id of a tensor just saved -> (tensor, the statistics the writer thread reads from its copy),
        # until its leaf takes them (defer_leaf).
        self._from_copies = {}  # type: Dict[int, Tuple[Any, CopyStatistics]]

    def for_copy(self, tensor: Any) -> Optional[CopyStatistics]:
        """New statistics for the writer thread to read from the copy of ``tensor`` it will save, or None
        where they are read from ``tensor`` (``CopyStatistics.wanted``; and when CPU tensors take the
        accelerator's path, as tests make them: ``DEFERRAL.on_cpu``)."""
        return None if self._defer_cpu or not CopyStatistics.wanted(tensor) else CopyStatistics()

    def expect(self, tensor: Any, statistics: CopyStatistics) -> None:
        """The leaf of ``tensor``, built next (:meth:`defer_leaf`), takes ``statistics``: those the writer
        thread reads from the copy of ``tensor`` it saves (or saved, for a tensor recorded again)."""
        self._from_copies[id(tensor)] = (tensor, statistics)

    def defer_leaf(self, leaf: Dict[str, Any], tensor: Any) -> bool:
        """``msprobe.leaves.tensor_leaf``'s hook. A tensor just saved whose statistics come from its copy:
        ``leaf`` waits for them. One off the CPU: its reductions are queued on its device and ``leaf`` is
        filled when they are read back (next rewrite or flush: one sync per device). Returns whether
        ``leaf`` was taken (False: its statistics are read now).

        Through :attr:`cached` when the sink set it: see :meth:`pending_of`."""
        taken = self._from_copies.pop(id(tensor), None) if self._from_copies else None
        if taken is not None and taken[0] is tensor:
            with self._lock:
                self._new.append((leaf, taken[1]))
            return True
        if not defer_candidate(tensor, self._defer_cpu):
            return False
        pending = self.pending_of(tensor)
        if type(pending) is not PendingDeviceStatistics:  # nothing to read back (no values)
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
        """The statistics of ``tensor`` (``defer_candidate``): pending in the batch until it is read back, or
        read now where there is nothing to read back. With :attr:`cached` set, the same unchanged tensor
        recorded recently (one call's output, the next call's input) shares its pending numbers instead of
        launching its reductions again (7 launches per float tensor on an accelerator)."""
        cached = self.cached
        pending = self._reduce(tensor) if cached is None else cached(tensor, self._reduce)
        batch = self.batch
        if batch.pending_count() >= MAX_PENDING_STATISTICS:  # bounded: read back now
            batch.resolve()
        return pending

    def _reduce(self, tensor: Any) -> Any:
        """The statistics of ``tensor`` from the batch: pending, or read now when there is nothing to read back."""
        floating = tensor.is_floating_point()
        if tensor.dim() == 0:
            # msprobe's rule for a 0-d tensor: its value, exact, four times (the Norm too, sign and all), and
            # not reduced in float32. Queued rather than read now: reading it would stop the host until the
            # device has caught up with everything queued before it.
            with Inside():
                value = tensor.detach() if floating else tensor.detach().double()  # an int: exact to 2**53
                parts = [value, value, value, value] + (deferred_reductions(value) if floating else [])
                return self.batch.enqueue(parts, 1, value.device)
        # Values reduced from ints cannot be infinite or NaN: no finite extremes to prepare for them.
        return self.batch.add(msprobe_reduced(tensor), extra=deferred_reductions if floating else None)

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
