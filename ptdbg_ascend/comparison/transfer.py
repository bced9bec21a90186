"""How an error passes through each class of API (:mod:`~ptdbg_ascend.comparison.api_classes`): from the
measured errors of a call's inputs (:class:`Measured`, one per judged row) to the error its output may carry,
``(reference, carried)``: the norm the output would have if its terms did not cancel, and the error norm its
inputs' errors give through the call. One rule per class (:data:`RULES`); a class without one, or a rule that
finds too little in the dump (a factor not recorded), leaves it to the general rule of
:mod:`~ptdbg_ascend.comparison.propagation`. The reasons for each rule are in its docstring and in
``doc/compare_guide.md`` (Verdicts).

Torch-free.
"""

from __future__ import annotations

import math
from typing import Callable, Dict, List, NamedTuple, Optional, Tuple

from ptdbg_ascend.comparison import api_classes as classes
from ptdbg_ascend.comparison.metrics import RELATIVE_CAP
from ptdbg_ascend.formats.records import TensorRecord
from ptdbg_ascend.comparison.rows import CompareRow

# How many times each input's norm-wise relative error reaches a quotient's output. A root halves every
# element's relative error, but weighs small elements more than its input's norm does (sqrt(v) of Adam's
# second moments: 0.83 % out of 0.69 % in, measured), so it is counted once, not half.
_QUOTIENT_POWERS = {"sqrt": (1.0,), "rsqrt": (1.0,), "reciprocal": (1.0,)}
_DEFAULT_QUOTIENT = (1.0, 1.0)
# A quotient's gradient raises its forward tensors to at most this power (rsqrt's: y ** 3).
QUOTIENT_GRADIENT_POWER = 3.0
# pow/square: the exponent is no tensor of the dump; 2 (square, the usual case) is assumed.
POWER_EXPONENT = 2.0
# Activation and periodic gradients move with their input through the second derivative, at most ~1.
SECOND_DERIVATIVE = 1.0
# Dtypes whose narrow exponent range loses the relative precision of small values (subnormals, underflow):
# there, a division or a root passes on its inputs' element-wise relative errors, not their norms'.
NARROW_RANGE = frozenset(("torch.float16", "torch.half", "torch.float8_e4m3fn", "torch.float8_e4m3fnuz",
                          "torch.float8_e5m2", "torch.float8_e5m2fnuz"))


class Measured:
    """The numbers of one judged row that propagation uses."""

    __slots__ = ("bench", "index", "error", "norm", "npu_norm", "size", "worst", "scale", "relative_rms",
                 "max_relative", "shape", "statistics", "dtype")

    def __init__(self, row: CompareRow) -> None:
        metrics = row.metrics
        # Not the row: it would keep every row's metrics alive until the last row is judged.
        self.bench = row.bench
        self.index = record_index(row)  # of ..._input.i / ..._output.i
        self.error = metrics.error_norm
        self.norm = metrics.bench_norm or 0.0
        self.npu_norm = metrics.npu_norm if metrics.npu_norm is not None else self.norm
        self.size = max(int(metrics.size or 0), 1)
        self.worst = metrics.max_abs_err or 0.0
        self.scale = metrics.scale or 0.0
        self.relative_rms = metrics.relative_rms if metrics.relative_rms is not None else 0.0
        self.max_relative = min(metrics.max_relative_err, RELATIVE_CAP) if metrics.max_relative_err is not None \
            else RELATIVE_CAP
        self.shape = tuple(row.bench.shape)
        self.statistics = row.bench.statistics
        self.dtype = row.npu.dtype

    @property
    def relative(self) -> float:
        """Error norm over bench norm (inf for an error on an all-zero bench)."""
        if self.norm > 0:
            return self.error / self.norm
        return 0.0 if self.error == 0 else math.inf

    @property
    def rms(self) -> float:
        return self.norm / math.sqrt(self.size)

    @property
    def spread_relative(self) -> float:
        """The error's root mean square over the bench tensor's standard deviation: what a normalisation
        makes of it (:func:`spread`); the plain relative error when the spread is unknown or zero."""
        deviation = spread(self.bench)
        if deviation:
            return (self.error / math.sqrt(self.size)) / deviation
        return self.relative

    @property
    def same_sign(self) -> bool:
        """Whether every bench element has one sign (from the statistics): then its sums cannot cancel."""
        maximum, minimum = self.statistics[0], self.statistics[1]
        return (minimum is not None and minimum >= 0) or (maximum is not None and maximum <= 0)

    def spread_to(self, size: int) -> float:
        """How many times an element of this tensor is used in an output of ``size`` elements (broadcast)."""
        return math.sqrt(max(1.0, size / self.size))


def spread(record: TensorRecord) -> Optional[float]:
    """The standard deviation of a tensor from its statistics (``max - min`` when that is all there is);
    None when the statistics cannot tell."""
    maximum, minimum, mean, norm = record.statistics
    size = 1
    for extent in record.shape:
        size *= extent
    if norm is not None and mean is not None and size > 1 and math.isfinite(norm) and math.isfinite(mean):
        variance = norm * norm / size - mean * mean
        if variance > 0:
            return math.sqrt(variance)
    if maximum is not None and minimum is not None and math.isfinite(maximum - minimum) and maximum > minimum:
        return maximum - minimum
    return None


def record_index(row: CompareRow) -> int:
    """``i`` of ``..._input.i`` / ``..._output.i`` (0 for a lone ``_output``, -1 when unparsable)."""
    call = row.pair.npu_call
    suffix = row.npu.name[len(call.name):] if call is not None and row.npu.name.startswith(call.name) else ""
    head, _, rest = suffix.partition(".")
    if head not in ("_input", "_output"):
        return -1
    if not rest:
        return 0
    first = rest.split(".", 1)[0]
    return int(first) if first.isdigit() and len(first) < 6 else -1


class CallTensors:
    """The judged rows of one NPU call, by side and index."""

    def __init__(self) -> None:
        self.inputs: Dict[int, Measured] = {}
        self.all_inputs: List[Measured] = []
        self.outputs: List[Measured] = []
        self.unreadable = False


class Through(NamedTuple):
    """What a rule sees of one output row: the output, its API (without prefix), its call's judged rows and,
    for a backward call, its forward call's (None for a forward call); the largest relative error and the
    absolute errors (each counted as often as a broadcast uses it) of all those inputs, and the larger of the
    output's two norms."""

    out: Measured
    api: str
    call: CallTensors
    forward: Optional[CallTensors]
    backward: bool
    relative_in: float
    absolute_in: float
    largest: float


def _contraction(t: Through) -> Optional[Tuple[float, float]]:
    """A sum of products: its norm without cancellation is ``sqrt(terms) * rms(p) * rms(q)``, and it carries
    the two factors' relative errors added in quadrature (a bias its error). A gradient with respect to a
    factor is the same sum with the output's gradient in that factor's place; the bias gradient sums the
    output's gradient, coherently at worst, and so may a weight's gradient (a layer with a bias: linear, conv,
    addmm)."""
    layout = classes.operands(t.api)
    if layout is None:
        return None
    factors = t.forward.inputs if t.forward is not None else t.call.inputs
    p, q = factors.get(layout.p), factors.get(layout.q)
    if p is None or q is None:
        return None
    produced = (t.forward.outputs if t.forward is not None else t.call.outputs)
    terms = (produced[0].size if produced else t.out.size) * _sum_length(layout.terms, p, q)
    if not t.backward:
        reference = math.sqrt(terms) * p.rms * q.rms
        carried = max(reference, t.largest) * math.hypot(p.relative, q.relative)
        bias = factors.get(layout.bias) if layout.bias is not None else None
        if bias is not None:
            carried += bias.error * bias.spread_to(t.out.size)
        return reference, carried
    gradient = t.call.inputs.get(0)
    if gradient is None:
        return None
    index = t.out.index
    other = q if index == layout.p else p if index == layout.q else None
    if other is None:  # the bias: a sum of the output's gradient over what the bias was added to
        return gradient.norm, gradient.error * math.sqrt(max(1.0, gradient.size / t.out.size))
    reference = math.sqrt(terms) * gradient.rms * other.rms
    carried = max(reference, t.largest) * math.hypot(gradient.relative, other.relative)
    if index == layout.q and layout.bias is not None:
        # A weight's gradient sums over every token; errors with a common source (the rounding of a weight that
        # every token used) add up coherently there, up to the Cauchy-Schwarz bound.
        carried = max(carried, gradient.error * other.norm + gradient.norm * other.error)
    return reference, carried


def _sum_length(rule: str, p: Measured, q: Measured) -> int:
    """How many products each output of a contraction sums (from the factors' shapes)."""
    if rule == "q_last":
        return max(q.shape[-1], 1) if q.shape else 1
    if rule == "p_last":
        return max(p.shape[-1], 1) if p.shape else 1
    if rule in ("conv", "conv_transpose"):
        shape = q.shape
        if len(shape) < 2:
            return 1
        extents = shape[1:] if rule == "conv" else (shape[0],) + shape[2:]
        return max(math.prod(extents), 1)
    return 1


def _additive(t: Through) -> Optional[Tuple[float, float]]:
    """Sums, concatenations, copies, casts: errors add up (each input counted as often as a broadcast uses
    it); a gradient is its output gradient summed or split, coherently at worst."""
    if t.backward:
        gradient = t.call.inputs.get(0)
        if gradient is None:
            return None
        return max(gradient.norm, t.out.norm), max(gradient.error * math.sqrt(max(1.0, gradient.size / t.out.size)),
                                                 gradient.relative * t.largest)
    inputs = t.call.all_inputs
    reference = math.sqrt(sum(s.norm ** 2 * max(1.0, t.out.size / s.size) for s in inputs)) if inputs else t.out.norm
    return max(reference, t.out.norm), max(t.absolute_in, t.relative_in * t.largest)


def _elementwise(t: Through) -> Optional[Tuple[float, float]]:
    """A function of one value: forward, its output moves with its input relatively; a gradient carries the
    output gradient's relative error and the input's error through the second derivative."""
    if not t.backward:
        return t.out.norm, t.relative_in * t.largest
    gradient, value = t.call.inputs.get(0), t.forward.inputs.get(0) if t.forward is not None else None
    if gradient is None:
        return None
    through_value = gradient.rms * value.error * SECOND_DERIVATIVE if value is not None else 0.0
    return t.out.norm, gradient.relative * t.largest + through_value


def _periodic(t: Through) -> Optional[Tuple[float, float]]:
    """sin, cos: the derivative is at most 1, so the output's error is at most the input's (absolutely);
    their output is not proportional to their input (sin is 0 at pi)."""
    if t.backward:
        return _elementwise(t)
    return t.out.norm, max(t.relative_in * t.largest, t.absolute_in)


def _exponential(t: Through) -> Optional[Tuple[float, float]]:
    """exp: the output's relative error is the input's absolute error."""
    if t.backward:
        return None
    absolute_rms = max([s.error / math.sqrt(s.size) for s in t.call.all_inputs] or [0.0])
    return t.out.norm, max(t.relative_in, absolute_rms) * t.largest


def _logarithm(t: Through) -> Optional[Tuple[float, float]]:
    """log: the output's absolute error is the input's element-wise relative error."""
    if t.backward:
        return None
    return t.out.norm, max(t.relative_in * t.largest,
                         math.sqrt(t.out.size) * sum(s.relative_rms for s in t.call.all_inputs))


def _quotient(t: Through) -> Optional[Tuple[float, float]]:
    """Divisions and roots: relative errors add up, each times its exponent. Where a value is small in a
    narrow-range dtype (float16 subnormals), the element-wise relative errors are what passes on. A gradient
    (``dY / b``, ``-dY * a / b**2``, ``-dY * y**3 / 2`` for rsqrt) carries the output gradient's relative error
    and up to three times its forward tensors'."""
    if t.backward:
        gradient = t.call.inputs.get(0)
        if gradient is None or t.forward is None:
            return None
        saved = max([s.relative for s in t.forward.all_inputs + t.forward.outputs] or [0.0])
        return t.out.norm, t.largest * (gradient.relative + QUOTIENT_GRADIENT_POWER * saved)
    powers = _QUOTIENT_POWERS.get(t.api.rstrip("_"), _DEFAULT_QUOTIENT)
    inputs = [t.call.inputs.get(i) for i in range(len(powers))]
    by_norm = sum(power * s.relative for power, s in zip(powers, inputs) if s is not None)
    carried = by_norm * t.largest
    if any(s is not None and s.dtype in NARROW_RANGE for s in inputs):
        carried = max(carried, t.largest * sum(power * s.relative_rms for power, s in zip(powers, inputs)
                                             if s is not None))
    return t.out.norm, carried


def _power(t: Through) -> Optional[Tuple[float, float]]:
    if t.backward:
        return None
    return t.out.norm, POWER_EXPONENT * t.relative_in * t.largest


def _normalization(t: Through) -> Optional[Tuple[float, float]]:
    """A normalisation divides its input's error by the input's spread; its weight and bias pass theirs on.
    The weight and bias gradients sum the output gradient (times the normalised input) over the tokens."""
    values = t.forward.inputs if t.forward is not None else t.call.inputs
    value = values.get(0)
    if value is None:
        return None
    spread_error = value.spread_relative
    others = max([s.relative for s in (t.forward.all_inputs if t.forward is not None else t.call.all_inputs)
                  if s is not value] or [0.0])
    if not t.backward:
        return t.out.norm, t.largest * max(spread_error, others)
    gradient = t.call.inputs.get(0)
    if gradient is None:
        return None
    if t.out.shape != value.shape:  # a weight or bias gradient: a sum over the tokens, coherent at worst
        reference = gradient.norm
        coherent = gradient.error * math.sqrt(max(1.0, gradient.size / t.out.size))
        return max(reference, t.out.norm), max(reference * math.hypot(gradient.relative, spread_error), coherent) + \
            t.largest * others
    return t.out.norm, t.largest * max(spread_error, others, gradient.relative)


def _softmax(t: Through) -> Optional[Tuple[float, float]]:
    """softmax moves with its logits' absolute error (shifting them all changes nothing)."""
    values = t.forward.inputs if t.forward is not None else t.call.inputs
    value = values.get(0)
    absolute_rms = value.error / math.sqrt(value.size) if value is not None else 0.0
    carried = t.largest * max(t.relative_in, absolute_rms)
    if not t.backward and t.api.startswith("log"):  # log_softmax: x - logsumexp(x), the logits' error itself
        carried = max(carried, t.absolute_in)
    return t.out.norm, carried


def _reduction(t: Through, mean: bool) -> Optional[Tuple[float, float]]:
    """A sum or mean of M elements: same-sign elements cannot cancel, so it is as precise as they are,
    relatively; mixed signs may cancel, and their errors add up coherently at worst (M times for a sum, once
    for a mean)."""
    if t.backward:
        gradient = t.call.inputs.get(0)
        return (t.out.norm, gradient.relative * t.largest) if gradient is not None else None
    value = t.call.inputs.get(0)
    if value is None:
        return None
    if value.same_sign:
        return t.out.norm, t.relative_in * t.largest
    factor = math.sqrt(t.out.size / value.size) if mean else math.sqrt(value.size / t.out.size)
    reference = t.out.norm if mean else max(value.norm * factor, t.out.norm)
    return reference, max(value.error * factor, t.relative_in * t.largest)


def _sum(t: Through) -> Optional[Tuple[float, float]]:
    return _reduction(t, mean=False)


def _mean(t: Through) -> Optional[Tuple[float, float]]:
    return _reduction(t, mean=True)


def _spread_rule(t: Through) -> Optional[Tuple[float, float]]:
    """var/std: their input's error relative to its spread, twice for a variance."""
    if t.backward:
        return None
    value = t.call.inputs.get(0)
    if value is None:
        return None
    times = 1.0 if t.api.startswith("std") else 2.0
    return t.out.norm, times * value.spread_relative * t.largest


def _loss(t: Through) -> Optional[Tuple[float, float]]:
    """A loss averages per-element terms that move with the logits' absolute error (cross entropy) or with
    the inputs' relative error (mse): both, at twice."""
    values = t.forward.inputs if t.forward is not None else t.call.inputs
    value = values.get(0)
    if value is None:
        return None
    absolute_rms = value.error / math.sqrt(value.size)
    if t.backward:
        return t.out.norm, 2.0 * t.largest * max(t.relative_in, absolute_rms)
    return t.out.norm, 2.0 * max(absolute_rms * math.sqrt(t.out.size), t.relative_in * t.largest)


def _optimizer(t: Through) -> Optional[Tuple[float, float]]:
    """An update ``self + value * t1 op t2`` (addcdiv_, addcmul_): the quotient or product of the two
    tensors carries their element-wise relative errors (Adam's first step divides a gradient by its own size:
    a tiny gradient that changes sign moves by 2 of itself), added to ``self``'s error."""
    if t.backward or t.api.startswith("_"):
        return None
    base = t.call.inputs.get(0)
    terms = [t.call.inputs.get(1), t.call.inputs.get(2)]
    relative = sum(t.relative_rms for t in terms if t is not None)
    base_error = base.error if base is not None else 0.0
    base_norm = base.norm if base is not None else 0.0
    return t.out.norm, max(base_error + (t.largest + base_norm) * relative, t.relative_in * t.largest)


def optimizer_by_statistics(t: Through) -> Optional[Tuple[float, float]]:
    """Statistics cannot show the element-wise relative errors an optimizer's quotient passes on (a gradient
    element near zero that changes sign): its update is uncertain up to its size, which the norms bound."""
    base = t.call.inputs.get(0)
    if base is None:
        return None
    update = abs(t.out.norm - base.norm) + abs(t.out.npu_norm - base.npu_norm)
    return t.out.norm, base.error + max(update, t.relative_in * t.largest)


RULES: Dict[str, Callable[[Through], Optional[Tuple[float, float]]]] = {
    classes.MATMUL: _contraction, classes.PRODUCT: _contraction, classes.ADDITIVE: _additive,
    classes.LAYOUT: _additive, classes.SELECTION: _additive, classes.ACTIVATION: _elementwise,
    classes.PERIODIC: _periodic, classes.EXPONENTIAL: _exponential, classes.LOGARITHM: _logarithm,
    classes.QUOTIENT: _quotient, classes.POWER: _power, classes.NORMALIZATION: _normalization,
    classes.SOFTMAX: _softmax, classes.SUM: _sum, classes.MEAN: _mean, classes.SPREAD: _spread_rule,
    classes.LOSS: _loss, classes.OPTIMIZER: _optimizer,
}
