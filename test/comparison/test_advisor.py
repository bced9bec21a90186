"""The advisor: cause vs propagation, input inconsistency, the first dtype mismatch, one-sided calls,
the user's code line, FP16 overflow, and "too little compared" (hand-written dumps, torch-free)."""

from __future__ import annotations

import csv

import numpy as np
import pytest

from ptdbg_ascend.comparison.api import compare

pytestmark = pytest.mark.torchfree

Y = np.array([[0.5, -1.0, 2.0], [1.5, 0.25, -0.75]], np.float32)
USER_STACK = [["/venv/lib/python3.11/site-packages/torch/nn/modules/linear.py", "125", "forward",
               "return F.linear(input, self.weight, self.bias)"],
              ["/home/me/model.py", "31", "forward", "h = self.proj(x)"],
              ["/home/me/train.py", "90", "<module>", "loss = model(x).sum()"]]


def advice_of(npu, bench, output_dir):
    outcome = compare(npu.param(bench), output_dir, stack_mode=True)
    with open(outcome.advisor_path) as handle:
        return outcome, handle.read()


def test_cause_names_the_api_and_the_users_line_not_torchs(legacy_dump, output_dir, capsys):
    npu, bench = legacy_dump("npu"), legacy_dump("bench")
    npu.stack = bench.stack = USER_STACK
    npu.add_call("Functional_linear_0_forward", [("input.0", Y), ("output", Y * 1.02)])
    bench.add_call("Functional_linear_0_forward", [("input.0", Y), ("output", Y)])
    outcome, text = advice_of(npu, bench, output_dir)
    # The file answers first (suspect, its re-run, code line, the failure, the next step); the legacy three lines
    # follow. The re-run cannot rebuild this legacy linear: its dump records one of its two tensors (torch-free:
    # there is no torch to re-run it with).
    lines = text.splitlines()
    assert lines[0] == "Suspect API: Functional_linear_0_forward (Cause: its output differs beyond what its " \
                       "precision and its inputs explain)"
    assert lines[1].startswith("Re-run: not run: ") and (
        "Functional.linear takes 2 to 3 tensors and the dump records 1" in lines[1]
        or "torch is not installed" in lines[1])
    assert lines[2] == "Code: /home/me/model.py:31  h = self.proj(x)"
    assert lines[3].startswith("First failure: Functional_linear_0_forward_output (CSV line 3): Relative error ")
    assert lines[4].startswith("Next step: The inputs of Functional_linear_0_forward are within what their precision "
                               "explains, but its output is not")
    assert "Check its NPU kernel for this shape and dtype" in lines[4]  # the matmul class's next step
    assert "\nLine: 3\nSuspect Nodes: Functional_linear_0_forward_output\nExpert Advice: The inputs of " \
           "Functional_linear_0_forward are within what their precision explains, but its output is not" in text
    # The log keeps the legacy order.
    logged = [line.split("]", 1)[-1] for line in capsys.readouterr().out.splitlines()]
    start = logged.index("Line: 3")
    assert logged[start + 1] == "Suspect Nodes: Functional_linear_0_forward_output"
    assert logged[start + 2].startswith("Expert Advice: The inputs of Functional_linear_0_forward are within")
    assert logged[start + 3].startswith("Suspect API: Functional_linear_0_forward (Cause:")
    assert "Code: /home/me/model.py:31  h = self.proj(x)" in text
    assert "seed_all(mode=True)" not in text  # a 2 % error is no non-determinism
    finding = outcome.finding
    assert (finding.kind, finding.call, finding.api, finding.line) == (
        "cause", "Functional_linear_0_forward", "Functional_linear", 3)
    assert finding.user_line == "/home/me/model.py:31  h = self.proj(x)"
    assert not outcome and outcome.first_failure == "Functional_linear_0_forward_output"


def test_input_changed_between_calls_names_the_producer(legacy_dump, output_dir):
    npu, bench = legacy_dump("npu"), legacy_dump("bench")
    npu.add_call("Functional_linear_0_forward", [("input.0", Y), ("output", Y)])
    npu.add_call("Torch_relu_0_forward", [("input.0", Y + 3), ("output", np.maximum(Y + 3, 0))])
    bench.add_call("Functional_linear_0_forward", [("input.0", Y), ("output", Y)])
    bench.add_call("Torch_relu_0_forward", [("input.0", Y), ("output", np.maximum(Y, 0))])
    outcome, text = advice_of(npu, bench, output_dir)
    assert text.startswith("Suspect API: Torch_relu_0_forward (Input: an input already differs and no dumped API "
                           "produced it)\n")
    assert "\nLine: 4\nSuspect Nodes: Torch_relu_0_forward_input.0\n" in text
    assert outcome.finding.kind == "input"  # Y + 3 is no earlier output: nothing dumped produced it
    # ... but linear, dumped before it, matched: the gap between the two calls is named, not the data.
    assert "Expert Advice: This input already differs, but every dumped call before it matched: the difference " \
           "arose between Functional_linear_0_forward (/work/train.py:42  x = self.conv(x)) and Torch_relu_0_forward " \
           "(/work/train.py:42  x = self.conv(x)), in code that calls no dumped API" in text
    assert "loading order" not in text and "seed_all" not in text and "weights" not in text


def test_input_of_the_first_dumped_call_points_at_the_data(legacy_dump, output_dir):
    npu, bench = legacy_dump("npu"), legacy_dump("bench")
    npu.add_call("Torch_relu_0_forward", [("input.0", Y + 3), ("output", np.maximum(Y + 3, 0))])
    bench.add_call("Torch_relu_0_forward", [("input.0", Y), ("output", np.maximum(Y, 0))])
    outcome, text = advice_of(npu, bench, output_dir)
    assert outcome.finding.kind == "input" and outcome.first_failure == "Torch_relu_0_forward_input.0"
    assert "This input already differs and no dumped API produced it" in text and "loading order" in text
    assert "every dumped call before it matched" not in text


def test_input_that_an_earlier_call_produced_and_then_changed_is_propagation(legacy_dump, output_dir):
    npu, bench = legacy_dump("npu"), legacy_dump("bench")
    z = Y + 3
    npu.add_call("Functional_linear_0_forward", [("input.0", Y), ("output", z)])
    npu.add_call("Torch_relu_0_forward", [("input.0", z * 1.5), ("output", z * 1.5)])
    npu.add_call("Torch_exp_0_forward", [("input.0", z * 1.5), ("output", np.exp(z * 1.5))])
    bench.add_call("Functional_linear_0_forward", [("input.0", Y), ("output", z)])
    bench.add_call("Torch_relu_0_forward", [("input.0", z), ("output", z)])
    bench.add_call("Torch_exp_0_forward", [("input.0", z), ("output", np.exp(z))])
    outcome, text = advice_of(npu, bench, output_dir)
    assert outcome.first_failure == "Torch_relu_0_forward_input.0"
    assert outcome.finding.kind == "input"
    # The exp input is the relu output: traced to relu, which is the failing call before it.


def test_one_sided_calls_are_traced_and_named(legacy_dump, output_dir):
    """NPU casts to half before an API, scales its result in a call the bench does not make, and casts back
    (all three NPU-only): the consumer's input differs beyond what the calls before it carried; the advisor
    traces it back through the one-sided calls to the one that changed the values, the casts listed first."""
    x = np.linspace(-2, 2, 64, dtype=np.float32).reshape(8, 8)
    half = x.astype(np.float16)
    y32 = x @ x
    y16 = y32.astype(np.float16)
    scaled = (y16.astype(np.float32) * 1.05).astype(np.float16)
    npu, bench = legacy_dump("npu"), legacy_dump("bench")
    npu.add_call("Tensor_half_0_forward", [("input.0", x), ("output", half)])
    npu.add_call("Torch_matmul_0_forward", [("input.0", half), ("input.1", half), ("output", y16)])
    npu.add_call("Tensor___mul___0_forward", [("input.0", y16), ("output", scaled)])
    npu.add_call("Tensor_float_0_forward", [("input.0", scaled), ("output", scaled.astype(np.float32))])
    npu.add_call("Torch_tanh_0_forward", [("input.0", scaled.astype(np.float32)),
                                          ("output", np.tanh(scaled.astype(np.float32)))])
    bench.add_call("Torch_matmul_0_forward", [("input.0", x), ("input.1", x), ("output", y32)])
    bench.add_call("Torch_tanh_0_forward", [("input.0", y32), ("output", np.tanh(y32))])
    outcome, text = advice_of(npu, bench, output_dir)
    assert outcome.first_failure == "Torch_tanh_0_forward_input.0"
    finding = outcome.finding
    assert (finding.kind, finding.call) == ("propagation", "Tensor___mul___0_forward")
    assert finding.dtype_mismatch == "Torch_matmul_0_forward (NPU torch.float16, bench torch.float32)"
    assert finding.one_sided[:2] == ("Tensor_float_0_forward (NPU only)", "Tensor_half_0_forward (NPU only)")
    assert "Tensor___mul___0_forward (NPU only)" in finding.one_sided
    assert "it comes from Tensor___mul___0_forward which exists on NPU only (through Tensor_float_0_forward)" in text
    assert "First dtype mismatch before it: Torch_matmul_0_forward (NPU torch.float16, bench torch.float32)" in text


def test_a_lower_precision_call_within_its_precision_passes_and_is_noted(legacy_dump, output_dir):
    """The same casts and matmul, but nothing beyond float16's round-off: every row passes (the float32 tanh
    carries what its input brings in), and the advisor notes where the precision drops."""
    x = np.linspace(-2, 2, 64, dtype=np.float32).reshape(8, 8)
    half = x.astype(np.float16)
    y32 = x @ x
    y16 = (y32 * (1 + 1.5e-3)).astype(np.float16)  # within float16's allowance, beyond float32's
    npu, bench = legacy_dump("npu"), legacy_dump("bench")
    npu.add_call("Tensor_half_0_forward", [("input.0", x), ("output", half)])
    npu.add_call("Torch_matmul_0_forward", [("input.0", half), ("input.1", half), ("output", y16)])
    npu.add_call("Tensor_float_0_forward", [("input.0", y16), ("output", y16.astype(np.float32))])
    npu.add_call("Torch_tanh_0_forward", [("input.0", y16.astype(np.float32)), ("output", np.tanh(y16.astype(np.float32)))])
    bench.add_call("Torch_matmul_0_forward", [("input.0", x), ("input.1", x), ("output", y32)])
    bench.add_call("Torch_tanh_0_forward", [("input.0", y32), ("output", np.tanh(y32))])
    outcome, text = advice_of(npu, bench, output_dir)
    assert outcome and outcome.first_failure is None
    assert text.startswith("All data in comparison result meets the accuracy requirements.")
    assert "Note: Torch_matmul_0_forward is the first call that runs in torch.float16 on NPU and torch.float32 on " \
           "bench" in text
    # the casts NPU-only are no gap: the run counts as compared
    assert outcome.counts.npu_only == 4 and outcome.counts.npu_unpaired == 0 and outcome.complete


def test_backward_cause_says_backward(legacy_dump, output_dir):
    g = np.full((2, 3), 0.5, np.float32)
    npu, bench = legacy_dump("npu"), legacy_dump("bench")
    npu.add_call("Torch_tanh_0_backward", [("input.0", g), ("output.0", g * 0.8)])
    bench.add_call("Torch_tanh_0_backward", [("input.0", g), ("output.0", g * 0.7)])
    outcome, text = advice_of(npu, bench, output_dir)
    assert outcome.finding.kind == "cause"
    assert "check the backward implementation" in text


def test_small_error_of_a_nondeterministic_api_suggests_deterministic_mode(legacy_dump, output_dir):
    x = np.linspace(1, 2, 100, dtype=np.float64)
    npu, bench = legacy_dump("npu"), legacy_dump("bench")
    npu.add_call("Functional_conv2d_0_forward", [("input.0", x), ("output", x * (1 + 3e-3))])
    bench.add_call("Functional_conv2d_0_forward", [("input.0", x), ("output", x)])
    _, text = advice_of(npu, bench, output_dir)
    assert "seed_all(mode=True)" in text


def test_fp16_overflow(legacy_dump, output_dir):
    npu, bench = legacy_dump("npu"), legacy_dump("bench")
    x = np.array([300.0, 1.0, -2.0], np.float32)
    npu.add_call("Tensor___mul___0_forward", [("input.0", x.astype(np.float16)),
                                               ("output", np.array([65504.0, 300.0, -600.0], np.float16))])
    bench.add_call("Tensor___mul___0_forward", [("input.0", x), ("output", np.array([90000.0, 300.0, -600.0],
                                                                                     np.float32))])
    outcome, text = advice_of(npu, bench, output_dir)
    with open(outcome.csv_path) as handle:
        rows = list(csv.DictReader(handle))
    assert [r["Accuracy Reached or Not"] for r in rows] == ["Yes", "No"]  # MaxAbsErr 24496 > 1
    assert [r["Result"] for r in rows] == ["pass", "error"]
    assert outcome.finding.kind == "cause"
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
    assert rows[1]["Result"] == "pass" and outcome


def test_nothing_comparable_says_so(legacy_dump, output_dir, tmp_path):
    npu, bench = legacy_dump("npu"), legacy_dump("bench")
    npu.add_call("Functional_linear_0_forward", [("input.0", Y), ("output", Y)], save=False)
    bench.add_call("Functional_linear_0_forward", [("input.0", Y), ("output", Y)], save=False)
    outcome, text = advice_of(npu, bench, output_dir)
    assert not outcome and outcome.first_failure is None and outcome.finding is None
    assert (outcome.counts.paired, outcome.counts.compared, outcome.counts.not_compared) == (2, 0, 2)
    assert text.startswith("Nothing could be compared: none of the 2 paired tensors was judged (2 rows: a tensor "
                           "file is missing)")
    assert "\nLine: NA\nSuspect Nodes: NA\nExpert Advice: Nothing could be compared: none of the 2 " \
           "paired tensors was judged (2 rows: a tensor file is missing)" in text
    assert "does not show that the runs agree" in text
    assert "All data" not in text and str(outcome).startswith("not enough could be compared")
    assert outcome.status == "incomplete"


def test_fewer_than_half_compared_is_not_a_pass(legacy_dump, output_dir):
    npu, bench = legacy_dump("npu"), legacy_dump("bench")
    for side in (npu, bench):
        side.add_call("Functional_linear_0_forward", [("input.0", Y), ("output", Y)])
        side.add_call("Functional_linear_1_forward", [("input.0", Y), ("output", Y)], save=False)
        side.add_call("Functional_linear_2_forward", [("input.0", Y), ("output", Y)], save=False)
    outcome, text = advice_of(npu, bench, output_dir)
    assert outcome.counts.compared == 2 and outcome.counts.paired == 6 and not outcome
    assert "Too little could be compared: only 2 of 6 paired tensors were judged" in text


def _after_a_half_precision_call(legacy_dump, output_error: float):
    """NPU computes a matmul in float16 (its error within float16's allowance); the float32 tanh after it
    gets inputs off by 5e-4 (within float32's 1e-3) and returns outputs off by ``output_error``."""
    x = np.linspace(-1, 1, 64, dtype=np.float32).reshape(8, 8)
    y = x @ x
    npu, bench = legacy_dump("npu"), legacy_dump("bench")
    npu.add_call("Torch_matmul_0_forward", [("input.0", x.astype(np.float16)), ("output", (y * (1 + 5e-4)).astype(
        np.float16))])
    npu.add_call("Torch_tanh_0_forward", [("input.0", y * (1 + 5e-4)), ("output", np.tanh(y) * (1 + output_error))])
    bench.add_call("Torch_matmul_0_forward", [("input.0", x), ("output", y)])
    bench.add_call("Torch_tanh_0_forward", [("input.0", y), ("output", np.tanh(y))])
    return npu, bench


def test_tanh_cannot_quadruple_its_inputs_error_so_the_excess_is_its_own(legacy_dump, output_dir):
    """tanh's output is never more sensitive, relatively, than its input (|x tanh'(x) / tanh(x)| <= 1): an
    output error 4 times its inputs' is made by tanh, even after a lower-precision call."""
    npu, bench = _after_a_half_precision_call(legacy_dump, 2e-3)
    outcome, text = advice_of(npu, bench, output_dir)
    assert outcome.first_failure == "Torch_tanh_0_forward_output"
    assert (outcome.finding.kind, outcome.finding.call) == ("cause", "Torch_tanh_0_forward")
    assert "carried in by its inputs' errors through activation" in text  # the allowance says what was carried in


def test_small_input_difference_carried_by_tanh_passes(legacy_dump, output_dir):
    npu, bench = _after_a_half_precision_call(legacy_dump, 6e-4)
    outcome, text = advice_of(npu, bench, output_dir)
    assert outcome and outcome.first_failure is None


def test_output_error_far_beyond_its_inputs_is_a_cause_even_after_a_lower_precision_call(legacy_dump, output_dir):
    npu, bench = _after_a_half_precision_call(legacy_dump, 2e-2)  # 40 times the input's error
    outcome, _ = advice_of(npu, bench, output_dir)
    assert (outcome.finding.kind, outcome.finding.call) == ("cause", "Torch_tanh_0_forward")


def test_library_frames_by_location_not_by_folder_name():
    import os

    import ptdbg_ascend
    from ptdbg_ascend.formats.records import is_library_file

    tool_file = os.path.join(os.path.dirname(ptdbg_ascend.__file__), "dump", "capture.py")
    assert is_library_file(tool_file)  # this tool as installed here
    assert is_library_file("/usr/lib/python3/dist-packages/torch_npu/utils/_step.py")  # pip's layout elsewhere
    assert is_library_file(r"C:\Python311\Lib\site-packages\torch\nn\modules\linear.py")
    assert is_library_file("<frozen importlib._bootstrap>")
    assert not is_library_file("/opt/torch/.venv/lib/python3.10/site-packages/transformers/models/gpt2/modeling_gpt2.py")
    assert not is_library_file("/home/me/torch/project/model.py")
    assert not is_library_file("/home/me/pytorch-env/src/msprobe_notes/train.py")
    assert not is_library_file("train.py")


def test_the_user_line_names_the_script_without_dot_dot():
    """``python ../sample/train.py`` run from ``npu/`` records ``…/npu/../sample/train.py``."""
    from ptdbg_ascend.formats.records import user_line

    frames = (("/work/npu/../sample/legacy_train.py", 41, "forward", "x = self.fc2(x)"),)
    assert user_line(frames) == "/work/sample/legacy_train.py:41  x = self.fc2(x)"


def test_a_backward_with_nothing_arriving_recorded_says_so_not_that_it_matches(legacy_dump, output_dir):
    """A loss's backward whose arriving gradient is not in the dump (a 0-d gradient filtered out) and whose
    forward output was not compared either (here: not dumped): the advice must not claim that the gradients
    arriving still match, and names the forward's non-tensor arguments (label_smoothing) as a possibility."""
    logits = np.linspace(-2, 2, 12, dtype=np.float32).reshape(3, 4)
    grad = np.full((3, 4), 0.05, np.float32)
    npu, bench = legacy_dump("npu"), legacy_dump("bench")
    npu.add_call("Functional_cross_entropy_0_forward", [("input.0", logits)])
    bench.add_call("Functional_cross_entropy_0_forward", [("input.0", logits)])
    npu.add_call("Functional_cross_entropy_0_backward", [("output.0", grad * 0.9)])  # label_smoothing on NPU
    bench.add_call("Functional_cross_entropy_0_backward", [("output.0", grad)])
    outcome, text = advice_of(npu, bench, output_dir)
    assert outcome.finding.call == "Functional_cross_entropy_0_backward"
    assert "still match" not in text and "are within what their precision explains" not in text
    assert "Nothing arriving at Functional_cross_entropy_0_backward was recorded" in text
    assert "label_smoothing" in text and "its forward call's output was not compared" in text


def test_a_weight_gradient_after_a_rounded_input_is_no_reduced_precision_claim(legacy_dump, output_dir):
    """The forward input was rounded to float16 on the NPU (within float32's tolerance); the weight gradient
    depends on it: its small difference is no "computes below float32 precision" of the backward, whose own
    inputs (the arriving gradient) are identical."""
    rng = np.random.RandomState(5)
    x = rng.randn(64, 32).astype(np.float32)
    w = rng.randn(16, 32).astype(np.float32) * 0.1
    x16 = x.astype(np.float16).astype(np.float32)
    dy = rng.randn(64, 16).astype(np.float32)
    npu, bench = legacy_dump("npu"), legacy_dump("bench")
    for side, inp in ((npu, x16), (bench, x)):
        side.add_call("Functional_linear_0_forward", [("input.0", inp), ("input.1", w), ("output", inp @ w.T)])
        side.add_call("Functional_linear_0_backward", [("input.0", dy), ("output.0", dy @ w),
                                                       ("output.1", dy.T @ inp)])
    outcome, text = advice_of(npu, bench, output_dir)
    assert "computes below float32 precision" not in text, text
    assert outcome.finding is None or outcome.finding.precision is None, outcome.finding
