"""Metrics and verdicts on hand-computed pairs (every special case of the reference §9.4)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ptdbg_ascend.comparison import metrics as met
from ptdbg_ascend.comparison.tensor_pairs import compare_files
from ptdbg_ascend.comparison.verdicts import accuracy_reached

pytestmark = pytest.mark.torchfree


def cells(m):
    """The five legacy CSV cells of a pair (numbers, or the legacy words)."""
    return tuple(m.cell(field) for field in met.LEGACY_FIELDS)


def verdict(cosine, max_abs):
    """The legacy column for given Cosine / MaxAbsErr numbers."""
    return accuracy_reached(met.Metrics(met.Status.COMPARED, cosine=cosine, max_abs_err=max_abs))


def test_normal_case_all_metrics():
    m = met.compare_arrays(np.array([1.0, 2.0, 3.0], np.float32), np.array([1.0, 2.0, 4.0], np.float32))
    assert m.cosine == pytest.approx(17 / math.sqrt(14 * 21))  # 0.99146...
    assert m.max_abs_err == 1.0
    assert m.max_relative_err == 0.25
    assert m.one_thousandth_ratio == pytest.approx(2 / 3)
    assert m.five_thousandths_ratio == pytest.approx(2 / 3)
    assert m.accumulated_relative_err == pytest.approx(1 / 7)
    assert m.euclidean_relative_distance == pytest.approx(1 / math.sqrt(21))
    p, q = np.array([1, 2, 4]) / 7, np.array([1, 2, 3]) / 6
    assert m.kl_divergence == pytest.approx(float((p * np.log(p / q)).sum()))
    assert m.messages == ()
    assert accuracy_reached(m) == "Yes"  # cosine >= 0.99


def test_verdict_rule_no_iff_cosine_below_099_and_maxabs_above_0001():
    assert verdict(0.98, 0.002) == "No"
    assert verdict(0.98, 0.0009) == "Yes"
    assert verdict(0.995, 0.5) == "Yes"
    assert verdict(0.89, 0.0001) == "No"  # the original's safety net: cosine < 0.9
    assert verdict(0.999, 1.5) == "No"  # ... or MaxAbsErr > 1
    assert accuracy_reached(met.Metrics(met.Status.SHAPE)) == "Unmatched"
    assert verdict(None, 0.1) == "Nan"
    assert accuracy_reached(met.Metrics(met.Status.INF_NAN)) == "No"
    assert accuracy_reached(met.Metrics(met.Status.SCALAR, max_abs_err=0.0)) == "Nan"


def test_cosine_near_one_rounds_and_bench_zero_uses_eps():
    m = met.compare_arrays(np.array([0.0, 1.0], np.float32), np.array([0.0, 1.0], np.float32))
    assert m.cosine == 1.0 and m.max_relative_err == 0.0
    m = met.compare_arrays(np.array([1e-7, 1.0], np.float32), np.array([0.0, 1.0], np.float32))
    eps = float(np.finfo(np.float32).eps)
    assert m.max_relative_err == pytest.approx(float(np.float32(1e-7)) / eps)


def test_zero_d_scalar():
    m = met.compare_arrays(np.array(2.0), np.array(4.0))
    assert cells(m)[:4] == ("unsupported", 2.0, 0.5, "Nan")
    assert m.messages == ("This is type of scalar data: Cosine and the error ratios do not apply; its value is "
                          "compared.",)
    assert accuracy_reached(m) == "Nan"


def test_empty():
    m = met.compare_arrays(np.zeros((0, 3), np.float32), np.zeros((0, 3), np.float32))
    assert cells(m) == ("unsupported", 0.0, 0.0, 0.0, 0.0)
    assert m.messages == ("This is empty data, can not compare.",)


def test_one_element_cosine_unsupported():
    m = met.compare_arrays(np.array([3.0]), np.array([3.0]))
    assert m.cell("cosine") == "unsupported" and m.max_abs_err == 0.0
    assert m.messages == ("This tensor is scalar.",)


def test_bool_and_int_are_cast_to_float64():
    m = met.compare_arrays(np.array([True, False, True]), np.array([True, True, True]))
    assert m.max_abs_err == 1.0 and m.max_relative_err == 1.0
    assert m.cosine == pytest.approx(2 / (math.sqrt(2) * math.sqrt(3)))
    m = met.compare_arrays(np.array([3, 4], np.int64), np.array([3, 5], np.int64))
    assert m.max_abs_err == 1.0 and m.max_relative_err == pytest.approx(0.2)


def test_all_zero():
    both = met.compare_arrays(np.zeros(4), np.zeros(4))
    assert both.cosine == 1.0 and both.max_abs_err == 0.0
    npu_zero = met.compare_arrays(np.zeros(4), np.ones(4))
    assert npu_zero.cell("cosine") == "Nan"
    assert "Cannot compare by Cosine Similarity, All the data is Zero in npu dump data." in npu_zero.messages
    bench_zero = met.compare_arrays(np.ones(4), np.zeros(4))
    assert bench_zero.cell("cosine") == "Nan"
    assert "Cannot compare by Cosine Similarity, All the data is Zero in Bench dump data." in bench_zero.messages


def test_nan_inf_same_positions_are_zeroed():
    n = np.array([np.nan, 1.0, np.inf, 2.0])
    b = np.array([np.nan, 1.0, np.inf, 2.0])
    m = met.compare_arrays(n, b)
    assert m.cosine == 1.0 and m.max_abs_err == 0.0 and m.max_relative_err == 0.0
    # zeroed positions count as relative error 0 -> pass
    assert m.one_thousandth_ratio == 1.0


def test_nan_inf_different_positions():
    m = met.compare_arrays(np.array([np.nan, 1.0]), np.array([1.0, np.nan]))
    assert cells(m) == ("N/A",) * 5
    assert m.messages == ("The position of inf or nan in NPU and bench Tensor do not match.",)
    assert accuracy_reached(m) == "No"
    m = met.compare_arrays(np.array([np.inf, 1.0]), np.array([-np.inf, 1.0]))
    assert m.cell("cosine") == "N/A" and m.worst_index == (0,)


def test_shape_mismatch():
    m = met.compare_arrays(np.ones((2, 3)), np.ones((3, 2)))
    assert cells(m) == ("shape unmatched",) * 5
    assert m.messages == ("Shape of NPU and bench Tensor do not match. Skipped.",)
    assert accuracy_reached(m) == "Unmatched"


def test_missing_and_pickled_npy(tmp_path):
    good = tmp_path / "a.npy"
    np.save(good, np.ones(3))
    missing = str(tmp_path / "missing.npy")
    m = compare_files(str(good), missing)
    assert m.cell("cosine") == "Nan" and m.messages == (f"Dump file: {missing} not found.",)
    pickled = tmp_path / "obj.npy"
    np.save(pickled, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    m = compare_files(str(good), str(pickled))
    assert m.cell("cosine") == "Nan" and m.messages[0].startswith(f"Dump file: {pickled} cannot be read")




def _tiny_pair():
    """Two ~1e-19 vectors (AdamW's first second moments) whose true cosine is about 0.41."""
    npu = np.array([3e-19, 1e-19, 0.0, 2e-19], np.float32)
    bench = np.array([1e-19, 0.0, 3e-19, 2e-19], np.float32)
    true = float(np.dot(npu.astype(np.float64), bench) / (np.linalg.norm(npu.astype(np.float64))
                                                             * np.linalg.norm(bench.astype(np.float64))))
    assert 0.3 < true < 0.5
    return npu, bench


def test_both_norms_below_float64_epsilon_give_cosine_one():
    npu, bench = _tiny_pair()
    m = met.compare_arrays(npu, bench)
    assert m.cosine == 1.0 and m.max_abs_err == pytest.approx(3e-19, rel=1e-6)
    assert accuracy_reached(m) == "Yes"
    # One side above epsilon: the true cosine, and the legacy rule's safety net (< 0.9) says No.
    m = met.compare_arrays(npu * 1e4, bench * 1e4)
    assert 0.3 < m.cosine < 0.5 and accuracy_reached(m) == "No"


def test_tiny_vectors_pass_in_the_csv(legacy_dump, output_dir):
    import csv

    from ptdbg_ascend.comparison.api import compare

    npu_values, bench_values = _tiny_pair()
    npu, bench = legacy_dump("npu"), legacy_dump("bench")
    npu.add_call("Torch_sqrt_0_forward", [("input.0", npu_values), ("output", npu_values)])
    bench.add_call("Torch_sqrt_0_forward", [("input.0", bench_values), ("output", bench_values)])
    outcome = compare(npu.param(bench), output_dir, auto_analyze=False, xlsx=False)
    with open(outcome.csv_path, newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert [(float(row["Cosine"]), row["Accuracy Reached or Not"]) for row in rows] == [(1.0, "Yes"), (1.0, "Yes")]
