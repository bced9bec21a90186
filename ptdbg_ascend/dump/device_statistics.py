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
    copy per device (one sync however many tensors) and fills them in place. Memory: four 0-d tensors
    per pending tensor on its device (and those ``extra`` adds); the writer resolves at
    :data:`BATCH_RECORDS` pending tensors, after :data:`BATCH_SECONDS`, and at flush/close. Thread-safe:
    the writer thread may resolve while the training thread adds.
    """

    # A batch is read at this many pending tensors: each read is a host sync, which on a GPU made the legacy
    # dump wait ~1.5 ms for the device 21 times a step at 64 (the large model of bench/device_bench.py on an
    # H200, 2,285 tensors a step); BATCH_SECONDS bounds how long a line waits either way.
    BATCH_RECORDS = 1024
    BATCH_SECONDS = 1.0
    # Stacked batches join the numbers of this many tensors recorded on one stream into one tensor.
    STACK_EVERY = 32

    def __init__(self, stacked: bool = False) -> None:
        """``stacked`` (default False): keep the numbers of every :data:`STACK_EVERY` tensors queued on one
        stream as one tensor (``torch.stack`` of their 0-d parts, six per tensor with msprobe's extremes), for
        a batch whose tensors wait long to be read (the PrecisionDebugger's wait until dump.json is next
        written, thousands of them; the legacy pkl's, up to BATCH_RECORDS): Python's garbage collector walks
        every tensor kept, and 8 per tensor
        cost ~60 us per call on the emulated device path of ``bench/bench_per_call.py`` (197 -> 121 us).
        A stack per tensor did that at one launch more per tensor, which a device run showed is what a call
        costs on a GPU (~14 us per launch on an H200): one per STACK_EVERY tensors now. torch.stack promotes
        a bf16 extreme to the float32 of the statistics (or an int's float64), exactly."""
        import threading

        self._pending = []  # type: List[PendingDeviceStatistics]
        self._lock = threading.Lock()
        self._since = 0.0
        self.transfers = 0  # host syncs done (one per device per resolve): tests and benchmarks read it
        self._stacked = stacked
        # Stacked batches: per stream key (LAUNCH_STREAMS.note), the tensors whose parts are not stacked yet;
        # and the stacks made, each with its tensors in order.
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
            if self._stacked:
                run = self._runs.setdefault(stream, [])
                run.append(pending)
                if len(run) >= self.STACK_EVERY:
                    # On the stream the parts were made on (the caller's current one: its key is the run's),
                    # so the stack reads them in order and their memory is reused only after it.
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
        """Read every pending statistics back (one copy per device) and fill them in place. Safe on any
        thread (the writer's, or the training thread at OFF): its torch calls are never recorded."""
        with self._lock, Inside():
            pending, self._pending = self._pending, []
            if not pending:
                return
            torch = _torch_types().torch
            if self._stacked:
                self._resolve_stacked(torch)
                return
            by_device = {}  # type: dict
            for item in pending:
                by_device.setdefault(item.values[0].device, []).append(item)
            for device, items in by_device.items():
                with LAUNCH_STREAMS.reading(device):  # after the streams the reductions went to
                    host = _read_back(torch, [part for item in items for part in item.values])
                self.transfers += 1
                _fill(items, host)

    def _resolve_stacked(self, torch: Any) -> None:
        """:meth:`resolve` of a stacked batch: its stacks, and the parts of the tensors not stacked yet."""
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
                host = _read_back(torch, joined, True)
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


def _read_back(torch: Any, parts: List[Any], stacked: bool = False) -> List[float]:
    """The values of the 0-d tensors ``parts`` (all on one device) with one device->host copy: stacked per
    dtype (a float32 statistic and a bfloat16 extreme), widened to float64 (exact) and joined. ``stacked``
    (default False): ``parts`` are 1-d tensors, joined (float32 and float64 ones as float64: exact)."""
    if stacked:
        return (torch.cat(parts) if len(parts) > 1 else parts[0]).tolist()
    groups: Dict[Any, List[int]] = {}
    for index, part in enumerate(parts):
        groups.setdefault(part.dtype, []).append(index)
    if len(groups) == 1:
        return torch.stack(parts).tolist()
    joined = torch.cat([torch.stack([parts[index] for index in group]).double() for group in groups.values()])
    values = [0.0] * len(parts)
    for index, value in zip([index for group in groups.values() for index in group], joined.tolist()):
        values[index] = value
    return values


def _finalised(numbers: List[float], count: int) -> List[float]:
    """``[max, min, mean, norm] + extras`` from the read-back ``[max, min, sum, norm] + extras`` of a tensor
    of ``count`` elements (0: a 0-d value, whose third number is itself and fourth its own value, the norm
    being its magnitude). The mean's division on the host in float64, as the CPU path does."""
    high, low, total, norm = numbers[:4]
    if count == 0:
        return [high, low, total, abs(norm)] + numbers[4:]
    return [high, low, total / count, norm] + numbers[4:]
