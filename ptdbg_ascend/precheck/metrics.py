"""The standard-specific metrics of one float output (binary consistency, absolute threshold, ULP,
benchmark), computed as msprobe 1.0.4 ``compare/algorithm.py`` does: they fill the details CSV and are
what ``api_precision_compare`` judges against the GPU's. Arrays are flat numpy arrays: the bench in
float64, the device values and the bench rounded to the device dtype as float64.
"""

from __future__ import annotations

import math
from typing import Any, Dict

import numpy as np

from ptdbg_ascend.precheck import columns as col
from ptdbg_ascend.precheck import standards as std

F64_EPS = float(np.finfo(np.float64).eps)


def rel_eps(dtype: str) -> float:
    """The eps added to |bench| in relative errors: float64's, 2**-8 for a bfloat16 device (1.0.4)."""
    return std.BFLOAT16_EPS if dtype == std.BFLOAT16 else F64_EPS


def standard_metrics(bench: np.ndarray, device: np.ndarray, rounded: np.ndarray, dtype: str,
                     standard: str) -> Dict[str, Any]:
    """The metrics of ``standard`` for a float output of device dtype ``dtype`` (float16/bfloat16/
    float32), as 1.0.4 computes them; arrays flat, bench float64, device and rounded as float64."""
    if standard == std.BINARY:
        # BINARY_AT_DEVICE_DTYPE: an exact op in the device dtype gives the bench rounded to it.
        same = (device == rounded) | (np.isnan(device) & np.isnan(rounded))
        return {col.ERROR_RATE: float(np.count_nonzero(~same)) / device.size}
    if standard == std.ABSOLUTE:
        return absolute_threshold_metrics(bench, device, rounded, dtype)
    if standard == std.ULP:
        return ulp_metrics(bench, device, dtype)
    return benchmark_metrics(bench, device, rounded, dtype)


def _masks(bench: np.ndarray, device: np.ndarray, rounded: np.ndarray, small_value: float):
    both_finite = np.isfinite(device) & np.isfinite(rounded)
    inf_nan = ~both_finite
    small = (np.abs(bench) <= small_value) & both_finite
    return both_finite, inf_nan, small


def absolute_threshold_metrics(bench: np.ndarray, device: np.ndarray, rounded: np.ndarray,
                               dtype: str) -> Dict[str, float]:
    """inf/nan error rate, relative error rate of normal values, absolute error rate of small values
    (thresholds: standards.ABSOLUTE_THRESHOLDS of the device dtype)."""
    limits = std.ABSOLUTE_THRESHOLDS[dtype]
    rtol, small_value, atol = limits["rtol"], limits["small_value"], limits["small_value_atol"]
    both_finite, inf_nan, small = _masks(bench, device, rounded, small_value)
    normal = both_finite & ~small
    eps = rel_eps(dtype)
    abs_bench_eps = np.abs(bench) + eps
    abs_err = np.abs(device - bench)
    rel_err = abs_err / abs_bench_eps
    # inf/nan: clip both to the dtype's range, so an overflow to inf next to a finite bench beyond the
    # range still passes when its relative error is within rtol; two NaN agree.
    top = std.BFLOAT16_MAX if dtype == std.BFLOAT16 else float(np.finfo(_NP_DTYPES[dtype]).max)
    clipped_err = np.abs(np.clip(device, -top, top) - np.clip(rounded, -top, top)) / abs_bench_eps
    inf_nan_pass = (clipped_err <= rtol) | (np.isnan(device) & np.isnan(rounded))
    return {
        col.INF_NAN_ERR_RATIO: _share(inf_nan & ~inf_nan_pass, inf_nan),
        col.REL_ERR_RATIO: _share(normal & (rel_err > rtol), normal),
        col.ABS_ERR_RATIO: _share(small & (abs_err > atol), small),
    }


_NP_DTYPES = {std.FLOAT16: np.float16, std.FLOAT32: np.float32, std.BFLOAT16: np.float32}


def _share(hits: np.ndarray, population: np.ndarray) -> float:
    count = int(np.count_nonzero(population))
    return 0.0 if count == 0 else float(np.count_nonzero(hits)) / count


def ulp_metrics(bench: np.ndarray, device: np.ndarray, dtype: str) -> Dict[str, float]:
    """ULP error max/mean and the share above the threshold (1 for float16/bfloat16, 32 for float32).

    The ULP of an element is that of the bench's binade in the device format:
    ``2 ** (max(floor(log2|b|), min_eb) - mantissa_bits)``, with ``floor(log2|b|)`` taken as 0 where
    ``b == 0`` (1.0.4's rule)."""
    if bench.size == 0:
        return {col.MAX_ULP_ERR: 0.0, col.MEAN_ULP_ERR: 0.0, col.ULP_ERR_PROPORTION: 0.0}
    params = std.ULP_PARAMETERS[dtype]
    abs_bench = np.abs(bench)
    exponent = np.where(abs_bench == 0, 0.0, np.floor(np.log2(np.where(abs_bench == 0, 1.0, abs_bench))))
    exponent = np.maximum(exponent, params["min_eb"])
    ulp_err = np.abs((device - bench) * np.exp2(params["mantissa_bits"] - exponent))
    return {
        col.MAX_ULP_ERR: float(np.max(ulp_err)),
        col.MEAN_ULP_ERR: float(np.mean(ulp_err)),
        col.ULP_ERR_PROPORTION: float(np.count_nonzero(ulp_err > std.ULP_THRESHOLD[dtype])) / bench.size,
    }


def benchmark_metrics(bench: np.ndarray, device: np.ndarray, rounded: np.ndarray, dtype: str) -> Dict[str, float]:
    """Small-value error share, RMSE, error balance, max/mean relative error (benchmark algorithm).

    - small values: finite elements with ``|b| <= small_value``; an error when ``|d - b| > small_value_atol``
      (standards.SMALL_VALUE of the device dtype).
    - relative error ``|d - b| / (|b| + eps)`` over the finite, non-small elements (eps: float64's, 2**-8
      for bfloat16); max and mean (0 when there are none).
    - RMSE over the finite non-small elements, as 1.0.4: ``sqrt(mean(e**2) * (N / (N - M + 1e-4) + 1e-4))``
      with the masked-out M elements counting 0 in the mean.
    - EB: ``|#(d > b) - #(d < b)| / N`` with b rounded to the device dtype.
    """
    limits = std.SMALL_VALUE[dtype]
    both_finite, inf_nan, small = _masks(bench, device, rounded, limits["small_value"])
    abs_err = np.abs(device - bench)
    eps = rel_eps(dtype)
    out = {col.SMALL_VALUE_ERR_RATIO: _share(small & (abs_err > limits["small_value_atol"]), small)}
    masked = inf_nan | small
    kept = ~masked
    squared = np.where(masked, 0.0, abs_err) ** 2
    mse = float(np.mean(squared)) * (abs_err.size / (abs_err.size - int(np.count_nonzero(masked)) + 0.0001) + 0.0001)
    out[col.RMSE] = math.sqrt(mse)
    # 1.0.4 casts the bench to the numpy dtype of the device values (float32 for bfloat16) before the sign
    reference = bench.astype(np.float32).astype(np.float64) if dtype == std.BFLOAT16 else rounded
    diff = device - reference
    out[col.EB] = abs(int(np.count_nonzero(diff > 0)) - int(np.count_nonzero(diff < 0))) / bench.size
    rel = abs_err[kept] / (np.abs(bench[kept]) + eps)
    out[col.MAX_REL_ERR] = float(np.max(rel)) if rel.size else 0.0
    out[col.MEAN_REL_ERR] = float(np.mean(rel)) if rel.size else 0.0
    return out
