"""CSV column names: the legacy ones first, in the legacy order; new ones appended after."""

from __future__ import annotations

from typing import List

NPU_NAME, BENCH_NAME = "NPU Name", "Bench Name"
BASIC = [NPU_NAME, BENCH_NAME, "NPU Tensor Dtype", "Bench Tensor Dtype", "NPU Tensor Shape", "Bench Tensor Shape"]
COSINE, MAX_ABS = "Cosine", "MaxAbsErr"
METRICS = [COSINE, MAX_ABS, "MaxRelativeErr", "One Thousandth Err Ratio", "Five Thousandths Err Ratio"]
STATISTICS = ["NPU max", "NPU min", "NPU mean", "NPU l2norm", "Bench max", "Bench min", "Bench mean", "Bench l2norm"]
ACCURACY, ERR_MESSAGE, STACK = "Accuracy Reached or Not", "Err_message", "NPU_Stack_Info"
SUMMARY_DIFFS = ["Max diff", "Min diff", "Mean diff", "L2norm diff"]
RESULT = "Result"
EXTRA_METRICS = ["Accumulated Relative Err", "Euclidean Relative Distance", "KL Divergence"]


def full_columns(stack_mode: bool) -> List[str]:
    """Tensor comparison: the 4.0 legacy columns [+ NPU_Stack_Info], then Result and the MindStudio metrics."""
    return BASIC + METRICS + STATISTICS + [ACCURACY, ERR_MESSAGE] + ([STACK] if stack_mode else []) \
        + [RESULT] + EXTRA_METRICS


def summary_columns(stack_mode: bool) -> List[str]:
    """Statistics-only comparison: the 4.0 legacy summary columns [+ NPU_Stack_Info], then Result, Err_message."""
    return BASIC + SUMMARY_DIFFS + STATISTICS + ([STACK] if stack_mode else []) + [RESULT, ERR_MESSAGE]
