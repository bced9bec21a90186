"""The ``torch.autocast`` state a dumped API call runs in, for its dump.json entry's ``autocast`` value
(``formats/dump_json.py``), so that the pre-check re-runs the call in the same state.

Read per recorded call, at the call: ``torch._C._is_any_autocast_enabled()`` answers the usual case (no
autocast) in about 0.1 µs; only inside autocast are the call's tensors looked at (the first one's device
type is the autocast that applies to the call, as torch dispatches it).
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Sequence

import torch

from ptdbg_ascend.formats.dump_json import autocast_record

_any_enabled = getattr(torch._C, "_is_any_autocast_enabled", None)


def autocast_state(args: Sequence[Any], kwargs: Dict[str, Any]) -> Optional[Dict[str, str]]:
    """``{"device_type": ..., "dtype": "torch.bfloat16"}`` when autocast is on for the device of the call's
    first tensor argument (positional, then keyword, one list level deep); None otherwise, or when the
    call has no tensor argument (a factory call: autocast does not change it)."""
    if _any_enabled is not None and not _any_enabled():
        return None
    device_type = _first_device_type(args, kwargs)
    if device_type is None or not _enabled(device_type):
        return None
    return autocast_record(device_type, str(_dtype(device_type)))


def _first_device_type(args: Sequence[Any], kwargs: Dict[str, Any]) -> Optional[str]:
    for value in list(args) + list(kwargs.values()):
        items = value if isinstance(value, (list, tuple)) else (value,)
        for item in items:
            if isinstance(item, torch.Tensor):
                return item.device.type
    return None


def _enabled(device_type: str) -> bool:
    try:
        return bool(torch.is_autocast_enabled(device_type))  # torch >= 2.4
    except TypeError:  # older torch: one function per device type
        if device_type == "cpu":
            return bool(torch.is_autocast_cpu_enabled())
        return device_type == "cuda" and bool(torch.is_autocast_enabled())


def _dtype(device_type: str) -> Any:
    try:
        return torch.get_autocast_dtype(device_type)  # torch >= 2.4
    except (AttributeError, TypeError):
        return torch.get_autocast_cpu_dtype() if device_type == "cpu" else torch.get_autocast_gpu_dtype()
