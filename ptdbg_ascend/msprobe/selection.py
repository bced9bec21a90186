"""Which calls and which blocks a PrecisionDebugger dump selects (msprobe 1.0.4 semantics, §3).

:class:`MsprobeSelection` is the msprobe implementation of the one recorder's selection protocol
(``dump/selection.SelectionPolicy``; the legacy one is ``LegacySelection`` there); the module hooks
(``modules.py``) use its module events too.

* ``list``: a call is selected if any item is a case-sensitive **substring** of its full name
  (``"relu"`` also matches ``leaky_relu``; ``"Functional.conv2d.0.forward"`` selects that forward only).
* ``scope`` of two API names: dumping starts at the event ``scope[0]`` and stops after ``scope[1]``,
  both inclusive, in time order over forward and backward events (a fresh range every step).
* ``scope`` of two module names (``Module....``): everything from the start of module ``scope[0]`` to
  the end of module ``scope[1]`` (needs module hooks: level L0 or mix).
* both ``scope`` and ``list``: a call must satisfy both.
* ``data_mode`` (OR, as 1.0.4): a block (forward/backward x input/output) is dumped if the list holds
  ``all``, its direction or its side.

The selector also keeps, per window (:meth:`Selector.start_window`), which list items matched no call and
whether the scope's start and end came (:meth:`Selector.unmatched`): the recorder says them at ``stop()``.
"""

from __future__ import annotations

import threading
from typing import Any, Tuple

from ptdbg_ascend.config import DebuggerConfig
from ptdbg_ascend.dump.observers import dotted
from ptdbg_ascend.dump.selection import SelectionPolicy, Unmatched
from ptdbg_ascend.formats.naming import BACKWARD, FORWARD


def block_wanted(data_mode: Tuple[str, ...], direction: str, side: str) -> bool:
    """Whether the ``direction`` ("forward"/"backward") x ``side`` ("input"/"output") block is dumped."""
    return "all" in data_mode or direction in data_mode or side in data_mode


def direction_wanted(data_mode: Tuple[str, ...], direction: str) -> bool:
    """Whether any block of ``direction`` is dumped."""
    return block_wanted(data_mode, direction, "input") or block_wanted(data_mode, direction, "output")


class Selector:
    """Applies one config's scope and list. Holds the only state, the position inside the range
    (reset with :meth:`reset` at every step)."""

    def __init__(self, config: DebuggerConfig) -> None:
        self.api_list = config.api_list
        self.scope = config.scope
        self.module_range = config.module_range
        self._inside = False
        self._lock = threading.Lock()  # backward events may come from autograd's threads
        # Since the window began: the list items no selected call matched yet, whether the scope's start
        # and end came.
        self._waiting = list(dict.fromkeys(self.api_list))
        self._started = self._ended = False

    def reset(self) -> None:
        with self._lock:
            self._inside = False

    def start_window(self) -> None:
        """A window begins (``start()``): what matched is counted from now."""
        with self._lock:
            self._waiting = list(dict.fromkeys(self.api_list))
            self._started = self._ended = False

    def unmatched(self) -> Unmatched:
        """The list items that matched no call in scope since the window began, or the scope's start that
        never came (nothing was dumped) or its end (everything after the start was)."""
        with self._lock:
            if self.scope and not self._started:
                return Unmatched(start=self.scope[0])
            if self.scope and not self._ended:
                return Unmatched(end=self.scope[1])
            return Unmatched(tuple(self._waiting), len(set(self.api_list))) if self._waiting else Unmatched()

    def _listed(self, name: str) -> bool:
        if not self.api_list:
            return True
        if not any(item in name for item in self.api_list):
            return False
        if self._waiting:
            with self._lock:
                self._waiting = [item for item in self._waiting if item not in name]
        return True

    def api_event(self, name: str) -> bool:
        """An API call's forward or backward event, in time order: is it selected?"""
        if not self.scope:
            return self._listed(name)
        if self.module_range:
            with self._lock:
                inside = self._inside
            return inside and self._listed(name)
        with self._lock:
            if name == self.scope[0]:
                self._inside = self._started = True
            inside = self._inside
            if name == self.scope[1] and inside:
                self._inside, self._ended = False, True
        return inside and self._listed(name)

    def module_start(self, name: str) -> None:
        """A module forward/backward begins (module ranges only)."""
        if self.module_range and name == self.scope[0]:
            with self._lock:
                self._inside = self._started = True

    def module_end(self, name: str) -> bool:
        """A module forward/backward ends: is its own entry selected? (Closes a module range at
        ``scope[1]``.) For API ranges, module names are matched like API names."""
        if not self.scope:
            return self._listed(name)
        if not self.module_range:
            return self.api_event(name)
        with self._lock:
            inside = self._inside
            if name == self.scope[1] and inside:
                self._inside, self._ended = False, True
        return inside and self._listed(name)


class MsprobeSelection(Selector, SelectionPolicy):
    """The PrecisionDebugger's selection of API calls: scope and list on the dotted names
    (``Torch.add.0.forward``), ``data_mode`` directions; :meth:`reset` at every step."""

    def __init__(self, config: DebuggerConfig) -> None:
        super().__init__(config)
        self.forward = direction_wanted(config.data_mode, FORWARD)
        self.backward = direction_wanted(config.data_mode, BACKWARD)

    def forward_event(self, call: Any) -> bool:
        if not (self.scope or self.api_list):  # every call (the default): no name to build
            return True
        return self.api_event(dotted(call, FORWARD))

    def backward_armed(self, call: Any) -> bool:
        if self.scope:
            return True  # decided when the gradients arrive (the range is walked in time order)
        if not self.api_list:
            return True
        return self.api_event(dotted(call, BACKWARD))  # a list alone: known now, skip the hooks

    def backward_event(self, call: Any) -> bool:
        if not (self.scope or self.api_list):
            return True
        return self.api_event(dotted(call, BACKWARD))
