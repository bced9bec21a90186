"""The dump session: the only mutable process state of the tool.

It holds the API counters, the observers (legacy recorder, overflow detector, ACL runner, msprobe
recorder), the legacy dump settings (path, tag, rank) and whether the wrappers are installed. Features
never keep globals of their own: they get the session with :func:`get_session`.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch

from ptdbg_ascend.dump import backward as backward_capture
from ptdbg_ascend.dump import compiled
from ptdbg_ascend.dump import jit_builtins
from ptdbg_ascend.dump.capture import call_tensors, collective_outputs, tensors_in, written_arguments
from ptdbg_ascend.dump.inplace import ALWAYS, KEYWORDS, inplace_call
from ptdbg_ascend.dump.interception import install
from ptdbg_ascend.inside import THREAD_STATE
from ptdbg_ascend.dump.observers import ApiCall, CallObserver
from ptdbg_ascend.errors import ParameterError
from ptdbg_ascend.log import logger
from ptdbg_ascend.statistics.fused_batch import WRITES as _WRITES

_is_grad_enabled = torch.is_grad_enabled
# torch.compiler._is_compiling_flag: True while dynamo/AOTAutograd/inductor compile (a torch without it: never).
# (torch.compiler itself exists from torch 2.1 on.)
_compiler = getattr(torch, "compiler", None)
if not hasattr(_compiler, "_is_compiling_flag"):
    _compiler = compiled.NoCompileFlag
_graph_codes = compiled.GRAPH_CODES  # id(code object) -> (code, whether it is compiled code): dump/compiled.py


def check_extra_apis(extra_apis: Optional[bool]) -> None:
    """``extra_apis`` of register_hook / ensure_wrapped: None, True or False (checked before any effect)."""
    if extra_apis is not None and not isinstance(extra_apis, bool):
        raise ParameterError("extra_apis", extra_apis, "must be True (also wrap the APIs of wrapped_apis_extra.txt), "
                             "False (only the original 4.0's list) or None (keep the list already installed)")


class LegacyDumpSettings:
    """What ``set_dump_path`` / ``register_hook`` configured for the legacy recorder."""

    def __init__(self) -> None:
        self.directory: Optional[str] = None  # dir of fpath (where the tag dir goes)
        self.stem = "dump"  # the pkl file name without .pkl
        self.tag = "ptdbg_dump"
        self.rank: Optional[int] = None  # register_hook(rank=)
        self.registered = False
        self.recorder: Optional[Any] = None  # the LegacyRecorder observer, once registered


class DumpSession:
    """Process-wide dump state. Use :func:`get_session`; do not build one yourself."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        # Set in a forked child (DataLoader worker): wrappers then only call the original.
        self.in_forked_child = False
        self.counters: Dict[str, int] = {}
        # A tuple, replaced on change: the wrappers read it without a lock.
        self.observers: Tuple[CallObserver, ...] = ()
        self.wrapped_count = 0
        self.extra_apis = False  # whether wrapped_apis_extra.txt is wrapped too (see ensure_wrapped)
        self.patches: List[Tuple[Any, str, Any, bool]] = []  # (namespace, name, original, own attribute)
        # Counts uninstall()s: the patch list is refilled to the same length with new wrappers after one.
        self.patch_generation = 0
        self.legacy = LegacyDumpSettings()
        # Files opened by this process (first open truncates, later windows append).
        self.opened_files: set = set()
        self._lock = threading.Lock()

    # -- wrappers and observers ---------------------------------------------------------------
    def ensure_wrapped(self, extra_apis: Optional[bool] = None) -> int:
        """Install the wrappers on the torch APIs (idempotent). Returns the number of wrapped APIs.

        ``extra_apis``: None keeps the list already installed (at first, the original 4.0's list);
        True also wraps ``wrapped_apis_extra.txt``; False goes back to the original's list. A change
        re-installs the wrappers (the counters are kept)."""
        check_extra_apis(extra_apis)
        with self._lock:
            wanted = self.extra_apis if extra_apis is None else extra_apis
            if self.wrapped_count and wanted != self.extra_apis:
                from ptdbg_ascend.dump.interception import uninstall

                uninstall(self)
                self.wrapped_count = 0
            if not self.wrapped_count:
                jit_builtins.prepare()  # TorchScript's builtin table, built before the originals are replaced
                self.wrapped_count = install(self, extra_apis=wanted)
                jit_builtins.register(self.patches)  # torch.jit.script (jvp's decompositions) sees builtins
                compiled.install()  # torch.compile: the compiler's calls pass through the wrappers
                self.extra_apis = wanted
                logger.info("Wrapped {} torch APIs for dumping ({}).".format(
                    self.wrapped_count, "the original 4.0's list and the extra APIs" if wanted else "the original 4.0's list"))
        return self.wrapped_count

    def unwrap(self) -> None:
        """Restore the original torch functions (benchmarks, tests). ``ensure_wrapped`` wraps again;
        counters are kept."""
        from ptdbg_ascend.dump.interception import uninstall

        with self._lock:
            uninstall(self)
            jit_builtins.forget()  # TorchScript's builtin table must not name the removed wrappers
            self.wrapped_count = 0

    def add_observer(self, observer: CallObserver) -> None:
        """Consult ``observer`` on every top-level call from now on (no-op if already added)."""
        if not isinstance(observer, CallObserver):
            raise ParameterError("observer", observer, "must be a ptdbg_ascend.dump.observers.CallObserver")
        with self._lock:
            if observer not in self.observers:
                self.observers = self.observers + (observer,)
        compiled.install()  # (again: torch._dynamo may have been imported, or reset, since)

    def remove_observer(self, observer: CallObserver) -> None:
        """Stop consulting ``observer`` (its ``close`` is not called). No-op if absent."""
        with self._lock:
            self.observers = tuple(item for item in self.observers if item is not observer)

    def find_observer(self, kind: type) -> Optional[CallObserver]:
        """The first registered observer that is an instance of ``kind``, or None."""
        for observer in self.observers:
            if isinstance(observer, kind):
                return observer
        return None

    def reset_counters(self) -> None:
        """Restart every API counter at 0 (msprobe's ``step()``)."""
        self.counters.clear()

    def close_observers(self) -> None:
        """Call ``close`` on every observer (at exit); ``close_cut`` when an uncaught exception ends the
        process, so a dump window still on is named as cut (:func:`uncaught_exception`). Errors are logged,
        not raised: exit must finish."""
        if os.getpid() != self.pid:
            return
        cut = uncaught_exception()
        for observer in self.observers:
            try:
                if cut is None:
                    observer.close()
                else:
                    observer.close_cut(cut)
            except Exception as error:  # noqa: BLE001 - reported, other observers still close
                logger.error(f"Closing {observer!r} failed: {error}")

    # -- rank ----------------------------------------------------------------------------------
    def resolve_rank(self, explicit: Optional[int] = None, sample_tensors: Sequence[Any] = ()) -> int:
        """``explicit`` if given, else the ``torch.distributed`` rank when initialised, else the
        environment's ``RANK`` (then ``LOCAL_RANK``: set by torchrun and most launchers, so processes of
        one job write distinct rank directories even before init_process_group), else the device index
        of the first tensor in ``sample_tensors`` (CPU -> 0), else 0. Never the pid."""
        known = self.known_rank(explicit)
        if known is not None:
            return known
        from ptdbg_ascend.device import first_device_index

        index = first_device_index(sample_tensors)
        return index if index is not None else 0

    def known_rank(self, explicit: Optional[int] = None) -> Optional[int]:
        """The rank when it is known without looking at tensors (``explicit``, torch.distributed, the
        ``RANK``/``LOCAL_RANK`` environment), else None."""
        if explicit is not None:
            return explicit
        import torch

        if torch.distributed.is_available() and torch.distributed.is_initialized():
            return torch.distributed.get_rank()
        return environment_rank()

    # -- the slow path of a wrapper -------------------------------------------------------------
    def dispatch(self, prefix: str, api: str, index: int, original: Callable[..., Any],
                 args: Tuple[Any, ...], kwargs: Dict[str, Any], rule: int = KEYWORDS) -> Any:
        """Run one top-level call with observers (called by the wrappers, which already checked that
        the thread is not inside another wrapped API). ``rule`` is the API's in-place rule
        (:func:`~ptdbg_ascend.dump.inplace.inplace_rule`)."""
        thread = THREAD_STATE
        # torch.compile (dump/compiled.py): a call made while compiling neither counts nor is recorded;
        # one made by a dynamo graph run in Python (backend="eager") counts but is not recorded.
        unmarked = _compiler._is_compiling_flag and compiled.compiling_unmarked()
        if not unmarked:
            caller = sys._getframe(2)  # the code that called the wrapper: one frame, one dict lookup
            seen = _graph_codes.get(id(caller.f_code))
            # (first sight of this code object: examined once)
            from_graph = seen[1] if seen is not None else compiled.from_compiled_graph(caller)
        if unmarked or from_graph:
            return self._run_unrecorded(prefix, api, original, args, kwargs, unmarked)
        call = ApiCall(prefix, api, index, original)
        thread.inside = True  # what Inside() does, without an object per call on this hot path
        try:
            observers = self.observers
            forward = [item for item in observers if item.wants_forward(call)]
            edges = None
            # Backward capture only where autograd records: the optimizer's updates and anything under
            # no_grad skip wants_backward (documented in observers.py) and the input scan.
            if prefix != "Distributed" and _is_grad_enabled():
                backward = [item for item in observers if item.wants_backward(call)]
                if backward:
                    inputs = call_tensors(args, kwargs)
                    for tensor in inputs:
                        if tensor.requires_grad:
                            edges = backward_capture.input_edges(inputs)
                            break
            # In place (dump/inplace.py): the observers take the inputs now, before the call changes them.
            # Most calls are not: their rule is KEYWORDS and they have no keyword arguments.
            in_place = rule == ALWAYS or ((kwargs or rule >= 0) and inplace_call(rule, args, kwargs))
            if forward and in_place:
                output = _run_inplace(call, forward, original, args, kwargs)
            else:
                # Not recorded, but it may write a tensor whose statistics are still to be read: read it first.
                if in_place and _WRITES.armed:
                    _WRITES.before_write(args, kwargs)
                output = original(*args, **kwargs)
            # A collective (all_reduce...) writes its result into its arguments: those are its outputs for
            # every observer, decided here once (the original's return value, None or a Work, is not).
            if forward:
                observed = tuple(collective_outputs(args, kwargs)) if prefix == "Distributed" else output
                if observed is None and call.inplace:  # torch._foreach_add_, _fused_adamw_: the lists they wrote
                    observed = written_arguments(api, args)
                for observer in forward:
                    observer.on_forward(call, args, kwargs, observed)
                if call.replacement is not None:  # (free_benchmark's fix: the perturbed run's output)
                    output = call.replacement
            if edges is not None:
                self._arm_backward(call, backward, len(inputs), edges, output)
        finally:
            thread.inside = False
        return output

    def _run_unrecorded(self, prefix: str, api: str, original: Callable[..., Any], args: Tuple[Any, ...],
                        kwargs: Dict[str, Any], unmarked: bool) -> Any:
        """A call torch.compile makes: while compiling (``unmarked``) it does not count (its counter is given
        back), from a dynamo graph run in Python it counts; neither is recorded."""
        if unmarked:
            key = prefix + "_" + api
            self.counters[key] = self.counters.get(key, 1) - 1
        thread = THREAD_STATE
        thread.inside = True
        try:
            return original(*args, **kwargs)
        finally:
            thread.inside = False

    def _arm_backward(self, call: ApiCall, observers: List[CallObserver], n_inputs: int,
                      edges: List[Any], output: Any) -> None:
        outputs = tensors_in(output)

        def deliver(backward_input: List[Any], backward_output: List[Any]) -> None:
            for observer in observers:
                observer.on_backward(call, backward_input, backward_output)

        backward_capture.arm(deliver, n_inputs, edges, outputs)


def uncaught_exception() -> Optional[str]:
    """At exit: "the process exited on an uncaught {type} ({message})" when an uncaught exception ends the
    interpreter (Python sets ``sys.last_type`` before the exit handlers run; Ctrl-C's KeyboardInterrupt too),
    else None (a normal end, or ``sys.exit``)."""
    kind = getattr(sys, "last_type", None)
    if kind is None:
        return None
    text = str(getattr(sys, "last_value", "") or "")
    text = " ".join(text.split())
    if len(text) > 160:
        text = text[:157] + "..."
    return "the process exited on an uncaught {}{} with the dump window on".format(
        getattr(kind, "__name__", "exception"), f" ({text})" if text else "")


def environment_rank() -> Optional[int]:
    """``RANK``, else ``LOCAL_RANK`` from the environment when it is an int >= 0 (else None; a value
    that is not is reported once and ignored)."""
    for variable in ("RANK", "LOCAL_RANK"):
        text = os.environ.get(variable)
        if text is None or not text.strip():
            continue
        try:
            value = int(text)
        except ValueError:
            value = -1
        if value >= 0:
            return value
        if variable not in _WARNED_ENVIRONMENT:
            _WARNED_ENVIRONMENT.add(variable)
            logger.warning(f"Ignoring the environment variable {variable}={text!r}: not an int >= 0.")
    return None


_WARNED_ENVIRONMENT: set = set()
_SESSION: List[DumpSession] = []


def get_session() -> DumpSession:
    """The process's dump session (created on first use)."""
    if not _SESSION:
        session = DumpSession()
        _SESSION.append(session)
        atexit.register(session.close_observers)
        if hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=_mark_forked_child)
    return _SESSION[0]


def _mark_forked_child() -> None:
    for session in _SESSION:
        if os.getpid() != session.pid:
            session.in_forked_child = True
            session.observers = ()


def _run_inplace(call: ApiCall, forward: List[CallObserver], original: Callable[..., Any], args: Tuple[Any, ...],
                 kwargs: Dict[str, Any]) -> Any:
    """Run an in-place call (dump/inplace.py): the observers take its inputs first, before the call changes
    them, the statistics queued of the tensors it writes are launched (``statistics/fused_batch.WRITES``), and
    the observers hear of it when it raises."""
    call.inplace = True
    for observer in forward:
        observer.before_forward(call, args, kwargs)
    # After the observers queued the inputs, before the write: queued tensors it writes are read first.
    if _WRITES.armed:
        _WRITES.before_write(args, kwargs)
    try:
        return original(*args, **kwargs)
    except BaseException:
        for observer in forward:
            observer.forward_failed(call)
        raise
