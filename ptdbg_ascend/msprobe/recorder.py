"""The msprobe-format recorder: turns API calls (an observer of the dump engine) and module calls
(``modules.py``) into dump.json entries, stack.json lines and construct.json links.

One :class:`MsprobeRecorder` lives as long as its PrecisionDebugger; ``begin_step`` points it at the
``step{N}/rank{R}`` writer of the current step, ``switch`` turns recording on and off.
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from ptdbg_ascend.config import DebuggerConfig
from ptdbg_ascend.dump.observers import ApiCall, CallObserver
from ptdbg_ascend.dump.stack import user_stack_lines
from ptdbg_ascend.errors import PtdbgError
from ptdbg_ascend.log import logger
from ptdbg_ascend.msprobe.leaves import value_leaf
from ptdbg_ascend.msprobe.selection import Selector, block_wanted, direction_wanted
from ptdbg_ascend.naming import BACKWARD, FORWARD
from ptdbg_ascend.writers.msprobe_json import MsprobeJsonWriter


class OverflowLimitReached(PtdbgError, RuntimeError):
    """The overflow_check task saw its ``overflow_nums``-th overflowing call: training stops here
    (msprobe raised ``Exception("[msprobe] exit")``). The dump of the overflows is complete on disk."""


def dotted(call: ApiCall, direction: str) -> str:
    """``Tensor.__add__.0.forward`` for an ApiCall."""
    return "{}.{}.{}.{}".format(call.prefix, call.api, call.index, direction)


class MsprobeRecorder(CallObserver):
    """Records API calls (L1/mix) and is the sink of the module hooks (L0/mix).

    Args:
        config: the validated configuration.
        record_apis: whether API calls are recorded (levels L1 and mix).
        record_construct: whether construct.json is filled (levels L0 and mix).
    """

    def __init__(self, config: DebuggerConfig, record_apis: bool, record_construct: bool) -> None:
        self.config = config
        self.record_apis = record_apis
        self.record_construct = record_construct
        self.selector = Selector(config)
        self.writer = None  # type: Optional[MsprobeJsonWriter]
        self.on = False
        self.overflows = 0
        self.md5 = config.task == "statistics" and config.summary_mode == "md5"
        self.overflow_task = config.task == "overflow_check"
        # data_mode never changes: decided once, not on every API call
        self._forward_wanted = direction_wanted(config.data_mode, FORWARD)
        self._backward_wanted = direction_wanted(config.data_mode, BACKWARD)
        # construct.json needs the module enclosing each call: the module hooks push and pop here.
        self.module_stack = []  # type: List[str]
        self._forward_parent = {}  # type: Dict[str, Optional[str]]
        self._lock = threading.Lock()

    # -- lifecycle -------------------------------------------------------------------------------
    def begin_step(self, writer: MsprobeJsonWriter) -> None:
        """Record into ``writer`` from now on (a new step directory)."""
        self.writer = writer
        self.selector.reset()
        self._forward_parent.clear()
        self.module_stack = []

    def switch(self, on: bool) -> None:
        self.on = on

    def close(self) -> None:
        """Write the JSON files of the current step (at stop() and at interpreter exit)."""
        if self.writer is not None:
            try:
                self.writer.flush()
            finally:
                self.writer.release()  # the step/rank directory's lock (a later start() takes it again)

    # -- construct.json ----------------------------------------------------------------------------
    def parent_of(self, name: str) -> Optional[str]:
        """The enclosing module of a forward event now; for a backward event, the forward parent
        with forward -> backward (msprobe's rule)."""
        if ".backward" in name:
            forward_parent = self._forward_parent.get(name.replace(".backward", ".forward"))
            return forward_parent.replace(".forward", ".backward") if forward_parent else None
        parent = self.module_stack[-1] if self.module_stack else None
        self._forward_parent[name] = parent
        return parent

    def note_construct(self, name: str) -> None:
        if self.record_construct and self.writer is not None:
            self.writer.add_construct(name, self.parent_of(name))

    # -- the API observer ------------------------------------------------------------------------
    def wants_forward(self, call: ApiCall) -> bool:
        if not (self.on and self.record_apis and self.writer is not None):
            return False
        name = dotted(call, FORWARD)
        self.note_construct(name)  # every call seen while on, even outside scope/list (as 1.0.4)
        return self.selector.api_event(name) and self._forward_wanted

    def wants_backward(self, call: ApiCall) -> bool:
        if not (self.on and self.record_apis and call.prefix != "Distributed" and self._backward_wanted):
            return False
        if self.selector.scope:
            return True  # decided when the gradients arrive (the range is walked in time order)
        return self.selector.api_event(dotted(call, BACKWARD))  # a list alone: known now, skip the hooks

    def before_forward(self, call: ApiCall, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> None:
        # An in-place call (add_, out=, a collective...): the inputs block as they go in (statistics now,
        # .pt copies queued now); the outputs are added after the call. overflow_check decides after the
        # call whether a call is written at all: there only collectives take their inputs here.
        if self.overflow_task and call.prefix != "Distributed":
            return
        call.keep(self, self._inputs_block(dotted(call, FORWARD), args, kwargs))

    def on_forward(self, call: ApiCall, args: Tuple[Any, ...], kwargs: Dict[str, Any], output: Any) -> None:
        name = dotted(call, FORWARD)
        if not call.inplace:
            self.add_entry(name, lambda: self.forward_entry(name, args, kwargs, output), stack=True,
                           values=(args, kwargs, output))
            return
        inputs = call.kept(self)  # None: overflow_check, the inputs are taken now
        if call.prefix == "Distributed":
            # A collective writes its result into its arguments: those are its outputs.
            outputs = list(args) + list(kwargs.values())
            values = (args, kwargs)  # type: Any
        else:
            outputs = _as_list(output)
            values = (args, kwargs, output)

        def build() -> Dict[str, Any]:
            entry = inputs if inputs is not None else self._inputs_block(name, args, kwargs)
            if block_wanted(self.config.data_mode, FORWARD, "output"):
                entry["output"] = self._leaves(outputs, name + ".output")
            return entry

        self.add_entry(name, build, stack=True, values=values)

    def on_backward(self, call: ApiCall, backward_input: Sequence[Optional[Any]],
                    backward_output: Sequence[Optional[Any]]) -> None:
        if not self.on or self.writer is None:
            return
        name = dotted(call, BACKWARD)
        self.note_construct(name)
        if not self.selector.api_event(name):
            return
        self.add_entry(name, lambda: self.gradient_entry(name, backward_input, backward_output), stack=False,
                       values=(backward_input, backward_output))

    # -- entries (shared with the module hooks) ------------------------------------------------------
    def forward_entry(self, name: str, args: Sequence[Any], kwargs: Dict[str, Any], output: Any) -> Dict[str, Any]:
        entry = self._inputs_block(name, args, kwargs)
        if block_wanted(self.config.data_mode, FORWARD, "output"):
            entry["output"] = self._leaves(_as_list(output), name + ".output")
        return entry

    def gradient_entry(self, name: str, incoming: Sequence[Optional[Any]], produced: Sequence[Optional[Any]]) -> Dict[str, Any]:
        entry = {}  # type: Dict[str, Any]
        if block_wanted(self.config.data_mode, BACKWARD, "input"):
            entry["input"] = self._leaves(list(incoming), name + ".input")
        if block_wanted(self.config.data_mode, BACKWARD, "output"):
            entry["output"] = self._leaves(list(produced), name + ".output")
        return entry

    def add_entry(self, name: str, build: Callable[[], Dict[str, Any]], stack: bool, values: Any = None) -> None:
        """Build and write an entry. overflow_check: only when ``values`` (everything the entry holds)
        overflow, by the overflow feature's check (inf/NaN, float16/bfloat16 saturation); the entry
        is then counted against ``overflow_nums``."""
        writer = self.writer
        if writer is None:
            return
        if self.overflow_task:
            from ptdbg_ascend.overflow.detection import overflow_flag, read_flags

            if not read_flags([overflow_flag(values)])[0]:
                return
            logger.warning("{} overflows (inf, nan or saturation in its data).".format(name))
        entry = build()
        writer.add_entry(name, entry)
        if stack:
            writer.add_stack(name, user_stack_lines(2))
        if self.overflow_task:
            with self._lock:
                self.overflows += 1
                reached = self.config.overflow_nums != -1 and self.overflows >= self.config.overflow_nums
            if reached:
                self.on = False  # what the script does while it handles the stop is not recorded
                writer.flush()
                raise OverflowLimitReached(
                    "Overflow check stops training at overflow {} (overflow_nums={}); the overflowing calls are in {}."
                    .format(self.overflows, self.config.overflow_nums, writer.directory))

    def _inputs_block(self, name: str, args: Sequence[Any], kwargs: Dict[str, Any]) -> Dict[str, Any]:
        if not block_wanted(self.config.data_mode, FORWARD, "input"):
            return {}
        base = name + ".input"
        return {
            "input_args": self._leaves(list(args), base),
            # A kwarg's file is named like its compare row, {call}.input.{key}.0 (1.0.4 wrote
            # ....kwargs.{key}.pt, which its own compare could not find: §12 quirk 1).
            "input_kwargs": {key: self._leaf(value, "{}.{}{}".format(base, key, ".0" if _is_tensor(value) else ""), key)
                             for key, value in kwargs.items()},
        }

    def _leaves(self, values: List[Any], base: str) -> List[Any]:
        return [self._leaf(value, "{}.{}".format(base, index)) for index, value in enumerate(values)]

    def _leaf(self, value: Any, path: str, key: Optional[str] = None) -> Any:
        writer = self.writer
        saving = writer is not None and writer.saves_tensors
        return value_leaf(value, path, writer.save_tensor if saving else None, self.md5, key)


def _is_tensor(value: Any) -> bool:
    import torch

    return isinstance(value, torch.Tensor)


def _as_list(output: Any) -> List[Any]:
    """A tuple result is spread; anything else (a list too) is one item, as in 1.0.4."""
    return list(output) if isinstance(output, tuple) else [output]
