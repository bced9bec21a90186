"""How close two tensors must be: the robust verdict's tolerance of one row, from the precision its call
computes in, the row's own scale, and the error its inputs bring in.

The legacy column ``Accuracy Reached or Not`` (Cosine < 0.99 and MaxAbsErr > 0.001) is kept as the guide
defines it, but it cries wolf on round-off (a gradient that is mathematically zero has a random cosine)
and misses uniform errors (``x * 1.02`` has Cosine 1). The graded ``Result``, the advisor and the exit
code use this rule instead. A row of ``N`` elements with error ``d = n - b`` passes when

- **the bulk**: ``||d|| <= hypot(rtol * max(||b||, T), G * P) + atol * sqrt(N)``, where
  ``rtol`` is the round-off of the call's precision (the lowest float precision among *all* its tensors, both
  sides: one unit of round-off, 2^-8 for bfloat16, and at least 1e-3, so reordered float32 sums pass),
  ``T`` the norm the output would have if its terms did not cancel (a bias gradient that sums to ~0 is
  judged by the size of what it sums, :mod:`~ptdbg_ascend.comparison.propagation`), and ``P`` the error
  norm its inputs' *measured* errors give through this kind of API (:mod:`~ptdbg_ascend.comparison.api_classes`),
  with a margin ``G`` (:data:`GAIN`) for how roughly an error model can know it;
- **the worst element**: ``max|d| <= worst_rtol * max(|n|, |b|) + atol + G * W``, ``W`` the worst element
  error the inputs' worst elements give (one badly wrong element in a large tensor still fails);
- integer and bool tensors are equal.

``atol`` is per element: the smallest step of the row's dtype (float16's subnormals, 6e-8) plus 16 float32
ulps of the call's largest magnitude (a float32 sum that cancels to ~0). The rule judges a call by its own
scale, never by the largest tensor it touches: a bfloat16 linear whose input reaches 0.47 and whose output
0.064 is held to its output's round-off, not to 2 ulps of 0.47.

The numbers are written down in ``doc/compare_guide.md`` with the reasons.
"""

from __future__ import annotations

import math
from typing import Iterable, NamedTuple, Optional, Sequence

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
# rtol = max(ROUNDING_UNITS * eps / 2, RTOL_MIN): one unit of round-off of the call's precision
# (bfloat16 3.9e-3, float16 4.9e-4), at least RTOL_MIN (float16, float32, float64: 1e-3).
ROUNDING_UNITS = 1.0
RTOL_MIN = 1e-3
# The worst single element may be off by max(WORST_MIN, WORST_ULPS * eps) of the tensor's largest magnitude:
# 1 % for float32/float16, 3.1 % (4 ulps) for bfloat16.
WORST_MIN = 1e-2
WORST_ULPS = 4.0
# atol per element: FLOOR_FLOAT32_ULPS float32 ulps of the call's largest magnitude (a float32 sum of 32 terms
# of ~0.04 that cancels to ~1e-8, a conv bias gradient before BatchNorm, was measured within it), plus the
# smallest step of the row's NPU dtype (what underflow loses: float16 values below 6e-8 become 0).
FLOOR_FLOAT32_ULPS = 16.0
SMALLEST_STEP = {
    "torch.float16": 2.0 ** -24, "torch.half": 2.0 ** -24, "float16": 2.0 ** -24,
    "torch.bfloat16": 2.0 ** -133, "bfloat16": 2.0 ** -133,
    "torch.float32": 2.0 ** -149, "torch.float": 2.0 ** -149, "float32": 2.0 ** -149,
    "torch.float8_e4m3fn": 2.0 ** -9, "torch.float8_e4m3fnuz": 2.0 ** -10,
    "torch.float8_e5m2": 2.0 ** -16, "torch.float8_e5m2fnuz": 2.0 ** -17,
}
# The margin on the error the inputs bring in: an error model that knows the size of a propagated error
# to within a factor of 2 (measured on transformers decoders, fp32 against bf16 and fp16: the largest clean
# row used 0.85 of its allowance, a planted 2 % error at least 1.4 times it).
GAIN = 2.0
# Summary mode: a statistic difference understates the error it comes from (a tensor's round-off hardly moves
# its norm), so what the inputs' statistics carry in gets twice the margin.
SUMMARY_GAIN = 2.0 * GAIN
# Above this share of what is allowed (or when the legacy column says No) a passing row's Result is "warning":
# worth a look when hunting a small drift. A worst-case rounding of a few values reaches 0.75 of one unit of
# round-off; on the transformers runs, 0.4 % of the rows of clean fp32-against-bf16 compares were above 0.7.
WARNING_SHARE = 0.8


class Tolerance(NamedTuple):
    """What one row is allowed: ``exact`` for integer/bool data, otherwise ``rtol`` (round-off, relative to
    the larger of the bench norm and ``reference``), ``atol`` (per element), ``worst_rtol`` (the worst element,
    of the tensor's largest magnitude), and what the call's inputs bring in: ``carried`` (an error norm),
    ``carried_worst`` (a worst element error), both with the margin :data:`GAIN` applied, and ``rule``, the API
    class that gave them ("" when nothing is carried: a row judged by round-off alone)."""

    rtol: float
    atol: float
    exact: bool
    precision: str  # the dtype that set rtol, e.g. "torch.bfloat16" (for messages)
    worst_rtol: float = WORST_MIN
    reference: float = 0.0
    carried: float = 0.0
    carried_worst: float = 0.0
    rule: str = ""

    def rounding_allowed(self, bench_norm: float) -> float:
        """The round-off part of the bulk allowance (relative to ``max(bench_norm, reference)``)."""
        return self.rtol * max(bench_norm, self.reference)

    def norm_allowed(self, bench_norm: float, size: int) -> float:
        return math.hypot(self.rounding_allowed(bench_norm), self.carried) + self.atol * math.sqrt(max(size, 1))

    def worst_allowed(self, scale: float) -> float:
        return self.worst_rtol * scale + self.atol + self.carried_worst

    def allows(self, error_norm: float, bench_norm: float, size: int, worst: float, scale: float) -> bool:
        """Whether an error of norm ``error_norm`` and worst element ``worst`` passes on a tensor of
        ``size`` elements, bench norm ``bench_norm`` and largest magnitude ``scale``."""
        if self.exact:
            return worst == 0.0
        return error_norm <= self.norm_allowed(bench_norm, size) and worst <= self.worst_allowed(scale)

    def share(self, error_norm: float, bench_norm: float, size: int, worst: float, scale: float) -> float:
        """How much of what is allowed the row uses: the larger of the bulk's and the worst element's share
        (1 = at the limit; above 1 the row fails). ``inf`` when nothing is allowed and something differs."""
        shares = []
        for used, allowed in ((error_norm, self.norm_allowed(bench_norm, size)), (worst, self.worst_allowed(scale))):
            shares.append(used / allowed if allowed > 0 else (0.0 if used == 0 else math.inf))
        return max(shares)

    def needed_rtol(self, error_norm: float, bench_norm: float, size: int, worst: float, scale: float) -> float:
        """The smallest rtol (with this atol and what the inputs carry in, and the worst element allowed the
        same multiple of it as now) under which the row would pass: the "minimum tolerance that would have
        passed" of a failing row. ``inf`` when no rtol can (an error on an all-zero bench)."""
        needed = 0.0
        slack = error_norm - self.atol * math.sqrt(max(size, 1))
        if slack > self.carried:
            base = max(bench_norm, self.reference)
            needed = math.sqrt(slack * slack - self.carried * self.carried) / base if base > 0 else math.inf
        worst_slack = worst - self.atol - self.carried_worst
        if worst_slack > 0:
            ratio = self.worst_rtol / self.rtol if self.rtol > 0 else 1.0
            needed = max(needed, worst_slack / (ratio * scale) if scale > 0 else math.inf)
        return needed

    def with_carried(self, reference: float, carried: float, carried_worst: float, rule: str,
                     gain: float = GAIN) -> Tolerance:
        """This tolerance with what the inputs bring in (norms before the margin ``gain``, default
        :data:`GAIN`, applied here)."""
        if self.exact:
            return self
        return self._replace(reference=max(reference, 0.0), carried=gain * max(carried, 0.0),
                             carried_worst=gain * max(carried_worst, 0.0), rule=rule)


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


def tolerance(row_dtypes: Sequence[str], precision: Optional[str], api_scale: float) -> Tolerance:
    """The round-off tolerance of one row (nothing carried in yet, see :meth:`Tolerance.with_carried`): exact
    when the row's own data is not float; otherwise from the call's ``precision`` (see
    :func:`call_precision`), ``api_scale`` (the largest magnitude of the call, for the float32 floor) and the
    row's NPU dtype (``row_dtypes[0]``, for the smallest step)."""
    if not all(is_float(dtype) for dtype in row_dtypes) or precision is None:
        return Tolerance(0.0, 0.0, True, "exact")
    eps = EPSILON[precision]
    scale = api_scale if math.isfinite(api_scale) else 0.0
    atol = FLOOR_FLOAT32_ULPS * EPSILON["torch.float32"] * scale + SMALLEST_STEP.get(row_dtypes[0], 0.0)
    return Tolerance(max(ROUNDING_UNITS * eps / 2.0, RTOL_MIN), atol, False, precision,
                     max(WORST_MIN, WORST_ULPS * eps))


def magnitude(maximum: Optional[float], minimum: Optional[float]) -> float:
    """``max(|max|, |min|)`` of a record's statistics; 0 for missing or non-finite numbers."""
    values = [abs(v) for v in (maximum, minimum) if v is not None and math.isfinite(v)]
    return max(values) if values else 0.0
