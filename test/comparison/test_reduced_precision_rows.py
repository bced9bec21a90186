"""Reduced precision, amplifiers and verdicts that travel, on hand-written dumps (torch-free): the numbers are
made with numpy as the kernels would make them (TF32: inputs rounded to a 10-bit mantissa)."""

from __future__ import annotations

import csv

import numpy as np

from ptdbg_ascend.comparison.api import compare
from ptdbg_ascend.formats import finding as finding_file


def tf32(array):
    """float32 rounded to a 10-bit mantissa (round half up on the bit pattern), kept as float32."""
    bits = np.asarray(array, np.float32).view(np.int32)
    return ((bits + (1 << 12)) & ~((1 << 13) - 1)).astype(np.int32).view(np.float32)


def layer_norm(x):
    x = x.astype(np.float64)
    return ((x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5)).astype(np.float32)


def _linear_then_norm(legacy_dump, offset):
    """linear (TF32 on the NPU side) -> layer_norm, inputs with ``offset`` (mean over spread of the output)."""
    rng = np.random.RandomState(0)
    x = (offset + rng.rand(16, 8)).astype(np.float32)
    w = (0.1 + 0.005 * rng.randn(8, 64)).astype(np.float32)  # outputs' mean ~100 times their spread
    dumps = {}
    for side, rounding in (("npu", tf32), ("bench", lambda a: a)):
        out = (rounding(x).astype(np.float64) @ rounding(w).astype(np.float64)).astype(np.float32)
        dump = dumps[side] = legacy_dump(side)
        dump.add_call("Functional_linear_0_forward", [("input.0", x), ("input.1", w), ("output", out)])
        dump.add_call("Functional_layer_norm_0_forward", [("input.0", out), ("output", layer_norm(out))])
    return dumps["npu"], dumps["bench"]


def test_layer_norm_amplifying_tf32_names_the_linear(legacy_dump, output_dir):
    npu, bench = _linear_then_norm(legacy_dump, offset=1.0)
    outcome = compare(npu.param(bench), output_dir, stack_mode=True)
    assert outcome.first_failure == "Functional_layer_norm_0_forward_output", str(outcome)
    finding = outcome.finding
    assert (finding.call, finding.kind, finding.precision, finding.level) == (
        "Functional_linear_0_forward", "cause", "TF32/HF32-like", "error"), finding
    with open(outcome.advisor_path, encoding="utf-8") as handle:
        text = handle.read()
    assert "Functional_layer_norm_0_forward fails, but it subtracts or normalises" in text, text
    assert "Functional_linear_0_forward computes below float32 precision (TF32/HF32-like)" in text, text


def test_a_planted_scale_is_no_reduced_precision(legacy_dump, output_dir):
    """x 1.005 at the same size as TF32 noise, but a scale (the norm moves by all of the error): a plain cause."""
    x = np.linspace(1, 2, 64, dtype=np.float32)
    npu, bench = legacy_dump("npu"), legacy_dump("bench")
    npu.add_call("Functional_linear_0_forward", [("input.0", x), ("output", x * np.float32(1.005))])
    bench.add_call("Functional_linear_0_forward", [("input.0", x), ("output", x)])
    outcome = compare(npu.param(bench), output_dir, stack_mode=True)
    assert (outcome.finding.call, outcome.finding.kind, outcome.finding.precision) == (
        "Functional_linear_0_forward", "cause", None), outcome.finding


def _result_of(outcome, name):
    with open(outcome.csv_path, encoding="utf-8", newline="") as handle:
        return next(row for row in csv.DictReader(handle) if row["NPU Name"] == name)


def test_an_input_that_really_changed_keeps_its_own_verdict(legacy_dump, output_dir):
    """Same statistics as the producer's output on the NPU side, other values on the bench side: no inheritance,
    and the advisor still says the value changed in between."""
    a = np.array([1e-8, -1e-8, 1e-8, -1e-8], np.float32)
    b = np.array([-1e-8, -1e-8, 1e-8, 1e-8], np.float32)
    x = np.linspace(-0.1, 0.1, 4).astype(np.float32)
    npu, bench = legacy_dump("npu"), legacy_dump("bench")
    npu.add_call("Functional_conv2d_0_backward", [("input.0", x), ("output.0", x), ("output.2", a)])
    bench.add_call("Functional_conv2d_0_backward", [("input.0", x), ("output.0", x), ("output.2", a)])
    npu.add_call("Tensor_add__0_forward", [("input.0", a), ("output", a)])
    bench.add_call("Tensor_add__0_forward", [("input.0", b), ("output", b)])
    outcome = compare(npu.param(bench), output_dir, stack_mode=True)
    row = _result_of(outcome, "Tensor_add__0_forward_input.0")
    assert row["Result"] == "error" and "Same tensor as" not in row["Err_message"], row
    with open(outcome.advisor_path, encoding="utf-8") as handle:
        assert "the value changed in between" in handle.read()


def test_finding_version_2_round_trip():
    found = finding_file.Finding("Functional_linear_0_forward_output", 3, "cause", "Functional_linear_0_forward",
                                 "linear", None, None, (), "warning", "TF32/HF32-like")
    import json

    assert finding_file.decode(json.loads(finding_file.encode(found)), "f.json") == found
