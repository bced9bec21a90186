"""How close two tensors must be: the robust verdict's tolerances, from the dtypes of a call and the
magnitude of its tensors.

The legacy column ``Accuracy Reached or Not`` (Cosine < 0.99 and MaxAbsErr > 0.001) is kept as the guide
defines it, but it cries wolf on round-off (a gradient that is mathematically zero has a random cosine)
and misses uniform errors (``x * 1.02`` has Cosine 1). The graded ``Result``, the advisor and the exit
code use this rule instead, written like ``torch.testing.assert_close`` (an absolute plus a relative
part), with both parts scaled by what the data can promise:

- **relative part** ``rtol`` from the lowest float precision among *all* tensors of the call, on both
  sides: a call that touches bfloat16 on either side (autocast, a bf16 kernel) is allowed bfloat16's
  round-off on all its tensors; a float32-only call is strict (0.1 %: 8000 float32 ulps, so reordered
  float32 sums pass, and a 2 % scale error fails 20 times over);
- **absolute part** ``atol`` = the call's largest magnitude (``api_scale``) times the larger of 16 float32
  ulps (sums of many terms in float32 cancel to ~that) and 2 ulps of the call's precision (a bfloat16
  result is rounded once more): a value that is zero up to the round-off of the numbers it was computed
  from (the bias gradient of a conv before BatchNorm, a mean of centred values) is never a failure;
- a tensor passes when its error norm ``‖n−b‖₂ ≤ rtol·‖b‖₂ + atol·√N`` (the bulk of the values) **and** its
  worst element ``max|n−b| ≤ worst_rtol·max(|n|,|b|) + atol`` with ``worst_rtol = max(1e-2, 4·eps)`` (one
  badly wrong element in a large tensor); integer and bool tensors must be equal.

The numbers are written down in ``doc/compare_guide.md`` with the reasons.
"""

from __future__ import annotations

import math
from typing import Iterable, NamedTuple, Optional

# Unit of least precision (machine epsilon) of each float dtype name as the dumps write them.
EPSILON = {
    "torch.float64": 2.0 ** -52, "torch.double": 2.0 ** -52,
    "torch.float32": 2.0 ** -23, "torch.float": 2.0 ** -23,
    "torch.float16": 2.0 ** -10, "torch.half": 2.0 ** -10,
    "torch.bfloat16": 2.0 ** -7,
    "torch.float8_e4m3fn": 2.0 ** -3, "torch.float8_e4m3fnuz": 2.0 ** -3,
    "torch.float8_e5m2": 2.0 ** -2, "torch.float8_e5m2fnuz": 2.0 ** -2,
    "float64": 2.0 ** -52, "float32": 2.0 ** -23, "float16": 2.0 ** -10, "bfloat16": 2.0 ** -7,
}
# rtol = max(RTOL_ULPS * eps, RTOL_MIN): bfloat16 1.6e-2, float16 2.0e-3, float32 and float64 1e-3.
RTOL_ULPS = 2.0
RTOL_MIN = 1e-3
# The worst single element may be off by max(WORST_MIN, WORST_ULPS * eps) of the tensor's largest magnitude:
# 1 % for float32/float16, 3.1 % (4 ulps) for bfloat16.
WORST_MIN = 1e-2
WORST_ULPS = 4.0
# atol: the call's largest magnitude times max(FLOOR_FLOAT32_ULPS float32 ulps, FLOOR_ULPS ulps of the
# call's precision). 16 ulps of float32 was measured to cover a conv bias gradient before BatchNorm
# (a sum of 32 terms of ~0.04 that cancels to ~1e-8); 2 ulps of bfloat16 keeps a 10 % error of a bfloat16
# call an error (16 bfloat16 ulps would be 12.5 % of the largest value).
FLOOR_FLOAT32_ULPS = 16.0
FLOOR_ULPS = 2.0
# Below this share of rtol a passing row is a plain pass; above it (or when the legacy column says No)
# the Result is "warning": worth a look when hunting a small drift.
WARNING_SHARE = 0.25


class Tolerance(NamedTuple):
    """What one row is allowed: ``exact`` for integer/bool data, otherwise ``rtol`` (the error norm),
    ``worst_rtol`` (the worst element, of the tensor's largest magnitude) and ``atol``."""

    rtol: float
    atol: float
    exact: bool
    precision: str  # the dtype that set rtol, e.g. "torch.bfloat16" (for messages)
    worst_rtol: float = WORST_MIN

    def norm_allowed(self, bench_norm: float, size: int) -> float:
        return self.rtol * bench_norm + self.atol * math.sqrt(max(size, 1))

    def worst_allowed(self, scale: float) -> float:
        return self.worst_rtol * scale + self.atol

    def allows(self, error_norm: float, bench_norm: float, size: int, worst: float, scale: float) -> bool:
        """Whether an error of norm ``error_norm`` and worst element ``worst`` passes on a tensor of
        ``size`` elements, bench norm ``bench_norm`` and largest magnitude ``scale``."""
        if self.exact:
            return worst == 0.0
        return error_norm <= self.norm_allowed(bench_norm, size) and worst <= self.worst_allowed(scale)

    def needed_rtol(self, error_norm: float, bench_norm: float, size: int, worst: float, scale: float) -> float:
        """The smallest rtol (with this atol, and the worst element allowed the same multiple of it as
        now) under which the row would pass: the "minimum tolerance that would have passed" of a failing
        row. ``inf`` when no rtol can (an error on an all-zero bench)."""
        needed = 0.0
        slack = error_norm - self.atol * math.sqrt(max(size, 1))
        if slack > 0:
            needed = slack / bench_norm if bench_norm > 0 else math.inf
        worst_slack = worst - self.atol
        if worst_slack > 0:
            ratio = self.worst_rtol / self.rtol
            needed = max(needed, worst_slack / (ratio * scale) if scale > 0 else math.inf)
        return needed


def is_float(dtype: str) -> bool:
    return dtype in EPSILON


def call_precision(dtypes: Iterable[str]) -> Optional[str]:
    """The float dtype with the largest epsilon among ``dtypes`` (both sides of a call); None when the
    call holds no float tensor."""
    lowest = None
    for dtype in dtypes:
        eps = EPSILON.get(dtype)
        if eps is not None and (lowest is None or eps > EPSILON[lowest]):
            lowest = dtype
    return lowest


def tolerance(row_dtypes: Iterable[str], precision: Optional[str], api_scale: float) -> Tolerance:
    """The tolerance of one row: exact when the row's own data is not float; otherwise from the call's
    ``precision`` (see :func:`call_precision`) and ``api_scale`` (the largest magnitude of the call)."""
    if not all(is_float(dtype) for dtype in row_dtypes) or precision is None:
        return Tolerance(0.0, 0.0, True, "exact")
    eps = EPSILON[precision]
    scale = api_scale if math.isfinite(api_scale) else 0.0
    floor = max(FLOOR_FLOAT32_ULPS * EPSILON["torch.float32"], FLOOR_ULPS * eps)
    return Tolerance(max(RTOL_ULPS * eps, RTOL_MIN), floor * scale, False, precision, max(WORST_MIN, WORST_ULPS * eps))


def magnitude(maximum: Optional[float], minimum: Optional[float]) -> float:
    """``max(|max|, |min|)`` of a record's statistics; 0 for missing or non-finite numbers."""
    values = [abs(v) for v in (maximum, minimum) if v is not None and math.isfinite(v)]
    return max(values) if values else 0.0
