"""The contract between interception and everything that reacts to an API call.

Interception (``dump/interception.py``) knows *that* an API ran; observers decide what to do with it:
the one recorder (``dump/recorder.py``: a selection policy + a sink, legacy pkl/npy or msprobe
dump.json), the overflow detector and the ACL re-runner are all observers registered on the one
:class:`~ptdbg_ascend.dump.session.DumpSession`. This keeps the wrappers ignorant of file formats, and
lets each feature be tested on its own.

Life of a top-level call to a wrapped API (nested calls inside it are invisible to observers):

1. interception takes the API's next counter value and builds an :class:`ApiCall`;
2. if any observer ``wants_forward(call)``, the original runs and ``on_forward`` is called for each
   observer that wanted it, with the real args/kwargs/output objects (do not mutate them);
   for a call that changes its arguments in place (``call.inplace``, decided by ``dump/inplace.py``:
   ``add_``, ``__setitem__``, ``out=``, ``inplace=True``, collectives), ``before_forward`` is called
   first, before the original runs: a recorder records the inputs there, as they go in, and only the
   outputs in ``on_forward``. If the original raises, ``forward_failed`` is called instead of
   ``on_forward``;
3. if autograd is recording (grad enabled) and the call is not a collective, observers are asked
   ``wants_backward(call)``; if any wants it and the output requires grad, backward capture is armed;
   when autograd computes the gradients, ``on_backward`` is called with ``backward_input`` (the
   gradients arriving at output i) and ``backward_output`` (the gradients w.r.t. input i; None where
   an input has no gradient).

Observers must be cheap in ``wants_*`` (called on every top-level call while the session is active)
and must not raise for ordinary data; an exception they raise on purpose (overflow limit reached)
propagates to the training script.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Optional, Sequence, Tuple

from ptdbg_ascend.formats.naming import BACKWARD, FORWARD, call_name


class ApiCall:
    """One top-level call of a wrapped API.

    ``prefix``/``api``/``index`` give the legacy names (``Tensor___add___0_forward``); ``original``
    is the unwrapped function, so an observer can re-execute the call (ACL dump).
    """

    __slots__ = ("prefix", "api", "index", "original", "forward_name", "_backward_name", "inplace", "_kept",
                 "replacement")

    def __init__(self, prefix: str, api: str, index: int, original: Callable[..., Any]) -> None:
        self.prefix = prefix
        self.api = api
        self.index = index
        self.original = original
        self.forward_name = call_name(prefix, api, index, FORWARD)
        self._backward_name: Optional[str] = None
        # Whether the call changes its arguments in place (set by the session before before_forward).
        self.inplace = False
        self._kept: Optional[Dict[Any, Any]] = None
        # What the call returns instead of the original's output, set by an observer's on_forward (free_benchmark's
        # fix handler: the more accurate run's output); None: the original's.
        self.replacement: Any = None

    def keep(self, observer: CallObserver, value: Any) -> None:
        """Keep what ``observer`` took in ``before_forward`` (its inputs) until its ``on_forward``."""
        if self._kept is None:
            self._kept = {}
        self._kept[observer] = value

    def kept(self, observer: CallObserver) -> Any:
        """What ``observer`` kept for this call, or None."""
        return self._kept.get(observer) if self._kept is not None else None

    @property
    def backward_name(self) -> str:
        """``{Prefix}_{api}_{n}_backward``, built on first use: most calls (the optimizer's, anything
        under no_grad) never have a backward."""
        if self._backward_name is None:
            self._backward_name = call_name(self.prefix, self.api, self.index, BACKWARD)
        return self._backward_name

    def __repr__(self) -> str:
        return f"ApiCall({self.forward_name})"


def dotted(call: ApiCall, direction: str) -> str:
    """``Tensor.__add__.0.forward``: the call's name in the msprobe format, for ``direction`` ("forward" or
    "backward")."""
    return f"{call.prefix}.{call.api}.{call.index}.{direction}"


class CallObserver:
    """Base class of observers; every method is a no-op so subclasses override what they need."""

    def wants_forward(self, call: ApiCall) -> bool:
        """Whether ``on_forward`` should run for this call. Default False."""
        return False

    def wants_backward(self, call: ApiCall) -> bool:
        """Whether ``on_backward`` should run for this call. Default False. Asked only while autograd
        records (grad enabled) and never for ``Distributed`` calls, so it must not have side effects."""
        return False

    def before_forward(self, call: ApiCall, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> None:
        """Before the original runs, for in-place calls (``call.inplace``) this observer
        ``wants_forward``: the arguments as they go in, before the call changes them. What a recorder
        takes here (statistics, copies) it keeps with ``call.keep(self, ...)`` for ``on_forward``."""

    def forward_failed(self, call: ApiCall) -> None:
        """The original of an in-place call raised after ``before_forward``: ``on_forward`` will not
        come (the exception propagates to the script). Drop what ``before_forward`` prepared."""

    def on_forward(self, call: ApiCall, args: Tuple[Any, ...], kwargs: Dict[str, Any], output: Any) -> None:
        """After the original returned ``output``. Setting ``call.replacement`` makes the call return it instead
        (and the backward capture follow it)."""

    def on_backward(
        self,
        call: ApiCall,
        backward_input: Sequence[Optional[Any]],
        backward_output: Sequence[Optional[Any]],
    ) -> None:
        """When autograd produced this call's gradients (see the module docstring for the meaning)."""

    def close(self) -> None:
        """Flush and release files. Called at switch OFF, on unregister and at interpreter exit."""

    def close_cut(self, why: str) -> None:
        """:meth:`close` at an interpreter exit that cuts the dump short (``why``: an uncaught exception
        ends the process while this observer still records). Default: :meth:`close`."""
        self.close()
