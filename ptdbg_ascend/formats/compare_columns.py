"""The compare CSV's column names: the legacy ones first, in the legacy order; new ones appended after. Read by
the compare's reports and by the pre-check's link to a compare CSV (``precheck/compare_report``)."""

from __future__ import annotations

from typing import List

__all__ = ["NPU_NAME", "BENCH_NAME", "BASIC", "COSINE", "MAX_ABS", "METRICS", "STATISTICS", "ACCURACY",
           "ERR_MESSAGE", "STACK", "SUMMARY_DIFFS", "RESULT", "EXTRA_METRICS", "ALLOWED_RTOL", "NEEDED_RTOL",
           "WORST_INDEX", "ALLOWED_RELATIVE", "CARRIED_THROUGH", "SHARE", "VERDICT_DETAILS", "full_columns",
           "summary_columns"]

NPU_NAME, BENCH_NAME = "NPU Name", "Bench Name"
BASIC = [NPU_NAME, BENCH_NAME, "NPU Tensor Dtype", "Bench Tensor Dtype", "NPU Tensor Shape", "Bench Tensor Shape"]
COSINE, MAX_ABS = "Cosine", "MaxAbsErr"
METRICS = [COSINE, MAX_ABS, "MaxRelativeErr", "One Thousandth Err Ratio", "Five Thousandths Err Ratio"]
STATISTICS = ["NPU max", "NPU min", "NPU mean", "NPU l2norm", "Bench max", "Bench min", "Bench mean", "Bench l2norm"]
ACCURACY, ERR_MESSAGE, STACK = "Accuracy Reached or Not", "Err_message", "NPU_Stack_Info"
SUMMARY_DIFFS = ["Max diff", "Min diff", "Mean diff", "L2norm diff"]
RESULT = "Result"
EXTRA_METRICS = ["Accumulated Relative Err", "Euclidean Relative Distance", "KL Divergence"]
# The robust verdict's numbers: the rtol this row was allowed, the smallest rtol under which a failing
# row would have passed, and where its greatest difference is.
ALLOWED_RTOL, NEEDED_RTOL, WORST_INDEX = "Allowed Rtol", "Rtol To Pass", "Greatest Diff Index"
# The whole bulk allowance relative to the bench norm (round-off and what the inputs carry in, to compare with
# Euclidean Relative Distance), the API class that carried something in, and how much of its allowance the row
# used (1 = at the limit).
ALLOWED_RELATIVE, CARRIED_THROUGH, SHARE = "Allowed Relative Err", "Carried Through", "Share Of Allowed"
VERDICT_DETAILS = [ALLOWED_RTOL, NEEDED_RTOL, WORST_INDEX, ALLOWED_RELATIVE, CARRIED_THROUGH, SHARE]


def full_columns(stack_mode: bool) -> List[str]:
    """Tensor comparison: the 4.0 legacy columns [+ NPU_Stack_Info], then Result, the MindStudio metrics
    and the robust verdict's numbers."""
    return BASIC + METRICS + STATISTICS + [ACCURACY, ERR_MESSAGE] + ([STACK] if stack_mode else []) \
        + [RESULT] + EXTRA_METRICS + VERDICT_DETAILS


def summary_columns(stack_mode: bool) -> List[str]:
    """Statistics-only comparison: the 4.0 legacy summary columns [+ NPU_Stack_Info], then Result,
    Err_message and the allowed rtol."""
    return BASIC + SUMMARY_DIFFS + STATISTICS + ([STACK] if stack_mode else []) + [RESULT, ERR_MESSAGE, ALLOWED_RTOL,
                                                                                CARRIED_THROUGH, SHARE]
