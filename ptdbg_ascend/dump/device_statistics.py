"""Statistics of accelerator tensors kept on their device and read back in batches.

On an accelerator, reading a tensor's four numbers back is a host sync, which stalls the training thread
until the device has caught up. :class:`DeviceStatisticsBatch` launches the reductions of each tensor at
its call (``statistics._reductions``) and reads a whole batch back with one device->host copy per device;
each tensor's :class:`PendingDeviceStatistics` is filled in place then. Which tensors take this path is
``statistics.DEFERRAL``'s setting.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Dict, List, Optional, Tuple

from ptdbg_ascend.dump.interception import Inside
from ptdbg_ascend.dump.statistics import Statistics, _reductions, _torch_types, special_statistics, tensor_statistics
from ptdbg_ascend.streams import LAUNCH_STREAMS


class PendingDeviceStatistics(list):
    """The statistics of an accelerator tensor, still on the device: ``[None] * 4`` until the
    :class:`DeviceStatisticsBatch` that made it reads its batch back (then the four numbers, in place)."""

    __slots__ = ("values", "count")


class DeviceStatisticsBatch(object):
    """Statistics of accelerator tensors kept on their device and read back in batches.

    :meth:`add` enqueues the reductions of a tensor (no host sync) and returns a
    :class:`PendingDeviceStatistics`; :meth:`resolve` reads every pending one with one device->host
    copy per device (one sync however many tensors) and fills them in place. Memory on the device: the 0-d
    results of a tensor's reductions (four, and those ``extra`` adds) until :data:`STACK_EVERY` tensors
    queued on one stream are stacked into one tensor, which then holds their numbers until the read. The
    legacy writer resolves at :data:`BATCH_RECORDS` pending tensors, after :data:`BATCH_SECONDS`, and at
    flush/close; the PrecisionDebugger's when dump.json is next written (or at 8,192 pending). Thread-safe:
    the writer thread may resolve while the training thread adds.

    Why a stack per run: the tensors of a batch wait up to a second to be read (thousands of them), and
    Python's garbage collector walks every tensor kept: 8 kept per tensor cost ~60 us per call on the
    emulated device path of ``bench/bench_per_call.py`` (197 -> 121 us). Stacking each tensor's numbers at
    once cost a launch per tensor, ~14 us of host time on an H200; one per STACK_EVERY tensors now.
    torch.stack promotes a bf16 extreme to the float32 of the statistics (or an int's float64), exactly.
    """

    # A batch is read at this many pending tensors: each read is a host sync, which on a GPU made the legacy
    # dump wait ~1.5 ms for the device 21 times a step at 64 (the large model of bench/device_bench.py on an
    # H200, 2,285 tensors a step); BATCH_SECONDS bounds how long a line waits either way.
    BATCH_RECORDS = 1024
    BATCH_SECONDS = 1.0
    # The numbers of this many tensors recorded on one stream are joined into one tensor.
    STACK_EVERY = 32

    def __init__(self) -> None:
        import threading

        self._pending = []  # type: List[PendingDeviceStatistics]
        self._lock = threading.Lock()
        self._since = 0.0
        self.transfers = 0  # host syncs done (one per device per resolve): tests and benchmarks read it
        # Per stream key (LAUNCH_STREAMS.note), the tensors whose parts are not stacked yet; and the stacks
        # made, each with its tensors in order.
        self._runs = {}  # type: Dict[Any, List[PendingDeviceStatistics]]
        self._stacks = []  # type: List[Tuple[Any, List[PendingDeviceStatistics]]]

    def add(self, tensor: Any, extra: "Optional[Callable[[Any], List[Any]]]" = None) -> Statistics:
        """The statistics of ``tensor``: pending when it lives on an accelerator and needs reductions,
        else computed now (empty, special kinds). ``extra(tensor)`` (default None) gives more 0-d
        tensors to read back with them: the pending list then holds the four statistics and those.

        Only the reductions are launched here (aminmax, sum, vector_norm: three kernels for a float
        tensor, half types included); the mean's division and the joining of the numbers for the copy
        happen once per batch (:meth:`resolve`), because on an accelerator every launch costs the training
        thread a few microseconds whatever the tensor's size."""
        if tensor.is_meta:  # no values to read back
            return tensor_statistics(tensor)
        types = _torch_types()
        # Inside(): the tool's own torch calls are not API calls of the script (no record, no counter).
        with Inside():
            try:
                reduced = _reductions(tensor.detach(), types, host_shortcuts=False)
            except (RuntimeError, TypeError, ValueError, NotImplementedError):
                return special_statistics(tensor)
            if not isinstance(reduced, tuple):
                return reduced
            high, low, total, norm, count = reduced  # the deferred path's fourth value is the norm itself
            # A 0-d value's norm is its magnitude (no v*v overflow): read |low| then, see _finalised.
            parts = [high, low, total, low if norm is None else norm]
            if extra is not None:
                parts.extend(extra(tensor))
            return self.enqueue(parts, count if norm is not None else 0, tensor.device)

    def enqueue(self, parts: List[Any], count: int, device: Any) -> "PendingDeviceStatistics":
        """Queue the 0-d tensors ``parts`` on ``device`` (max, min, sum, norm, extras) of a tensor of ``count``
        elements (0: a 0-d value, see :func:`_finalised`) and return their pending list (:meth:`add`). Call it
        inside ``Inside()`` (its stack is the tool's own call)."""
        pending = PendingDeviceStatistics([None] * len(parts))
        pending.values = parts
        pending.count = count
        stream = LAUNCH_STREAMS.note(device)  # the read waits for this stream (a side stream's work too)
        with self._lock:
            if not self._pending:
                self._since = time.monotonic()
            self._pending.append(pending)
            run = self._runs.setdefault(stream, [])
            run.append(pending)
            if len(run) >= self.STACK_EVERY:
                # On the stream the parts were made on (the caller's current one: its key is the run's), so
                # the stack reads them in order and their memory is reused only after it.
                del self._runs[stream]
                stacked = _torch_types().torch.stack([part for item in run for part in item.values])
                for item in run:
                    item.values = stacked  # the 0-d parts go; still pending (not None) until read
                self._stacks.append((stacked, run))
        return pending

    def has_pending(self) -> bool:
        """Whether statistics are waiting to be read."""
        return bool(self._pending)

    def pending_count(self) -> int:
        """How many tensors' statistics are waiting to be read."""
        return len(self._pending)

    def due(self) -> bool:
        """Whether the batch should be read now (full, or its oldest entry is BATCH_SECONDS old)."""
        pending = self._pending
        return bool(pending) and (len(pending) >= self.BATCH_RECORDS
                                  or time.monotonic() - self._since >= self.BATCH_SECONDS)

    def resolve(self) -> None:
        """Read every pending statistics back (one copy per device) and fill them in place: the stacks, and the
        parts of the tensors whose run is not full yet. Safe on any thread (the writer's, or the training
        thread at OFF): its torch calls are never recorded."""
        with self._lock, Inside():
            pending, self._pending = self._pending, []
            if not pending:
                return
            torch = _torch_types().torch
            stacks, self._stacks = self._stacks, []
            runs, self._runs = self._runs, {}
            by_device = {}  # type: Dict[Any, Tuple[List[Any], List[PendingDeviceStatistics], List[Any]]]
            for stacked, items in stacks:
                joined, ordered, _ = by_device.setdefault(stacked.device, ([], [], []))
                joined.append(stacked)
                ordered.extend(items)
            for run in runs.values():
                for item in run:
                    by_device.setdefault(item.values[0].device, ([], [], []))[2].append(item)
            for device, (joined, ordered, loose) in by_device.items():
                with LAUNCH_STREAMS.reading(device):  # after the streams the reductions and stacks went to
                    if loose:
                        joined.append(torch.stack([part for item in loose for part in item.values]))
                    host = _read_back(torch, joined)
                self.transfers += 1
                _fill(ordered + loose, host)


def _fill(items: List[PendingDeviceStatistics], host: List[float]) -> None:
    """Fill each pending ``item`` in place from ``host``, the read-back parts of ``items`` in order, and let its
    device memory go."""
    start = 0
    for item in items:
        end = start + len(item)
        item[:] = _finalised(host[start:end], item.count)
        start = end
        item.values = None  # the device memory goes now


def _read_back(torch: Any, stacks: List[Any]) -> List[float]:
    """The values of the 1-d tensors ``stacks`` (all on one device) with one device->host copy, joined (float32
    and float64 ones as float64: exact)."""
    return (torch.cat(stacks) if len(stacks) > 1 else stacks[0]).tolist()


def _finalised(numbers: List[float], count: int) -> List[float]:
    """``[max, min, mean, norm] + extras`` from the read-back ``[max, min, sum, norm] + extras`` of a tensor
    of ``count`` elements (0: a 0-d value, whose third number is itself and fourth its own value, the norm
    being its magnitude). The mean's division on the host in float64, as the CPU path does."""
    high, low, total, norm = numbers[:4]
    if count == 0:
        return [high, low, total, abs(norm)] + numbers[4:]
    return [high, low, total / count, norm] + numbers[4:]
