"""Reduced precision at the same dtype, and the calls that only amplify it (the advisor's diagnosis).

An accelerator's TF32/HF32 mode computes float32 convolutions and matrix products from inputs rounded to a
10-bit mantissa; a kernel may compute a float32 op in bfloat16 inside. Both runs then record float32
everywhere, so no dtype differs, and the first call that *fails* is usually a later one that subtracts or
normalises (BatchNorm removes the mean, softmax the maximum): its output error is large relative to its
output, yet only its inputs' small error relative to their spread, made visible.

- :func:`reduced_precision_root` finds the first call whose inputs match (equal, or within
  :data:`INPUT_ROUNDOFF`; a backward call's forward inputs too) and whose output differs by the size a
  reduced mode gives: a relative error in
  ``[REDUCED_LOW, REDUCED_HIGH]``, at least :data:`GAIN` times its inputs' and beyond the absolute round-off
  floor of the call, and noise-like (:data:`NOISE_SHARE`: a wrong scale is no rounding). Float32 calls on
  both sides only (TF32/HF32 and bf16 kernels replace float32 math).
- :func:`explained_by_inputs` tells whether a failing call's output error is explained by its inputs' error:
  for an amplifier (:data:`AMPLIFIERS`) relative to the inputs' spread (std from the statistics; the
  absolute error for softmax, whose output moves with the logits' absolute error); for any other call
  relative to the inputs' magnitude.

Full mode only (errors need the tensors); torch-free.
"""

from __future__ import annotations

import math
from typing import Dict, List, NamedTuple, Optional, Sequence

from ptdbg_ascend.comparison import api_classes
from ptdbg_ascend.formats.records import CallRecord
from ptdbg_ascend.comparison.rows import CompareRow
from ptdbg_ascend.comparison.tolerances import call_precision
from ptdbg_ascend.comparison.transfer import spread as transfer_spread
from ptdbg_ascend.formats.naming import api_of, split_call_name
from ptdbg_ascend.formats.reason import Carried

# Relative errors of a reduced mode: TF32/HF32 (10-bit mantissa) gives ~2^-12..2^-10 on a product of
# rounded inputs, bfloat16 (8 bits) ~2^-9..2^-8; below 2^-15 (256 float32 ulps) is float32's own round-off
# (summation order), above 2^-6 (1.6 %) is a wrong result (a planted x 1.02), not a rounding mode.
REDUCED_LOW = 2.0 ** -15
REDUCED_HIGH = 2.0 ** -6
# Above this relative error the size is that of an 8-bit mantissa rather than a 10-bit one.
BF16_LIKE = 2.0 ** -9
# An element-wise call is "bfloat16-like" only when no element is further off than one bfloat16 ulp.
ROUNDED_ELEMENT = 2.0 ** -7
TF32_LABEL, BF16_LABEL = "TF32/HF32-like", "bfloat16-like"
# The APIs a TF32/HF32 mode computes from rounded inputs (convolutions and matrix products). An error of
# TF32 size elsewhere is no such mode (e.g. an optimizer step with another learning rate changes a weight
# by ~1e-4 of itself): only a kernel computing in bfloat16 reaches other APIs, at bfloat16 size.
MATMUL_CLASS = frozenset(("conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d",
                          "convolution", "_convolution", "matmul", "mm", "bmm", "addmm", "addbmm", "baddbmm",
                          "linear", "einsum", "tensordot", "scaled_dot_product_attention", "chain_matmul",
                          "npu_fusion_attention", "npu_linear", "__matmul__", "__rmatmul__"))
# Inputs "match" when equal or within this relative error (float32 round-off of a reordered sum).
INPUT_ROUNDOFF = 2.0 ** -17
# The root's output error is at least this many times its inputs', and this many times the absolute
# round-off floor (atol per element) of the call: noise of a value that is zero up to round-off is no mode.
GAIN = 8.0
# An output error this many times its inputs' (relative to their spread or magnitude) is made by the call.
AMPLIFICATION = 10.0
# APIs that subtract or normalise: their output error is their inputs' error relative to the spread.
AMPLIFIERS = ("sub", "rsub", "__sub__", "__rsub__", "__isub__", "subtract", "addcdiv", "div", "__truediv__",
              "__rtruediv__", "__div__", "true_divide", "divide")  # besides the normalisation classes
FLOAT32 = ("torch.float32", "torch.float", "float32")
# A rounding error is noise, uncorrelated with the values: it hardly changes the norm (| |n| - |b| | is
# ~|n - b| / sqrt(N)), where a wrong scale (x 1.003) changes it by all of |n - b|. Above this share of the
# error norm, the error is no rounding mode.
NOISE_SHARE = 0.5
# APIs with a branch point (a kink or a selection): round-off in the input moves a few elements across it, so
# their gradients differ by flips (``provenance``), never by a reduced mode.
BRANCH_APIS = ("relu", "relu6", "leaky_relu", "hardtanh", "threshold", "clamp", "clip", "hardsigmoid", "hardswish",
               "max_pool", "adaptive_max_pool")


def is_branch_backward(call_name: str) -> bool:
    """Whether ``call_name`` is the backward of an API with a branch point (:data:`BRANCH_APIS`)."""
    return call_name.endswith("_backward") and api_of(call_name).rstrip("_").startswith(BRANCH_APIS)


class Reduced(NamedTuple):
    """A call computing below its dtype's precision: its output row index, the call, the error it shows,
    its precision and the label of the reduced mode the error's size fits."""

    index: int
    call: CallRecord
    relative_error: float
    precision: str
    label: str

    def text(self) -> str:
        mantissa = "10-bit" if self.label == TF32_LABEL else "8-bit"
        return "{} computes below {} precision ({}): its inputs match, its output differs by a relative error " \
               "{:.1e}, the size a {} mantissa gives, not {}'s round-off".format(
                   self.call.name, _short(self.precision), self.label, self.relative_error, mantissa,
                   _short(self.precision))


def _short(dtype: str) -> str:
    return dtype.replace("torch.", "")


def _rows_by_call(rows: Sequence[CompareRow], end: int) -> Dict[int, List[int]]:
    found: Dict[int, List[int]] = {}
    for index, row in enumerate(rows[:end]):
        if row.pair.npu_call is not None:
            found.setdefault(id(row.pair.npu_call), []).append(index)
    return found


def _relative(row: CompareRow) -> Optional[float]:
    return row.judgement.relative_error if row.metrics is not None and row.compared else None


def _input_matches(row: CompareRow) -> bool:
    if row.metrics is None or not row.compared:
        return False
    if row.metrics.max_abs_err == 0.0:
        return True
    relative = _relative(row)
    return relative is not None and relative <= INPUT_ROUNDOFF


def _reduced_output(row: CompareRow, input_error: float) -> bool:
    relative, metrics, tolerance = _relative(row), row.metrics, row.tolerance
    if relative is None or tolerance is None or tolerance.exact or not REDUCED_LOW <= relative <= REDUCED_HIGH:
        return False
    rms = metrics.error_norm / math.sqrt(max(metrics.size or 1, 1))
    return _noise_like(row) and relative >= GAIN * input_error and rms > GAIN * tolerance.atol


def _noise_like(row: CompareRow) -> bool:
    """Whether the row's error leaves the norm (nearly) as it is, as rounding does; True when the dump has
    no norms to tell."""
    npu_norm, bench_norm = row.npu.statistics[3], row.bench.statistics[3]
    if npu_norm is None or bench_norm is None or not (math.isfinite(npu_norm) and math.isfinite(bench_norm)):
        return True
    return abs(npu_norm - bench_norm) <= NOISE_SHARE * row.metrics.error_norm


def reduced_precision_root(rows: Sequence[CompareRow], end: int) -> Optional[Reduced]:
    """The first call before row ``end`` computing below its dtype's precision (see the module docstring),
    or None."""
    members = _rows_by_call(rows, end)
    checked = set()
    for index, row in enumerate(rows[:end]):
        call = row.pair.npu_call
        if row.side != "output" or row.one_sided or call is None or id(call) in checked or \
                is_branch_backward(call.name):
            continue
        checked.add(id(call))
        precision = call_precision(r.dtype for r in call.records)
        bench_precision = call_precision(r.dtype for r in row.pair.bench_call.records)
        if precision not in FLOAT32 or bench_precision not in FLOAT32:
            continue
        group = [rows[i] for i in members[id(call)]]
        inputs = [r for r in group if r.side == "input" and not r.one_sided]
        if not inputs or not all(_input_matches(r) for r in inputs):
            continue
        if call.name.endswith("_backward"):  # a gradient depends on the forward inputs as much as on its own
            saved = [r for r in carried_inputs(rows[:end], call) if r.pair.npu_call is not call]
            if not all(_input_matches(r) for r in saved):
                continue
            inputs = inputs + saved
        input_error = max(_relative(r) or 0.0 for r in inputs)
        outputs = [(i, rows[i]) for i in members[id(call)] if rows[i].side == "output" and not rows[i].one_sided
                   and _reduced_output(rows[i], input_error)]
        if outputs:
            where, worst = max(outputs, key=lambda item: _relative(item[1]) or 0.0)
            relative = _relative(worst) or 0.0
            if api_of(call.name) not in MATMUL_CLASS and (relative <= BF16_LIKE or not _rounded_alike(worst)):
                continue
            return Reduced(where, call, relative, precision, BF16_LABEL if relative > BF16_LIKE else TF32_LABEL)
    return None


def _rounded_alike(row: CompareRow) -> bool:
    """Whether every element of an element-wise call's output is within one bfloat16 ulp of the bench
    (relatively) and none is grossly off: what an output computed or rounded in bfloat16 looks like. Another
    learning rate, a wrong constant, moves small elements by much more of themselves."""
    metrics = row.metrics
    return metrics.max_relative_err is not None and metrics.max_relative_err <= ROUNDED_ELEMENT and \
        not metrics.gross


def carried_inputs(rows: Sequence[CompareRow], call: CallRecord) -> List[CompareRow]:
    """The input rows of ``call``, and for a backward call also those of its forward call (what the
    backward saved from the forward: a relu mask, a norm's statistics, is not among its recorded inputs)."""
    names = {call.name}
    parts = split_call_name(call.name)
    if parts.direction == "backward":
        names.add(call.name[: -len("backward")] + "forward")
    return [r for r in rows if r.pair.npu_call is not None and r.pair.npu_call.name in names and r.side == "input"
            and not r.one_sided and r.compared and r.metrics is not None]


def _kind(call_name: str) -> str:
    prefix, _, api = split_call_name(call_name).api.partition("_")
    return api_classes.api_class(prefix, api)


def _amplifies(call_name: str) -> bool:
    """Whether a call subtracts or normalises (its class, not a substring of its name: a module path such as
    ``layers.0.sublayer`` is no ``sub``)."""
    return _kind(call_name) in (api_classes.NORMALIZATION, api_classes.SOFTMAX, api_classes.SPREAD) or \
        api_of(call_name).rstrip("_") in AMPLIFIERS


def explained_by_inputs(row: CompareRow, inputs: Sequence[CompareRow]) -> Optional[str]:
    """Why the failing output ``row`` only carries its ``inputs``' error (a phrase for the advice), or None
    when the call made the error itself (or it cannot be told: summary mode, inputs without an error)."""
    carried = carried_error(row, inputs)
    return None if carried is None else carried_text(carried)


def carried_text(carried: Carried) -> str:
    """The phrase of :func:`explained_by_inputs` for the allowance numbers ``carried``."""
    if carried.spread:
        return "it subtracts or normalises, and its inputs' error is {:.1e} of their spread; its output's " \
               "{:.1e} is that error made visible".format(carried.input_error, carried.output_error)
    return "its inputs already carry a relative error of {:.1e}, its output {:.1e}".format(
        carried.input_error, carried.output_error)


def carried_error(row: CompareRow, inputs: Sequence[CompareRow]) -> Optional[Carried]:
    """The allowance numbers when the failing output ``row`` only carries its ``inputs``' error (within
    ``AMPLIFICATION`` times it: relative to their spread for a call that subtracts or normalises), or None
    when the call made the error itself (or it cannot be told: summary mode, inputs without an error)."""
    after = _relative(row)
    carrying = [r for r in inputs if r.metrics is not None and r.metrics.error_norm]
    if after is None or not carrying:
        return None
    if _amplifies(row.pair.npu_call.name):
        before = 0.0
        for r in carrying:
            rms = r.metrics.error_norm / math.sqrt(max(r.metrics.size or 1, 1))
            spread = transfer_spread(r.bench)
            if spread:
                before = max(before, rms / spread)
            if _kind(row.pair.npu_call.name) == api_classes.SOFTMAX:  # shift-invariant: the absolute error
                before = max(before, rms)
        if before > 0 and after <= AMPLIFICATION * before:
            return Carried(before, after, True)
        return None
    before = max(_relative(r) or 0.0 for r in carrying)
    if before > 0 and after <= AMPLIFICATION * before:
        return Carried(before, after, False)
    return None
