"""Verdicts: the legacy ``Accuracy Reached or Not`` and the robust verdict behind ``Result``, the advisor
and the exit code.

``Accuracy Reached or Not`` follows the user guide exactly (legacy scripts read it): ``No`` iff Cosine <
0.99 and MaxAbsErr > 0.001 (plus the original's safety net: Cosine < 0.9 or MaxAbsErr > 1), ``Unmatched``
for a shape mismatch, ``Nan`` where it cannot be judged.

The robust verdict judges each tensor against its own scale and the call's precision
(:mod:`~ptdbg_ascend.comparison.tolerances`) and grades it ``pass`` / ``warning`` / ``error`` /
``unmatched`` / ``not compared``.
"""

from __future__ import annotations

import math
from typing import NamedTuple, Optional, Sequence, Tuple

from ptdbg_ascend.comparison.metrics import LARGEST, NAN, Metrics, Status
from ptdbg_ascend.formats.records import TensorRecord
from ptdbg_ascend.comparison.tolerances import WARNING_SHARE, Tolerance

YES, NO, UNMATCHED = "Yes", "No", "Unmatched"
# Result grades: "warning" = passes, but the legacy column says No or the error is above a quarter of
# what is allowed (worth a look when hunting a small drift).
PASS, WARNING, ERROR = "pass", "warning", "error"
RESULT_UNMATCHED, NOT_COMPARED = "unmatched", "not compared"
PASSING = (PASS, WARNING)


def accuracy_reached(metrics: Metrics) -> str:
    """``Yes`` / ``No`` / ``Unmatched`` / ``Nan`` from Cosine and MaxAbsErr (checked in this order)."""
    if metrics.status == Status.SHAPE:
        return UNMATCHED
    if metrics.status == Status.INF_NAN:
        return NO  # inf/nan at different positions: the values are certainly different
    cosine, max_abs = metrics.cosine, metrics.max_abs_err
    if cosine is None or max_abs is None:
        return NAN
    if cosine < 0.99 and max_abs > 0.001:
        return NO
    if cosine < 0.9 or max_abs > 1:
        return NO
    return YES


class Judgement(NamedTuple):
    """The robust verdict of one row: its grade, the relative error it showed (error norm / bench
    norm, None when not judged), the rtol that would have made it pass, a message for Err_message, and
    ``share``: how much of what it was allowed the row used (1 = at the limit, above 1 it fails; None when not
    judged by a tolerance)."""

    grade: str
    relative_error: Optional[float]
    needed_rtol: Optional[float]
    message: str
    share: Optional[float] = None


def _format_index(index: Sequence[int]) -> str:
    return f"({', '.join((str(i) for i in index))})" if len(index) != 1 else f"({index[0]},)"


def judge_tensors(metrics: Metrics, tolerance: Tolerance, legacy: str) -> Judgement:
    """Full mode: the robust verdict of a compared pair."""
    if metrics.status == Status.SHAPE:
        return Judgement(RESULT_UNMATCHED, None, None, "")
    if metrics.status == Status.NOT_READ:
        return Judgement(NOT_COMPARED, None, None, "")
    if metrics.status == Status.INF_NAN:
        where = _format_index(metrics.worst_index or ())
        return Judgement(ERROR, None, math.inf, f"inf/nan differ first at index {where}.", math.inf)
    if metrics.status == Status.EMPTY:
        return Judgement(PASS, 0.0, None, "", 0.0)
    size = metrics.size or 1
    error_norm, bench_norm, worst, scale = metrics.error_norm, metrics.bench_norm, metrics.max_abs_err, metrics.scale
    relative = error_norm / bench_norm if bench_norm > 0 else (0.0 if error_norm == 0 else math.inf)
    exact_equal = metrics.exact_equal
    if tolerance.exact and exact_equal is not None:
        worst = 0.0 if exact_equal else max(worst, 1.0)  # integers beyond 2**53 differ although float64 says 0
    share = tolerance.share(error_norm, bench_norm, size, worst, scale)
    if tolerance.allows(error_norm, bench_norm, size, worst, scale):
        allowed = tolerance.norm_allowed(bench_norm, size)
        if legacy == NO:
            return Judgement(WARNING, relative, None, "Within round-off for this API: error {:.3g} <= {:.3g} allowed "
                             "({}: rtol {:.1e}, atol {:.2e}).".format(error_norm, allowed, _short(tolerance.precision),
                                                                     tolerance.rtol, tolerance.atol), share)
        if not tolerance.exact and error_norm > WARNING_SHARE * allowed:
            return Judgement(WARNING, relative, None, "Passes, but the error is {:.0%} of what {} allows.".format(
                error_norm / allowed, _short(tolerance.precision)), share)
        return Judgement(PASS, relative, None, "", share)
    where = _format_index(metrics.worst_index or ())
    if tolerance.exact:
        message = "Values differ (exact comparison for {} data){}.".format(
            "integer/bool", "" if exact_equal is False and metrics.max_abs_err == 0 else
            f": greatest difference {metrics.max_abs_err:.6g} at index {where}")
        return Judgement(ERROR, relative, None, message, share)
    needed = tolerance.needed_rtol(error_norm, bench_norm, size, worst, scale)
    mismatched = "" if metrics.mismatched is None else "; mismatched elements {} / {} ({})".format(
        metrics.mismatched, size, _percent(metrics.mismatched, size))
    precision = _short(tolerance.precision)
    if error_norm > tolerance.norm_allowed(bench_norm, size):
        head = "Relative error {:.2e} > {:.1e} allowed for {}{}".format(
            relative, tolerance.norm_allowed(bench_norm, size) / bench_norm if bench_norm > 0 else tolerance.rtol,
            precision, _allowance_parts(tolerance, bench_norm))
        tail = f"greatest difference {worst:.6g} at index {where}"
    else:  # the bulk passes; one element is far off
        head = "Greatest difference {:.6g} at index {} > {:.3g} allowed ({:.1e} of the largest magnitude {:.6g}, " \
               "for {})".format(worst, where, tolerance.worst_allowed(scale), tolerance.worst_rtol, scale, precision)
        tail = f"relative error {relative:.2e} (within {tolerance.rtol:.1e})"
    message = f"{head}{mismatched}; {tail}; would pass with rtol >= {needed:.2e}."
    return Judgement(ERROR, relative, needed, message, share)


def _statistics_checks(npu: TensorRecord, bench: TensorRecord) -> Tuple[int, list]:
    """``(size, [(name, npu value, bench value, reference, atol factor)])``: each statistic with what it is
    judged against (max and min: the tensor's magnitude; mean: the bench root mean square; l2norm: the bench
    norm, its atol counted sqrt(size) times)."""
    n_max, n_min, n_mean, n_norm = npu.statistics
    b_max, b_min, b_mean, b_norm = bench.statistics
    size = 1
    for extent in bench.shape:
        size *= extent
    size = max(size, 1)
    largest = (LARGEST.get(npu.dtype), LARGEST.get(bench.dtype))
    masked = False
    if npu.dtype != bench.dtype and None not in largest:
        # An extreme at each dtype's largest magnitude (a mask of finfo.min) is the same value on both sides;
        # the mean and norm of such a tensor are the mask constant's, which the dtypes make differ.
        masked = _saturated(n_max, b_max, largest) or _saturated(n_min, b_min, largest)
        n_max, n_min = (b if _saturated(n, b, largest) else n for n, b in ((n_max, b_max), (n_min, b_min)))
    values = [abs(v) for v in (n_max, n_min, b_max, b_min, 0.0) if v is not None and math.isfinite(v)]
    values = [v for v in values if None in largest or v < min(largest)] or [0.0]
    scale = max(values)
    rms = b_norm / math.sqrt(size) if b_norm is not None and math.isfinite(b_norm) else scale
    checks = [("max", n_max, b_max, scale, 1.0), ("min", n_min, b_min, scale, 1.0)]
    if not masked:
        checks += [("mean", n_mean, b_mean, rms, 1.0), ("l2norm", n_norm, b_norm, abs(b_norm or 0.0), math.sqrt(size))]
    return size, checks


def _statistic_allowed(name: str, reference: float, atol_times: float, size: int, tolerance: Tolerance) -> float:
    """What one statistic may differ by (see :func:`judge_statistics`)."""
    if name == "l2norm":
        return math.hypot(tolerance.rtol * max(reference, tolerance.reference), tolerance.carried) + \
            tolerance.atol * atol_times
    if name == "mean":
        base = max(reference, tolerance.reference / math.sqrt(size))
        return math.hypot(tolerance.rtol * base, tolerance.carried / math.sqrt(size)) + tolerance.atol
    return math.hypot(tolerance.rtol * reference, tolerance.carried_worst) + tolerance.atol


def _saturated(n_value: Optional[float], b_value: Optional[float], largest: Tuple[float, float]) -> bool:
    return n_value is not None and b_value is not None and abs(n_value) >= largest[0] and \
        abs(b_value) >= largest[1] and (n_value > 0) == (b_value > 0)


def statistics_discrepancy(npu: TensorRecord, bench: TensorRecord) -> Optional[float]:
    """The largest difference of the four statistics, each relative to what it is judged against (summary
    mode's stand-in for a relative error: what a tensor can carry into the calls that read it); None when
    no statistic can be compared, inf for an inf/nan on one side only."""
    if npu.shape != bench.shape:
        return None
    _size, checks = _statistics_checks(npu, bench)
    found = None
    for _name, n_value, b_value, reference, _atol in checks:
        if n_value is None or b_value is None:
            continue
        if not (math.isfinite(n_value) and math.isfinite(b_value)):
            if not (n_value == b_value or (math.isnan(n_value) and math.isnan(b_value))):
                return math.inf
            continue
        difference = abs(n_value - b_value)
        share = difference / reference if reference > 0 else (0.0 if difference == 0 else math.inf)
        found = share if found is None else max(found, share)
    return found


def judge_statistics(npu: TensorRecord, bench: TensorRecord, tolerance: Tolerance) -> Judgement:
    """Summary mode: the robust verdict from the four statistics. max and min within ``rtol`` of the
    tensor's magnitude, the norm within ``rtol`` of the bench norm, the mean within ``rtol`` of the bench
    *root mean square* (a mean of centred values is ~0: judging it against itself is what made two means
    of 1.9e-9 and 0.0 "differ by more than half"). What the call's inputs carry in is added in quadrature:
    ``tolerance.carried`` to the norm (and per element, ``/ sqrt(size)``, to the mean), ``carried_worst`` to
    max and min; the round-off of the norm and the mean scales with ``tolerance.reference`` when that is
    larger (a sum that cancels)."""
    if npu.shape != bench.shape:
        return Judgement(RESULT_UNMATCHED, None, None, "")
    size, checks = _statistics_checks(npu, bench)
    worst_share, worst_name, judged, most = 0.0, "", 0, 0.0
    for name, n_value, b_value, reference, atol_times in checks:
        if n_value is None or b_value is None:
            continue
        judged += 1
        if not (math.isfinite(n_value) and math.isfinite(b_value)):
            if not (n_value == b_value or (math.isnan(n_value) and math.isnan(b_value))):
                return Judgement(ERROR, None, math.inf, f"{name}: {n_value} against {b_value}.", math.inf)
            continue
        difference = abs(n_value - b_value)
        allowed = 0.0 if tolerance.exact else _statistic_allowed(name, reference, atol_times, size, tolerance)
        used = difference / allowed if allowed > 0 else (0.0 if difference == 0 else math.inf)
        most = max(most, used)
        if difference > allowed:
            share = difference / allowed if allowed > 0 else math.inf
            if share > worst_share:
                worst_share, worst_name = share, "{} differs by {:.3g} (> {:.3g} allowed for {}{})".format(
                    name, difference, allowed, _short(tolerance.precision),
                    " and what its inputs carry in" if tolerance.carried else "")
    if not judged:
        return Judgement(NOT_COMPARED, None, None, "")
    if worst_name:
        return Judgement(ERROR, None, None, worst_name[0].upper() + worst_name[1:] + ".", most)
    return Judgement(PASS, None, None, "", most)


def _allowance_parts(tolerance: Tolerance, bench_norm: float) -> str:
    """`` (round-off 3.9e-03 combined with 9.7e-03 carried in by its inputs' errors through matmul)`` when the inputs carry
    something in; "" when the allowance is round-off alone."""
    if not tolerance.carried or bench_norm <= 0:
        return ""
    base = tolerance.rtol * max(bench_norm, tolerance.reference) / bench_norm
    return " (round-off {:.1e} combined with {:.1e} carried in by its inputs' errors through {})".format(
        base, tolerance.carried / bench_norm, tolerance.rule or "it")


def _percent(part: int, whole: int) -> str:
    """``"20.0%"``; small shares keep two significant digits (``"0.01%"``), never ``"0.0%"``."""
    share = 100.0 * part / whole
    return f"{share:.1f}%" if share >= 0.1 or share == 0 else f"{share:.2g}%"


def _short(dtype: str) -> str:
    return dtype.replace("torch.", "")
