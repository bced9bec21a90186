"""The reductions of the overflow check (``overflow/detection.py`` decides which tensors and which limit): whether
a tensor's extremes reach a limit, and whether any of several device flags is set, kept on the device.
"""

from __future__ import annotations

from typing import Any, Callable, List, Optional, Union

from ptdbg_ascend.statistics.eager import min_max, torch_types

Flag = Union[bool, Any]  # a Python bool, or a 0-d bool tensor on the device (read later)


def beyond(tensor: Any, limit: float, refused: Callable[[Any], Optional[Flag]]) -> Optional[Flag]:
    """Whether the max or min of a floating ``tensor`` reaches ``limit`` in magnitude (NaN counts): a Python bool
    on the CPU (a memory read), a 0-d bool tensor elsewhere (no host sync). None where the reductions are not
    available (a tensor subclass or backend without them: the check must not stop training). A CPU tensor that
    refuses ``item()`` (a vmap-batched one) gets ``refused(tensor)``'s flag."""
    try:
        low, high = min_max(tensor)
    except (RuntimeError, TypeError, NotImplementedError):
        return None
    if tensor.device.type == "cpu":
        # Reading a CPU scalar costs no sync and is cheaper than three more tensor ops.
        try:
            high_value, low_value = float(high), float(low)
        except RuntimeError:
            return refused(tensor)
        return not (high_value < limit and low_value > -limit)
    # NaN compares False everywhere, so "inside the limits" is False for it and the flag is set.
    torch = torch_types().torch
    return torch.logical_not(torch.logical_and(high < limit, low > -limit))


def any_of(flags: List[Any]) -> Any:
    """One 0-d bool tensor that is set when any of ``flags`` (0-d bool tensors on one device) is."""
    return flags[0] if len(flags) == 1 else torch_types().torch.stack(flags).any()
