"""The robust verdict (``tolerances`` + ``verdicts``) on hand-built arrays and statistics, with golden numbers
computed by hand in the comments; a few runs end to end through ``compare()``; ``Counts`` and
``CompareOutcome`` (torch-free)."""

from __future__ import annotations

import csv
import math

import numpy as np
import pytest

from ptdbg_ascend.comparison import metrics as met
from ptdbg_ascend.comparison.api import compare
from ptdbg_ascend.comparison.outcome import CompareOutcome, Counts
from ptdbg_ascend.formats.finding import Finding
from ptdbg_ascend.formats.records import TensorRecord
from ptdbg_ascend.comparison.tolerances import call_precision, tolerance
from ptdbg_ascend.comparison.verdicts import (ERROR, NOT_COMPARED, PASS, PASSING, RESULT_UNMATCHED, WARNING,
                                              accuracy_reached, judge_statistics, judge_tensors)

pytestmark = pytest.mark.torchfree

F32, BF16 = "torch.float32", "torch.bfloat16"
EPS32, EPS_BF16 = 2.0 ** -23, 2.0 ** -7


def judge(npu, bench, dtypes=(F32, F32), precision=F32, scale=None):
    """(judgement, metrics, legacy column, tolerance) of one pair; ``scale`` default: the pair's own largest
    magnitude (a call holding only this tensor)."""
    if scale is None:
        scale = float(max(np.abs(np.asarray(npu, np.float64)).max(), np.abs(np.asarray(bench, np.float64)).max()))
    tol = tolerance(dtypes, precision, scale)
    metrics = met.compare_arrays(np.asarray(npu), np.asarray(bench), tol)
    legacy = accuracy_reached(metrics)
    return judge_tensors(metrics, tol, legacy), metrics, legacy, tol


def read_csv(path):
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


# ------------------------------------------------------------------------------------------ tolerances
def test_tolerance_numbers_per_precision():
    # rtol = max(eps / 2, 1e-3) (one unit of round-off); atol = 16 float32 eps * call scale + the smallest step
    # of the row's NPU dtype; worst_rtol = max(1e-2, 4 eps). Nothing is carried in yet.
    f32 = tolerance((F32, F32), F32, 2.0)
    assert (f32.rtol, f32.atol, f32.exact, f32.worst_rtol) == (1e-3, 16 * EPS32 * 2.0 + 2.0 ** -149, False, 1e-2)
    bf16 = tolerance((BF16, F32), BF16, 2.0)
    assert (bf16.rtol, bf16.atol, bf16.precision, bf16.worst_rtol) == (2.0 ** -8, 16 * EPS32 * 2.0 + 2.0 ** -133,
                                                                         BF16, 4 * EPS_BF16)
    f16 = tolerance(("torch.float16", F32), "torch.float16", 1.0)
    assert f16.rtol == 1e-3  # half of 2^-10 is below the floor
    assert f16.atol == 16 * EPS32 + 2.0 ** -24 and f16.worst_rtol == 1e-2
    assert (f16.carried, f16.reference, f16.rule) == (0.0, 0.0, "")
    assert tolerance(("torch.int64", "torch.int64"), F32, 5.0).exact  # the row's own data decides
    assert tolerance((F32, F32), None, 1.0).exact  # no float in the call
    assert call_precision([F32, "torch.int64", BF16, "torch.float16"]) == BF16
    assert call_precision(["torch.int64", "torch.bool"]) is None


# ---------------------------------------------------------------------------------- uniform 2 % error
B_LIN = np.linspace(0.01, 1.0, 100).astype(np.float32).reshape(10, 10)  # 0.01, 0.02, ..., 1.00
N_LIN = (B_LIN.astype(np.float64) * 1.02).astype(np.float32)
# ‖b‖ = sqrt(sum_{k=1..100} (k/100)^2) = sqrt(33.835) = 5.81679; scale 1.02 -> atol = 16 * 2^-23 * 1.02
# = 1.94550e-6; error ‖d‖ = 0.02 ‖b‖. Rtol to pass: (0.02 ‖b‖ - atol * sqrt(100)) / ‖b‖ = 0.02 - 3.3446e-6.
NORM_LIN = math.sqrt(33.835)
ATOL_LIN = 16 * EPS32 * 1.02
NEEDED_LIN = 0.02 - 10 * ATOL_LIN / NORM_LIN
MESSAGE_LIN = ("Relative error 2.00e-02 > 1.0e-03 allowed for float32; mismatched elements 100 / 100 (100.0%); "
               "greatest difference 0.02 at index (9, 9); would pass with rtol >= 2.00e-02.")


def test_uniform_two_percent_error_is_an_error_although_the_legacy_column_says_yes():
    judgement, metrics, legacy, tol = judge(N_LIN, B_LIN, scale=1.02)
    assert (tol.rtol, tol.atol) == (1e-3, pytest.approx(ATOL_LIN, rel=1e-12))
    assert metrics.cosine == 1.0 and metrics.max_abs_err == pytest.approx(0.02, abs=1e-7)
    assert legacy == "Yes"  # Cosine 1, MaxAbsErr 0.02 <= 1: the legacy rule misses it
    assert judgement.grade == ERROR
    assert judgement.relative_error == pytest.approx(0.02, rel=1e-5)
    assert judgement.needed_rtol == pytest.approx(NEEDED_LIN, rel=1e-5)
    assert metrics.worst_index == (9, 9) and metrics.mismatched == 100
    assert judgement.message == MESSAGE_LIN


def test_uniform_two_percent_error_end_to_end(legacy_dump, output_dir):
    npu, bench = legacy_dump("npu"), legacy_dump("bench")
    npu.add_call("Functional_linear_0_forward", [("input.0", B_LIN), ("output", N_LIN)])
    bench.add_call("Functional_linear_0_forward", [("input.0", B_LIN), ("output", B_LIN)])
    outcome = compare(npu.param(bench), output_dir, auto_analyze=False, xlsx=False)
    rows = read_csv(outcome.csv_path)
    out = rows[1]
    assert (out["Accuracy Reached or Not"], out["Result"]) == ("Yes", "error")
    assert out["Err_message"] == MESSAGE_LIN
    assert float(out["Allowed Rtol"]) == 1e-3
    assert float(out["Rtol To Pass"]) == pytest.approx(NEEDED_LIN, rel=1e-5)
    assert out["Greatest Diff Index"] == "(9, 9)"
    assert (rows[0]["Result"], rows[0]["Greatest Diff Index"], rows[0]["Rtol To Pass"]) == ("pass", "", "")
    assert not outcome and outcome.first_failure == "Functional_linear_0_forward_output"
    assert (outcome.counts.compared, outcome.counts.failed, outcome.counts.passed) == (2, 1, 1)


def test_a_pass_above_four_fifths_of_the_allowance_is_a_warning():
    # x 1.0009: ‖d‖ = 9e-4 * 5.81679 = 5.2351e-3; allowed 1e-3 * 5.81679 + 10 * 16 * 2^-23 * 1.0009 = 5.8359e-3:
    # 89.7 % of the allowance (> 80 %) -> warning. x 1.0007: 69.8 % -> a plain pass.
    npu = (B_LIN.astype(np.float64) * 1.0009).astype(np.float32)
    judgement, _, legacy, _ = judge(npu, B_LIN, scale=1.0009)
    assert legacy == "Yes" and judgement.grade == WARNING and judgement.needed_rtol is None
    assert judgement.message == "Passes, but the error is 90% of what float32 allows."
    npu = (B_LIN.astype(np.float64) * 1.0007).astype(np.float32)
    assert judge(npu, B_LIN, scale=1.0007)[0][:2] == (PASS, pytest.approx(7e-4, rel=1e-3))


# ------------------------------------------------------------------------------- a few wrong elements
def test_a_wrong_value_in_every_fifth_element_is_an_error():
    bench = (np.arange(100, dtype=np.float32) / 64 + 1).reshape(4, 25)  # 1 .. 2.546875, exact binary fractions
    npu = bench.copy()
    npu.reshape(-1)[::5] += np.float32(0.25)  # exact: 20 elements off by 0.25
    judgement, metrics, _, _ = judge(npu, bench)
    assert metrics.mismatched == 20 and metrics.max_abs_err == 0.25
    assert metrics.worst_index == (0, 0)  # the first of the equal greatest differences
    assert metrics.error_norm == pytest.approx(0.25 * math.sqrt(20))
    assert judgement.grade == ERROR
    assert "mismatched elements 20 / 100 (20.0%); greatest difference 0.25 at index (0, 0);" in judgement.message


# One element off by 5 % of the tensor's max in 10,000 float32 elements (b = linspace(-1, 1, 10000)):
# ‖b‖² = N(N+1)/(3(N-1)) = 3333.67, ‖b‖ = 57.7408; scale 1 -> atol = 16 * 2^-23 = 1.90735e-6.
# Bulk: ‖d‖ = 0.05 <= 1e-3 * 57.7408 + 100 * atol = 0.0579315 -> passes.
# Worst element: 0.05 > 10 * 1e-3 * 1 + atol = 0.0100019 -> fails. Rtol to pass: (0.05 - atol) / 10 = 5.00e-3.
def _one_bad_element():
    bench = np.linspace(-1, 1, 10000).astype(np.float32)
    npu = bench.copy()
    npu[5000] += np.float32(0.05)
    return npu, bench


def test_one_element_off_by_five_percent_of_the_max_in_a_large_tensor_is_an_error():
    npu, bench = _one_bad_element()
    judgement, metrics, legacy, tol = judge(npu, bench)
    assert metrics.error_norm <= tol.rtol * metrics.bench_norm + tol.atol * 100  # the bulk alone would pass
    assert metrics.bench_norm == pytest.approx(57.7408, rel=1e-5)
    assert legacy == "Yes"
    assert judgement.grade == ERROR
    assert judgement.needed_rtol == pytest.approx((0.05 - 16 * EPS32) / 10, rel=1e-6)
    assert judgement.relative_error == pytest.approx(0.05 / 57.7408, rel=1e-5)  # 8.66e-4
    assert metrics.worst_index == (5000,) and metrics.mismatched == 1
    assert judgement.message == (
        "Greatest difference 0.05 at index (5000,) > 0.01 allowed (1.0e-02 of the largest magnitude 1, for float32); "
        "mismatched elements 1 / 10000 (0.01%); relative error 8.66e-04 (within 1.0e-03); would pass with "
        "rtol >= 5.00e-03.")


def test_worst_element_failure_message_does_not_claim_a_false_inequality():
    npu, bench = _one_bad_element()
    judgement = judge(npu, bench)[0]
    assert "Relative error 8.66e-04 > 1.0e-03" not in judgement.message


# ------------------------------------------------------------------------------------------- round-off
ROUNDOFF_B = np.array([1, -1, 1, -1, 1, -1, 1, -1], np.float32) * np.float32(1e-8)
ROUNDOFF_N = np.array([-1, -1, 1, 1, -1, -1, 1, 1], np.float32) * np.float32(1e-8)
# Cosine 0 (orthogonal), MaxAbsErr 2e-8: legacy "No" (Cosine < 0.9). ‖d‖ = sqrt(4 * (2e-8)^2) = 4e-8,
# ‖b‖ = sqrt(8) * 1e-8 = 2.83e-8.
# In a call of magnitude 0.1: atol = 16 * 2^-23 * 0.1 = 1.907e-7; allowed = 1e-3 * 2.83e-8 + sqrt(8) * atol
# = 5.395e-7 >= 4e-8; worst 2e-8 <= 1e-5 * 1e-8 + 1.907e-7 -> passes, and "warning" because legacy says No.
# In a call of magnitude 1e-8: atol = 1.9e-14, allowed = 2.84e-11 < 4e-8 -> error; relative error =
# 4e-8 / 2.83e-8 = 1.414; 4 of 8 elements differ.


def test_roundoff_in_a_call_of_larger_magnitude_passes_as_a_warning_when_legacy_says_no():
    judgement, metrics, legacy, tol = judge(ROUNDOFF_N, ROUNDOFF_B, scale=0.1)
    assert metrics.cosine == 0.0 and legacy == "No"
    assert tol.atol == pytest.approx(1.9073486e-7)
    assert judgement.grade == WARNING
    assert judgement.message == ("Within round-off for this API: error 4e-08 <= 5.4e-07 allowed (float32: rtol 1.0e-03, "
                                 "atol 1.91e-07).")


def test_the_same_roundoff_in_a_call_whose_largest_magnitude_is_1e8_fails():
    judgement, metrics, _, tol = judge(ROUNDOFF_N, ROUNDOFF_B)  # the call's scale is the tensor's own, 1e-8
    assert tol.atol == pytest.approx(16 * EPS32 * 1e-8, rel=1e-6)
    assert judgement.grade == ERROR
    assert judgement.relative_error == pytest.approx(math.sqrt(2), rel=1e-6)
    assert judgement.message == ("Relative error 1.41e+00 > 1.0e-03 allowed for float32; mismatched elements 4 / 8 "
                                 "(50.0%); greatest difference 2e-08 at index (0,); would pass with rtol >= 1.41e+00.")


def test_random_roundoff_passes_in_a_call_of_magnitude_01_and_fails_in_a_call_of_magnitude_1e8():
    rng = np.random.RandomState(1234)
    bench = (rng.randn(64) * 1e-8).astype(np.float32)
    npu = (bench + rng.randn(64) * 1e-8).astype(np.float32)  # |d| < 5e-8 << atol 1.9e-7
    judgement, metrics, legacy, _ = judge(npu, bench, scale=0.1)
    assert metrics.max_abs_err < 1e-7
    assert judgement.grade == (WARNING if legacy == "No" else PASS)
    assert judge(npu, bench)[0].grade == ERROR


def test_roundoff_end_to_end(legacy_dump, output_dir):
    x = np.linspace(-0.1, 0.1, 8).astype(np.float32)
    npu, bench = legacy_dump("npu"), legacy_dump("bench")
    # A bias gradient that is zero up to round-off, in a backward call whose other tensors are ~0.1 ...
    npu.add_call("Functional_conv2d_0_backward", [("input.0", x), ("output.0", x), ("output.2", ROUNDOFF_N)])
    bench.add_call("Functional_conv2d_0_backward", [("input.0", x), ("output.0", x), ("output.2", ROUNDOFF_B)])
    # ... and the same numbers in a call where they are all there is.
    npu.add_call("Torch_mul_0_forward", [("input.0", ROUNDOFF_B), ("output", ROUNDOFF_N)])
    bench.add_call("Torch_mul_0_forward", [("input.0", ROUNDOFF_B), ("output", ROUNDOFF_B)])
    outcome = compare(npu.param(bench), output_dir, auto_analyze=False, xlsx=False)
    rows = read_csv(outcome.csv_path)
    assert [(r["NPU Name"], r["Accuracy Reached or Not"], r["Result"]) for r in rows] == [
        ("Functional_conv2d_0_backward_input.0", "Yes", "pass"),
        ("Functional_conv2d_0_backward_output.0", "Yes", "pass"),
        ("Functional_conv2d_0_backward_output.2", "No", "warning"),
        ("Torch_mul_0_forward_input.0", "Yes", "pass"),
        ("Torch_mul_0_forward_output", "No", "error"),
    ]
    assert outcome.first_failure == "Torch_mul_0_forward_output" and not outcome
    assert (outcome.counts.passed, outcome.counts.warnings, outcome.counts.failed) == (4, 1, 1)


# -------------------------------------------------------------------------------------- bf16 vs fp32
# b = [[1, 2], [4, 8]] * (1 + 3/1024) (exact in float32); its bfloat16 rounding (7 fraction bits: the
# 3/1024 is below half an ulp, 4/1024) is [[1, 2], [4, 8]]: relative error 3/1027 = 2.921e-3 everywhere.
# ‖b‖ = 1.0029296875 * sqrt(85) = 9.24655, ‖d‖ = 3/1024 * sqrt(85) = 0.0270104, scale 8.0234375.
# bf16 call: rtol 2^-6 = 0.015625 > 2.92e-3 -> passes. float32 call: rtol 1e-3, atol = 16 * 2^-23 * 8.0234375
# = 1.5303e-5, allowed 9.2466e-3 + 2 * 1.5303e-5 = 9.277e-3 < 0.0270 -> error, rtol to pass
# (0.0270104 - 3.0607e-5) / 9.24655 = 2.918e-3.
F = 1 + 3 / 1024
BF_BENCH = np.array([[1.0, 2.0], [4.0, 8.0]], np.float32) * np.float32(F)
BF_ROUNDED = np.array([[1.0, 2.0], [4.0, 8.0]], np.float32)
BF_MESSAGE = ("Relative error 2.92e-03 > 1.0e-03 allowed for float32; mismatched elements 4 / 4 (100.0%); greatest "
              "difference 0.0234375 at index (1, 1); would pass with rtol >= 2.92e-03.")


def to_bfloat16(array):
    """Round float32 to the nearest bfloat16 (ties to even), kept as float32."""
    bits = np.asarray(array, np.float32).view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return rounded.astype(np.uint32).view(np.float32)


def test_bf16_rounded_copy_passes_in_a_bf16_call_and_fails_in_a_float32_call():
    assert np.array_equal(to_bfloat16(BF_BENCH), BF_ROUNDED)
    scale = 8 * F
    precision = call_precision([BF16, BF16, F32, F32])  # NPU side bf16, bench side float32
    assert precision == BF16
    judgement, metrics, legacy, tol = judge(BF_ROUNDED, BF_BENCH, (BF16, F32), precision, scale)
    assert tol.rtol == 2.0 ** -8  # one bfloat16 unit of round-off
    assert judgement.relative_error == pytest.approx(3 / 1027, rel=1e-9)
    assert (legacy, judgement.grade) == ("Yes", PASS)
    judgement, metrics, legacy, tol = judge(BF_ROUNDED, BF_BENCH, (F32, F32), F32, scale)
    assert judgement.grade == ERROR and legacy == "Yes"
    assert judgement.needed_rtol == pytest.approx((3 / 1024 * math.sqrt(85) - 2 * 16 * EPS32 * scale)
                                                  / (F * math.sqrt(85)), rel=1e-9)
    assert judgement.message == BF_MESSAGE


def test_random_bf16_rounding_passes_only_under_bf16_precision():
    rng = np.random.RandomState(7)
    bench = rng.uniform(-3, 3, (16, 16)).astype(np.float32)
    npu = to_bfloat16(bench)
    relative = float(np.abs(npu - bench).max() / np.abs(bench).max())
    assert 0 < relative <= 2.0 ** -8  # at most half a bfloat16 ulp
    assert judge(npu, bench, (BF16, F32), BF16)[0].grade in PASSING
    assert judge(npu, bench, (F32, F32), F32)[0].grade == ERROR


def test_bf16_against_fp32_end_to_end(legacy_dump, output_dir):
    npu, bench = legacy_dump("npu"), legacy_dump("bench")
    # NPU ran the matmul in bf16 (both tensors bf16 on NPU): within bf16's allowance.
    npu.add_call("Torch_matmul_0_forward", [("input.0", BF_BENCH, BF16), ("output", BF_ROUNDED, BF16)])
    bench.add_call("Torch_matmul_0_forward", [("input.0", BF_BENCH), ("output", BF_BENCH)])
    # The same rounding error in a float32-only call.
    npu.add_call("Torch_tanh_0_forward", [("input.0", BF_BENCH), ("output", BF_ROUNDED)])
    bench.add_call("Torch_tanh_0_forward", [("input.0", BF_BENCH), ("output", BF_BENCH)])
    outcome = compare(npu.param(bench), output_dir, auto_analyze=False, xlsx=False)
    rows = read_csv(outcome.csv_path)
    # The bf16 output uses 75 % of its allowance (2.92e-3 of 3.9e-3): a pass.
    assert [(r["NPU Tensor Dtype"], r["Bench Tensor Dtype"], r["Result"]) for r in rows] == [
        (BF16, F32, "pass"), (BF16, F32, "pass"), (F32, F32, "pass"), (F32, F32, "error")]
    assert [float(r["Allowed Rtol"]) for r in rows] == [2.0 ** -8, 2.0 ** -8, 1e-3, 1e-3]
    assert rows[3]["Err_message"] == BF_MESSAGE
    assert rows[1]["Err_message"] == ""  # the dtypes differ, but bf16 against fp32 is no dtype mismatch


def test_a_ten_percent_error_in_a_bf16_call_is_an_error():
    bench = np.linspace(0.5, 1.0, 100).astype(np.float32)
    npu = to_bfloat16(bench * np.float32(1.1))
    # ‖d‖ ~ 0.1 ‖b‖ = 0.76; allowed 2^-8 * 7.6 = 0.03 (+ 16 float32 ulps * 1.1 * sqrt(100), 2e-5).
    assert judge(npu, bench, (BF16, F32), BF16, 1.1)[0].grade == ERROR


def test_a_two_percent_error_in_a_bf16_call_is_an_error_and_its_rounding_is_not():
    """The call's own round-off is one bfloat16 unit of its output (2^-8), whatever else the call touches:
    a 2 % error fails, a bfloat16 rounding of the same values passes."""
    bench = np.linspace(0.5, 1.0, 100).astype(np.float32)
    assert judge(to_bfloat16(bench * np.float32(1.02)), bench, (BF16, F32), BF16, 1.0)[0].grade == ERROR
    assert judge(to_bfloat16(bench), bench, (BF16, F32), BF16, 1.0)[0].grade in PASSING


# -------------------------------------------------------------------------------------- exact data
def test_integer_and_bool_data_must_be_equal():
    ints = np.array([1, 2, 3], np.int32)
    judgement, metrics, _, tol = judge(np.array([1, 2, 4], np.int32), ints, ("torch.int32", "torch.int32"), F32, 4.0)
    assert tol.exact and (tol.rtol, tol.atol) == (0.0, 0.0)
    assert judgement.grade == ERROR and judgement.needed_rtol is None
    assert judgement.message == ("Values differ (exact comparison for integer/bool data): greatest difference 1 at "
                                 "index (2,).")
    assert judge(ints.copy(), ints, ("torch.int32", "torch.int32"), F32, 4.0)[0].grade == PASS
    # An index off by one among large values is far below any float rtol, and still an error.
    big = np.array([1000000, 2000000], np.int64)
    assert judge(big + np.array([0, 1]), big, ("torch.int64", "torch.int64"), F32, 2e6)[0].grade == ERROR
    mask = np.array([True, False, True])
    judgement = judge(np.array([True, True, True]), mask, ("torch.bool", "torch.bool"), None, 1.0)[0]
    assert judgement.grade == ERROR and "greatest difference 1 at index (1,)." in judgement.message
    assert judge(mask.copy(), mask, ("torch.bool", "torch.bool"), None, 1.0)[0].grade == PASS


def test_int64_values_beyond_2_pow_53_that_differ_are_an_error():
    bench = np.array([2 ** 53, 7], np.int64)
    npu = np.array([2 ** 53 + 1, 7], np.int64)
    assert judge(npu, bench, ("torch.int64", "torch.int64"), None, 0.0)[0].grade == ERROR


# --------------------------------------------------------------------------------------------- inf/nan
SAME_POSITION_BUG = ("BUG: metrics.compare_arrays locates the first inf/nan difference with argmax(n_bad != b_bad), "
                     "which is all False when both sides are non-finite at the same position but of another kind "
                     "(+inf/-inf, nan/inf): the message names index (0,) instead of (1,)")


@pytest.mark.parametrize("npu, bench, index", [
    ([1.0, np.inf, 3.0, 4.0], [1.0, 2.0, np.inf, 4.0], (1,)),
    ([np.inf, 1.0], [-np.inf, 1.0], (0,)),  # same position, another sign
    ([1.0, np.inf], [1.0, -np.inf], (1,)),
    ([1.0, np.nan], [1.0, np.inf], (1,)),
    ([1.0, 2.0, np.nan], [1.0, 2.0, 3.0], (2,)),
])
def test_inf_nan_at_different_positions_is_an_error(npu, bench, index):
    judgement, metrics, legacy, _ = judge(np.array(npu, np.float32), np.array(bench, np.float32), scale=4.0)
    assert metrics.status == met.Status.INF_NAN and legacy == "No"
    assert (judgement.grade, judgement.needed_rtol) == (ERROR, math.inf)
    assert judgement.message == f"inf/nan differ first at index {index}."


def test_inf_nan_at_the_same_positions_compare_the_rest():
    npu = np.array([1.0, np.nan, np.inf, 4.0], np.float32)
    assert judge(npu, npu.copy(), scale=4.0)[0].grade == PASS
    wrong = np.array([1.0, np.nan, np.inf, 5.0], np.float32)
    judgement = judge(wrong, npu, scale=5.0)[0]
    assert judgement.grade == ERROR and "greatest difference 1 at index (3,)" in judgement.message


# --------------------------------------------------------------------------------------- summary mode
def record(statistics, shape=(100,), dtype=F32, name="Torch_mean_0_forward_output"):
    return TensorRecord(name, "output", dtype, shape, tuple(statistics), None)


def test_summary_tiny_means_are_judged_against_the_bench_rms():
    # rms = l2norm / sqrt(N) = 0.1 / 10 = 0.01; scale 0.05 -> atol = 16 * 2^-23 * 0.05 = 9.54e-8;
    # the mean may differ by 1e-3 * 0.01 + 9.54e-8 = 1.0095e-5: 1.9e-9 against 0.0 passes.
    tol = tolerance((F32, F32), F32, 0.05)
    judgement = judge_statistics(record((0.05, -0.05, 1.9e-9, 0.1)), record((0.05, -0.05, 0.0, 0.1)), tol)
    assert (judgement.grade, judgement.message) == (PASS, "")


def test_summary_mean_is_judged_against_the_rms_not_the_max():
    # max 1 but rms 0.01 (l2norm 0.1, N = 100): a mean off by 2e-5 is beyond 1e-3 * 0.01 + 16 * 2^-23 = 1.19e-5
    # although it is far within 1e-3 of the max.
    tol = tolerance((F32, F32), F32, 1.0)
    judgement = judge_statistics(record((1.0, -1.0, 2e-5, 0.1)), record((1.0, -1.0, 0.0, 0.1)), tol)
    assert judgement.grade == ERROR
    assert judgement.message == "Mean differs by 2e-05 (> 1.19e-05 allowed for float32)."


def test_summary_two_percent_scale_on_max_min_and_norm_fails():
    # scale 1.02 -> atol 1.9455e-6. max/min: 0.02 > 1.02e-3 + atol = 1.02195e-3 (19.6 times);
    # l2norm: 0.2 > 1e-3 * 10 + atol * sqrt(100) = 0.0100195 (19.96 times): the worst, so named.
    tol = tolerance((F32, F32), F32, 1.02)
    judgement = judge_statistics(record((1.02, -1.02, 0.0, 10.2)), record((1.0, -1.0, 0.0, 10.0)), tol)
    assert judgement.grade == ERROR
    assert judgement.message == "L2norm differs by 0.2 (> 0.01 allowed for float32)."
    only_max = judge_statistics(record((1.02, -1.0, 0.0, 10.0)), record((1.0, -1.0, 0.0, 10.0)), tol)
    assert only_max.grade == ERROR and only_max.message.startswith("Max differs by 0.02 (> 0.00102 allowed")


def test_summary_none_statistics_are_skipped_and_all_none_is_not_compared():
    tol = tolerance((F32, F32), F32, 1.0)
    bench = record((1.0, -1.0, 5.0, 100.0))
    assert judge_statistics(record((1.0, -1.0, None, None)), bench, tol).grade == PASS
    assert judge_statistics(record((1.0, -1.0, 0.5, 100.0)), record((1.0, -1.0, None, 100.0)), tol).grade == PASS
    # the statistics that are there are still judged: scale 1.5 -> allowed 1.5e-3 + 16 * 2^-23 * 1.5 = 1.5029e-3
    bad = judge_statistics(record((1.5, -1.0, None, None)), bench, tolerance((F32, F32), F32, 1.5))
    assert bad.grade == ERROR and bad.message == "Max differs by 0.5 (> 0.0015 allowed for float32)."
    nothing = judge_statistics(record((None,) * 4), record((None,) * 4), tol)
    assert (nothing.grade, nothing.message) == (NOT_COMPARED, "")
    one_sided = judge_statistics(record((1.0, None, None, None)), record((None, -1.0, 0.0, 1.0)), tol)
    assert one_sided.grade == NOT_COMPARED


def test_summary_shape_change_is_unmatched_and_integers_are_exact():
    tol = tolerance((F32, F32), F32, 1.0)
    assert judge_statistics(record((1.0, 0.0, 0.5, 1.0), (4, 2)), record((1.0, 0.0, 0.5, 1.0), (2, 4)),
                            tol).grade == RESULT_UNMATCHED
    exact = tolerance(("torch.int64", "torch.int64"), None, 10.0)
    ints = judge_statistics(record((10.0, 0.0, 4.5, 19.6), dtype="torch.int64"),
                            record((10.0, 0.0, 4.6, 19.6), dtype="torch.int64"), exact)
    assert ints.grade == ERROR and ints.message.startswith("Mean differs by 0.1")


def test_summary_mode_end_to_end(legacy_dump, output_dir):
    centred = np.array([0.01, -0.01] * 50, np.float32)  # mean 0, l2norm 0.1, rms 0.01
    lin = np.linspace(-1, 1, 100).astype(np.float32)
    npu, bench = legacy_dump("npu"), legacy_dump("bench")
    npu.add_call("Torch_sub_0_forward", [("output", centred + np.float32(2e-9))])
    bench.add_call("Torch_sub_0_forward", [("output", centred)])
    npu.add_call("Torch_mul_0_forward", [("input.0", lin), ("output", lin * np.float32(1.02))])
    bench.add_call("Torch_mul_0_forward", [("input.0", lin), ("output", lin)])
    outcome = compare(npu.param(bench, data=False), output_dir, auto_analyze=False, xlsx=False)
    rows = read_csv(outcome.csv_path)
    assert [r["Result"] for r in rows] == ["pass", "pass", "error"]
    assert rows[2]["Err_message"].startswith("L2norm differs by 0.117 (> 0.00585 allowed for float32)")
    assert [float(r["Allowed Rtol"]) for r in rows] == [1e-3] * 3
    assert outcome.first_failure == "Torch_mul_0_forward_output" and not outcome


# ------------------------------------------------------------------------------- Counts and the outcome
def counts(paired, compared, failed=0, rows=None):
    rows = paired if rows is None else rows
    return Counts(rows=rows, paired=paired, compared=compared, passed=compared - failed, warnings=0, failed=failed,
                  not_compared=paired - compared, unmatched=0, npu_only=rows - paired, bench_only=0)


def outcome_of(tally, first_failure=None, finding=None):
    return CompareOutcome("r.csv", None, None, first_failure, tally.rows, finding, tally)


def test_enough_compared_needs_one_and_at_least_half():
    assert not counts(0, 0).enough_compared
    assert not counts(0, 0, rows=3).enough_compared  # only one-sided rows
    assert not counts(6, 2).enough_compared
    assert not counts(5, 2).enough_compared  # 2 < 2.5
    assert counts(4, 2).enough_compared  # exactly half
    assert counts(1, 1).enough_compared


def test_outcome_is_false_when_nothing_or_too_little_was_compared():
    assert not outcome_of(counts(2, 0))
    assert not outcome_of(counts(6, 2))
    assert outcome_of(counts(4, 2))
    assert not outcome_of(counts(4, 4, failed=1), first_failure="Torch_relu_0_forward_output")
    assert str(outcome_of(counts(2, 0))) == "not enough could be compared (0 of 2 paired tensors compared, 0 " \
        "failing); incomplete: none of the 2 paired tensors was judged"
    assert str(outcome_of(counts(6, 2))) == "not enough could be compared (2 of 6 paired tensors compared, 0 " \
        "failing); incomplete: only 2 of 6 paired tensors were judged"


def test_outcome_without_counts_judges_by_the_first_failure_only():
    assert CompareOutcome("r.csv", None, None, None, 0)
    assert not CompareOutcome("r.csv", None, None, "Torch_relu_0_forward_output", 2)
    assert str(CompareOutcome("r.csv", None, None, None, 0)) == "all compared tensors reached the accuracy"


def test_outcome_str_with_a_finding_is_one_line():
    finding = Finding("Functional_linear_0_forward_output", 4, "cause", "Functional_linear_0_forward",
                      "Functional_linear", "/home/me/model.py:31  h = self.proj(x)", None, ())
    text = str(outcome_of(counts(7, 7, failed=5), "Functional_linear_0_forward_output", finding))
    assert text == ("first failure Functional_linear_0_forward_output (line 4): cause at Functional_linear_0_forward "
                    "(7 of 7 paired tensors compared, 5 failing)")
    assert "\n" not in text


def test_outcome_str_never_says_all_reached_when_something_failed():
    outcome = outcome_of(counts(4, 4, failed=1), first_failure="Torch_relu_0_forward_output")
    assert not outcome
    assert "reached the accuracy" not in str(outcome)


def test_equal_dumps_give_a_true_outcome_and_a_one_line_summary(two_dumps, output_dir):
    npu, bench = two_dumps()
    outcome = compare(npu.param(bench), output_dir, auto_analyze=False, xlsx=False)
    # linear: input.0, input.1, output; relu: input.0, output; mul: input.0, output.
    assert outcome.counts == Counts(rows=7, paired=7, compared=7, passed=7, warnings=0, failed=0, not_compared=0,
                                    unmatched=0, npu_only=0, bench_only=0, npu_forward=7, bench_forward=7,
                                    paired_forward=7)
    assert outcome and outcome.first_failure is None and outcome.finding is None
    assert str(outcome) == "all compared tensors reached the accuracy (7 of 7 paired tensors compared, 0 failing)"


def test_a_failing_compare_is_false_and_its_summary_names_the_failure(two_dumps, output_dir):
    npu, bench = two_dumps(planted="Functional_linear_0_forward")
    outcome = compare(npu.param(bench), output_dir, auto_analyze=False, xlsx=False)
    assert not outcome
    text = str(outcome)
    assert text.startswith("first failure Functional_linear_0_forward_output (line 4): cause at "
                           "Functional_linear_0_forward (7 of 7 paired tensors compared, ")
    assert "\n" not in text
