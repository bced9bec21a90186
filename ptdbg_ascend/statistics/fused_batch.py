"""The pending batch of tensors behind ``DeviceStatisticsBatch``: :class:`FusedQueue` keeps a reference to each
tensor it takes and reads them all in one fused pass at a launch (``fused_plan.Plan``: the Triton kernels of
``fused_triton`` on CUDA, the numpy emulator on CPU tensors), instead of launching three to seven reductions per
tensor at its call.

A reference is read later, so the queue must see every write to a queued tensor before it happens:

* every wrapped in-place call (``dump/inplace.py``: ``add_``, ``out=``, ``inplace=True``, collectives, the fused
  optimizer steps, which do not bump ``_version``) asks :data:`WRITES` first, selected for recording or not; a
  call whose tensors share memory with a queued tensor launches its queue, so the kernel reads the values
  before the write (the attribute :attr:`WriteWatch.armed` is the whole cost while no queue holds a tensor);
* a backward pass that queued gradients launches at its end: autograd accumulates a later pass's gradient into
  the one it stole (``.grad``) without a wrapper seeing it;
* at the launch each tensor's ``_version`` is compared with the one queued: a write nothing saw (a kernel of an
  extension, an API not wrapped) gives null statistics, and one warning per batch says how many.

A write that neither bumps the version counter nor passes a wrapper (through a ``.data`` alias or a numpy view,
by a function not wrapped) cannot be seen: its tensor's numbers are those after it (the statistics cache has
the same limit).

Memory held: for each queued tensor a detached alias (about 0.3 KB of host memory, no copy of the data: an alias,
unlike the tensor itself, leaves autograd free to steal a fresh gradient instead of cloning it), which keeps its
storage alive until the launch; at most :attr:`FusedQueue.MAX_TENSORS` (1024) tensors or
:attr:`FusedQueue.MAX_BYTES` (256 MiB, a storage shared by several tensors counted once) before a launch, which
drops the aliases (``record_stream`` keeps the memory from reuse until the pass has read it). A launched pass
holds its pointer table (32 bytes per tensor on the device, and 32 in pinned host memory) and final rows (56 bytes
per tensor) until the batch is read back; its partials (56 bytes per chunk of ``fused_plan.CHUNK`` = 4,096
elements: 3.5 MiB for 256 MiB of int8, 0.9 MiB of float32) only until its finalize kernel has run.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy

from ptdbg_ascend.inside import Inside
from ptdbg_ascend.log import logger
from ptdbg_ascend.statistics import fused_plan
from ptdbg_ascend.statistics.eager import EMPTY, Statistics
from ptdbg_ascend.statistics.pending import DEVICE, PendingStatistics
from ptdbg_ascend.streams import LAUNCH_STREAMS, current_stream, stream_module

# StatisticsPlanner(fused=...): the Triton pass on CUDA where triton imports, else today's per-tensor device path;
# today's path always; or, besides AUTO's, the queue on CPU tensors with the numpy emulator (tests, benchmarks).
AUTO, OFF, EMULATED = "auto", "off", "emulated"
MODES = (AUTO, OFF, EMULATED)
# How a device type's queued tensors are read (FusedQueue(runners=)): the Triton kernels, or the emulator.
TRITON, EMULATOR = "triton", "emulator"

# (alias, version when queued, its pending numbers)
_Item = Tuple[Any, int, PendingStatistics]
_UNKNOWN = object()


class WriteWatch:
    """The queues holding tensors not launched yet, asked by the engine before every wrapped in-place call.

    Attributes:
        armed: whether some queue holds a tensor not launched yet (the engine's one test per in-place call).
    """

    def __init__(self) -> None:
        self.armed = False
        # id -> weak reference of each queue holding tensors not launched yet; a queue dropped unlaunched (its writer
        # stopped by a full disk, a process's last window) leaves by its reference's callback, which disarms.
        self._queues: Dict[int, "weakref.ref[FusedQueue]"] = {}
        self._lock = threading.RLock()  # (reentrant: a collection may run the callback while this thread holds it)

    def arm(self, queue: FusedQueue) -> None:
        """``queue`` holds tensors not launched yet."""
        with self._lock:
            self._queues[id(queue)] = weakref.ref(queue, self._dropped)
            self.armed = True

    def disarm(self, queue: FusedQueue) -> None:
        """``queue`` launched everything it held (called once its kernels are queued, so a write that finds
        the watch disarmed comes after them)."""
        with self._lock:
            self._queues.pop(id(queue), None)
            self.armed = bool(self._queues)

    def _dropped(self, reference: "weakref.ref[FusedQueue]") -> None:
        with self._lock:
            for key in [key for key, known in self._queues.items() if known is reference]:
                del self._queues[key]
            self.armed = bool(self._queues)

    def before_write(self, args: Sequence[Any], kwargs: Dict[str, Any]) -> None:
        """An in-place call with these arguments is about to run: every queue holding a tensor whose memory
        one of their tensors overlaps launches first."""
        written = _tensors_of(args, kwargs)
        if not written:
            return
        with self._lock:
            queues = [queue for queue in (reference() for reference in self._queues.values()) if queue is not None]
        for queue in queues:
            queue.launch_if_written(written)


# The engine's watch (``dump/session.py``): process-wide, as the writes it watches are.
WRITES = WriteWatch()


class Launched:
    """One launched pass: its plan (its counts and formats; the references are dropped at the launch), the final
    rows (a device tensor, or the emulator's numpy array), the pending numbers in plan order, and what must live
    until the read (the pinned table)."""

    __slots__ = ("device", "plan", "finals", "pending", "keep")

    def __init__(self, device: Any, plan: fused_plan.Plan, finals: Any, pending: List[PendingStatistics],
                 keep: Any = None) -> None:
        self.device, self.plan, self.finals, self.pending, self.keep = device, plan, finals, pending, keep

    def on_host(self) -> bool:
        """Whether the final rows are already host numbers (the emulator's)."""
        return isinstance(self.finals, numpy.ndarray)

    def fill(self, flat: Sequence[float]) -> None:
        """Fill each pending value from ``flat``, the final rows read back (``fused_plan.WIDTH`` per tensor)."""
        width = fused_plan.WIDTH
        rows = [flat[start:start + width] for start in range(0, len(flat), width)]
        for pending, numbers in zip(self.pending, self.plan.numbers(rows)):
            pending.fill(numbers)


class FusedQueue:
    """References to the tensors a device batch takes, read in one fused pass per device, stream and format.

    :meth:`add` queues a tensor :func:`takes` accepts and returns its pending numbers; a launch (:meth:`launch`,
    at the bound, before a write to a queued tensor, at a backward pass's end) queues the pass of everything
    held; :meth:`take_launched` hands the passes to the batch's read-back (one copy per device).

    Args:
        mode: :data:`AUTO` or :data:`EMULATED` (:data:`OFF` has no queue). Default AUTO.
        runners: ``{device type: TRITON or EMULATOR}`` replacing the mode's choice (default None): how the tests
            run the Triton kernels on CPU tensors under ``TRITON_INTERPRET=1``.
    """

    # Launch at this many tensors or referenced bytes: the bound on the memory the references keep alive.
    MAX_TENSORS = 1024
    MAX_BYTES = 256 << 20

    def __init__(self, mode: str = AUTO, runners: Optional[Dict[str, str]] = None) -> None:
        self.mode = mode
        self._runners: Dict[str, Optional[str]] = dict(runners or {})
        self._lock = threading.Lock()
        self._groups: Dict[Tuple[Any, Any, str], List[_Item]] = {}  # (device, stream key, format) -> items
        self._spans: Dict[int, List[int]] = {}  # storage address -> [first byte, end] referenced
        self._count = 0
        self._bytes = 0
        self._launched: List[Launched] = []
        self._changed = 0  # tensors changed unseen since the last take_launched
        self._streams: Dict[Any, Any] = {}  # stream key -> the stream, for a launch from another thread
        self._backward_task = -1  # the backward pass whose end launches (autograd's graph task id)

    def add(self, tensor: Any, fmt: str) -> Optional[PendingStatistics]:
        """The pending numbers of ``tensor`` in format ``fmt`` (``fused_plan.LEGACY``/``MSPROBE``), queued; None
        where the queue does not take it (:func:`takes`, or no runner for its device): the caller's path then."""
        kind = "cpu" if tensor.is_cpu else tensor.device.type
        runner = self._runners.get(kind, _UNKNOWN)
        if runner is _UNKNOWN:
            runner = self._runners[kind] = _runner_for(kind, self.mode)
        if runner is None or not takes(tensor):
            return None
        with Inside():
            alias = tensor.detach()  # not the tensor: see the module docstring (autograd's stolen gradients)
            device = alias.device
            stream = LAUNCH_STREAMS.note(device)  # the read waits for the stream the pass is launched on
            if stream not in self._streams and device.type != "cpu":
                self._streams[stream] = current_stream(stream_module(device.type), device)
        pending = PendingStatistics([None] * 4)
        pending.values, pending.count, pending.source = True, alias.numel(), DEVICE
        with self._lock:
            if not self._groups:
                WRITES.arm(self)
            self._groups.setdefault((device, stream, fmt), []).append((alias, alias._version, pending))
            self._count += 1
            self._bytes += _referenced(self._spans, alias)
            if self._count >= self.MAX_TENSORS or self._bytes >= self.MAX_BYTES:
                self._launch_locked()
        self._launch_at_backward_end()
        return pending

    def _launch_at_backward_end(self) -> None:
        """Inside a backward pass, launch when the pass ends (once per pass): autograd writes a later pass's
        gradient into the one it stole, unseen by the wrappers. Outside one, nothing."""
        task = _graph_task()
        if task == -1 or task == self._backward_task:
            return
        self._backward_task = task
        try:
            import torch

            torch.autograd.Variable._execution_engine.queue_callback(self.launch)
        except (AttributeError, RuntimeError):
            pass  # an old torch: the bound, the watch and the version check remain

    def has_queued(self) -> bool:
        """Whether tensors wait for a launch."""
        return bool(self._groups)

    def launch(self) -> None:
        """Queue the pass over every tensor held (nothing read back)."""
        with self._lock:
            self._launch_locked()

    def launch_if_written(self, written: Sequence[Any]) -> None:
        """Launch when the memory of a tensor in ``written`` (about to be written) overlaps a queued tensor's."""
        with self._lock:
            if self._groups and any(_overlaps(self._spans, tensor) for tensor in written):
                self._launch_locked()

    def take_launched(self) -> Tuple[List[Launched], int]:
        """Launch what is held, and hand over every pass launched since the last call with the number of tensors
        found changed unseen meanwhile (their numbers are nulls already)."""
        with self._lock:
            self._launch_locked()
            launched, self._launched = self._launched, []
            changed, self._changed = self._changed, 0
        return launched, changed

    def _launch_locked(self) -> None:
        groups = self._groups
        if not groups:
            return
        self._groups, self._spans, self._count, self._bytes = {}, {}, 0, 0
        try:
            with Inside():  # the tool's torch calls, whichever thread launches
                for (device, stream, fmt), items in groups.items():
                    launched = self._launch_group(device, self._streams.get(stream), fmt, items)
                    if launched is not None:
                        self._launched.append(launched)
        finally:
            WRITES.disarm(self)  # after the kernels are queued: a write that finds it disarmed comes after them

    def _launch_group(self, device: Any, stream: Any, fmt: str, items: List[_Item]) -> Optional[Launched]:
        """The pass over one group's tensors unchanged since they were queued; the changed ones get nulls."""
        sources, pending = [], []
        for alias, version, numbers in items:
            if alias._version != version:  # written behind the watch: its values now are not those recorded
                numbers.fill(list(EMPTY))
                self._changed += 1
            else:
                sources.append(alias)
                pending.append(numbers)
        if not sources:
            return None
        plan = fused_plan.Plan(sources, fmt)
        runner = self._runners[device.type]
        try:
            if runner == EMULATOR:
                finals = fused_plan.emulate_finals(plan.arrays(), plan.widths())
                plan.sources = []  # read: the references go (the bound holds what waits to be launched)
                return Launched(device, plan, finals, pending)
            finals, table = _kernel_finals(plan, device, stream)
            return Launched(device, plan, finals, pending, keep=table)
        except Exception as error:  # noqa: BLE001 - a dump must never stop training
            # This device type takes today's per-tensor path from now on; this batch's numbers are lost.
            self._runners[device.type] = None
            logger.warning("The fused statistics pass failed on {} ({}: {}); the statistics of its {} tensor(s) "
                           "are null, later tensors of that device take the per-tensor path.".format(
                               device, type(error).__name__, error, len(pending)))
            for numbers in pending:
                numbers.fill(list(EMPTY))
            return None


def takes(tensor: Any) -> bool:
    """Whether a queue can hold ``tensor``: ``fused_plan.accepts`` it, it is dense in memory (a view with gaps
    would need a copy: the per-tensor path reads it as it is) and not an inference tensor (no version counter)."""
    if not fused_plan.accepts(tensor) or tensor.is_inference():
        return False
    return tensor.is_contiguous() or fused_plan.dense_in_memory(tensor)


def _runner_for(kind: str, mode: str) -> Optional[str]:
    """How the tensors of a ``kind`` device are read in ``mode``: TRITON on CUDA where triton imports, EMULATOR on
    the CPU with EMULATED, else None (the per-tensor path)."""
    if mode not in (AUTO, EMULATED):
        return None
    if kind == "cpu":
        return EMULATOR if mode == EMULATED else None
    if kind == "cuda":
        from ptdbg_ascend.statistics import fused_triton  # imports triton: only once a CUDA tensor comes

        return TRITON if fused_triton.available() else None
    return None


def _kernel_finals(plan: fused_plan.Plan, device: Any, stream: Any) -> Tuple[Any, Any]:
    """``(final rows on the device, the host table)``: the Triton pass queued on ``stream`` (the one its tensors
    were recorded on, so a later write there runs after it; None: the current one), its table copied from pinned
    memory without waiting (on the CPU, under ``TRITON_INTERPRET=1``, the table as it is). The plan's references
    are dropped once the pass is queued."""
    import contextlib

    from ptdbg_ascend.statistics import fused_triton

    on_cpu = device.type == "cpu"
    host = plan.host_table(pinned=not on_cpu)
    module = stream_module(device.type)
    context = module.stream(stream) if stream is not None and module is not None else contextlib.nullcontext()
    with context:
        table = host if on_cpu else host.to(device, non_blocking=True)
        finals = fused_triton.fused_finals(plan, device, table=table)
        if not on_cpu:
            # The references go now, not at the read: the allocator reuses a tensor's memory only after the work
            # queued on this stream (the pass), even a tensor made on another stream. So the bound on what the
            # queue keeps alive holds launched passes too.
            for source in plan.sources:
                source.record_stream(module.current_stream(device) if stream is None else stream)
    plan.sources = []
    return finals, host


def _referenced(spans: Dict[int, List[int]], alias: Any) -> int:
    """Add a dense tensor's bytes to ``spans`` (per storage, the range its queued tensors cover); returns how
    many bytes that adds (none for a view inside what its storage already has queued)."""
    start = alias.data_ptr()
    size = alias.element_size()
    end = start + alias.numel() * size
    base = start - alias.storage_offset() * size
    span = spans.get(base)
    if span is None:
        spans[base] = [start, end]
        return end - start
    before = span[1] - span[0]
    span[0], span[1] = min(span[0], start), max(span[1], end)
    return span[1] - span[0] - before


def _overlaps(spans: Dict[int, List[int]], tensor: Any) -> bool:
    """Whether ``tensor``'s memory overlaps a queued range; True where it cannot be told (no data pointer)."""
    try:
        start = tensor.data_ptr()
        size = tensor.element_size()
        span = spans.get(start - tensor.storage_offset() * size)
        if span is None:
            return False
        if tensor.numel() == 0:
            return False
        extent = 1 + sum((length - 1) * step for length, step in zip(tensor.shape, tensor.stride()) if step > 0)
        return start < span[1] and start + extent * size > span[0]
    except Exception:  # noqa: BLE001 - sparse, meta, a transform wrapper: launch rather than guess
        return True


def _tensors_of(args: Sequence[Any], kwargs: Dict[str, Any]) -> List[Any]:
    """The tensors among ``args`` and ``kwargs``' values, and in their lists and tuples (one level: the foreach
    and fused optimizer calls take lists of tensors)."""
    import torch

    found = []
    for value in (*args, *kwargs.values()) if kwargs else args:
        if isinstance(value, torch.Tensor):
            found.append(value)
        elif isinstance(value, (list, tuple)):
            found.extend(item for item in value if isinstance(item, torch.Tensor))
    return found


_GRAPH_TASK: List[Any] = []


def _graph_task() -> int:
    """The id of the backward pass running on this thread (-1: none, or a torch that cannot tell)."""
    if not _GRAPH_TASK:
        import torch

        _GRAPH_TASK.append(getattr(torch._C, "_current_graph_task_id", None))
    task_id = _GRAPH_TASK[0]
    return -1 if task_id is None else task_id()


def unseen_warning(changed: int) -> None:
    """The one warning of a batch in which ``changed`` tensors were written unseen before their launch."""
    logger.warning("{} tensor(s) changed in place after they were recorded and before their statistics were read, "
                   "by a write the dump did not see (a function that is not wrapped, a C++ extension); their "
                   "records hold null statistics rather than the numbers after the change.".format(changed))

