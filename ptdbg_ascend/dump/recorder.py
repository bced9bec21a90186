"""The one recording path of both front-ends: a :class:`Recorder` observer = a selection policy + a sink.

* **which calls** — a :class:`~ptdbg_ascend.dump.selection.SelectionPolicy`: legacy whole-name
  list/range/api_list matching (:class:`~ptdbg_ascend.dump.selection.LegacySelection`, one
  ``set_dump_switch`` window) or msprobe scope/list matching
  (:class:`~ptdbg_ascend.msprobe.selection.MsprobeSelection`, one PrecisionDebugger, reset per step);
* **which format** — a :class:`RecordSink`: legacy pkl + npy (``sinks/legacy/sink.LegacySink``) or
  msprobe dump.json + tensors (``sinks/msprobe/sink.MsprobeSink``).

The recorder itself owns what both formats share: the order of events (every forward event reaches the
selection, in time order, so ranges are walked correctly; backward events are decided when the
gradients arrive), the in-place protocol of ``observers.py`` (inputs taken in ``before_forward`` and
kept on the call until ``on_forward``), the statistics cache (aged once per call, cleared after a
collective, which writes without bumping version counters, and after a failed in-place call), whether
a stack is taken, the lock (backward hooks may run on autograd's threads) and the count of recorded
calls. Collectives need no case of their own: dispatch hands their outputs over (``observers.py``).
"""

from __future__ import annotations

import threading
from typing import Any, Dict, Optional, Sequence, Tuple

from ptdbg_ascend.dump.observers import ApiCall, CallObserver
from ptdbg_ascend.dump.selection import SelectionPolicy
from ptdbg_ascend.statistics.cache import StatisticsCache
from ptdbg_ascend.formats.naming import BACKWARD, FORWARD


class RecordSink:
    """The output format of a :class:`Recorder`. Every method is called by the recorder only for
    selected calls, except :meth:`seen` (every event the recorder sees while recording).

    ``bind`` gives the sink the recorder's statistics cache and lock (hold it while touching files
    or the cache)."""

    statistics: Optional[StatisticsCache] = None
    lock: Any = None
    uses_statistics = True  # False: the recorder need not age the cache on every call
    sees_events = False  # True: call seen() on every event (else it is skipped: no call per event)

    def bind(self, statistics: StatisticsCache, lock: Any) -> None:
        self.statistics = statistics
        self.lock = lock

    def seen(self, call: ApiCall, direction: str) -> None:
        """Every forward event, and every backward event that arrives, before selection (only when
        ``sees_events`` is True). Default no-op."""

    def inputs_before(self, call: ApiCall, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Any:
        """An in-place call's inputs as they go in (statistics and tensor copies taken now); what it
        returns comes back as ``before`` of :meth:`forward`. None: nothing taken now."""
        return None

    def forward(self, call: ApiCall, args: Tuple[Any, ...], kwargs: Dict[str, Any], output: Any, before: Any,
                stack: bool) -> None:
        """Write a selected forward call. ``call.inplace``: its inputs are ``before`` (None when
        :meth:`inputs_before` took nothing). ``stack``: also write its user stack."""
        raise NotImplementedError

    def backward(self, call: ApiCall, backward_input: Sequence[Optional[Any]],
                 backward_output: Sequence[Optional[Any]], stack: bool) -> None:
        """Write a selected backward event (gradients arriving at output i / w.r.t. input i)."""
        raise NotImplementedError

    def close(self) -> None:
        """Flush and release files."""

    def close_cut(self, why: str) -> None:
        """:meth:`close` at an exit that cuts the dump short (``why``): the files are flushed as by
        :meth:`close`, and a sink that locks its rank directory leaves the lock with ``why`` in it, so
        compare and parse name the dump as cut (``readers/dump_state.py``). Default: :meth:`close`."""
        self.close()


class Recorder(CallObserver):
    """Records the calls ``selection`` selects into ``sink``.

    Args:
        selection: which calls and directions (see :class:`~ptdbg_ascend.dump.selection.SelectionPolicy`).
        sink: the file format.
        stack_forward: write the user stack of forward calls. Default False.
        stack_backward: write the user stack of backward events. Default False.
    """

    def __init__(self, selection: SelectionPolicy, sink: RecordSink, stack_forward: bool = False,
                 stack_backward: bool = False) -> None:
        self.selection = selection
        self.sink = sink
        # Whether calls are recorded at all now (a PrecisionDebugger between start() and stop()); a legacy
        # window records as long as it is registered.
        self.recording = True
        self.matched = 0
        self.statistics = StatisticsCache()
        self._lock = threading.Lock()  # backward hooks may run on autograd's device threads
        sink.bind(self.statistics, self._lock)
        # Decided once, not per call (every top-level call asks wants_forward).
        self._forward = selection.forward
        self._backward = selection.backward
        self._stack_forward = stack_forward
        self._stack_backward = stack_backward
        self._ages_statistics = sink.uses_statistics
        # A sink that does not look at every event (the legacy one) costs no call per top-level call.
        self._seen = sink.seen if sink.sees_events else None

    def wants_forward(self, call: ApiCall) -> bool:
        if not self.recording:
            return False
        # Every top-level call, recorded or not, ages the statistics cache: anything may change a tensor.
        if self._ages_statistics:
            self.statistics.advance()
        if self._seen is not None:
            self._seen(call, FORWARD)
        # The selection sees every forward event (ranges), even when only backward data is dumped.
        return self.selection.forward_event(call) and self._forward

    def wants_backward(self, call: ApiCall) -> bool:
        if not (self.recording and self._backward):  # dispatch never asks for collectives
            return False
        return self.selection.backward_armed(call)

    def before_forward(self, call: ApiCall, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> None:
        before = self.sink.inputs_before(call, args, kwargs)
        if before is not None:
            call.keep(self, before)

    def forward_failed(self, call: ApiCall) -> None:
        # The cache names the inputs taken in before_forward, whose records are never written: a later
        # record must not link to them.
        with self._lock:
            self.statistics.clear()

    def on_forward(self, call: ApiCall, args: Tuple[Any, ...], kwargs: Dict[str, Any], output: Any) -> None:
        # Collectives and the fused optimizer steps (torch._fused_adamw_ on CPU) write in place without bumping
        # version counters: the cache would give their outputs the statistics of their inputs.
        if call.prefix == "Distributed" or (call.inplace and call.api.startswith("_fused_")):
            with self._lock:
                self.statistics.clear()
        self.matched += 1
        self.sink.forward(call, args, kwargs, output, call.kept(self) if call.inplace else None, self._stack_forward)

    def on_backward(self, call: ApiCall, backward_input: Sequence[Optional[Any]],
                    backward_output: Sequence[Optional[Any]]) -> None:
        if not self.recording:
            return
        if self._seen is not None:
            self._seen(call, BACKWARD)
        if not self.selection.backward_event(call):
            return
        self.statistics.advance()
        self.matched += 1
        self.sink.backward(call, backward_input, backward_output, self._stack_backward)

    def close(self) -> None:
        self.sink.close()

    def close_cut(self, why: str) -> None:
        self.sink.close_cut(why)
