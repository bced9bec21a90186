"""Alignment of two dumps call by call (``matching.align_calls`` / ``pair_rows``) and through ``compare()``:
shifted counters, one-sided calls, backward order, checkpoint re-computation, changed shapes, API mapping and
the legacy fuzzy-match message (hand-built records and hand-written dumps, torch-free)."""

from __future__ import annotations

import csv
import json
import os

import numpy as np
import pytest

from ptdbg_ascend.comparison.api import compare
from ptdbg_ascend.comparison.inputs import check_api_mapping
from ptdbg_ascend.comparison.matching import align_calls, pair_rows
from ptdbg_ascend.formats.records import CallRecord, TensorRecord
from ptdbg_ascend.errors import FileFormatError, ParameterError

pytestmark = pytest.mark.torchfree

FUZZY = "Fuzzy matching data, the comparison accuracy may be affected."


# ---------------------------------------------------------------------------------------------- helpers
def call(name, in_shape=(2, 3), out_shape=None, dtype="torch.float32", suffixes=None):
    """A CallRecord with an ``input.0`` of ``in_shape`` and an ``output`` of ``out_shape`` (default: same)
    (backward calls: ``input.0`` / ``output.0``); ``suffixes`` = [(suffix, shape)] overrides both."""
    if suffixes is None:
        out = "output.0" if name.endswith("_backward") else "output"
        suffixes = [("input.0", in_shape), (out, out_shape if out_shape is not None else in_shape)]
    records = tuple(
        TensorRecord(f"{name}_{suffix}", "output" if suffix.startswith("output") else "input", dtype,
                     tuple(shape), (1.0, -1.0, 0.0, 1.0), None)
        for suffix, shape in suffixes)
    return CallRecord(name, records, ())


def names(pairs):
    return [(n.name if n is not None else None, b.name if b is not None else None) for n, b in pairs]


def read_csv(path):
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def name_pairs(rows):
    return [(r["NPU Name"], r["Bench Name"]) for r in rows]


def y(offset):
    """Distinct data per call, so a call paired with the wrong counterpart fails loudly."""
    return (np.arange(6, dtype=np.float32).reshape(2, 3) + 1) * np.float32(offset)


# ------------------------------------------------------------------------------ one-sided extra calls
def test_extra_early_npu_call_later_calls_of_that_api_pair_with_their_true_counterparts():
    # NPU adds an early ``x + 0`` (Torch_add_0): every later Torch_add counter is one higher on NPU.
    npu = [call("Functional_linear_0_forward"), call("Torch_add_0_forward"), call("Functional_relu_0_forward"),
           call("Torch_add_1_forward"), call("Functional_relu_1_forward"), call("Torch_add_2_forward")]
    bench = [call("Functional_linear_0_forward"), call("Functional_relu_0_forward"), call("Torch_add_0_forward"),
             call("Functional_relu_1_forward"), call("Torch_add_1_forward")]
    assert names(align_calls(npu, bench)) == [
        ("Functional_linear_0_forward", "Functional_linear_0_forward"),
        ("Torch_add_0_forward", None),  # the extra one: NPU only, not bench's Torch_add_0 of the same name
        ("Functional_relu_0_forward", "Functional_relu_0_forward"),
        ("Torch_add_1_forward", "Torch_add_0_forward"),
        ("Functional_relu_1_forward", "Functional_relu_1_forward"),
        ("Torch_add_2_forward", "Torch_add_1_forward"),
    ]


def test_extra_npu_call_with_its_own_shape_right_before_same_api_calls_is_the_one_left_out():
    npu = [call("Torch_add_0_forward", (1,)), call("Torch_add_1_forward"), call("Torch_add_2_forward")]
    bench = [call("Torch_add_0_forward"), call("Torch_add_1_forward")]
    assert names(align_calls(npu, bench)) == [
        ("Torch_add_0_forward", None),
        ("Torch_add_1_forward", "Torch_add_0_forward"),
        ("Torch_add_2_forward", "Torch_add_1_forward"),
    ]


def test_extra_npu_call_end_to_end(legacy_dump, output_dir):
    npu, bench = legacy_dump("npu"), legacy_dump("bench")
    npu.add_call("Functional_linear_0_forward", [("input.0", y(1)), ("output", y(2))])
    npu.add_call("Torch_add_0_forward", [("input.0", y(2)), ("output", y(2))])  # the extra x + 0
    npu.add_call("Functional_relu_0_forward", [("input.0", y(2)), ("output", y(3))])
    npu.add_call("Torch_add_1_forward", [("input.0", y(3)), ("output", y(4))])
    npu.add_call("Functional_relu_1_forward", [("input.0", y(4)), ("output", y(5))])
    npu.add_call("Torch_add_2_forward", [("input.0", y(5)), ("output", y(6))])
    bench.add_call("Functional_linear_0_forward", [("input.0", y(1)), ("output", y(2))])
    bench.add_call("Functional_relu_0_forward", [("input.0", y(2)), ("output", y(3))])
    bench.add_call("Torch_add_0_forward", [("input.0", y(3)), ("output", y(4))])
    bench.add_call("Functional_relu_1_forward", [("input.0", y(4)), ("output", y(5))])
    bench.add_call("Torch_add_1_forward", [("input.0", y(5)), ("output", y(6))])
    outcome = compare(npu.param(bench), output_dir, auto_analyze=False, xlsx=False)
    rows = read_csv(outcome.csv_path)
    assert name_pairs(rows) == [
        ("Functional_linear_0_forward_input.0", "Functional_linear_0_forward_input.0"),
        ("Functional_linear_0_forward_output", "Functional_linear_0_forward_output"),
        ("Torch_add_0_forward_input.0", "Nan"),
        ("Torch_add_0_forward_output", "Nan"),
        ("Functional_relu_0_forward_input.0", "Functional_relu_0_forward_input.0"),
        ("Functional_relu_0_forward_output", "Functional_relu_0_forward_output"),
        ("Torch_add_1_forward_input.0", "Torch_add_0_forward_input.0"),
        ("Torch_add_1_forward_output", "Torch_add_0_forward_output"),
        ("Functional_relu_1_forward_input.0", "Functional_relu_1_forward_input.0"),
        ("Functional_relu_1_forward_output", "Functional_relu_1_forward_output"),
        ("Torch_add_2_forward_input.0", "Torch_add_1_forward_input.0"),
        ("Torch_add_2_forward_output", "Torch_add_1_forward_output"),
    ]
    # The true counterparts hold the same data: every paired row passes; the extra call is unmatched.
    assert [r["Result"] for r in rows] == ["pass"] * 2 + ["unmatched"] * 2 + ["pass"] * 8
    assert [r["Err_message"] for r in rows[2:4]] == ["No bench data matched."] * 2
    counts = outcome.counts
    assert (counts.rows, counts.paired, counts.compared, counts.failed, counts.npu_only, counts.bench_only) == (
        12, 10, 10, 0, 2, 0)
    # 2 of 12 NPU rows (17 %, beyond the 5 % allowed) were never compared: not a pass, but not a failure either
    assert not outcome and outcome.first_failure is None and outcome.status == "incomplete"
    assert counts.coverage_problems() == ("2 of 12 NPU rows (17%) have no bench partner (different models, dump "
                                          "modes or filters: list, range, api_list, scope?)",)


def test_bench_only_call_is_placed_after_the_npu_partner_of_the_bench_call_before_it():
    # NPU casts to half after the linear (NPU only); bench casts to float (bench only). The bench-only call
    # goes right after NPU's partner of bench's linear, i.e. before NPU's own one-sided half cast.
    npu = [call("Functional_linear_0_forward"), call("Tensor_half_0_forward"), call("Functional_relu_0_forward")]
    bench = [call("Functional_linear_0_forward"), call("Tensor_float_0_forward"), call("Functional_relu_0_forward")]
    assert names(align_calls(npu, bench)) == [
        ("Functional_linear_0_forward", "Functional_linear_0_forward"),
        (None, "Tensor_float_0_forward"),
        ("Tensor_half_0_forward", None),
        ("Functional_relu_0_forward", "Functional_relu_0_forward"),
    ]


def test_bench_only_call_before_any_paired_call_comes_first_and_rows_follow_npu_order():
    npu = [call("Functional_linear_0_forward"), call("Functional_relu_0_forward"), call("Torch_mul_0_forward")]
    bench = [call("Tensor_to_0_forward"), call("Functional_linear_0_forward"), call("Functional_relu_0_forward"),
             call("Tensor_contiguous_0_forward"), call("Torch_mul_0_forward"), call("Torch_sum_0_forward")]
    assert names(align_calls(npu, bench)) == [
        (None, "Tensor_to_0_forward"),
        ("Functional_linear_0_forward", "Functional_linear_0_forward"),
        ("Functional_relu_0_forward", "Functional_relu_0_forward"),
        (None, "Tensor_contiguous_0_forward"),
        ("Torch_mul_0_forward", "Torch_mul_0_forward"),
        (None, "Torch_sum_0_forward"),
    ]
    rows = pair_rows(npu, bench)
    assert [(r.npu.name if r.npu else None, r.bench.name if r.bench else None, r.first_of_call) for r in rows[:3]] \
        == [(None, "Tensor_to_0_forward_input.0", True), (None, "Tensor_to_0_forward_output", False),
            ("Functional_linear_0_forward_input.0", "Functional_linear_0_forward_input.0", True)]
    assert rows[0].bench_call.name == "Tensor_to_0_forward" and rows[0].npu_call is None


def test_extra_bench_call_end_to_end(legacy_dump, output_dir):
    npu, bench = legacy_dump("npu"), legacy_dump("bench")
    npu.add_call("Functional_linear_0_forward", [("input.0", y(1)), ("output", y(2))])
    npu.add_call("Tensor_half_0_forward", [("input.0", y(2)), ("output", y(2).astype(np.float16))])
    npu.add_call("Functional_relu_0_forward", [("input.0", y(2)), ("output", y(3))])
    bench.add_call("Functional_linear_0_forward", [("input.0", y(1)), ("output", y(2))])
    bench.add_call("Tensor_float_0_forward", [("input.0", y(2)), ("output", y(2))])
    bench.add_call("Functional_relu_0_forward", [("input.0", y(2)), ("output", y(3))])
    outcome = compare(npu.param(bench), output_dir, auto_analyze=False, xlsx=False)
    rows = read_csv(outcome.csv_path)
    assert name_pairs(rows) == [
        ("Functional_linear_0_forward_input.0", "Functional_linear_0_forward_input.0"),
        ("Functional_linear_0_forward_output", "Functional_linear_0_forward_output"),
        ("Nan", "Tensor_float_0_forward_input.0"),
        ("Nan", "Tensor_float_0_forward_output"),
        ("Tensor_half_0_forward_input.0", "Nan"),
        ("Tensor_half_0_forward_output", "Nan"),
        ("Functional_relu_0_forward_input.0", "Functional_relu_0_forward_input.0"),
        ("Functional_relu_0_forward_output", "Functional_relu_0_forward_output"),
    ]
    assert [r["Err_message"] for r in rows[2:6]] == ["No NPU data matched."] * 2 + ["No bench data matched."] * 2
    assert {r["Result"] for r in rows[2:6]} == {"unmatched"}
    counts = outcome.counts
    assert (counts.rows, counts.paired, counts.npu_only, counts.bench_only) == (8, 4, 2, 2)


# ----------------------------------------------------------------------------------------- backward
def test_backward_calls_in_another_order_pair_through_their_forward_calls():
    # NPU has an extra early linear (its own shape, no gradient): NPU linear_1/2 are bench linear_0/1.
    # Autograd ran the two backward calls in opposite orders on the two sides; both backward calls have the
    # same structure, so only their forward calls tell them apart.
    npu = [call("Functional_linear_0_forward", (5,)), call("Functional_linear_1_forward"),
           call("Functional_linear_2_forward"),
           call("Functional_linear_2_backward"), call("Functional_linear_1_backward")]
    bench = [call("Functional_linear_0_forward"), call("Functional_linear_1_forward"),
             call("Functional_linear_0_backward"), call("Functional_linear_1_backward")]
    assert names(align_calls(npu, bench)) == [
        ("Functional_linear_0_forward", None),
        ("Functional_linear_1_forward", "Functional_linear_0_forward"),
        ("Functional_linear_2_forward", "Functional_linear_1_forward"),
        ("Functional_linear_2_backward", "Functional_linear_1_backward"),
        ("Functional_linear_1_backward", "Functional_linear_0_backward"),
    ]


def test_backward_calls_without_forward_in_the_dump_align_as_a_sequence():
    npu = [call("Torch_tanh_3_backward"), call("Torch_mul_7_backward")]
    bench = [call("Torch_tanh_0_backward"), call("Torch_mul_0_backward")]
    assert names(align_calls(npu, bench)) == [("Torch_tanh_3_backward", "Torch_tanh_0_backward"),
                                              ("Torch_mul_7_backward", "Torch_mul_0_backward")]


def test_backward_in_another_order_end_to_end(legacy_dump, output_dir):
    npu, bench = legacy_dump("npu"), legacy_dump("bench")
    npu.add_call("Functional_linear_0_forward", [("input.0", np.ones(5, np.float32)), ("output", np.ones(5, np.float32))])
    npu.add_call("Functional_linear_1_forward", [("input.0", y(1)), ("output", y(2))])
    npu.add_call("Functional_linear_2_forward", [("input.0", y(3)), ("output", y(4))])
    npu.add_call("Functional_linear_2_backward", [("input.0", y(5)), ("output.0", y(6))])
    npu.add_call("Functional_linear_1_backward", [("input.0", y(7)), ("output.0", y(8))])
    bench.add_call("Functional_linear_0_forward", [("input.0", y(1)), ("output", y(2))])
    bench.add_call("Functional_linear_1_forward", [("input.0", y(3)), ("output", y(4))])
    bench.add_call("Functional_linear_0_backward", [("input.0", y(7)), ("output.0", y(8))])
    bench.add_call("Functional_linear_1_backward", [("input.0", y(5)), ("output.0", y(6))])
    outcome = compare(npu.param(bench), output_dir, auto_analyze=False, xlsx=False)
    rows = read_csv(outcome.csv_path)
    assert name_pairs(rows)[-4:] == [
        ("Functional_linear_2_backward_input.0", "Functional_linear_1_backward_input.0"),
        ("Functional_linear_2_backward_output.0", "Functional_linear_1_backward_output.0"),
        ("Functional_linear_1_backward_input.0", "Functional_linear_0_backward_input.0"),
        ("Functional_linear_1_backward_output.0", "Functional_linear_0_backward_output.0"),
    ]
    assert [r["Result"] for r in rows] == ["unmatched"] * 2 + ["pass"] * 8
    # the extra NPU call is 2 of 10 NPU rows, never compared: incomplete (beyond 5 %), though nothing failed
    assert not outcome and outcome.status == "incomplete" and outcome.counts.failed == 0


# --------------------------------------------------------------------------- checkpoint re-computation
def _layers(counter_a, counter_b):
    """Layer a (linear 4 -> 8, relu) and layer b (linear 8 -> 2, relu) forward calls."""
    return [call(f"Functional_linear_{counter_a}_forward", (2, 4), (2, 8)),
            call(f"Functional_relu_{counter_a}_forward", (2, 8)),
            call(f"Functional_linear_{counter_b}_forward", (2, 8), (2, 2)),
            call(f"Functional_relu_{counter_b}_forward", (2, 2))]


def _backward(counter_a, counter_b):
    return ([call(f"Functional_relu_{counter_b}_backward", (2, 2)),
             call(f"Functional_linear_{counter_b}_backward", (2, 2), (2, 8))],
            [call(f"Functional_relu_{counter_a}_backward", (2, 8)),
             call(f"Functional_linear_{counter_a}_backward", (2, 8), (2, 4))])


def _loss(counter):
    return call(f"Functional_mse_loss_{counter}_forward", (2, 2), ())


def _loss_backward(counter):
    return call(f"Functional_mse_loss_{counter}_backward", (), (2, 2))


def test_checkpoint_recomputation_is_npu_only_and_never_pairs_with_a_same_named_bench_call():
    # Step 1 forward (with its loss), backward of the loss and of layer b, then (NPU only, gradient
    # checkpointing of layer a) a re-run of layer a's forward as linear_2/relu_2 and its backward, then step
    # 2's forward. On NPU step 2 is linear_3/relu_3, linear_4/relu_4; on bench linear_2/relu_2,
    # linear_3/relu_3. NPU's re-computed Functional_linear_2_forward has the name *and* the structure of
    # bench's step-2 Functional_linear_2_forward.
    b_back_npu, a_back_npu = _backward(2, 1)  # the backward of the re-computed layer a carries counter 2
    b_back_bench, a_back_bench = _backward(0, 1)
    npu = _layers(0, 1) + [_loss(0), _loss_backward(0)] + b_back_npu + _layers(2, 1)[:2] + a_back_npu \
        + _layers(3, 4) + [_loss(1)]
    bench = _layers(0, 1) + [_loss(0), _loss_backward(0)] + b_back_bench + a_back_bench + _layers(2, 3) + [_loss(1)]
    assert names(align_calls(npu, bench)) == [
        ("Functional_linear_0_forward", "Functional_linear_0_forward"),
        ("Functional_relu_0_forward", "Functional_relu_0_forward"),
        ("Functional_linear_1_forward", "Functional_linear_1_forward"),
        ("Functional_relu_1_forward", "Functional_relu_1_forward"),
        ("Functional_mse_loss_0_forward", "Functional_mse_loss_0_forward"),
        ("Functional_mse_loss_0_backward", "Functional_mse_loss_0_backward"),
        ("Functional_relu_1_backward", "Functional_relu_1_backward"),
        ("Functional_linear_1_backward", "Functional_linear_1_backward"),
        ("Functional_linear_2_forward", None),  # re-computation: NPU only
        ("Functional_relu_2_forward", None),
        ("Functional_relu_2_backward", "Functional_relu_0_backward"),
        ("Functional_linear_2_backward", "Functional_linear_0_backward"),
        ("Functional_linear_3_forward", "Functional_linear_2_forward"),
        ("Functional_relu_3_forward", "Functional_relu_2_forward"),
        ("Functional_linear_4_forward", "Functional_linear_3_forward"),
        ("Functional_relu_4_forward", "Functional_relu_3_forward"),
        ("Functional_mse_loss_1_forward", "Functional_mse_loss_1_forward"),
    ]


def test_checkpoint_recomputation_of_the_first_layer_without_a_separating_call_is_npu_only():
    # As above without a loss call between the steps (a dump limited to some APIs, or a loss that is not
    # dumped): NPU forward keys La Ra Lb Rb [La Ra] La Ra Lb Rb against bench La Ra Lb Rb La Ra Lb Rb: the
    # re-computed La Ra extend the first common block (6 > 4) and pair with step 2's bench calls.
    b_back_npu, a_back_npu = _backward(2, 1)
    b_back_bench, a_back_bench = _backward(0, 1)
    npu = _layers(0, 1) + b_back_npu + _layers(2, 1)[:2] + a_back_npu + _layers(3, 4)
    bench = _layers(0, 1) + b_back_bench + a_back_bench + _layers(2, 3)
    pairs = names(align_calls(npu, bench))
    assert ("Functional_linear_2_forward", None) in pairs and ("Functional_relu_2_forward", None) in pairs
    assert ("Functional_linear_3_forward", "Functional_linear_2_forward") in pairs
    assert ("Functional_relu_3_forward", "Functional_relu_2_forward") in pairs


def test_whole_model_checkpoint_recomputation_between_backward_calls_is_npu_only():
    # One layer, fully checkpointed (reentrant): step 1 forward, the loss and its backward, then the
    # re-computed forward and its backward (NPU only re-runs the forward), step 2 forward. The
    # re-computation's place (after backward started) tells it apart. (Without any backward call before
    # it, two identical forward runs in a row are ambiguous: either may be the re-computation.)
    def fwd(k):
        return [call(f"Functional_linear_{k}_forward", (2, 4), (2, 8)),
                call(f"Functional_relu_{k}_forward", (2, 8))]

    def bwd(k):
        return [call(f"Functional_relu_{k}_backward", (2, 8)),
                call(f"Functional_linear_{k}_backward", (2, 8), (2, 4))]

    def loss(k):
        return [call(f"Functional_mse_loss_{k}_forward", (2, 8)),
                call(f"Functional_mse_loss_{k}_backward", (2, 8))]

    npu = fwd(0) + loss(0) + fwd(1) + bwd(1) + fwd(2)
    bench = fwd(0) + loss(0) + bwd(0) + fwd(1)
    assert names(align_calls(npu, bench)) == [
        ("Functional_linear_0_forward", "Functional_linear_0_forward"),
        ("Functional_relu_0_forward", "Functional_relu_0_forward"),
        ("Functional_mse_loss_0_forward", "Functional_mse_loss_0_forward"),
        ("Functional_mse_loss_0_backward", "Functional_mse_loss_0_backward"),
        ("Functional_linear_1_forward", None),
        ("Functional_relu_1_forward", None),
        ("Functional_relu_1_backward", "Functional_relu_0_backward"),
        ("Functional_linear_1_backward", "Functional_linear_0_backward"),
        ("Functional_linear_2_forward", "Functional_linear_1_forward"),
        ("Functional_relu_2_forward", "Functional_relu_1_forward"),
    ]


# ------------------------------------------------------------------------------------- changed shape
def test_changed_shape_inside_an_aligned_run_still_pairs_the_same_api_calls():
    npu = [call("Torch_cat_0_forward", (2, 2)), call("Functional_relu_0_forward"),
           call("Torch_cat_1_forward", (2, 2), (4, 2)), call("Torch_mul_0_forward")]
    bench = [call("Torch_cat_0_forward", (2, 2)), call("Functional_relu_0_forward"),
             call("Torch_cat_1_forward", (2, 2), (2, 4)), call("Torch_mul_0_forward")]
    assert names(align_calls(npu, bench)) == [(c.name, c.name) for c in npu]
    rows = pair_rows(npu, bench)
    cat_out = [r for r in rows if r.npu.name == "Torch_cat_1_forward_output"][0]
    assert (cat_out.npu.shape, cat_out.bench.shape) == ((4, 2), (2, 4))


def test_changed_shapes_with_shifted_counters_pair_in_order():
    # NPU has an extra early add of its own shape and its later adds changed shape: adds still pair in order.
    npu = [call("Torch_add_0_forward", (7,)), call("Functional_relu_0_forward"), call("Torch_add_1_forward", (3, 2)),
           call("Torch_add_2_forward", (3, 2))]
    bench = [call("Functional_relu_0_forward"), call("Torch_add_0_forward", (2, 3)),
             call("Torch_add_1_forward", (2, 3))]
    assert names(align_calls(npu, bench)) == [
        ("Torch_add_0_forward", None),
        ("Functional_relu_0_forward", "Functional_relu_0_forward"),
        ("Torch_add_1_forward", "Torch_add_0_forward"),
        ("Torch_add_2_forward", "Torch_add_1_forward"),
    ]


def test_changed_shape_end_to_end_is_unmatched(legacy_dump, output_dir):
    a = np.ones((2, 2), np.float32)
    npu, bench = legacy_dump("npu"), legacy_dump("bench")
    npu.add_call("Functional_linear_0_forward", [("input.0", y(1)), ("output", y(2))])
    npu.add_call("Torch_cat_0_forward", [("input.0", a), ("output", np.ones((4, 2), np.float32))])
    npu.add_call("Functional_relu_0_forward", [("input.0", y(3)), ("output", y(3))])
    bench.add_call("Functional_linear_0_forward", [("input.0", y(1)), ("output", y(2))])
    bench.add_call("Torch_cat_0_forward", [("input.0", a), ("output", np.ones((2, 4), np.float32))])
    bench.add_call("Functional_relu_0_forward", [("input.0", y(3)), ("output", y(3))])
    outcome = compare(npu.param(bench), output_dir, auto_analyze=False, xlsx=False)
    rows = read_csv(outcome.csv_path)
    assert [r["NPU Name"] for r in rows] == [r["Bench Name"] for r in rows]  # every call paired with itself
    cat = rows[3]
    assert (cat["NPU Name"], cat["NPU Tensor Shape"], cat["Bench Tensor Shape"]) == (
        "Torch_cat_0_forward_output", "[4, 2]", "[2, 4]")
    assert (cat["Accuracy Reached or Not"], cat["Result"]) == ("Unmatched", "unmatched")
    assert cat["Err_message"] == "Shape of NPU and bench Tensor do not match. Skipped."
    assert [r["Result"] for r in rows] == ["pass"] * 3 + ["unmatched"] + ["pass"] * 2
    counts = outcome.counts
    assert (counts.paired, counts.compared, counts.unmatched, counts.npu_only, counts.bench_only) == (6, 5, 1, 0, 0)


# -------------------------------------------------------------------------------------- API mapping
RMS_NPU = "NPU_npu_rms_norm"
RMS_BENCH = "Functional_rms_norm"
MAPPING = {RMS_NPU: RMS_BENCH}


def _rms_calls(prefix):
    suffixes = [("input.0", (2, 4)), ("input.1", (4,)), ("output", (2, 4))]
    return [call("Functional_linear_0_forward"), call(prefix + "_0_forward", suffixes=suffixes),
            call("Functional_relu_0_forward"), call(prefix + "_0_backward", suffixes=suffixes)]


def test_api_mapping_pairs_a_fused_npu_api_with_the_bench_api_it_replaces():
    npu, bench = _rms_calls(RMS_NPU), _rms_calls(RMS_BENCH)
    assert names(align_calls(npu, bench, MAPPING)) == [
        ("Functional_linear_0_forward", "Functional_linear_0_forward"),
        ("NPU_npu_rms_norm_0_forward", "Functional_rms_norm_0_forward"),
        ("Functional_relu_0_forward", "Functional_relu_0_forward"),
        ("NPU_npu_rms_norm_0_backward", "Functional_rms_norm_0_backward"),
    ]
    rows = pair_rows(npu, bench, MAPPING)
    assert [(r.npu.name, r.bench.name) for r in rows[2:5]] == [
        ("NPU_npu_rms_norm_0_forward_input.0", "Functional_rms_norm_0_forward_input.0"),
        ("NPU_npu_rms_norm_0_forward_input.1", "Functional_rms_norm_0_forward_input.1"),
        ("NPU_npu_rms_norm_0_forward_output", "Functional_rms_norm_0_forward_output")]


def test_without_the_mapping_the_two_apis_are_one_sided():
    npu, bench = _rms_calls(RMS_NPU), _rms_calls(RMS_BENCH)
    assert names(align_calls(npu, bench)) == [
        ("Functional_linear_0_forward", "Functional_linear_0_forward"),
        (None, "Functional_rms_norm_0_forward"),  # placed after NPU's partner of bench's linear
        ("NPU_npu_rms_norm_0_forward", None),
        ("Functional_relu_0_forward", "Functional_relu_0_forward"),
        (None, "Functional_rms_norm_0_backward"),
        ("NPU_npu_rms_norm_0_backward", None),
    ]


def test_mapped_calls_pair_records_by_suffix_and_the_rest_is_one_sided():
    # The fused kernel also returns rstd (output.1): it has no bench counterpart and is a row of its own.
    npu = [call(RMS_NPU + "_0_forward", suffixes=[("input.0", (2, 4)), ("output.0", (2, 4)), ("output.1", (2, 1))])]
    bench = [call(RMS_BENCH + "_0_forward", suffixes=[("input.0", (2, 4)), ("output.0", (2, 4))])]
    rows = pair_rows(npu, bench, MAPPING)
    assert [(r.npu.name if r.npu else None, r.bench.name if r.bench else None) for r in rows] == [
        ("NPU_npu_rms_norm_0_forward_input.0", "Functional_rms_norm_0_forward_input.0"),
        ("NPU_npu_rms_norm_0_forward_output.0", "Functional_rms_norm_0_forward_output.0"),
        ("NPU_npu_rms_norm_0_forward_output.1", None),
    ]
    assert rows[2].bench_call is None and rows[2].npu_call.name == "NPU_npu_rms_norm_0_forward"


def _rms_dumps(legacy_dump):
    x = np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4)
    w = np.array([1.0, 0.5, 2.0, 1.5], np.float32)
    out = x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + np.float32(1e-6)) * w
    npu, bench = legacy_dump("npu"), legacy_dump("bench")
    for side, prefix in ((npu, RMS_NPU), (bench, RMS_BENCH)):
        side.add_call("Functional_linear_0_forward", [("input.0", y(1)), ("output", x)])
        side.add_call(prefix + "_0_forward", [("input.0", x), ("input.1", w), ("output", out)])
        side.add_call("Functional_relu_0_forward", [("input.0", out), ("output", np.maximum(out, 0))])
    return npu, bench


RMS_PAIRED = [
    ("Functional_linear_0_forward_input.0", "Functional_linear_0_forward_input.0"),
    ("Functional_linear_0_forward_output", "Functional_linear_0_forward_output"),
    ("NPU_npu_rms_norm_0_forward_input.0", "Functional_rms_norm_0_forward_input.0"),
    ("NPU_npu_rms_norm_0_forward_input.1", "Functional_rms_norm_0_forward_input.1"),
    ("NPU_npu_rms_norm_0_forward_output", "Functional_rms_norm_0_forward_output"),
    ("Functional_relu_0_forward_input.0", "Functional_relu_0_forward_input.0"),
    ("Functional_relu_0_forward_output", "Functional_relu_0_forward_output"),
]


def test_api_mapping_end_to_end_dict_and_json_file(legacy_dump, output_dir, tmp_path):
    npu, bench = _rms_dumps(legacy_dump)
    outcome = compare(npu.param(bench), output_dir, auto_analyze=False, xlsx=False, api_mapping=MAPPING,
                      suffix="dict")
    rows = read_csv(outcome.csv_path)
    assert name_pairs(rows) == RMS_PAIRED
    assert {r["Result"] for r in rows} == {"pass"} and outcome
    mapping_file = tmp_path / "mapping.json"
    mapping_file.write_text(json.dumps(MAPPING))
    outcome = compare(npu.param(bench), output_dir, auto_analyze=False, xlsx=False, api_mapping=str(mapping_file),
                      suffix="file")
    assert name_pairs(read_csv(outcome.csv_path)) == RMS_PAIRED


def test_without_api_mapping_end_to_end_the_apis_are_one_sided(legacy_dump, output_dir):
    npu, bench = _rms_dumps(legacy_dump)
    outcome = compare(npu.param(bench), output_dir, auto_analyze=False, xlsx=False)
    rows = read_csv(outcome.csv_path)
    assert name_pairs(rows) == RMS_PAIRED[:2] + [
        ("Nan", "Functional_rms_norm_0_forward_input.0"),
        ("Nan", "Functional_rms_norm_0_forward_input.1"),
        ("Nan", "Functional_rms_norm_0_forward_output"),
        ("NPU_npu_rms_norm_0_forward_input.0", "Nan"),
        ("NPU_npu_rms_norm_0_forward_input.1", "Nan"),
        ("NPU_npu_rms_norm_0_forward_output", "Nan"),
    ] + RMS_PAIRED[5:]
    assert (outcome.counts.npu_only, outcome.counts.bench_only) == (3, 3)


@pytest.mark.parametrize("mapping, parameter", [
    (5, "api_mapping"),
    (["NPU_npu_rms_norm", "Functional_rms_norm"], "api_mapping"),
    ({"NPU npu_rms_norm": "Functional_rms_norm"}, "api_mapping['NPU npu_rms_norm']"),
    ({"NPU_npu_rms_norm": "Functional rms_norm"}, "api_mapping['NPU_npu_rms_norm']"),
    ({"NPU_npu_rms_norm": 3}, "api_mapping['NPU_npu_rms_norm']"),
    ({"NPU_npu_rms_norm": ""}, "api_mapping['NPU_npu_rms_norm']"),
    ({"NPU_npu_rms_norm": "Functional_rms_norm/x"}, "api_mapping['NPU_npu_rms_norm']"),
])
def test_bad_api_mapping_is_refused_naming_the_parameter(legacy_dump, output_dir, mapping, parameter):
    npu, bench = _rms_dumps(legacy_dump)
    with pytest.raises(ParameterError) as info:
        compare(npu.param(bench), output_dir, api_mapping=mapping)
    assert info.value.parameter == parameter
    assert "api_mapping" in str(info.value)
    assert os.listdir(output_dir) == []  # refused before anything is written


def test_api_mapping_file_holding_no_dict_or_bad_names_is_refused(tmp_path):
    listed = tmp_path / "list.json"
    listed.write_text(json.dumps(["NPU_npu_rms_norm"]))
    with pytest.raises(ParameterError) as info:
        check_api_mapping(str(listed))
    assert info.value.parameter == "api_mapping"
    spaced = tmp_path / "spaced.json"
    spaced.write_text(json.dumps({"NPU npu_rms_norm": "Functional_rms_norm"}))
    with pytest.raises(ParameterError) as info:
        check_api_mapping(str(spaced))
    assert "api_mapping" in info.value.parameter and str(spaced) in str(info.value)


def test_api_mapping_file_missing_or_not_json_names_the_path(legacy_dump, output_dir, tmp_path):
    npu, bench = _rms_dumps(legacy_dump)
    missing = str(tmp_path / "no_such_mapping.json")
    with pytest.raises(FileFormatError) as info:
        compare(npu.param(bench), output_dir, api_mapping=missing)
    assert missing in str(info.value)
    broken = tmp_path / "broken.json"
    broken.write_text("{\"NPU_npu_rms_norm\": ")
    with pytest.raises(FileFormatError) as info:
        check_api_mapping(str(broken))
    assert str(broken) in str(info.value)


def test_valid_mappings_are_returned_as_dicts():
    assert check_api_mapping(None) == {}
    assert check_api_mapping(MAPPING) == MAPPING
    assert check_api_mapping({"Torch_npu_fast_gelu": "Functional_gelu"}) == {"Torch_npu_fast_gelu": "Functional_gelu"}


def test_api_mapping_with_counter_and_direction_is_refused():
    with pytest.raises(ParameterError):
        check_api_mapping({"NPU_npu_rms_norm_0_forward": "Functional_rms_norm_0_forward"})


def test_api_mapping_name_with_a_trailing_newline_is_refused():
    with pytest.raises(ParameterError):
        check_api_mapping({"NPU_npu_rms_norm": "Functional_rms_norm\n"})


def test_api_mapping_with_counter_and_direction_maps_nothing():
    """What the accepted-but-wrong mapping does today (see the xfail above): the APIs stay one-sided."""
    npu, bench = _rms_calls(RMS_NPU), _rms_calls(RMS_BENCH)
    mapping = {"NPU_npu_rms_norm_0_forward": "Functional_rms_norm_0_forward"}
    assert ("NPU_npu_rms_norm_0_forward", None) in names(align_calls(npu, bench, mapping))


# -------------------------------------------------------------------------------------- fuzzy_match
def _shifted_add_dumps(legacy_dump):
    npu, bench = legacy_dump("npu"), legacy_dump("bench")
    npu.add_call("Torch_add_0_forward", [("input.0", np.zeros(7, np.float32)), ("output", np.zeros(7, np.float32))])
    npu.add_call("Torch_add_1_forward", [("input.0", y(1)), ("output", y(2))])
    npu.add_call("Functional_relu_0_forward", [("input.0", y(2)), ("output", y(2))])
    bench.add_call("Torch_add_0_forward", [("input.0", y(1)), ("output", y(2))])
    bench.add_call("Functional_relu_0_forward", [("input.0", y(2)), ("output", y(2))])
    return npu, bench


def test_fuzzy_match_keeps_its_legacy_message_on_rows_whose_call_names_differ(legacy_dump, output_dir):
    npu, bench = _shifted_add_dumps(legacy_dump)
    outcome = compare(npu.param(bench), output_dir, auto_analyze=False, xlsx=False, fuzzy_match=True)
    rows = read_csv(outcome.csv_path)
    assert [(r["NPU Name"], r["Bench Name"], r["Err_message"]) for r in rows] == [
        ("Torch_add_0_forward_input.0", "Nan", "No bench data matched."),
        ("Torch_add_0_forward_output", "Nan", "No bench data matched."),
        ("Torch_add_1_forward_input.0", "Torch_add_0_forward_input.0", FUZZY),
        ("Torch_add_1_forward_output", "Torch_add_0_forward_output", FUZZY),
        ("Functional_relu_0_forward_input.0", "Functional_relu_0_forward_input.0", ""),
        ("Functional_relu_0_forward_output", "Functional_relu_0_forward_output", ""),
    ]
    assert [r["Result"] for r in rows[2:]] == ["pass"] * 4


def test_without_fuzzy_match_the_same_pairs_carry_no_fuzzy_message(legacy_dump, output_dir):
    npu, bench = _shifted_add_dumps(legacy_dump)
    rows = read_csv(compare(npu.param(bench), output_dir, auto_analyze=False, xlsx=False).csv_path)
    assert [r["Bench Name"] for r in rows[2:4]] == ["Torch_add_0_forward_input.0", "Torch_add_0_forward_output"]
    assert all(FUZZY not in r["Err_message"] for r in rows)


def test_a_killed_run_pairs_its_last_forward_with_the_full_run():
    # Three steps (forward, loss, backward of the loss and both layers). The NPU run was killed during
    # step 2's forward: its last forward run has no backward after it. The next
    # step's forward is not a re-computation on either side (its backward starts at the loss again), so the
    # killed run's last calls pair with the full run's.
    def step(k):
        b_back, a_back = _backward(2 * k, 2 * k + 1)
        return _layers(2 * k, 2 * k + 1) + [_loss(k), _loss_backward(k)] + b_back + a_back

    full = step(0) + step(1) + step(2)
    killed = step(0) + step(1) + _layers(4, 5)[:3]
    pairs = names(align_calls(killed, full))
    assert ("Functional_linear_2_forward", "Functional_linear_2_forward") in pairs  # step 1, between backward calls
    assert ("Functional_linear_4_forward", "Functional_linear_4_forward") in pairs  # the killed step
    assert ("Functional_relu_4_forward", "Functional_relu_4_forward") in pairs
    assert ("Functional_linear_5_forward", "Functional_linear_5_forward") in pairs
    assert [pair[1] for pair in pairs if pair[0] is None and pair[1].endswith("_forward")] == [
        "Functional_relu_5_forward", "Functional_mse_loss_2_forward"]
