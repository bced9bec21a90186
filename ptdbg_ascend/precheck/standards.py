"""The facts of the "new precision standard" (msprobe 1.0.4): which API uses which comparison algorithm
and the thresholds per device dtype.

Carried as Python data (no yaml dependency) from msprobe 1.0.4 ``compare/api_precision_standard.yaml``,
``compare/api_precision_threshold.yaml``, ``compare/compare_utils.py``, ``compare/api_precision_compare.py``
and ``core/common/const.py``, and the seed guide (``docs/07.accuracy_checker_PyTorch.md`` §4-5).

An API is looked up by its name without the type prefix and the counter, as msprobe does
(``Functional.linear`` -> ``linear``, ``Torch.linalg.inv`` -> ``linalg.inv``); see :func:`api_key`.
Dtypes are the ``str(torch.dtype)`` spellings (``"torch.float32"``), so this module imports no torch.
"""

from __future__ import annotations

from typing import FrozenSet, Mapping

# --- comparison algorithms (our names; the seed's titles in ALGORITHM_TITLES) -------------------------
BENCHMARK = "benchmark"
BINARY = "binary consistency"
ABSOLUTE = "absolute threshold"
ULP = "ULP"
THOUSANDTH = "thousandth"

# The "比对算法" cell of api_precision_compare_details, as msprobe 1.0.4 writes it.
ALGORITHM_TITLES: Mapping[str, str] = {
    BENCHMARK: "标杆比对法",
    BINARY: "二进制一致法",
    ABSOLUTE: "绝对阈值法",
    ULP: "ULP误差比对法",
    THOUSANDTH: "双千指标法",
}

# --- api_precision_standard.yaml ----------------------------------------------------------------------
ABSOLUTE_THRESHOLD_APIS: FrozenSet[str] = frozenset("""
    mul mul_ __mul__ __imul__ __rmul__ add add_ __add__ __iadd__ __radd__ div div_ __div__ __idiv__
    divide divide_ leaky_relu leaky_relu_ prelu reciprocal reciprocal_ rsqrt rsqrt_ square square_
    sub sub_ rsub __isub__ __sub__
""".split())

BINARY_CONSISTENCY_APIS: FrozenSet[str] = frozenset("""
    abs abs_ absolute absolute_ argmin bitwise_and bitwise_and_ broadcast_to ceil ceil_ equal fill_
    flatten floor floor_ gather greater greater_ greater_equal greater_equal_ isfinite isnan less less_
    less_equal less_equal_ logical_and logical_and_ logical_not logical_not_ logical_or logical_or_
    masked_fill masked_fill_ max_pool3d maximum minimum neg neg_ nonzero not_equal not_equal_ one_hot
    pad relu reshape round round_ select sign sign_ sort tile topk transpose transpose_ tril tril_ triu
    triu_ type_as
""".split())

ULP_APIS: FrozenSet[str] = frozenset("""
    __matmul__ addbmm addbmm_ addmm addmm_ baddbmm baddbmm_ bilinear bmm chain_matmul hspmm linear
    matmul mm mv smm sspaddmm
""".split())

THOUSANDTH_APIS: FrozenSet[str] = frozenset(["conv1d", "conv2d"])

# --- dtype families (compare_utils.py) ----------------------------------------------------------------
FLOAT16 = "torch.float16"
BFLOAT16 = "torch.bfloat16"
FLOAT32 = "torch.float32"
FLOAT64 = "torch.float64"
# dtypes the benchmark / ULP algorithms support
BENCHMARK_DTYPES: FrozenSet[str] = frozenset([FLOAT16, BFLOAT16, FLOAT32])
ULP_DTYPES: FrozenSet[str] = BENCHMARK_DTYPES
# dtypes api_precision_compare does not judge (SKIP: "This data type does not support benchmark compare.")
PRECISION_COMPARE_UNSUPPORTED_DTYPES: FrozenSet[str] = frozenset([FLOAT64, "torch.complex64", "torch.complex128"])
# a device dtype outside this set is judged by binary consistency in api_precision_compare
BINARY_UNSUPPORTED_DTYPES: FrozenSet[str] = BENCHMARK_DTYPES | PRECISION_COMPARE_UNSUPPORTED_DTYPES
HALF_DTYPES: FrozenSet[str] = frozenset([FLOAT16, BFLOAT16])

# --- api_precision_threshold.yaml: absolute-threshold algorithm, per device dtype ---------------------
# Every API of ABSOLUTE_THRESHOLD_APIS has the same three numbers in 1.0.4, so they are carried once.
# rtol: relative error limit for normal values; small_value: |bench| at or below it is a small value;
# small_value_atol: absolute error limit for small values.
ABSOLUTE_THRESHOLDS: Mapping[str, Mapping[str, float]] = {
    FLOAT32: {"rtol": 1.0e-6, "small_value": 1.0e-6, "small_value_atol": 1.0e-9},
    FLOAT16: {"rtol": 1.0e-3, "small_value": 1.0e-3, "small_value_atol": 1.0e-5},
    BFLOAT16: {"rtol": 4.0e-3, "small_value": 1.0e-3, "small_value_atol": 1.0e-5},
}

# --- the small-value domain of the benchmark algorithm (compare_utils.precision_configs; seed §4.2) ---
SMALL_VALUE: Mapping[str, Mapping[str, float]] = {
    FLOAT16: {"small_value": 1e-3, "small_value_atol": 1e-5},
    BFLOAT16: {"small_value": 1e-3, "small_value_atol": 1e-5},
    FLOAT32: {"small_value": 1e-6, "small_value_atol": 1e-9},
}

# --- ULP (compare_utils.ULP_PARAMETERS, const.ULP_*_THRESHOLD) ----------------------------------------
# min_eb: the smallest exponent (subnormals count in units of the smallest normal's ULP);
# mantissa_bits: explicit fraction bits of the format.
ULP_PARAMETERS: Mapping[str, Mapping[str, int]] = {
    FLOAT16: {"min_eb": -14, "mantissa_bits": 10},
    BFLOAT16: {"min_eb": -126, "mantissa_bits": 7},
    FLOAT32: {"min_eb": -126, "mantissa_bits": 23},
}
ULP_THRESHOLD: Mapping[str, int] = {FLOAT16: 1, BFLOAT16: 1, FLOAT32: 32}

# --- bfloat16 constants (const.py): numpy has no bfloat16 ---------------------------------------------
BFLOAT16_EPS = 2.0 ** -8
BFLOAT16_MAX = 3.3895313892515355e+38

# --- the single run_ut verdict (compare.py; seed §4.1) ------------------------------------------------
COSINE_THRESHOLD = 0.99           # cosine <= 0.99 -> error
MAX_ABS_ERR_THRESHOLD = 0.001     # max abs error < 0.001 -> pass
HUNDREDTH = 0.01
THOUSANDTH_RATIO = 0.001
TEN_THOUSANDTH = 0.0001
# per device dtype: (error-level relative tolerance, warning-level relative tolerance); a dual-X
# indicator passes when the share of elements with relative error < X is greater than 1 - X.
DUAL_RATIO_LEVELS: Mapping[str, tuple] = {
    FLOAT16: (HUNDREDTH, THOUSANDTH_RATIO),
    BFLOAT16: (HUNDREDTH, THOUSANDTH_RATIO),
    FLOAT32: (THOUSANDTH_RATIO, TEN_THOUSANDTH),
    FLOAT64: (THOUSANDTH_RATIO, TEN_THOUSANDTH),
}

# --- api_precision_compare (api_precision_compare.py; seed §5) ----------------------------------------
# NPU/GPU ratio of a benchmark metric: > error -> error, > warning -> warning, else pass.
BENCHMARK_RATIO_THRESHOLDS: Mapping[str, Mapping[str, float]] = {
    "small_value": {"error": 2.0, "warning": 1.0},
    "rmse": {"error": 2.0, "warning": 1.0},
    "max_rel_err": {"error": 10.0, "warning": 1.0},
    "mean_rel_err": {"error": 2.0, "warning": 1.0},
    "eb": {"error": 2.0, "warning": 1.0},
}
# the ratio given when the GPU metric is ~0 and the NPU one is not
RATIO_WHEN_GPU_ZERO = 10000.0
# ULP verdict: float32 passes with mean ULP < 64, or share above threshold < 0.05, or NPU share < GPU share;
# float16/bfloat16 pass with share < 0.001, or NPU share < GPU share. (The seed's strict "<"; our
# api_precision_compare passes an equal share: device_compare ULP_EQUAL_SHARE.)
ULP_FLOAT32_MEAN_LIMIT = 64.0
ULP_FLOAT32_PROPORTION_LIMIT = 0.05
ULP_HALF_PROPORTION_LIMIT = 0.001
# thousandth algorithm: the dual-thousandth indicator must be >= 0.999
THOUSANDTH_PASS_RATIO = 0.999


def api_key(api: str) -> str:
    """The standard lookup key of an API: ``"Functional.linear"`` -> ``"linear"``,
    ``"Torch.linalg.inv"`` -> ``"linalg.inv"``; a name without a type prefix is returned unchanged."""
    return api.split(".", 1)[1] if "." in api else api


def standard_of(api: str) -> str:
    """The comparison algorithm of ``api`` (with or without its type prefix), in msprobe 1.0.4's order of
    precedence (thousandth, binary, absolute threshold, ULP; everything else: benchmark)."""
    key = api_key(api)
    if key in THOUSANDTH_APIS:
        return THOUSANDTH
    if key in BINARY_CONSISTENCY_APIS:
        return BINARY
    if key in ABSOLUTE_THRESHOLD_APIS:
        return ABSOLUTE
    if key in ULP_APIS:
        return ULP
    return BENCHMARK
