"""An append-only log of the legacy dump-side calls the running script made, for ``export_config``.

``ptdbg_ascend.legacy`` calls :func:`record_call` first thing in each dump-side function (seed_all,
set_dump_path, register_hook, set_dump_switch, set_overflow_check_switch, set_backward_input).
The log lives in the core so that the core never imports ``compat``: the migration shim reads it
(``compat.export``, ``compat.mapping``).
Recording must never break the call it records, so every failure is logged and swallowed. It costs
about 4 microseconds per legacy call (these are called a few times per step, never per API call).

Torch-free: values are kept as given, except the model (only its class name is kept, so the log never
holds a model alive) and the hook markers (kept by name).
"""

from __future__ import annotations

import threading
from typing import Any, Dict, List, NamedTuple, Tuple

RECORDED_FUNCTIONS: Tuple[str, ...] = (
    "seed_all", "set_dump_path", "register_hook", "set_dump_switch", "set_overflow_check_switch",
    "set_backward_input",
)


class LegacyCall(NamedTuple):
    """One legacy call: the function name and its arguments by name (defaults included)."""

    function: str
    arguments: Dict[str, Any]


# A week-long job may switch the dump ON/OFF every step: a call equal to the last one of the same function
# (and switch) adds nothing to the config, so it is not stored again, and the log is capped.
MAX_RECORDED_CALLS = 10000
TRUNCATED = "(more calls not recorded)"  # the function name of the marker appended at the cap

_LOCK = threading.Lock()
# The log itself. Append-only while a script runs; clear_calls() exists for tests and export-config.
_CALLS: List[LegacyCall] = []
_LAST: Dict[Tuple[str, Any], Dict[str, Any]] = {}


def _plain(name: str, value: Any) -> Any:
    if name == "model":
        return None if value is None else type(value).__name__
    if name == "hook":
        return getattr(value, "name", repr(value))
    if isinstance(value, (list, tuple)):
        return list(value)  # a copy: the script may change its list after the call
    return value


def record_call(function: str, arguments: Dict[str, Any]) -> None:
    """Append ``(function, arguments)`` to the log. Never raises."""
    try:
        call = LegacyCall(function, {name: _plain(name, value) for name, value in arguments.items()})
        key = (function, repr(call.arguments.get("switch")))
        with _LOCK:
            if _LAST.get(key) == call.arguments:
                return
            if len(_CALLS) >= MAX_RECORDED_CALLS:
                if len(_CALLS) == MAX_RECORDED_CALLS:
                    from ptdbg_ascend.log import logger  # here: importing logging costs more than recording

                    _CALLS.append(LegacyCall(TRUNCATED, {}))
                    logger.warning("More than {} different legacy calls: export_config keeps the first {}."
                                   .format(MAX_RECORDED_CALLS, MAX_RECORDED_CALLS))
                return
            _CALLS.append(call)
            _LAST[key] = call.arguments
    except Exception as error:  # recording is best effort: the user's call must go on
        try:
            from ptdbg_ascend.log import logger

            logger.warning(f"Could not record the legacy call {function} for export_config: {error}")
        except Exception:
            pass


def recorded_calls() -> Tuple[LegacyCall, ...]:
    """The legacy calls recorded so far, oldest first."""
    with _LOCK:
        return tuple(_CALLS)


def clear_calls() -> None:
    """Forget every recorded call and config (tests; ``ptdbg export-config`` before running a script)."""
    with _LOCK:
        del _CALLS[:]
        _LAST.clear()
        del _CONFIGS[:]


# The config.json form of each PrecisionDebugger built (a script already on the new API: export-config writes its
# config, whatever its task, grad_probe and free_benchmark included).
_CONFIGS: List[Dict[str, Any]] = []


def record_debugger_config(config: Dict[str, Any]) -> None:
    """Remember the config of a PrecisionDebugger just built (at most 64 kept)."""
    with _LOCK:
        if len(_CONFIGS) < 64:
            _CONFIGS.append(config)


def debugger_configs() -> Tuple[Dict[str, Any], ...]:
    """The configs of the PrecisionDebuggers built so far, oldest first."""
    with _LOCK:
        return tuple(_CONFIGS)
