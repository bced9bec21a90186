"""Statistics of many tensors in one pass: the chunk plan, its arithmetic and a numpy emulator of it.

The fused kernel (``fused_triton.py``) reads every tensor of a batch in chunks of :data:`CHUNK` elements, one
program per chunk, and writes one row of :data:`COLUMNS` partials per chunk; a finalize combines each tensor's
rows in a fixed order into one row of the same columns; :func:`format_numbers` turns that row into the numbers
a format writes. :func:`emulate` is the same arithmetic in numpy (the reference on the CPU, and the tests'
oracle for the kernel). The dump path runs it through ``fused_batch.FusedQueue``, behind ``DeviceStatisticsBatch``.

The arithmetic, and why:

* Every element is widened to float64 in the kernel. Where the format reduces in float32 (``width32``: msprobe
  always, legacy for float32/float16/bfloat16) it is first cast from its own dtype to float32, as the eager path
  casts it (an int64 straight to float32, no double rounding through float64). float32 values square exactly in
  float64, so the per-chunk sums are more accurate than the float32 reductions of ``device_batch.py``.
* The partials are over the finite elements only (``finite_max``/``finite_min`` are -inf/+inf when a chunk has
  none), plus counts of NaN, +inf and -inf. Max and Min follow from them exactly, and the kernel never has to
  rely on how a reduction treats NaN.
* The eager float32 reductions overflow where a float64 sum does not: with ``width32``, a finite sum beyond
  float32's range is written as +-inf and a sum of squares beyond it as an infinite norm, as the eager path
  writes them (the one difference left: a signed sum whose float32 partials overflow while the total does not,
  which the eager path writes as inf or NaN and this path as the finite value).
* The finalize combines a tensor's chunk rows in chunk order, :data:`FINAL_BLOCK` rows at a time: each block
  reduced, the block results accumulated one after another. Max, Min and the counts are exact in any order; the
  sums' bits are the same from run to run (no atomics) and differ between the kernel and this emulator only
  within float64 rounding (the order inside a block is the reduction tree's).
"""

from __future__ import annotations

import math
from typing import Any, Dict, List, Optional, Sequence

import numpy

from ptdbg_ascend.statistics.eager import Statistics

CHUNK = 4096  # elements per program: one load of 4,096 lanes (16 per thread at 8 warps)
FINAL_BLOCK = 128  # chunk rows the finalize reduces at a time
COLUMNS = ("finite_max", "finite_min", "finite_sum", "finite_square_sum", "nan", "pos_inf", "neg_inf")
WIDTH = len(COLUMNS)
FLOAT32_MAX = float(numpy.finfo(numpy.float32).max)
LEGACY, MSPROBE = "legacy", "msprobe"
# The kernel's dtype codes (the low byte of a table row's third column; bit 8 is width32).
DTYPE_NAMES = ("float32", "float16", "bfloat16", "float64", "int8", "uint8", "int16", "int32", "int64")
_HALF_OR_SINGLE = ("float32", "float16", "bfloat16")
_CODES: Dict[Any, int] = {}


def _codes() -> Dict[Any, int]:
    """``{torch dtype: code}``, built on first use (torch is imported then)."""
    if not _CODES:
        import torch

        _CODES.update((getattr(torch, name), code) for code, name in enumerate(DTYPE_NAMES))
    return _CODES


def accepts(tensor: Any) -> bool:
    """Whether the fused pass can take ``tensor``: a plain strided torch tensor (not a subclass, transform
    wrapper, meta or lazily negated view) of a :data:`DTYPE_NAMES` dtype with a dimension and an element. The
    others (empty, 0-d, bool, complex, float8, unsigned > 8 bits...) stay on the per-tensor path."""
    import torch

    from ptdbg_ascend import tensor_kinds

    if type(tensor) not in (torch.Tensor, torch.nn.Parameter) or tensor.layout != torch.strided:
        return False
    if tensor.dtype not in _codes() or tensor.dim() == 0 or tensor.numel() == 0 or tensor.is_meta:
        return False
    # A neg-bit view's memory holds the values before negation; a functorch wrapper has no data pointer.
    return not tensor.is_neg() and not tensor_kinds.is_transform_wrapper(tensor)


def width32(dtype_name: str, fmt: str) -> bool:
    """Whether format ``fmt`` (:data:`LEGACY` or :data:`MSPROBE`) reduces a tensor of ``dtype_name`` in
    float32: msprobe always (its ints and float64 included), legacy for float32/float16/bfloat16 (it reduces
    ints and float64 in float64)."""
    if fmt not in (LEGACY, MSPROBE):
        raise ValueError(f"unknown statistics format {fmt!r}")
    return fmt == MSPROBE or dtype_name in _HALF_OR_SINGLE


def dense_in_memory(tensor: Any) -> bool:
    """Whether ``tensor``'s elements fill ``numel`` consecutive elements of memory from ``data_ptr()`` (contiguous,
    or a permutation of a contiguous layout: transposes, channels_last), so the kernel can read them flat."""
    dims = sorted((stride, size) for stride, size in zip(tensor.stride(), tensor.shape) if size != 1)
    expected = 1
    for stride, size in dims:
        if stride != expected:
            return False
        expected *= size
    return True


class Plan:
    """The rows of one fused pass over ``tensors`` (all :func:`accepts`, one device) for format ``fmt``.

    A tensor whose elements are dense in memory is read where it lies, in memory order: its statistics do not
    depend on the order but for the sums' rounding. Any other (a slice with gaps, an expanded view) is copied
    with ``contiguous()`` first, one copy kernel and its memory each; passing strides instead would cost every
    element a division per dimension, for views that are rare among recorded tensors. ``sources`` keeps the
    memory the table points to alive until the pass is read back."""

    def __init__(self, tensors: Sequence[Any], fmt: str) -> None:
        self.fmt = fmt
        self.sources: List[Any] = []
        self.counts: List[int] = []
        self.flags: List[int] = []
        self.first_chunks: List[int] = []
        self.copied = 0  # how many tensors needed a contiguous copy
        codes, chunks = _codes(), 0
        for tensor in tensors:
            data = tensor.detach()
            if not dense_in_memory(data):
                data = data.contiguous()
                self.copied += 1
            name = str(data.dtype).replace("torch.", "")
            self.sources.append(data)
            self.counts.append(data.numel())
            self.flags.append(codes[data.dtype] | (int(width32(name, fmt)) << 8))
            self.first_chunks.append(chunks)
            chunks += -(-data.numel() // CHUNK)
        self.chunks = chunks

    def widths(self) -> List[bool]:
        """Per tensor, whether it is reduced in float32 (:func:`width32`)."""
        return [bool(flag >> 8) for flag in self.flags]

    def table(self, device: Any = None) -> Any:
        """The kernel's int64 table, one row per tensor: data address, element count, flags (dtype code, bit 8
        width32), first chunk; on ``device`` (default: the CPU; elsewhere a blocking copy, see
        :meth:`host_table`)."""
        table = self.host_table()
        return table if device is None else table.to(device)

    def host_table(self, pinned: bool = False) -> Any:
        """:meth:`table` in host memory, page-locked when ``pinned`` (default False): a copy from pinned memory
        with ``non_blocking=True`` is queued on the stream, while one from pageable memory waits for the device
        (a host sync at every launch). 32 bytes per tensor."""
        import torch

        rows = [[source.data_ptr(), count, flag, first]
                for source, count, flag, first in zip(self.sources, self.counts, self.flags, self.first_chunks)]
        table = torch.tensor(rows, dtype=torch.int64)
        return table.pin_memory() if pinned else table

    def arrays(self) -> List[Any]:
        """The sources as numpy arrays (CPU tensors only; bfloat16 widened to float32, exactly)."""
        import torch

        return [(source.float() if source.dtype == torch.bfloat16 else source).numpy() for source in self.sources]

    def numbers(self, finals: Sequence[Sequence[float]]) -> List[Statistics]:
        """Each tensor's numbers in this plan's format from its row of ``finals`` (:func:`format_numbers`)."""
        return [format_numbers(row, count, self.fmt, wide)
                for row, count, wide in zip(finals, self.counts, self.widths())]


def chunk_partials(array: Any, wide: bool) -> Any:
    """The ``[chunks, WIDTH]`` float64 partials of one array (read in memory order, as the kernel reads it),
    its elements cast to float32 first when ``wide`` (:func:`width32`)."""
    flat = numpy.ravel(array, order="K")
    with numpy.errstate(over="ignore"):  # a float64 beyond float32's range is inf there, as in the eager cast
        values = (flat.astype(numpy.float32) if wide else flat).astype(numpy.float64)
    chunks = -(-values.size // CHUNK)
    padded = numpy.zeros(chunks * CHUNK, dtype=numpy.float64)
    padded[:values.size] = values
    grid = padded.reshape(chunks, CHUNK)
    valid = (numpy.arange(chunks * CHUNK) < values.size).reshape(chunks, CHUNK)
    with numpy.errstate(all="ignore"):  # inf - inf, and squares beyond float64 (inf, as the kernel's)
        finite = valid & ((grid - grid) == 0.0)
        infinite = valid & ~numpy.isnan(grid) & ~finite
        out = numpy.empty((chunks, WIDTH), dtype=numpy.float64)
        out[:, 0] = numpy.where(finite, grid, -numpy.inf).max(axis=1)
        out[:, 1] = numpy.where(finite, grid, numpy.inf).min(axis=1)
        out[:, 2] = numpy.where(finite, grid, 0.0).sum(axis=1)
        out[:, 3] = numpy.where(finite, grid * grid, 0.0).sum(axis=1)
    out[:, 4] = (valid & numpy.isnan(grid)).sum(axis=1)
    out[:, 5] = (infinite & (grid > 0)).sum(axis=1)
    out[:, 6] = (infinite & (grid < 0)).sum(axis=1)
    return out


def combine(partials: Any) -> Any:
    """One tensor's final row from its chunk rows, in the finalize's fixed order: FINAL_BLOCK rows at a time,
    each block reduced, the block results accumulated in chunk order."""
    final = numpy.array([-numpy.inf, numpy.inf, 0.0, 0.0, 0.0, 0.0, 0.0])
    for start in range(0, partials.shape[0], FINAL_BLOCK):
        block = partials[start:start + FINAL_BLOCK]
        final[0] = max(final[0], block[:, 0].max())
        final[1] = min(final[1], block[:, 1].min())
        with numpy.errstate(all="ignore"):  # float64 sums of float64 data may overflow, as the kernel's
            final[2:] = final[2:] + block[:, 2:].sum(axis=0)
    return final


def emulate_finals(arrays: Sequence[Any], widths: Sequence[bool],
                   order: Optional[Any] = None) -> Any:
    """The ``[tensors, WIDTH]`` final rows of ``arrays`` (numpy, any layout; ``widths`` per array). ``order``
    (default None: chunk order) maps a tensor's chunk rows to the order they are combined in: only for tests
    that must see a wrong order caught."""
    rows = []
    for array, wide in zip(arrays, widths):
        partials = chunk_partials(array, wide)
        rows.append(combine(partials if order is None else order(partials)))
    return numpy.array(rows, dtype=numpy.float64).reshape(len(rows), WIDTH)


def emulate(arrays: Sequence[Any], fmt: str = LEGACY) -> List[Statistics]:
    """Each array's numbers in format ``fmt`` (default :data:`LEGACY`) by the fused arithmetic in numpy: the
    CPU reference of the kernel. A bfloat16 tensor is given as its float32 values (exact)."""
    widths = [width32(numpy.dtype(array.dtype).name, fmt) for array in arrays]
    finals = emulate_finals(arrays, widths)
    return [format_numbers(row, numpy.size(array), fmt, wide) for row, array, wide in zip(finals, arrays, widths)]


def format_numbers(final: Sequence[float], count: int, fmt: str, wide: bool) -> Statistics:
    """A tensor's numbers in format ``fmt`` from its final row and element ``count``: legacy's ``[max, min,
    mean, l2norm]``, msprobe's ``[Max, Min, Mean, Norm]`` and, when Max or Min is not finite,
    ``Max_except_inf_nan, Min_except_inf_nan`` (those of ``msprobe_rules.eager_statistics``). ``wide``: the
    format reduces in float32, whose range the sums saturate at (module docstring)."""
    high_f, low_f, total, squares = (float(value) for value in final[:4])
    nan, pos, neg = (int(value) for value in final[4:])
    inf = math.inf
    finite = high_f != -inf  # a chunk without a finite element leaves -inf
    if nan:
        high = low = mean = norm = math.nan  # torch's max/min/sum/norm propagate NaN
    else:
        high = inf if pos else high_f if finite else -inf
        low = -inf if neg else low_f if finite else inf
        if wide and abs(total) > FLOAT32_MAX:
            total = math.copysign(inf, total)
        total = total + (inf if pos else 0.0) + (-inf if neg else 0.0)  # inf + -inf: NaN, as eager's
        mean = total / count
        norm = inf if pos or neg or (wide and squares > FLOAT32_MAX) else math.sqrt(squares)
    numbers: Statistics = [high, low, mean, norm]
    if fmt == MSPROBE and not (math.isfinite(high) and math.isfinite(low)):
        if finite:
            numbers += [high_f, low_f]
        elif pos or neg:  # no finite element: the non-NaN ones' extremes, all infinite
            numbers += [inf if pos else -inf, -inf if neg else inf]
        else:
            numbers += [math.nan, math.nan]
    return numbers
