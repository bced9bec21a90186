"""The advisor: cause vs propagation, input inconsistency, FP16 overflow, the original's advice rules."""

from __future__ import annotations

import csv

import numpy as np
import pytest

from ptdbg_ascend.comparison.advisor import legacy_advice
from ptdbg_ascend.comparison.api import compare

pytestmark = pytest.mark.torchfree

Y = np.array([[0.5, -1.0, 2.0], [1.5, 0.25, -0.75]], np.float32)


def advice_of(npu, bench, output_dir):
    outcome = compare(npu.param(bench), output_dir, stack_mode=True)
    with open(outcome.advisor_path) as handle:
        return handle.read()


def test_input_changed_in_place_names_the_producer(legacy_dump, output_dir):
    npu, bench = legacy_dump("npu"), legacy_dump("bench")
    npu.add_call("Functional_linear_0_forward", [("input.0", Y), ("output", Y)])
    npu.add_call("Torch_relu_0_forward", [("input.0", Y + 3), ("output", np.maximum(Y + 3, 0))])
    bench.add_call("Functional_linear_0_forward", [("input.0", Y), ("output", Y)])
    bench.add_call("Torch_relu_0_forward", [("input.0", Y), ("output", np.maximum(Y, 0))])
    text = advice_of(npu, bench, output_dir)
    assert text.startswith("Line: 4\nSuspect Nodes: Torch_relu_0_forward_input.0\nExpert Advice: 1. Analyze the "
                           "model to view the input source.")
    assert ("Propagation: this input already differs; it was produced by Functional_linear_0_forward (line 3, "
            "Functional_linear_0_forward_output). Its output still matched, so the value changed in between") in text


def test_first_input_differs_is_input_inconsistency(legacy_dump, output_dir):
    npu, bench = legacy_dump("npu"), legacy_dump("bench")
    npu.add_call("Functional_linear_0_forward", [("input.0", -Y), ("output", -Y)])
    bench.add_call("Functional_linear_0_forward", [("input.0", Y), ("output", Y)])
    text = advice_of(npu, bench, output_dir)
    assert "Suspect Nodes: Functional_linear_0_forward_input.0" in text
    assert "no earlier dumped API produced it" in text and "data loading order" in text


def test_fp16_overflow(legacy_dump, output_dir):
    npu, bench = legacy_dump("npu"), legacy_dump("bench")
    x = np.array([300.0, 1.0, -2.0], np.float32)
    npu.add_call("Tensor___mul___0_forward", [("input.0", x.astype(np.float16)),
                                               ("output", np.array([65504.0, 300.0, -600.0], np.float16))])
    bench.add_call("Tensor___mul___0_forward", [("input.0", x), ("output", np.array([90000.0, 300.0, -600.0],
                                                                                     np.float32))])
    outcome = compare(npu.param(bench), output_dir, stack_mode=True)
    with open(outcome.csv_path) as handle:
        rows = list(csv.DictReader(handle))
    assert [r["Accuracy Reached or Not"] for r in rows] == ["Yes", "No"]  # MaxAbsErr 24496 > 1
    with open(outcome.advisor_path) as handle:
        text = handle.read()
    assert "Cause, not propagation" in text
    assert "FP16 overflow: a float16 tensor of Tensor___mul___0_forward reaches inf/nan or the float16 maximum" in text


def test_dtype_mismatch_reaches_the_csv(legacy_dump, output_dir):
    npu, bench = legacy_dump("npu"), legacy_dump("bench")
    npu.add_call("Torch_argmax_0_forward", [("input.0", Y), ("output", np.array([2, 0], np.int32))])
    bench.add_call("Torch_argmax_0_forward", [("input.0", Y), ("output", np.array([2, 0], np.int64))])
    outcome = compare(npu.param(bench), output_dir, stack_mode=True, auto_analyze=False)
    with open(outcome.csv_path) as handle:
        rows = list(csv.DictReader(handle))
    assert rows[1]["Bench Name"] == "Torch_argmax_0_forward_output"
    assert rows[1]["Err_message"] == "Dtype of NPU and bench Tensor do not match."


def test_legacy_advice_rules():
    assert legacy_advice("Functional_relu_0_forward_output") == (
        "This is a forward API computation error. Check the computation implementation.")
    assert legacy_advice("Functional_relu_0_backward_input.0") == "Check whether the forward computation result is affected."
    assert legacy_advice("Functional_relu_0_backward_output.0") == (
        "This is a backward API computation error. Check the computation implementation.")
    assert legacy_advice("Functional_conv2d_0_forward_output").startswith("This torch api may be uncertainty")
    assert legacy_advice("Functional_batch_norm_0_forward_input.1").startswith("Torch API batch_norm input not fixed")
