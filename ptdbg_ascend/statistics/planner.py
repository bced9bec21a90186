"""Which way a tensor's statistics are computed: now (eager), later in a device batch, or later on the writer
thread from the copy it saves. One :class:`StatisticsPlanner` per writer, with its format's rules
(``rules.py``); every sink asks it, in this order:

1. :meth:`~StatisticsPlanner.takes_writer` (only a writer that saves the tensor's copy on its thread asks):
   a pending value (:meth:`~StatisticsPlanner.for_writer`) that the writer thread fills
   (:meth:`~StatisticsPlanner.from_copy`);
2. ``StatisticsPlanner.takes_device(tensor)``: queued in the planner's device batch
   (:meth:`~StatisticsPlanner.device`), filled when the batch is read back;
3. else :meth:`~StatisticsPlanner.eager`.

Off the CPU a number read now is a host sync; on the CPU it is a memory read, so CPU tensors are eager unless
``defer_cpu`` (tests and benchmarks run the accelerator's path on CPU tensors so, there being no accelerator in
CI).

In the device batch, ``fused`` chooses how a tensor is read: ``AUTO`` queues a reference to a CUDA tensor for one
fused Triton pass over the batch where triton imports (``fused_batch.py``), and launches the tensor's own
reductions at its call elsewhere (today's per-tensor path); ``OFF`` always does the latter; ``EMULATED`` also
queues CPU tensors, read by the numpy emulator of the pass (how tests and benchmarks run the queue without a GPU).
"""

from __future__ import annotations

from typing import Any, Callable, Optional

from ptdbg_ascend.errors import ParameterError
from ptdbg_ascend.statistics.device_batch import DeviceStatisticsBatch
from ptdbg_ascend.statistics.eager import Statistics
from ptdbg_ascend.statistics.fused_batch import AUTO, EMULATED, MODES
from ptdbg_ascend.statistics.pending import PendingStatistics, pending_on_writer


class PlannerDefaults:
    """What a planner takes when its writer is built by a front-end (``register_hook``, ``PrecisionDebugger``),
    which passes no parameters of its own: read when the planner is built, so a change affects writers built
    afterwards only and costs nothing per recorded call.

    Attributes:
        defer_cpu: CPU tensors take the device batch too (the accelerator's path on CPU tensors). Default False.
        from_copies: the writer thread reads large saved CPU tensors' statistics from its copy. Default True
            (False: every statistic is read at the call, as a reference run in tests).
        fused: how the device batch reads a tensor (the module docstring): ``AUTO``, ``OFF`` or ``EMULATED``.
            Default ``AUTO``.
    """

    __slots__ = ("defer_cpu", "from_copies", "fused")

    def __init__(self) -> None:
        self.defer_cpu = False
        self.from_copies = True
        self.fused = AUTO


# The process-wide defaults of writers built without explicit parameters.
DEFAULTS = PlannerDefaults()


class StatisticsPlanner:
    """Chooses eager / device batch / writer thread for each tensor of one writer, by ``rules``.

    Args:
        rules: ``rules.LEGACY`` or ``rules.MSPROBE``.
        defer_cpu: CPU tensors take the device batch too. Default None: :data:`DEFAULTS`' ``defer_cpu``.
        from_copies: the writer thread may read statistics from its copies. Default None: :data:`DEFAULTS`'.
        max_pending: read the batch back at once when this many tensors wait (a bound on device memory).
            Default None: no bound here (the writer reads it back when due).
        on_read: given to the device batch (``DeviceStatisticsBatch(on_read=)``). Default None.
        fused: ``AUTO``, ``OFF`` or ``EMULATED`` (the module docstring; EMULATED makes ``defer_cpu`` default to
            True: the emulator reads CPU tensors). Default None: :data:`DEFAULTS`' ``fused``.
    """

    __slots__ = ("rules", "defer_cpu", "from_copies", "max_pending", "batch", "takes_device", "cpu_eager", "fused",
                 "_on_read")

    def __init__(self, rules: Any, defer_cpu: Optional[bool] = None, from_copies: Optional[bool] = None,
                 max_pending: Optional[int] = None, on_read: Optional[Callable[[int], None]] = None,
                 fused: Optional[str] = None) -> None:
        self.rules = rules
        self.fused = DEFAULTS.fused if fused is None else fused
        if self.fused not in MODES:
            raise ParameterError("fused", self.fused, "must be one of {}".format(", ".join(map(repr, MODES))))
        # EMULATED reads CPU tensors: it sends them to the device batch unless told otherwise here.
        self.defer_cpu = (DEFAULTS.defer_cpu or self.fused == EMULATED) if defer_cpu is None else defer_cpu
        self.from_copies = DEFAULTS.from_copies if from_copies is None else from_copies
        self.max_pending = max_pending
        self._on_read = on_read
        # The device batch, made when the first tensor takes it (None until then: a CPU dump has none).
        self.batch: Optional[DeviceStatisticsBatch] = None
        # takes_device(tensor): whether the statistics of ``tensor`` go through the device batch. The rules' test
        # made once: it runs for every recorded tensor.
        self.takes_device: Callable[[Any], bool] = rules.device_test(self.defer_cpu)
        # Whether takes_device is False for every CPU tensor (a sink may then skip asking it for those).
        self.cpu_eager = not self.defer_cpu

    def device_batch(self) -> DeviceStatisticsBatch:
        """The device batch (made now if no tensor took it yet)."""
        batch = self.batch
        if batch is None:
            batch = self.batch = DeviceStatisticsBatch(self._on_read, fused=self.fused)
        return batch

    def eager(self, tensor: Any) -> Statistics:
        """The statistics of ``tensor`` now."""
        return self.rules.eager(tensor)

    def takes_writer(self, tensor: Any) -> bool:
        """Whether the writer thread reads the statistics of ``tensor`` (about to be saved) from its copy."""
        return self.from_copies and self.rules.takes_writer(tensor, self.defer_cpu)

    def for_writer(self, _tensor: Any = None) -> PendingStatistics:
        """A pending value for the writer thread to fill (:meth:`from_copy`); ``_tensor`` is ignored (a
        ``compute(tensor)`` of the statistics cache)."""
        return pending_on_writer()

    def from_copy(self, pending: PendingStatistics, copy: Any) -> None:
        """Fill ``pending`` (on the writer thread) from ``copy``, the host copy the writer saves."""
        pending.fill(self.rules.from_copy(copy))

    def device(self, tensor: Any) -> Statistics:
        """The statistics of ``tensor`` from the device batch: pending until it is read back, or the numbers
        where there is nothing to read back (empty, meta, special kinds)."""
        batch = self.batch or self.device_batch()
        pending = self.rules.device(batch, tensor)
        if self.max_pending is not None and batch.pending_count() >= self.max_pending:
            batch.resolve()
        return pending
