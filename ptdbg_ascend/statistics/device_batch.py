"""Statistics of accelerator tensors kept on their device and read back in batches: the one place that
launches statistics kernels on a device (the seam to replace for other kernels).

On an accelerator, reading a tensor's four numbers back is a host sync, which stalls the training thread
until the device has caught up. :class:`DeviceStatisticsBatch` either queues a reference to a tensor in its
:class:`~ptdbg_ascend.statistics.fused_batch.FusedQueue` (:meth:`~DeviceStatisticsBatch.queued`: one fused pass
over many tensors at a launch) or launches the reductions of the tensor at its call (:meth:`~DeviceStatisticsBatch.add`:
:func:`device_reductions`, and the extras a format's rules ask for, such as msprobe's :func:`finite_pair`), and
reads a whole batch back with one device->host copy per device; each tensor's
:class:`~ptdbg_ascend.statistics.pending.PendingStatistics` is filled in place then. Which tensors take this
path is the planner's choice (``planner.py``).
"""

from __future__ import annotations

import time
from typing import Any, Callable, Dict, List, Optional, Tuple

from ptdbg_ascend.inside import Inside
from ptdbg_ascend.statistics.eager import (Statistics, TorchTypes, min_max, reduction_input, special_statistics,
                                           tensor_statistics, torch_types)
from ptdbg_ascend.statistics.fused_batch import AUTO, OFF, FusedQueue, Launched, unseen_warning
from ptdbg_ascend.statistics.fused_plan import WIDTH
from ptdbg_ascend.statistics.pending import DEVICE, PendingStatistics
from ptdbg_ascend.streams import LAUNCH_STREAMS


class DeviceStatisticsBatch:
    """Statistics of accelerator tensors kept on their device and read back in batches.

    :meth:`add` enqueues the reductions of a tensor (no host sync) and returns a
    :class:`PendingStatistics`; :meth:`resolve` reads every pending one with one device->host
    copy per device (one sync however many tensors) and fills them in place. Memory on the device: the 0-d
    results of a tensor's reductions (four, and those ``extra`` adds) until :data:`STACK_EVERY` tensors
    queued on one stream are stacked into one tensor, which then holds their numbers until the read. The
    legacy writer resolves at :data:`BATCH_RECORDS` pending tensors, after :data:`BATCH_SECONDS`, and at
    flush/close; the PrecisionDebugger's when dump.json is next written (or at 8,192 pending). Thread-safe:
    the writer thread may resolve while the training thread adds.

    Why a stack per run: the tensors of a batch wait up to a second to be read (thousands of them), and
    Python's garbage collector walks every tensor kept: 8 kept per tensor cost ~60 us per call on the
    emulated device path of ``bench/bench_per_call.py``. Stacking each tensor's numbers at
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

    def __init__(self, on_read: Optional[Callable[[int], None]] = None, fused: str = AUTO,
                 runners: Optional[Dict[str, str]] = None) -> None:
        """``on_read(tensors)`` (default None) is called after each device->host copy with the number of tensors
        it read (one copy per device per :meth:`resolve`): how tests and benchmarks count the host syncs.
        ``fused``: ``fused_batch.AUTO`` (default), ``EMULATED`` or ``OFF`` (no queue: every tensor's reductions
        are launched at its call); ``runners``: given to the queue (``FusedQueue(runners=)``), default None."""
        import threading

        self._pending: List[PendingStatistics] = []
        self._lock = threading.Lock()
        self._since = 0.0
        self._on_read = on_read
        # Per stream key (LAUNCH_STREAMS.note), the tensors whose parts are not stacked yet; and the stacks
        # made, each with its tensors in order.
        self._runs: Dict[Any, List[PendingStatistics]] = {}
        self._stacks: List[Tuple[Any, List[PendingStatistics]]] = []
        # The references to tensors read by one fused pass (None: OFF).
        self.queue: Optional[FusedQueue] = None if fused == OFF else FusedQueue(fused, runners)

    def queued(self, tensor: Any, fmt: str) -> Optional[PendingStatistics]:
        """The statistics of ``tensor`` in format ``fmt`` (``fused_plan.LEGACY``/``MSPROBE``) from the fused
        queue, pending until the batch is read back; None where the queue does not take it (the caller then
        takes :meth:`add`'s path)."""
        queue = self.queue
        if queue is None:
            return None
        pending = queue.add(tensor, fmt)
        if pending is not None:
            # After the queue (never the other way round): a read between the two fills it early, never not at all.
            with self._lock:
                if not self._pending:
                    self._since = time.monotonic()
                self._pending.append(pending)
        return pending

    def launch(self) -> None:
        """Queue the fused pass over the tensors the queue holds now (nothing read back)."""
        if self.queue is not None:
            self.queue.launch()

    def add(self, tensor: Any, extra: Optional[Callable[[Any], List[Any]]] = None) -> Statistics:
        """The statistics of ``tensor``: pending when it lives on an accelerator and needs reductions,
        else computed now (empty, special kinds). ``extra(tensor)`` (default None) gives more 0-d
        tensors to read back with them: the pending list then holds the four statistics and those.

        Only the reductions are launched here (aminmax, sum, vector_norm: three kernels for a float
        tensor, half types included); the mean's division and the joining of the numbers for the copy
        happen once per batch (:meth:`resolve`), because on an accelerator every launch costs the training
        thread a few microseconds whatever the tensor's size."""
        if tensor.is_meta:  # no values to read back
            return tensor_statistics(tensor)
        types = torch_types()
        # Inside(): the tool's own torch calls are not API calls of the script (no record, no counter).
        with Inside():
            try:
                reduced = device_reductions(tensor.detach(), types)
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

    def enqueue(self, parts: List[Any], count: int, device: Any) -> PendingStatistics:
        """Queue the 0-d tensors ``parts`` on ``device`` (max, min, sum, norm, extras) of a tensor of ``count``
        elements (0: a 0-d value, see :func:`_finalised`) and return their pending list (:meth:`add`). Call it
        inside ``Inside()`` (its stack is the tool's own call)."""
        pending = PendingStatistics([None] * len(parts))  # (built here: this runs for every deferred tensor)
        pending.values, pending.count, pending.source = parts, count, DEVICE
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
                stacked = torch_types().torch.stack([part for item in run for part in item.values])
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
        """Read every pending statistics back (one copy per device) and fill them in place: the stacks, the parts
        of the tensors whose run is not full yet and the fused passes (launched now if still queued). Safe on
        any thread (the writer's, or the training thread at OFF): its torch calls are never recorded."""
        with self._lock, Inside():
            pending, self._pending = self._pending, []
            if not pending:
                return
            launched, changed = self.queue.take_launched() if self.queue is not None else ([], 0)
            torch = torch_types().torch
            for device, parts in self._by_device(launched).items():
                self._read_device(torch, device, *parts)
        if changed:
            unseen_warning(changed)

    def _by_device(self, launched: List[Launched]) -> Dict[Any, Tuple[List[Any], List[PendingStatistics],
                                                                      List[PendingStatistics], List[Launched]]]:
        """Per device: the stacks made, the tensors they hold, those of the runs not stacked yet, and the fused
        passes; taken out of the batch (under its lock)."""
        stacks, self._stacks = self._stacks, []
        runs, self._runs = self._runs, {}
        by_device: Dict[Any, Tuple[List[Any], List[PendingStatistics], List[PendingStatistics], List[Launched]]] = {}
        for stacked, items in stacks:
            joined, ordered, _, _ = by_device.setdefault(stacked.device, ([], [], [], []))
            joined.append(stacked)
            ordered.extend(items)
        for run in runs.values():
            for item in run:
                by_device.setdefault(item.values[0].device, ([], [], [], []))[2].append(item)
        for item in launched:
            by_device.setdefault(item.device, ([], [], [], []))[3].append(item)
        return by_device

    def _read_device(self, torch: Any, device: Any, joined: List[Any], ordered: List[PendingStatistics],
                     loose: List[PendingStatistics], passes: List[Launched]) -> None:
        """One device's read-back: the stacks, the loose parts and the fused passes' final rows in one copy (an
        emulated pass's rows are host numbers already)."""
        on_device = [item for item in passes if not item.on_host()]
        with LAUNCH_STREAMS.reading(device):  # after the streams the reductions, stacks and passes went to
            if loose:
                joined.append(torch.stack([part for item in loose for part in item.values]))
            tails = joined + [item.finals.reshape(-1) for item in on_device]
            host = _read_back(torch, tails) if tails else []
        stacked = ordered + loose
        start = sum(len(item) for item in stacked)
        _fill(stacked, host[:start])
        for item in on_device:
            end = start + len(item.pending) * WIDTH
            item.fill(host[start:end])
            start = end
        for item in passes:
            if item.on_host():
                item.fill(item.finals.reshape(-1).tolist())
        if self._on_read is not None:
            self._on_read(len(stacked) + sum(len(item.pending) for item in passes))

    def add_value(self, value: Any, extra: Optional[Callable[[Any], List[Any]]] = None) -> PendingStatistics:
        """The statistics of a 0-d ``value`` (already in the dtype to read back, and a copy: the tensor recorded
        may change before the read, see :func:`device_reductions`) as the value four times, and
        ``extra(value)``'s 0-d tensors after them: queued, no reduction (reading it now would stop the host until
        the device has caught up with everything queued before it)."""
        with Inside():
            parts = [value, value, value, value] + (extra(value) if extra is not None else [])
            return self.enqueue(parts, 1, value.device)


def _fill(items: List[PendingStatistics], host: List[float]) -> None:
    """Fill each pending ``item`` in place from ``host``, the read-back parts of ``items`` in order, and let its
    device memory go."""
    start = 0
    for item in items:
        end = start + len(item)
        item.fill(_finalised(host[start:end], item.count))  # and the device memory goes
        start = end


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


def device_reductions(data: Any, types: TorchTypes) -> Any:
    """``(max, min, sum, norm, count)`` as 0-d tensors on ``data``'s device (nothing read back; the norm is
    None for a 0-d tensor, whose norm is its magnitude), or the finished statistics of an empty tensor.

    Every launch costs the host microseconds here: the fourth value is the norm itself, one ``vector_norm``
    instead of a product and a sum, and float16/bfloat16 are reduced without a float32 copy (the sum and the
    norm accumulate in float32 themselves): 3 launches per tensor; the numbers agree with the eager path's to
    float32 rounding."""
    prepared = reduction_input(data, types.torch, half_native=True)
    if type(prepared) is list:
        return prepared
    work, accumulate = prepared
    if work.dim() == 0:
        # A copy when it is the tensor itself: read back later, the tensor may have changed by then (AdamW's
        # ``step_t += 1`` made the dump show the incremented step as the increment's input). One small launch.
        work = work.clone() if work is data else work
        return work, work, work, None, 1
    torch = types.torch
    try:
        low, high = min_max(work)
        return high, low, torch.sum(work, dtype=accumulate), torch.linalg.vector_norm(work, dtype=accumulate), \
            work.numel()
    except (RuntimeError, NotImplementedError, TypeError, AttributeError):
        # A device (or torch) without these kernels for this dtype: a float32 copy's launches, the same numbers.
        work = work.float() if accumulate is not None else work
        low, high = min_max(work)
        return high, low, torch.sum(work), torch.sum(work * work).sqrt(), work.numel()


def finite_pair(tensor: Any) -> List[Any]:
    """The 0-d tensors on the device from which ``msprobe_rules.except_inf_nan`` reads msprobe's
    ``*_except_inf_nan`` once the batch is read back (whether they are needed is known only then). Called with
    the data in the dtype the msprobe rules reduce (a 0-d value in its own dtype: its own max and min).

    The pair is the max with NaN and -inf as -inf and +inf as the dtype's lowest finite value, and the min
    with NaN and +inf as +inf and -inf as the highest finite value. With a finite element, those stand-ins
    never pass it: the pair is the finite max and min (max >= min). With none, the max is at most the
    lowest finite value and the min at least the highest (max < min), and a finite stand-in in the pair
    says an infinity of that sign is there. Four kernels (two ``nan_to_num``, two reductions); two for a 0-d
    value."""
    inf = float("inf")
    largest = _finfo_max(tensor.dtype)
    finite_max = tensor.nan_to_num(nan=-inf, posinf=-largest, neginf=-inf)
    finite_min = tensor.nan_to_num(nan=inf, posinf=inf, neginf=largest)
    if tensor.dim() == 0:  # a 0-d value is its own max and min: two launches fewer
        return [finite_max, finite_min]
    return [finite_max.amax(), finite_min.amin()]


_FINFO_MAX: Dict[Any, float] = {}


def _finfo_max(dtype: Any) -> float:
    """The largest finite value of a float dtype, looked up once per dtype."""
    largest = _FINFO_MAX.get(dtype)
    if largest is None:
        largest = _FINFO_MAX[dtype] = float(torch_types().torch.finfo(dtype).max)
    return largest
