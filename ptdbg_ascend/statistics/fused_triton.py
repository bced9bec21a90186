"""The fused statistics pass as two Triton kernels: every chunk of every tensor of a batch in one launch, then
one finalize launch, then one read-back (``fused_plan.py`` has the arithmetic, and its numpy emulator).

The chunk kernel reads the tensors where they lie through a table of (data address, element count, flags,
first chunk) rows: no copy of the data (only a view that is not dense in memory is copied, ``fused_plan.Plan``).
Each program finds its row by a binary search over the first chunks, loads its 4,096 elements in their own
dtype, widens them to float64 (through float32 where the format reduces in float32) and writes its row of
partials. The finalize runs one program per tensor over its chunk rows in a fixed order. Both are deterministic:
no atomics, so the same batch gives the same bits every run.

triton is optional: this module imports without it (:func:`available` says False) and nothing imports triton
unless it is installed. Under ``TRITON_INTERPRET=1`` (set before triton is first imported) the kernels run on
CPU tensors, which is how the tests check them against the emulator.
"""

from __future__ import annotations

from typing import Any, List, Optional, Sequence

from ptdbg_ascend.statistics.eager import Statistics
from ptdbg_ascend.statistics.fused_plan import CHUNK, FINAL_BLOCK, WIDTH, Plan

SEARCH_STEPS = 11  # binary-search steps of the chunk kernel for up to 2,047 tensors (fused_finals)

try:  # optional: a guard, so the module imports (and says why not) without triton
    import triton
    import triton.language as tl
    IMPORT_ERROR: Optional[str] = None
except Exception as error:  # noqa: BLE001 - a broken triton install must not break the statistics package
    triton = tl = None
    IMPORT_ERROR = f"{type(error).__name__}: {error}"


def available() -> bool:
    """Whether triton could be imported (whether a device can run the kernels is the caller's question)."""
    return triton is not None


if triton is not None:
    @triton.jit
    def _widen(v, wide):
        """``v`` as float64, rounded to float32 first when ``wide`` (the format reduces in float32)."""
        return tl.where(wide != 0, v.to(tl.float32).to(tl.float64), v.to(tl.float64))

    @triton.jit
    def _load_widened(addr, code, wide, offsets, valid, CHUNK: tl.constexpr):
        """The chunk's elements as float64 (0 where not ``valid``), cast to float32 first when ``wide``."""
        x = tl.zeros([CHUNK], tl.float64)
        if code == 0:
            x = tl.load(addr.to(tl.pointer_type(tl.float32)) + offsets, mask=valid, other=0.0).to(tl.float64)
        elif code == 1:
            x = tl.load(addr.to(tl.pointer_type(tl.float16)) + offsets, mask=valid, other=0.0).to(tl.float64)
        elif code == 2:
            x = tl.load(addr.to(tl.pointer_type(tl.bfloat16)) + offsets, mask=valid, other=0.0).to(tl.float64)
        elif code == 3:
            v = tl.load(addr.to(tl.pointer_type(tl.float64)) + offsets, mask=valid, other=0.0)
            x = _widen(v, wide)
        elif code == 4:
            v = tl.load(addr.to(tl.pointer_type(tl.int8)) + offsets, mask=valid, other=0)
            x = _widen(v, wide)
        elif code == 5:
            v = tl.load(addr.to(tl.pointer_type(tl.uint8)) + offsets, mask=valid, other=0)
            x = _widen(v, wide)
        elif code == 6:
            v = tl.load(addr.to(tl.pointer_type(tl.int16)) + offsets, mask=valid, other=0)
            x = _widen(v, wide)
        elif code == 7:
            v = tl.load(addr.to(tl.pointer_type(tl.int32)) + offsets, mask=valid, other=0)
            x = _widen(v, wide)
        elif code == 8:
            # Straight to float32 (as torch casts an int64), never through float64: no double rounding.
            v = tl.load(addr.to(tl.pointer_type(tl.int64)) + offsets, mask=valid, other=0)
            x = _widen(v, wide)
        return x

    @triton.jit
    def _chunk_kernel(table, partials, rows, SEARCH: tl.constexpr, CHUNK: tl.constexpr):
        """One program per chunk: its row of partials (``fused_plan.COLUMNS``)."""
        chunk = tl.program_id(0).to(tl.int64)
        # The last row whose first chunk is <= this chunk (first chunks increase: every tensor has one).
        low = chunk * 0
        high = low + rows - 1
        for _ in tl.static_range(SEARCH):
            middle = (low + high + 1) // 2
            ahead = tl.load(table + middle * 4 + 3) <= chunk
            low = tl.where(ahead, middle, low)
            high = tl.where(ahead, high, middle - 1)
        addr = tl.load(table + low * 4)
        count = tl.load(table + low * 4 + 1)
        flags = tl.load(table + low * 4 + 2)
        offsets = (chunk - tl.load(table + low * 4 + 3)) * CHUNK + tl.arange(0, CHUNK)
        valid = offsets < count
        x = _load_widened(addr, flags & 255, (flags >> 8) & 1, offsets, valid, CHUNK)
        # x - x is 0 exactly for a finite x and NaN for inf and NaN: no infinity constant needed to test it.
        finite = valid & ((x - x) == 0.0)
        infinite = valid & (x == x) & ~finite
        out = partials + chunk * 7
        tl.store(out + 0, tl.max(tl.where(finite, x, -float("inf")), axis=0))
        tl.store(out + 1, tl.min(tl.where(finite, x, float("inf")), axis=0))
        tl.store(out + 2, tl.sum(tl.where(finite, x, 0.0), axis=0))
        tl.store(out + 3, tl.sum(tl.where(finite, x * x, 0.0), axis=0))
        tl.store(out + 4, tl.sum((valid & (x != x)).to(tl.float64), axis=0))
        tl.store(out + 5, tl.sum((infinite & (x > 0)).to(tl.float64), axis=0))
        tl.store(out + 6, tl.sum((infinite & (x < 0)).to(tl.float64), axis=0))

    @triton.jit
    def _finalize_kernel(table, partials, finals, CHUNK: tl.constexpr, BLOCK: tl.constexpr):
        """One program per tensor: its chunk rows combined BLOCK at a time, the blocks in chunk order."""
        row = tl.program_id(0).to(tl.int64)
        count = tl.load(table + row * 4 + 1)
        first = tl.load(table + row * 4 + 3)
        chunks = (count + CHUNK - 1) // CHUNK
        lanes = tl.arange(0, BLOCK)
        high = tl.max(tl.full([BLOCK], -float("inf"), tl.float64), axis=0)
        low = tl.min(tl.full([BLOCK], float("inf"), tl.float64), axis=0)
        total = tl.sum(tl.zeros([BLOCK], tl.float64), axis=0)
        squares = total
        nan = total
        pos = total
        neg = total
        for start in range(0, chunks, BLOCK):
            index = start + lanes
            inside = index < chunks
            base = partials + (first + index) * 7
            high = tl.maximum(high, tl.max(tl.load(base + 0, mask=inside, other=-float("inf")), axis=0))
            low = tl.minimum(low, tl.min(tl.load(base + 1, mask=inside, other=float("inf")), axis=0))
            total += tl.sum(tl.load(base + 2, mask=inside, other=0.0), axis=0)
            squares += tl.sum(tl.load(base + 3, mask=inside, other=0.0), axis=0)
            nan += tl.sum(tl.load(base + 4, mask=inside, other=0.0), axis=0)
            pos += tl.sum(tl.load(base + 5, mask=inside, other=0.0), axis=0)
            neg += tl.sum(tl.load(base + 6, mask=inside, other=0.0), axis=0)
        out = finals + row * 7
        tl.store(out + 0, high)
        tl.store(out + 1, low)
        tl.store(out + 2, total)
        tl.store(out + 3, squares)
        tl.store(out + 4, nan)
        tl.store(out + 5, pos)
        tl.store(out + 6, neg)


def fused_finals(plan: Plan, device: Any = None, table: Any = None) -> Any:
    """The ``[tensors, WIDTH]`` float64 final rows of ``plan`` on ``device`` (default: the first source's):
    two launches, nothing read back. ``table``: the plan's table already on ``device`` (default None: made by
    ``plan.table(device)``, whose copy from pageable memory waits for the device; ``fused_batch`` passes one
    copied from pinned memory). Raises RuntimeError without triton."""
    if triton is None:
        raise RuntimeError(f"the fused statistics kernels need triton ({IMPORT_ERROR})")
    import torch

    device = plan.sources[0].device if device is None else device
    table = plan.table(device) if table is None else table
    rows = len(plan.sources)
    partials = torch.empty((plan.chunks, WIDTH), dtype=torch.float64, device=device)
    finals = torch.empty((rows, WIDTH), dtype=torch.float64, device=device)
    # SEARCH: steps of the binary search, enough for `rows` rows. At least SEARCH_STEPS, so every batch of the dump's
    # queue (at most 1,024 tensors, often a few: a launch before an in-place write) runs one compiled variant
    # instead of one per bit length; a step past the row found keeps it, for one load.
    _chunk_kernel[(plan.chunks,)](table, partials, rows, SEARCH=max(SEARCH_STEPS, rows.bit_length()), CHUNK=CHUNK,
                                  num_warps=8)
    _finalize_kernel[(rows,)](table, partials, finals, CHUNK=CHUNK, BLOCK=FINAL_BLOCK)
    return finals


def fused_statistics(tensors: Sequence[Any], fmt: str) -> List[Statistics]:
    """Each tensor's numbers in format ``fmt`` (``fused_plan.LEGACY``/``MSPROBE``) from one fused pass and one
    read-back. Every tensor must pass ``fused_plan.accepts`` and lie on one device."""
    if not tensors:
        return []
    plan = Plan(tensors, fmt)
    return plan.numbers(fused_finals(plan).tolist())  # the one device->host copy
