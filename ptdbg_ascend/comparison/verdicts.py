"""Verdicts: the legacy ``Accuracy Reached or Not`` and the graded ``Result`` column.

``Accuracy Reached or Not`` follows the user guide: ``No`` iff Cosine < 0.99 and MaxAbsErr > 0.001 (plus
the original's safety net: Cosine < 0.9 or MaxAbsErr > 1), ``Unmatched`` for a shape mismatch, ``Nan``
where it cannot be judged.
"""

from __future__ import annotations

from typing import Optional

from ptdbg_ascend.comparison.metrics import NAN, NOT_AVAILABLE, SHAPE_UNMATCHED, Cell, Metrics

YES, NO, UNMATCHED = "Yes", "No", "Unmatched"
# Result grades, best to worst; "warning" = reached, but not by a wide margin (worth a look when
# hunting a small drift): cosine below 0.9999, or fewer than 90% of the elements within 0.5% relative error
# (MaxRelativeErr alone is useless here: any value near 0 makes it large).
PASS, WARNING, ERROR, UNKNOWN = "pass", "warning", "error", "unknown"
RESULT_UNMATCHED = "unmatched"


def accuracy_reached(cosine: Cell, max_abs_err: Cell) -> str:
    """``Yes`` / ``No`` / ``Unmatched`` / ``Nan`` from Cosine and MaxAbsErr (checked in this order)."""
    if cosine == SHAPE_UNMATCHED:
        return UNMATCHED
    if cosine == NAN or max_abs_err == NAN:
        return NAN
    if cosine == NOT_AVAILABLE or max_abs_err == NOT_AVAILABLE:
        return NO  # inf/nan at different positions: the values are certainly different
    if not isinstance(cosine, float) or not isinstance(max_abs_err, float):
        return NAN
    if cosine < 0.99 and max_abs_err > 0.001:
        return NO
    if cosine < 0.9 or max_abs_err > 1:
        return NO
    return YES


def graded_result(accuracy: str, metrics: Optional[Metrics]) -> str:
    """``pass`` / ``warning`` / ``error`` / ``unmatched`` / ``unknown`` for the Result column."""
    if accuracy == NO:
        return ERROR
    if accuracy == UNMATCHED or metrics is None:
        return RESULT_UNMATCHED
    if accuracy != YES:
        return UNKNOWN
    cosine, ratio = metrics.cosine, metrics.five_thousandths_ratio
    if isinstance(cosine, float) and cosine < 0.9999:
        return WARNING
    if isinstance(ratio, float) and ratio < 0.9:
        return WARNING
    return PASS


def summary_result(npu: Optional[float], bench: Optional[float]) -> bool:
    """Summary mode: True when one statistic differs by more than half of its magnitude (msprobe rule)."""
    if npu is None or bench is None:
        return False
    return abs(npu - bench) / (max(abs(npu), abs(bench)) + 1e-10) > 0.5
