"""msprobe 1.0.4's statistics rules (``reference/msprobe_1_0_4.md`` §6.2): a leaf's ``Max, Min, Mean, Norm``
and, when Max or Min is not finite, ``Max_except_inf_nan, Min_except_inf_nan``.

=============================  =============================================================
tensor                         statistics
=============================  =============================================================
meta / empty                   nulls
bool                           ``any``, ``all``, null, null
0-d (any other dtype)          the value four times (the Norm too, sign and all), exact
complex                        max, min, mean of ``abs()``; Norm null (0-d: ``abs(value)`` four times)
int, float64                   reduced in float32
other floats                   as they are (fp16/bf16 accumulated in float32)
=============================  =============================================================

The legacy format's rules are ``eager.py``'s; both are held as objects in ``rules.py``.
"""

from __future__ import annotations

import math
from typing import Any, Callable, List, Optional

from ptdbg_ascend.inside import Inside
from ptdbg_ascend.statistics.device_batch import DeviceStatisticsBatch, finite_pair
from ptdbg_ascend.statistics.eager import Statistics, small_float32_statistics, tensor_statistics
from ptdbg_ascend.statistics.fused_plan import MSPROBE as MSPROBE_FORMAT


def tensor_statistics_msprobe(tensor: Any) -> Statistics:
    """``[Max, Min, Mean, Norm]`` with msprobe's rules (the module docstring)."""
    # The common case first (small float32 CPU tensors: the same numbers the path below computes).
    small = small_float32_statistics(tensor)
    if small is not None:
        return small
    import torch

    data = tensor.detach()
    if data.device.type == "meta" or data.numel() == 0:
        return [None, None, None, None]
    if data.dtype == torch.bool:
        return [bool(data.any().item()), bool(data.all().item()), None, None]
    if data.is_complex():
        if data.dtype == torch.complex32:
            data = data.to(torch.complex64)  # abs() of complex32 would round the magnitude to float16
        magnitude = data.abs()
        if magnitude.dim() == 0:
            value = float(magnitude.item())
            return [value, value, value, value]
        return [float(magnitude.max().item()), float(magnitude.min().item()), float(magnitude.mean().item()), None]
    if data.dim() == 0:
        value = float(data.item())
        return [value, value, value, value]
    return tensor_statistics(msprobe_reduced(data))


def finite_extremes(tensor: Any) -> List[float]:
    """Max and min over the finite elements; over the non-NaN ones if none is finite; NaN if all are NaN."""
    import torch

    data = tensor.detach()
    if not data.is_floating_point():
        data = data.float()
    finite = data[torch.isfinite(data)]
    if finite.numel() == 0:
        finite = data[~torch.isnan(data)]
    if finite.numel() == 0:
        return [float("nan"), float("nan")]
    return [float(finite.max().item()), float(finite.min().item())]


def eager_statistics(tensor: Any, statistics_of: Optional[Callable[[Any], Statistics]] = None) -> Statistics:
    """A leaf's numbers read now: Max, Min, Mean, Norm (by ``statistics_of``, default
    :func:`tensor_statistics_msprobe`) and, when Max or Min is not finite, msprobe's ``Max_except_inf_nan`` and
    ``Min_except_inf_nan`` after them."""
    return with_extremes(tensor, (statistics_of or tensor_statistics_msprobe)(tensor))


def with_extremes(tensor: Any, statistics: Statistics) -> Statistics:
    """``statistics`` of ``tensor`` (Max, Min, Mean, Norm) with msprobe's ``Max_except_inf_nan`` and
    ``Min_except_inf_nan`` after them when Max or Min is not finite."""
    if not_finite(statistics[0]) or not_finite(statistics[1]):
        return list(statistics[:4]) + finite_extremes(tensor)
    return statistics


def defer_candidate(tensor: Any, on_cpu: bool = False) -> bool:
    """Whether msprobe's statistics of ``tensor`` can be read back in a batch: a tensor with values off
    the CPU (``on_cpu``, default False: on it too) taking the float or 0-d path of
    :func:`tensor_statistics_msprobe` (not bool, complex or empty)."""
    if tensor.is_cpu and not on_cpu:
        return False
    return not (tensor.is_meta or tensor.numel() == 0 or tensor.is_complex() or str(tensor.dtype) == "torch.bool")


def msprobe_reduced(tensor: Any) -> Any:
    """The data :func:`tensor_statistics_msprobe` reduces for a float-path tensor: ints and float64 as
    float32 (1.0.4's rule), other floats as they are."""
    data = tensor.detach()
    if not data.is_floating_point() or str(data.dtype) == "torch.float64":
        data = data.float()
    return data


def on_device(batch: DeviceStatisticsBatch, tensor: Any) -> Any:
    """The statistics of a :func:`defer_candidate` tensor from ``batch``: pending, or read now where there is
    nothing to read back. In the batch's fused queue where it takes the tensor (its pass reduces ints and
    float64 in float32 itself, and gives the ``*_except_inf_nan`` pair); else a float tensor's pending list holds
    :func:`~device_batch.finite_pair` after the four numbers (:func:`extremes_except_inf_nan` reads them)."""
    floating = tensor.is_floating_point()
    if tensor.dim() == 0:
        # The value, exact, four times, not reduced in float32; an int as float64 (exact to 2**53). A copy either
        # way: read back later, the tensor itself may have changed by then (AdamW's ``step_t += 1``).
        with Inside():
            value = tensor.detach().clone() if floating else tensor.detach().double()
            return batch.add_value(value, finite_pair if floating else None)
    queued = batch.queued(tensor, MSPROBE_FORMAT)
    if queued is not None:
        return queued
    # Values reduced from ints cannot be infinite or NaN: no finite extremes to prepare for them.
    return batch.add(msprobe_reduced(tensor), extra=finite_pair if floating else None)


def extremes_except_inf_nan(numbers: List[Any]) -> Optional[List[float]]:
    """``[Max_except_inf_nan, Min_except_inf_nan]`` of a leaf whose numbers are ``numbers`` (Max, Min, Mean,
    Norm, then nothing, or a pair: those two themselves (:func:`eager_statistics`) or the finite pair a device
    batch read back); None when the leaf has no such keys (Max and Min finite, or no pair)."""
    if len(numbers) < 6 or not (not_finite(numbers[0]) or not_finite(numbers[1])):
        return None
    return _except_inf_nan(numbers[4], numbers[5])


def _except_inf_nan(high: float, low: float) -> List[float]:
    """msprobe's ``[Max_except_inf_nan, Min_except_inf_nan]`` from the finite pair read back, or from
    :func:`finite_extremes` (returned as they are: their max is never below their min)."""
    if not high < low:  # a finite element (its extremes), or the eager path's values, or NaN
        return [high, low]
    # No finite element: over the non-NaN ones, all infinite (NaN when every element is NaN). A finite
    # stand-in says an infinity of that sign is there.
    inf, nan = float("inf"), float("nan")
    positive, negative = math.isfinite(high), math.isfinite(low)
    return [inf if positive else -inf if negative else nan, -inf if negative else inf if positive else nan]


def not_finite(value: Any) -> bool:
    """Whether ``value`` is an infinite or NaN float (a bool's any/all and None are not)."""
    return isinstance(value, float) and (math.isinf(value) or math.isnan(value))
