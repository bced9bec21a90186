"""Which calls a recorder records: the :class:`SelectionPolicy` protocol, and the legacy policy.

The one recorder (``dump/recorder.py``) asks a selection policy; there are two implementations:
:class:`LegacySelection` here (a ``set_dump_switch`` window: whole-name list/range/stack/acl matching,
api_list by API name) and ``msprobe/selection.MsprobeSelection`` (PrecisionDebugger: msprobe scope
and substring list matching).

:class:`SwitchConfig` is the validated, immutable form of the switch arguments; the matching functions
are pure. The only state, the position inside a range, lives in :class:`RangeState` owned by the
window's :class:`LegacySelection` (so every ``set_dump_switch("ON", mode="range")`` starts a fresh range),
with what the window's items have matched so far (:meth:`SelectionPolicy.unmatched`, said at OFF).
"""

from __future__ import annotations

import threading
from typing import Any, FrozenSet, NamedTuple, Optional, Sequence, Tuple, Union

from ptdbg_ascend.errors import ParameterError
from ptdbg_ascend.formats.naming import BACKWARD, FORWARD, PREFIXES, parse_call_name

MODES = ("all", "list", "range", "stack", "acl", "api_list", "api_stack")
# File-name prefix of each mode's pkl and npy dir ("all" has none).
MODE_PREFIX = {"all": "", "list": "list_", "range": "range_", "stack": "stack_", "acl": "acl_",
               "api_list": "api_list_", "api_stack": "api_stack_"}
STACK_MODES = ("api_stack", "list", "range", "stack", "acl")
DUMP_MODE_WORDS = ("all", "forward", "backward", "input", "output")


class SwitchConfig(NamedTuple):
    """A validated dump window. ``directions`` ⊆ {forward, backward}, ``sides`` ⊆ {input, output}."""

    mode: str
    scope: Tuple[str, ...]
    api_list: Tuple[str, ...]
    filter_switch: bool
    directions: FrozenSet[str]
    sides: FrozenSet[str]
    summary_only: bool

    @property
    def writes_stack(self) -> bool:
        return self.mode in STACK_MODES

    @property
    def writes_tensors(self) -> bool:
        return self.mode != "stack"

    @property
    def writes_npy(self) -> bool:
        return self.writes_tensors and not self.summary_only

    @property
    def is_range(self) -> bool:
        return self.mode == "range" or (self.mode == "stack" and len(self.scope) == 2)


def _names(parameter: str, value: Any) -> Tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str) or not isinstance(value, (list, tuple)):
        raise ParameterError(parameter, value, "must be a list of API names",
                             f'Example: {parameter}=["Tensor_permute_1_forward"]')
    for item in value:
        if not isinstance(item, str) or not item:
            raise ParameterError(parameter, value, "every item must be a non-empty str")
    return tuple(value)


def _check_call_names(scope: Tuple[str, ...]) -> None:
    for item in scope:
        if parse_call_name(item) is None and parse_call_name(item + "_" + FORWARD) is None:
            raise ParameterError(
                "scope", list(scope),
                "items must be API names such as 'Tensor_permute_1_forward' (or without the direction: "
                "'Tensor_permute_1'); {!r} is not one".format(item),
                f"Prefixes: {', '.join(PREFIXES)}.",
            )


def parse_dump_mode(dump_mode: Union[str, Sequence[str], None]) -> Tuple[FrozenSet[str], FrozenSet[str]]:
    """``(directions, sides)`` of the ``dump_mode`` argument. A direction or side word that is not
    given means both (``["forward"]`` = forward inputs and outputs; ``["forward", "input"]`` = forward
    inputs only). None and "all" select everything."""
    words = [dump_mode] if isinstance(dump_mode, str) else dump_mode
    if dump_mode is None:
        words = ["all"]
    if not isinstance(words, (list, tuple)) or not words or any(word not in DUMP_MODE_WORDS for word in words):
        raise ParameterError("dump_mode", dump_mode,
                             f"must be 'all', 'forward', 'backward' or a non-empty list from {list(DUMP_MODE_WORDS)}")
    directions = frozenset(word for word in words if word in (FORWARD, BACKWARD)) or frozenset((FORWARD, BACKWARD))
    sides = frozenset(word for word in words if word in ("input", "output")) or frozenset(("input", "output"))
    return directions, sides


def make_switch_config(mode: Any, scope: Any, api_list: Any, filter_switch: Any, dump_mode: Any,
                       summary_only: Any) -> SwitchConfig:
    """Validate the ``set_dump_switch`` arguments (ParameterError names the bad one)."""
    if mode not in MODES:
        raise ParameterError("mode", mode, f"must be one of {list(MODES)}")
    scope_names = _names("scope", scope)
    api_names = _names("api_list", api_list)
    if filter_switch not in ("ON", "OFF"):
        raise ParameterError("filter_switch", filter_switch, "must be 'ON' or 'OFF'")
    if not isinstance(summary_only, bool):
        raise ParameterError("summary_only", summary_only, "must be a bool")
    directions, sides = parse_dump_mode(dump_mode)
    if mode == "range" and len(scope_names) != 2:
        raise ParameterError("scope", scope, "mode 'range' needs exactly two API names: [start, end]")
    if mode == "list" and not scope_names:
        raise ParameterError("scope", scope, "mode 'list' needs a non-empty list of API names")
    if mode == "stack" and len(scope_names) > 2:
        raise ParameterError("scope", scope, "mode 'stack' takes [] (all), one API name or [start, end]")
    if mode == "acl" and len(scope_names) != 1:
        raise ParameterError("scope", scope, "mode 'acl' takes exactly one API name")
    if mode == "api_list" and not api_names:
        raise ParameterError("api_list", api_list, "mode 'api_list' needs a non-empty list of API names, e.g. ['relu']")
    if mode not in ("list", "range", "stack", "acl") and scope_names:
        raise ParameterError("scope", scope, f"is only used by modes list, range, stack and acl (mode is {mode!r})")
    if mode != "api_list" and api_names:
        raise ParameterError("api_list", api_list, f"is only used by mode 'api_list' (mode is {mode!r})")
    _check_call_names(scope_names)
    return SwitchConfig(mode, scope_names, tuple(item.lower() for item in api_names), filter_switch == "ON",
                        directions, sides, summary_only)


def name_matches(item: str, name: str) -> bool:
    """Whole-name match of a scope item against a call name. An item without ``_forward``/``_backward``
    matches both directions; ``Tensor_add_1_forward`` never matches ``Tensor_add_10_forward``."""
    if item == name:
        return True
    return name == item + "_" + FORWARD or name == item + "_" + BACKWARD


def api_list_matches(api_list: Tuple[str, ...], prefix: str, api: str) -> bool:
    """api_list mode: an item selects an API by its name (``"relu"`` -> Torch/Tensor/Functional relu,
    not ``leaky_relu``), by prefix and name (``"Functional_relu"``) or a whole namespace
    (``"distributed"``). Case-insensitive."""
    api_lower = api.lower()
    prefix_lower = prefix.lower()
    for item in api_list:
        if item == api_lower or item == prefix_lower or item == prefix_lower + "_" + api_lower:
            return True
    return False


class RangeState:
    """Position in a ``[start, end]`` range, endpoints included; once ``end`` passed, the range stays closed."""

    __slots__ = ("start", "end", "state")

    def __init__(self, start: str, end: str) -> None:
        self.start = start
        self.end = end
        self.state = "before"

    def step(self, name: str) -> bool:
        """Advance over the event ``name``; True when it is inside the range."""
        if self.state == "before" and name_matches(self.start, name):
            self.state = "inside"
        if self.state == "inside":
            if name_matches(self.end, name):
                self.state = "after"
            return True
        return False


def selects_every_call(config: SwitchConfig) -> bool:
    """Whether the window selects every call whatever its name (modes all, api_stack, stack without scope)."""
    return config.mode in ("all", "api_stack") or (config.mode == "stack" and not config.scope)


def static_match(config: SwitchConfig, prefix: str, api: str, name: str) -> Optional[bool]:
    """Whether ``name`` is selected by a mode without state; None for range modes (ask the RangeState)."""
    if config.is_range:
        return None
    if selects_every_call(config):
        return True
    if config.mode == "api_list":
        return api_list_matches(config.api_list, prefix, api)
    return any(name_matches(item, name) for item in config.scope)  # list, stack with one item, acl


class Unmatched(NamedTuple):
    """What a window's selection never matched: ``items`` of the ``total`` listed ones (a list, an
    api_list), or the ``start`` of a range (nothing was dumped) or only its ``end`` (everything after the
    start was). Empty (false) when every name matched."""

    items: Tuple[str, ...] = ()
    total: int = 0
    start: Optional[str] = None
    end: Optional[str] = None

    def __bool__(self) -> bool:
        return bool(self.items) or self.start is not None or self.end is not None


class SelectionPolicy:
    """Which calls a recorder records (the protocol; see ``dump/recorder.py`` for when each is asked).

    ``forward``/``backward``: whether any data of that direction is recorded (fixed per policy).
    Events are given in time order: every forward event (wanted or not, so a range is walked
    correctly), then each backward event when its gradients arrive. May be called from autograd's
    threads: implementations lock their state.
    """

    forward = True
    backward = True

    def forward_event(self, call: Any) -> bool:
        """A forward event (every top-level call while recording): is it selected?"""
        raise NotImplementedError

    def backward_armed(self, call: Any) -> bool:
        """When the forward ran: could its backward be selected? (No state change; True when only the
        backward event can tell, as inside a range.) False skips the backward capture."""
        raise NotImplementedError

    def backward_event(self, call: Any) -> bool:
        """The backward event of an armed call, when its gradients arrive: is it selected?"""
        raise NotImplementedError

    def reset(self) -> None:
        """Start again (a new window or step): a range is closed until its start is seen again."""

    def unmatched(self) -> Unmatched:
        """The names that matched no call since the window began. Default: none."""
        return Unmatched()


class LegacySelection(SelectionPolicy):
    """The selection of one ``set_dump_switch`` window: modes all/api_stack (everything), list/acl/stack
    with one name (whole-name match), range/stack with two (a :class:`RangeState`), api_list (by API
    name); ``dump_mode`` directions."""

    def __init__(self, config: SwitchConfig) -> None:
        self.config = config
        self.forward = FORWARD in config.directions
        self.backward = BACKWARD in config.directions
        self.range = RangeState(config.scope[0], config.scope[1]) if config.is_range else None
        self._all = selects_every_call(config)
        self._lock = threading.Lock()
        # The items no call has matched yet (a list, a stack or acl name, an api_list), in the given order;
        # a range's are its RangeState's.
        listed = config.api_list if config.mode == "api_list" else () if config.is_range or self._all else config.scope
        self._waiting = list(dict.fromkeys(listed))

    @property
    def selects_all(self) -> bool:
        """Whether every call is selected whatever its name."""
        return self._all

    def _selected(self, call: Any, name: str) -> bool:
        matched = static_match(self.config, call.prefix, call.api, name)
        if matched is None:
            with self._lock:
                matched = self.range.step(name)
        elif matched and self._waiting:
            self._matched(call, name)
        return matched

    def _matched(self, call: Any, name: str) -> None:
        """Strike the items that ``call`` (named ``name``) matches off the waiting ones."""
        if self.config.mode == "api_list":
            hits = [item for item in self._waiting if api_list_matches((item,), call.prefix, call.api)]
        else:
            hits = [item for item in self._waiting if name_matches(item, name)]
        with self._lock:
            self._waiting = [item for item in self._waiting if item not in hits]

    def unmatched(self) -> Unmatched:
        if self.range is not None:
            state = self.range.state
            return Unmatched(start=self.range.start if state == "before" else None,
                             end=self.range.end if state == "inside" else None)
        listed = self.config.api_list if self.config.mode == "api_list" else self.config.scope
        return Unmatched(tuple(self._waiting), len(set(listed))) if self._waiting else Unmatched()

    def forward_event(self, call: Any) -> bool:
        return self._all or self._selected(call, call.forward_name)

    def backward_armed(self, call: Any) -> bool:
        if self.range is not None:
            return True  # decided when the backward event happens, in time order
        return self._all or self._selected(call, call.backward_name)

    def backward_event(self, call: Any) -> bool:
        # Outside ranges the name was matched when the backward was armed.
        return self.range is None or self._selected(call, call.backward_name)

    def reset(self) -> None:
        if self.range is not None:
            with self._lock:
                self.range = RangeState(self.range.start, self.range.end)
