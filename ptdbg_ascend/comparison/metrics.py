"""Metrics on one NPU/bench tensor pair, vectorized numpy in float64 (never torch unless a ``.pt`` is read).

Special cases and messages follow the original tool (reference §9.4), with its bugs fixed: every message
is kept (they were overwritten), a missing file is a row message (it aborted the compare), a dtype
mismatch reaches the CSV. Cell values are floats or the legacy words below.
"""

from __future__ import annotations

import math
from typing import NamedTuple, Optional, Tuple, Union

import numpy as np

Cell = Union[float, str]
UNSUPPORTED = "unsupported"
NAN = "Nan"
NOT_AVAILABLE = "N/A"
SHAPE_UNMATCHED = "shape unmatched"

MSG_NO_BENCH = "No bench data matched."
MSG_SCALAR = "This is type of scalar data, can not compare."
MSG_EMPTY = "This is empty data, can not compare."
MSG_SHAPE = "Shape of NPU and bench Tensor do not match. Skipped."
MSG_DTYPE = "Dtype of NPU and bench Tensor do not match."
MSG_INF_NAN = "The position of inf or nan in NPU and bench Tensor do not match."
MSG_ONE_ELEMENT = "This tensor is scalar."
MSG_NPU_ZERO = "Cannot compare by Cosine Similarity, All the data is Zero in npu dump data."
MSG_BENCH_ZERO = "Cannot compare by Cosine Similarity, All the data is Zero in Bench dump data."
MSG_COS_NAN = "Cannot compare by Cosine Similarity, the dump data has NaN."
MSG_REL_NAN = "Cannot compare by MaxRelativeError, the data contains nan in dump data."

EPS64 = float(np.finfo(np.float64).eps)
# KL divergence: probabilities below this are clamped so log() stays finite.
KL_FLOOR = 1e-12


class Metrics(NamedTuple):
    """One row's metrics; the first five are the legacy columns."""

    cosine: Cell
    max_abs_err: Cell
    max_relative_err: Cell
    one_thousandth_ratio: Cell
    five_thousandths_ratio: Cell
    accumulated_relative_err: Cell = NAN
    euclidean_relative_distance: Cell = NAN
    kl_divergence: Cell = NAN
    messages: Tuple[str, ...] = ()

    def with_message(self, message: str) -> "Metrics":
        return self._replace(messages=self.messages + (message,))


def _dot(x: np.ndarray, y: np.ndarray) -> float:
    """Sum of products without BLAS: on a busy machine BLAS's thread pool costs milliseconds per call on
    the small vectors most APIs have, more than the arithmetic itself."""
    return float(np.einsum("i,i->", x, y))


def uniform(value: Cell, message: str) -> Metrics:
    """Every metric ``value`` with one message (missing bench, missing file, shape mismatch...)."""
    return Metrics(value, value, value, value, value, value, value, value, (message,))


def load_tensor(path: str) -> np.ndarray:
    """Load a dumped tensor: ``.npy`` with allow_pickle=False, ``.pt`` with torch (lazily, weights_only)."""
    if path.endswith(".pt"):
        import torch  # only msprobe tensor dumps need it

        try:
            tensor = torch.load(path, map_location="cpu", weights_only=True)
        except TypeError:  # torch < 1.13 has no weights_only
            tensor = torch.load(path, map_location="cpu")
        if not isinstance(tensor, torch.Tensor):
            raise ValueError("{} does not hold a tensor".format(path))
        if tensor.dtype == torch.bfloat16:
            tensor = tensor.float()
        return tensor.detach().numpy()
    return np.load(path, allow_pickle=False)


def compare_arrays(npu: np.ndarray, bench: np.ndarray) -> Metrics:
    """All metrics of one pair of arrays (any dtype, any shape)."""
    if npu.size == 0 and bench.size == 0:
        return Metrics(UNSUPPORTED, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, (MSG_EMPTY,))
    if npu.shape != bench.shape:
        return uniform(SHAPE_UNMATCHED, MSG_SHAPE)
    bench_eps = float(np.finfo(bench.dtype).eps) if np.issubdtype(bench.dtype, np.floating) else EPS64
    n = npu.astype(np.float64, copy=False).reshape(-1)
    b = bench.astype(np.float64, copy=False).reshape(-1)
    with np.errstate(invalid="ignore", over="ignore"):
        all_finite = bool(np.isfinite(n.sum()) and np.isfinite(b.sum()))
    if not all_finite:  # one cheap reduction per side; the masks only when needed
        n_bad = ~np.isfinite(n)
        b_bad = ~np.isfinite(b)
        same = np.array_equal(np.isnan(n), np.isnan(b)) and np.array_equal(np.isposinf(n), np.isposinf(b)) \
            and np.array_equal(np.isneginf(n), np.isneginf(b))
        if not same:
            return uniform(NOT_AVAILABLE, MSG_INF_NAN)
        # Same positions and kinds: those elements agree, so zero them and compare the rest.
        n = np.where(n_bad, 0.0, n)
        b = np.where(b_bad, 0.0, b)
    abs_err = np.abs(n - b)
    b_abs = np.abs(b)
    # Legacy rule: where the bench value is 0, eps is added to both sides before dividing, so the
    # difference is unchanged and the divisor becomes eps.
    relative = abs_err / (np.where(b_abs == 0, bench_eps, b_abs) if b_abs.min() == 0 else b_abs)
    max_abs = float(abs_err.max())
    max_rel = float(relative.max())
    if npu.ndim == 0:
        return Metrics(UNSUPPORTED, max_abs, max_rel, NAN, NAN, NAN, NAN, NAN, (MSG_SCALAR,))
    messages = []
    n_norm = math.sqrt(_dot(n, n))
    b_norm = math.sqrt(_dot(b, b))
    cosine = _cosine(n, b, n_norm, b_norm, messages)
    if math.isnan(max_rel):
        max_rel_cell = NAN  # type: Cell
        messages.append(MSG_REL_NAN)
    else:
        max_rel_cell = max_rel
    count = float(n.size)
    bench_abs_sum = float(b_abs.sum())
    accumulated = float(abs_err.sum()) / bench_abs_sum if bench_abs_sum > EPS64 else NAN
    euclidean = math.sqrt(_dot(abs_err, abs_err)) / b_norm if b_norm > EPS64 else NAN
    return Metrics(
        cosine, max_abs, max_rel_cell,
        float(np.count_nonzero(relative < 0.001)) / count,
        float(np.count_nonzero(relative < 0.005)) / count,
        accumulated, euclidean, _kl_divergence(np.abs(n), b_abs, bench_abs_sum), tuple(messages),
    )


def _cosine(n: np.ndarray, b: np.ndarray, n_norm: float, b_norm: float, messages: list) -> Cell:
    if n.size == 1:
        messages.append(MSG_ONE_ELEMENT)
        return UNSUPPORTED
    if n_norm <= EPS64 and b_norm <= EPS64:
        return 1.0
    if n_norm <= EPS64:
        messages.append(MSG_NPU_ZERO)
        return NAN
    if b_norm <= EPS64:
        messages.append(MSG_BENCH_ZERO)
        return NAN
    cosine = _dot(n, b) / (n_norm * b_norm)
    if math.isnan(cosine):
        messages.append(MSG_COS_NAN)
        return NAN
    return 1.0 if cosine > 0.99999 else cosine


def _kl_divergence(n_abs: np.ndarray, b_abs: np.ndarray, b_sum: float) -> Cell:
    """KL(bench || npu) of the magnitude distributions |b|/sum|b| and |n|/sum|n| (MindStudio's KLD idea
    for tensors that are not probability vectors). 0 means the same shape of distribution."""
    n_sum = float(n_abs.sum())
    if n_sum <= EPS64 or b_sum <= EPS64:
        return NAN
    p = np.maximum(b_abs / b_sum, KL_FLOOR)
    q = np.maximum(n_abs / n_sum, KL_FLOOR)
    return max(0.0, _dot(p, np.log(p / q)))


def compare_files(npu_path: Optional[str], bench_path: Optional[str]) -> Metrics:
    """Load and compare; a file that cannot be loaded is a row message naming it, never an exception."""
    arrays = []
    for path in (npu_path, bench_path):
        if path is None:
            return uniform(NAN, "Dump file: {} not found.".format(path))
        try:
            arrays.append(load_tensor(path))
        except FileNotFoundError:
            return uniform(NAN, "Dump file: {} not found.".format(path))
        except (OSError, ValueError, RuntimeError) as error:
            return uniform(NAN, "Dump file: {} cannot be read ({}).".format(path, error))
    return compare_arrays(arrays[0], arrays[1])
