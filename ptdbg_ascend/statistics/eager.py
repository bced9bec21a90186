"""Statistics computed now, on the calling thread: the legacy format's ``[max, min, mean, l2norm]`` (the
summary every pkl record carries), and the host reductions the msprobe rules (``msprobe_rules.py``) share.

Computed on the tensor's own device with one host transfer of four numbers. The values equal what numpy
computes from the saved ``.npy`` (cast to float64) to float32 rounding:

=============================  =============================================================
tensor                         statistics
=============================  =============================================================
float, ndim >= 1, numel > 0    max, min, mean, l2norm (fp16/bf16 reduced in float32)
int / bool                     the same, of the values cast to float64 (False/True -> 0/1)
float8 (all variants)          the same, of the values as float32 (exactly representable)
complex (32/64/128)            the same, of the magnitude ``abs()`` (complex32 widened to complex64
                               first; the npy keeps the complex values: ``doc/dump_guide.md``)
0-d (any dtype)                the value, the value, the value, ``abs(value)``
empty (numel == 0)             ``[None, None, None, None]`` (``null`` in the pkl)
Python bool/int/float          the value three times, then ``abs(value)``
=============================  =============================================================

inf and NaN propagate as they do in numpy and are written as JSON ``Infinity``/``NaN`` (Python's
``json`` reads them back).

Tensors the reductions cannot read as they are (``vmap``/``grad``/``jvp`` wrappers, nested, sparse,
quantized, meta, fake...) get the statistics of the values ``tensor_kinds.py`` says their record
holds, or ``[None, None, None, None]``; :func:`tensor_statistics` never raises for them. One exception
it cannot see cheaply: a ``functionalize`` wrapper reads as garbage through ``numpy()``, so callers
check :func:`~ptdbg_ascend.tensor_kinds.transforms_active` once per call and then use
:func:`special_statistics`.
"""

from __future__ import annotations

import math
import operator
from typing import Any, Callable, List, Optional, Tuple

import numpy

Statistics = List[Optional[float]]
EMPTY: Statistics = [None, None, None, None]


def _torch_has(*path: str) -> bool:
    import torch

    target = torch
    for name in path:
        if not hasattr(target, name):
            return False
        target = getattr(target, name)
    return True


_HAS_AMINMAX = _torch_has("aminmax")
_SMALL = 32768  # up to this many elements, numpy reduces a CPU tensor faster than torch


def min_max(tensor: Any) -> Tuple[Any, Any]:
    """``(min, max)`` of a tensor as 0-d tensors, in one pass where torch has ``aminmax`` (>= 1.11)."""
    import torch

    if _HAS_AMINMAX:
        return torch.aminmax(tensor)
    return tensor.min(), tensor.max()


def scalar_statistics(value: Any) -> Statistics:
    """Statistics of a Python bool/int/float: ``[v, v, v, |v|]``."""
    number = float(value)
    return [number, number, number, abs(number)]


def tensor_statistics(tensor: Any) -> Statistics:
    """``[max, min, mean, l2norm]`` of a torch tensor (see the module docstring for special tensors).

    Runs on the tensor's device without autograd history: small float32/float64 CPU tensors through
    numpy on the same memory, others with three torch reductions whose four numbers are read at once
    (one device->host copy off the CPU).
    """
    types = _TYPES[0] if _TYPES else torch_types()
    small = _small_cpu_first(tensor, types, types.numpy_reals)
    if small is not None:
        return small
    # detach(): a tensor without autograd history, so no graph is recorded and no no_grad() is needed.
    try:
        return _general_statistics(tensor.detach(), types)
    except (RuntimeError, TypeError, ValueError, NotImplementedError):
        # A transform wrapper (vmap: .item() refuses), sparse/nested/quantized layouts, a dtype without
        # arithmetic: never an error inside the user's call.
        return special_statistics(tensor)


def small_float32_statistics(tensor: Any) -> Optional[Statistics]:
    """``[max, min, mean, l2norm]`` of a small float32 CPU tensor with at least one dimension and one
    element, as :func:`tensor_statistics` computes them (through numpy); None for any other tensor (the
    caller then takes its general path). The per-leaf fast path of the msprobe format, which reduces
    float64 in float32 and so cannot use :func:`tensor_statistics`'s float64 branch."""
    types = _TYPES[0] if _TYPES else torch_types()  # (a call fewer per recorded tensor)
    return _small_cpu_first(tensor, types, types.float32_only)


def _small_cpu_first(tensor: Any, types: TorchTypes, dtypes: Any) -> Optional[Statistics]:
    """The common case first, with as few checks as possible: most recorded tensors of a training step
    are small float CPU tensors (the optimizer's per-parameter ops), and for them the general path's
    checks cost as much as the reductions. The numpy statistics of ``tensor`` when its dtype is in
    ``dtypes``, it lives on the CPU, has a dimension and at most _SMALL elements; else None."""
    if tensor.dtype not in dtypes or not types.is_cpu(tensor):
        return None
    count = tensor.numel()
    if not (0 < count <= _SMALL and tensor.dim() > 0):
        return None
    # numpy() refuses a tensor that requires grad; detach() only then (it costs a new tensor).
    return _small_cpu_statistics(tensor.detach() if tensor.requires_grad else tensor)


def special_statistics(tensor: Any) -> Statistics:
    """The statistics of the values a record of a tensor of any kind holds (``tensor_kinds.py``): of the
    underlying batch for a vmap wrapper, the dense values of a sparse tensor...; EMPTY when it has none.
    Read with functorch disabled; never raises."""
    from ptdbg_ascend import tensor_kinds

    kind = "plain"
    try:
        with tensor_kinds.reading_values():
            plain, kind = tensor_kinds.plain_values(tensor)
            if plain is not None:
                return _general_statistics(plain, torch_types())
    except Exception as error:  # noqa: BLE001 - statistics must never stop training
        tensor_kinds.warn_once("statistics:" + kind, "Statistics of a {} tensor ({}) cannot be computed ({}: {}); "
                               "its records hold null statistics.".format(kind, getattr(tensor, "dtype", "?"),
                                                                          type(error).__name__, error))
    return list(EMPTY)


def _general_statistics(data: Any, types: TorchTypes) -> Statistics:
    reduced = _reductions(data, types)
    if not isinstance(reduced, tuple):
        return reduced
    high, low, total, square_sum, count = reduced
    if types.is_cpu(high):
        # On the CPU item() is a plain memory read: cheaper than stacking four scalars into one tensor.
        return [high.item(), low.item(), total.item() / count, math.sqrt(square_sum.item())]
    # On an accelerator: one device->host transfer for the four numbers instead of four syncs.
    return _stacked(types, reduced).tolist()


def _stacked(types: TorchTypes, reduced: Tuple[Any, Any, Any, Any, int]) -> Any:
    """The four statistics as one tensor on the device of ``reduced`` (from :func:`_reductions`)."""
    high, low, total, square_sum, count = reduced
    norm = low.abs() if square_sum is None else square_sum.sqrt()
    return types.torch.stack([high, low, total / count, norm])


def reduction_input(data: Any, torch: Any, half_native: bool = False) -> Any:
    """``(work, accumulate)``: the values whose max, min, sum and norm are a tensor's statistics (complex:
    the magnitude, complex32 widened first; int/bool as float64; fp16/bf16 as float32, or as they are with
    ``half_native`` (default False), ``accumulate`` then float32 for the kernels that take a dtype), or
    ``EMPTY`` for an empty tensor. Shared by this module and the device batch, so both reduce the same data."""
    if data.numel() == 0:
        return list(EMPTY)
    if data.is_complex():
        if data.dtype == torch.complex32:
            data = data.to(torch.complex64)  # abs() of complex32 would round the magnitude to float16
        data = data.abs()
    if data.dtype in (torch.float32, torch.float64):
        return data, None
    if half_native and data.dtype in (torch.float16, torch.bfloat16):
        return data, torch.float32
    if data.is_floating_point():
        return data.float(), None
    return data.double(), None  # int64 stays exact up to 2**53, bool becomes 0/1


def _reductions(data: Any, types: TorchTypes) -> Any:
    """``(max, min, sum, sum of squares, count)`` as 0-d tensors on ``data``'s device (nothing read
    back; the sum of squares is None for a 0-d tensor), or the finished statistics where no reduction
    is needed (empty, 0-d and small CPU tensors)."""
    prepared = reduction_input(data, types.torch)
    if type(prepared) is list:
        return prepared
    work = prepared[0]
    if work.dim() == 0:
        if types.is_cpu(work):
            value = float(work.item())
            return [value, value, value, abs(value)]
        return work, work, work, None, 1  # the norm of a value is its magnitude (not sqrt(v*v): overflow)
    if work.numel() <= _SMALL and types.is_cpu(work):
        small = _small_cpu_statistics(work)
        if small is not None:
            return small
    # Three passes over the data; the mean is the sum over n (torch's mean() has a higher fixed cost).
    low, high = min_max(work)
    total = types.torch.sum(work)
    # Not a dot product: BLAS accumulates it in float32 lanes, 4e-6 relative error for 32K equal values
    # (1e-4 at 4M). sum() uses a cascade and stays within float32 rounding of numpy's float64 result.
    square_sum = types.torch.sum(work * work)
    return high, low, total, square_sum, work.numel()


# Below this magnitude neither the sum nor the sum of squares of _SMALL float32 values can overflow
# (32768 * 1e16**2 < 3.4e38), so the reductions need no floating-point error state.
_SAFE_MAGNITUDE = 1e16
_MAXIMUM = numpy.maximum.reduce
_MINIMUM = numpy.minimum.reduce
_ADD = numpy.add.reduce


def _small_cpu_statistics(work: Any) -> Optional[Statistics]:
    """The statistics of a small CPU tensor through numpy, on the same memory (a copy only when it is
    not contiguous, and small): for a few thousand elements numpy's reductions cost a fraction of
    torch's per-operator dispatch, which is what the optimizer's many small parameter tensors pay.
    None when numpy cannot view the tensor (a lazily negated or conjugated view): the caller then
    uses torch."""
    try:
        array = work.numpy()
    except (RuntimeError, TypeError, ValueError):
        return None
    if array.ndim != 1:
        array = array.reshape(-1)
    # max/min propagate NaN without floating-point warnings; they also bound the other two.
    high = float(_MAXIMUM(array))
    low = float(_MINIMUM(array))
    if -_SAFE_MAGNITUDE < low and high < _SAFE_MAGNITUDE:  # finite, no NaN, no overflow possible
        total = float(_ADD(array))  # pairwise summation, as numpy's own mean
        square_sum = float(_ADD(array * array))  # pairwise too: see _general_statistics on dot products
    else:
        with numpy.errstate(all="ignore"):  # inf/nan propagate as in torch, without RuntimeWarnings
            total = float(_ADD(array))
            square_sum = float(_ADD(array * array))
    return [high, low, total / array.size, math.sqrt(square_sum)]


# Elements squared at a time by array_statistics: a 1 MiB float32 temporary that stays in cache.
_SQUARE_CHUNK = 1 << 18


def array_statistics(array: Any) -> Statistics:
    """``[max, min, mean, l2norm]`` of a non-empty float32/float64 numpy array, as numpy computes them
    (used on the writer thread with the array that goes to the npy file; numpy's loops release the GIL). The sum
    of squares is taken :data:`_SQUARE_CHUNK` elements at a time (pairwise within a chunk, the chunks added in
    float64), not as one temporary the size of the array: twice as fast on 64 MB (a temporary that large is
    fresh memory, and memory traffic is what the writer thread is short of beside ``np.save``), and closer to the
    exact value (1.1e-9 relative against 2.6e-8 for 16M float32 normals)."""
    flat = array.reshape(-1)
    with numpy.errstate(all="ignore"):  # inf/nan propagate, without RuntimeWarnings
        high = float(_MAXIMUM(flat))
        low = float(_MINIMUM(flat))
        total = float(_ADD(flat))
        square = numpy.empty(min(flat.size, _SQUARE_CHUNK), dtype=flat.dtype)
        square_sum = 0.0
        for start in range(0, flat.size, _SQUARE_CHUNK):
            part = flat[start:start + _SQUARE_CHUNK]
            numpy.multiply(part, part, out=square[:part.size])
            square_sum += float(_ADD(square[:part.size]))
    return [high, low, total / flat.size, math.sqrt(square_sum)]


class TorchTypes:
    """torch and the dtypes the fast path tests, looked up once (torch is imported on first use)."""

    def __init__(self) -> None:
        import torch

        self.torch = torch
        self.numpy_reals = frozenset((torch.float32, torch.float64))
        self.float32_only = frozenset((torch.float32,))
        # Whether a tensor lives on the CPU: Tensor.is_cpu (torch >= 1.13) is cheaper than .device.
        if hasattr(torch.Tensor, "is_cpu"):
            self.is_cpu: Callable[[Any], bool] = operator.attrgetter("is_cpu")  # (C: no Python frame per tensor)
        else:
            self.is_cpu = lambda tensor: tensor.device.type == "cpu"


_TYPES: List[TorchTypes] = []


def torch_types() -> TorchTypes:
    if not _TYPES:
        _TYPES.append(TorchTypes())
    return _TYPES[0]
