"""Metrics on one NPU/bench pair of arrays, vectorized numpy in float64: arithmetic only (the files are
loaded by :mod:`ptdbg_ascend.comparison.tensor_pairs`).

Values are numbers or None, with a :class:`Status` that says why a number is missing; the legacy words
of the CSV ("unsupported", "Nan", "N/A", "shape unmatched") are made only when a report is written
(:meth:`Metrics.cell`). Special cases and messages follow the original tool (reference §9.4), with its
bugs fixed: every message is kept, a missing file is a row message, a dtype mismatch reaches the CSV.

Besides the legacy metrics, each pair carries what the robust verdict (``tolerances.py``) and the error
propagation (``propagation.py``) need: the error norm, both norms, the worst element and where it is, the
root mean square of the element-wise relative errors, and how many elements miss the tolerance.
"""

from __future__ import annotations

import math
from typing import NamedTuple, Optional, Tuple

import numpy as np

from ptdbg_ascend.comparison.tolerances import Tolerance

UNSUPPORTED = "unsupported"
NAN = "Nan"
NOT_AVAILABLE = "N/A"
SHAPE_UNMATCHED = "shape unmatched"

MSG_NO_BENCH = "No bench data matched."
# The original said "This is type of scalar data, can not compare.", beside the value's own verdict (a
# relative error, an error): the message says what does not apply instead.
MSG_SCALAR = "This is type of scalar data: Cosine and the error ratios do not apply; its value is compared."
MSG_EMPTY = "This is empty data, can not compare."
MSG_SHAPE = "Shape of NPU and bench Tensor do not match. Skipped."
MSG_DTYPE = "Dtype of NPU and bench Tensor do not match."
MSG_INF_NAN = "The position of inf or nan in NPU and bench Tensor do not match."
MSG_ONE_ELEMENT = "This tensor is scalar."
MSG_NPU_ZERO = "Cannot compare by Cosine Similarity, All the data is Zero in npu dump data."
MSG_BENCH_ZERO = "Cannot compare by Cosine Similarity, All the data is Zero in Bench dump data."
MSG_COS_NAN = "Cannot compare by Cosine Similarity, the dump data has NaN."
MSG_REL_NAN = "Cannot compare by MaxRelativeError, the data contains nan in dump data."
MSG_SATURATED = "{} elements hold their dtype's largest magnitude on both sides (a mask such as finfo.min): " \
    "compared as equal."
# The largest finite magnitude of each float dtype as the dumps name it: ``torch.finfo(dtype).min`` fills
# attention masks, so a bfloat16 run's -3.39e38 and a float32 run's -3.40e38 are the same "minus infinity".
LARGEST = {
    "torch.float16": 65504.0, "torch.half": 65504.0, "torch.bfloat16": 3.3895313892515355e38,
    "torch.float32": 3.4028234663852886e38, "torch.float": 3.4028234663852886e38,
    "torch.float64": 1.7976931348623157e308, "torch.double": 1.7976931348623157e308,
}

EPS64 = float(np.finfo(np.float64).eps)
# Magnitudes whose squares (and sums of up to ~1e12 of them) stay normal float64 numbers.
_SAFE_SQUARES = (1e-140, 1e140)
# KL divergence: probabilities below this are clamped so log() stays finite.
KL_FLOOR = 1e-12
# ``gross``: elements off by more than this share of their larger side, among those above GROSS_FLOOR of the
# tensor's largest magnitude (two near-zero values are round-off, not a wrong element).
GROSS_SHARE = 0.5
GROSS_FLOOR = 1e-6
# An element's relative error counts at most this much in ``relative_rms``: a value that flips its sign is
# off by 2 of itself, and one that is zero on one side says nothing more by being infinitely off.
RELATIVE_CAP = 2.0
LEGACY_FIELDS = ("cosine", "max_abs_err", "max_relative_err", "one_thousandth_ratio", "five_thousandths_ratio")
EXTRA_FIELDS = ("accumulated_relative_err", "euclidean_relative_distance", "kl_divergence")


class Status:
    """Why a pair has (or lacks) numbers."""

    COMPARED = "compared"  # numbers computed (some metrics may still be None: one element, all zero)
    EMPTY = "empty"  # both tensors have no element
    SCALAR = "scalar"  # 0-d tensors: errors, no cosine or ratios
    SHAPE = "shape unmatched"
    INF_NAN = "inf/nan at different positions"
    NOT_READ = "not read"  # a file is missing or unreadable


class Metrics:
    """One pair's metrics (None where a number cannot be given; ``status`` says why)."""

    __slots__ = ("status", "cosine", "max_abs_err", "max_relative_err", "one_thousandth_ratio",
                 "five_thousandths_ratio", "accumulated_relative_err", "euclidean_relative_distance",
                 "kl_divergence", "messages", "error_norm", "bench_norm", "scale", "size", "worst_index",
                 "mismatched", "exact_equal", "npu_norm", "relative_rms", "gross")

    def __init__(self, status: str, messages: Tuple[str, ...] = (), **values: object) -> None:
        self.status = status
        self.messages = tuple(messages)
        for name in self.__slots__:
            if name not in ("status", "messages"):
                setattr(self, name, values.pop(name, None))
        if values:
            raise TypeError(f"unknown metrics: {', '.join(values)}")

    def __getstate__(self):
        return tuple(getattr(self, name) for name in self.__slots__)

    def __setstate__(self, state) -> None:
        for name, value in zip(self.__slots__, state):
            setattr(self, name, value)

    def __repr__(self) -> str:
        return f"Metrics({', '.join((f'{n}={getattr(self, n)!r}' for n in self.__slots__))})"

    @property
    def compared(self) -> bool:
        """Whether the two tensors were actually compared (numbers exist for the robust verdict)."""
        return self.status in (Status.COMPARED, Status.SCALAR, Status.EMPTY, Status.INF_NAN)

    def cell(self, field: str) -> object:
        """The legacy CSV cell of one metric: the number, or the word the original wrote instead."""
        value = getattr(self, field)
        if value is not None:
            return value
        if self.status == Status.SHAPE:
            return SHAPE_UNMATCHED
        if self.status == Status.INF_NAN:
            return NOT_AVAILABLE
        if field == "cosine" and (self.status in (Status.EMPTY, Status.SCALAR) or self.size == 1):
            return UNSUPPORTED
        return NAN


def not_compared(status: str, message: str) -> Metrics:
    """A pair without numbers (missing bench, missing file, shape mismatch...)."""
    return Metrics(status, (message,))


def _dot(x: np.ndarray, y: np.ndarray) -> float:
    """Sum of products without BLAS: on a busy machine BLAS's thread pool costs milliseconds per call on
    the small vectors most APIs have, more than the arithmetic itself."""
    return float(np.einsum("i,i->", x, y))


def compare_arrays(npu: np.ndarray, bench: np.ndarray, tolerance: Optional[Tolerance] = None,
                   dtypes: Optional[Tuple[str, str]] = None) -> Metrics:
    """All metrics of one pair of arrays (any dtype, any shape). ``tolerance`` (default None: not
    counted) gives ``mismatched``, the number of elements outside ``atol + rtol·|b|``. ``dtypes`` (default
    None): the dump's dtype names of the two tensors; elements that hold each one's largest magnitude (or an
    infinity) with one sign on both sides are equal (:data:`LARGEST`)."""
    if npu.size == 0 and bench.size == 0:
        return Metrics(Status.EMPTY, (MSG_EMPTY,), max_abs_err=0.0, max_relative_err=0.0, one_thousandth_ratio=0.0,
                       five_thousandths_ratio=0.0, accumulated_relative_err=0.0, euclidean_relative_distance=0.0,
                       kl_divergence=0.0, error_norm=0.0, bench_norm=0.0, npu_norm=0.0, relative_rms=0.0, scale=0.0,
                       size=0, mismatched=0)
    if npu.shape != bench.shape:
        return not_compared(Status.SHAPE, MSG_SHAPE)
    shape = npu.shape
    if np.iscomplexobj(npu) or np.iscomplexobj(bench):  # both parts count: a conjugate must not pass
        npu, bench = _real_pairs(npu), _real_pairs(bench)
        shape = npu.shape  # worst_index ends with 0 (real part) or 1 (imaginary part)
    bench_eps = float(np.finfo(bench.dtype).eps) if np.issubdtype(bench.dtype, np.floating) else EPS64
    n = npu.astype(np.float64, copy=False).reshape(-1)
    b = bench.astype(np.float64, copy=False).reshape(-1)
    n, b, differ_at = _agreeing_non_finite(n, b)
    if differ_at is not None:
        return Metrics(Status.INF_NAN, (MSG_INF_NAN,), size=int(n.size), worst_index=_index_of(differ_at, shape))
    saturated, messages_in = _saturated_pairs(n, b, dtypes)
    if saturated is not None:
        n = np.where(saturated, 0.0, n)
        b = np.where(saturated, 0.0, b)
    with np.errstate(over="ignore"):  # 1.7e308 - (-1.7e308) is inf: the true difference is beyond range
        abs_err = np.abs(n - b)
    b_abs = np.abs(b)
    worst_flat = int(np.argmax(abs_err))
    max_abs = float(abs_err[worst_flat])
    scale = max(float(b_abs.max()), float(np.abs(n).max()))
    norms = _scaled_norms(n, b, abs_err, max_abs, scale)
    mismatched = None
    if tolerance is not None and not tolerance.allows(norms.error_norm, norms.bench_norm, int(n.size), max_abs,
                                                      scale):
        # Only for a failing pair (it is in its message): one more pass over the data.
        mismatched = int(np.count_nonzero(abs_err > tolerance.atol + tolerance.rtol * b_abs))
    # Legacy rule: where the bench value is 0, eps is added to both sides before dividing, so the
    # difference is unchanged and the divisor becomes eps.
    relative = abs_err / (np.where(b_abs == 0, bench_eps, b_abs) if b_abs.min() == 0 else b_abs)
    max_rel = float(relative.max())
    relative_rms = _relative_rms(relative, abs_err, b_abs)
    # Integer and bool data are judged for equality on the data itself: float64 merges int64 values above 2**53.
    exact_equal = bool(np.array_equal(npu, bench)) if (_is_exact(npu) and _is_exact(bench)) else None
    # Elements off by more than half of their larger side, not both ~0: a gradient flipped at a branch point
    # (provenance.py) is off by all of itself, round-off by little.
    larger = np.maximum(np.abs(n), b_abs)
    gross = int(np.count_nonzero((abs_err > GROSS_SHARE * larger) & (larger > GROSS_FLOOR * scale)))
    common = dict(exact_equal=exact_equal, max_abs_err=max_abs, error_norm=norms.error_norm,
                  bench_norm=norms.bench_norm, npu_norm=norms.npu_norm, relative_rms=relative_rms, gross=gross,
                  scale=scale, size=int(n.size), worst_index=_index_of(worst_flat, shape), mismatched=mismatched)
    if npu.ndim == 0:
        return Metrics(Status.SCALAR, (MSG_SCALAR,) + messages_in, max_relative_err=max_rel, **common)
    return _tensor_metrics(norms, b_abs, relative, max_rel, list(messages_in), common)


def _agreeing_non_finite(n: np.ndarray, b: np.ndarray) -> Tuple[np.ndarray, np.ndarray, Optional[int]]:
    """``(n, b, None)`` with the infinities and NaNs both sides hold at the same places, of the same kind, set
    to 0 (those elements agree; the rest is compared); ``(n, b, index)`` with the first flat index where they
    differ."""
    with np.errstate(invalid="ignore", over="ignore"):
        all_finite = bool(np.isfinite(n.sum()) and np.isfinite(b.sum()))
    if not all_finite:
        all_finite = bool(np.isfinite(n).all() and np.isfinite(b).all())  # a sum can overflow on finite data
    if all_finite:  # one cheap reduction per side; the masks only when needed
        return n, b, None
    n_bad = ~np.isfinite(n)
    b_bad = ~np.isfinite(b)
    differ = (np.isnan(n) != np.isnan(b)) | (np.isposinf(n) != np.isposinf(b)) | (np.isneginf(n) != np.isneginf(b))
    if differ.any():
        return n, b, int(np.argmax(differ))
    return np.where(n_bad, 0.0, n), np.where(b_bad, 0.0, b), None


class _Norms(NamedTuple):
    """The data divided by ``unit`` (1.0 unless squares would under- or overflow), their norms, and the norms
    at the data's own scale."""

    unit: float
    n_unit: np.ndarray
    b_unit: np.ndarray
    err_unit: np.ndarray
    npu_unit_norm: float
    bench_unit_norm: float
    error_unit_norm: float
    npu_norm: float
    bench_norm: float
    error_norm: float


def _scaled_norms(n: np.ndarray, b: np.ndarray, abs_err: np.ndarray, max_abs: float, scale: float) -> _Norms:
    """Norms by sums of squares; for data near the ends of float64's range (1e-30 vectors, 1e200 values)
    the squares would under/overflow, so such data is scaled to magnitude ~1 first."""
    # The scaled norms are kept: near float64's maximum a norm itself is beyond range (inf) while the
    # cosine and ratios of the scaled data are exact.
    unit = scale if (scale > 0 and not _SAFE_SQUARES[0] < scale < _SAFE_SQUARES[1]) else 1.0
    n_unit, b_unit, err_unit = (n, b, abs_err) if unit == 1.0 else (n / unit, b / unit, abs_err / unit)
    if not math.isfinite(max_abs):  # n - b overflowed (1.7e308 and -1.7e308): the scaled difference does not
        err_unit = np.abs(n_unit - b_unit)
    with np.errstate(over="ignore"):
        bench_unit_norm = math.sqrt(_dot(b_unit, b_unit))
        npu_unit_norm = math.sqrt(_dot(n_unit, n_unit))
        error_unit_norm = math.sqrt(_dot(err_unit, err_unit))
        return _Norms(unit, n_unit, b_unit, err_unit, npu_unit_norm, bench_unit_norm, error_unit_norm,
                      npu_unit_norm * unit, bench_unit_norm * unit, error_unit_norm * unit)


def _tensor_metrics(norms: _Norms, b_abs: np.ndarray, relative: np.ndarray, max_rel: float, messages: list,
                    common: dict) -> Metrics:
    """The metrics of a pair of tensors with at least one dimension: ``common`` and the cosine, the ratios and
    the divergence the legacy columns hold."""
    # The guide's rule: both norms below float64's epsilon hold nothing but round-off, so their cosine (a
    # random angle between two noise vectors) says nothing: 1.0.
    negligible = norms.npu_unit_norm * norms.unit < EPS64 and norms.bench_norm < EPS64
    cosine = _cosine(norms.n_unit, norms.b_unit, norms.npu_unit_norm, norms.bench_unit_norm, messages, negligible)
    if math.isnan(max_rel):
        max_rel_value: Optional[float] = None
        messages.append(MSG_REL_NAN)
    else:
        max_rel_value = max_rel
    count = float(relative.size)
    # Ratios of sums on the scaled data: sums of values near 1e308 would overflow (inf / inf = NaN).
    b_unit_abs = b_abs if norms.unit == 1.0 else np.abs(norms.b_unit)
    bench_abs_sum = float(b_unit_abs.sum())
    return Metrics(
        Status.COMPARED, tuple(messages), cosine=cosine, max_relative_err=max_rel_value,
        one_thousandth_ratio=float(np.count_nonzero(relative < 0.001)) / count,
        five_thousandths_ratio=float(np.count_nonzero(relative < 0.005)) / count,
        accumulated_relative_err=float(norms.err_unit.sum()) / bench_abs_sum if bench_abs_sum > 0 else None,
        euclidean_relative_distance=(norms.error_unit_norm / norms.bench_unit_norm if norms.bench_unit_norm > 0
                                     else None),
        kl_divergence=_kl_divergence(np.abs(norms.n_unit), b_unit_abs, bench_abs_sum), **common)


def _saturated_pairs(n: np.ndarray, b: np.ndarray, dtypes: Optional[Tuple[str, str]]):
    """``(mask, messages)``: the elements at their dtype's largest magnitude (or already zeroed infinities'
    places are not counted) with the same sign on both sides, and the row message saying how many; ``(None,
    ())`` when there are none (or the dtypes are unknown or equal: then such values compare as they are)."""
    if dtypes is None or dtypes[0] == dtypes[1]:
        return None, ()
    largest_n, largest_b = LARGEST.get(dtypes[0]), LARGEST.get(dtypes[1])
    if largest_n is None or largest_b is None:
        return None, ()
    n_top, b_top = np.abs(n) >= largest_n, np.abs(b) >= largest_b
    if not (n_top.any() and b_top.any()):
        return None, ()
    mask = n_top & b_top & (np.sign(n) == np.sign(b))
    count = int(np.count_nonzero(mask))
    return (mask, (MSG_SATURATED.format(count),)) if count else (None, ())


def _relative_rms(relative: np.ndarray, abs_err: np.ndarray, b_abs: np.ndarray) -> float:
    """The root mean square of the element-wise relative errors, each at most :data:`RELATIVE_CAP` (an element
    zero on the bench side and not on the NPU side counts the cap): how far the typical element is off, small
    ones as much as large ones, which is what a division or a root passes on."""
    capped = np.minimum(relative, RELATIVE_CAP)
    if b_abs.min() == 0:
        capped = np.where(b_abs == 0, np.where(abs_err > 0, RELATIVE_CAP, 0.0), capped)
    with np.errstate(invalid="ignore"):
        value = float(np.sqrt(_dot(capped, capped) / capped.size))
    return value if math.isfinite(value) else RELATIVE_CAP


def _real_pairs(array: np.ndarray) -> np.ndarray:
    """A complex array as its (real, imaginary) float pairs on a new last axis; a real one with zero
    imaginary parts (a complex tensor compared with a real one)."""
    if np.iscomplexobj(array):
        return np.stack((array.real, array.imag), axis=-1)
    return np.stack((array, np.zeros_like(array)), axis=-1)


def _is_exact(array: np.ndarray) -> bool:
    return array.dtype.kind in "biu"


def _index_of(flat: int, shape: Tuple[int, ...]) -> Tuple[int, ...]:
    return tuple(int(i) for i in np.unravel_index(flat, shape)) if shape else ()


def _cosine(n: np.ndarray, b: np.ndarray, n_norm: float, b_norm: float, messages: list,
            negligible: bool = False) -> Optional[float]:
    """The true cosine of data already scaled to magnitude ~1 (so tiny and huge tensors are exact); 1.0 when
    ``negligible`` (default False): both unscaled norms are below float64's epsilon."""
    if n.size == 1:
        messages.append(MSG_ONE_ELEMENT)
        return None
    if negligible or (n_norm == 0 and b_norm == 0):
        return 1.0
    if n_norm == 0:
        messages.append(MSG_NPU_ZERO)
        return None
    if b_norm == 0:
        messages.append(MSG_BENCH_ZERO)
        return None
    cosine = _dot(n, b) / (n_norm * b_norm)
    if math.isnan(cosine):
        messages.append(MSG_COS_NAN)
        return None
    return 1.0 if cosine > 0.99999 else max(-1.0, cosine)  # rounding can take it just past -1


def _kl_divergence(n_abs: np.ndarray, b_abs: np.ndarray, b_sum: float) -> Optional[float]:
    """KL(bench || npu) of the magnitude distributions |b|/sum|b| and |n|/sum|n| (MindStudio's KLD idea
    for tensors that are not probability vectors). 0 means the same shape of distribution."""
    n_sum = float(n_abs.sum())
    if n_sum <= 0 or b_sum <= 0:
        return None
    p = np.maximum(b_abs / b_sum, KL_FLOOR)
    q = np.maximum(n_abs / n_sum, KL_FLOOR)
    return max(0.0, _dot(p, np.log(p / q)))
