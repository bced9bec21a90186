"""What a call's inputs bring in: the error its output may carry because its inputs already differ.

A tensor computed from inputs that differ by their round-off differs too, and by how much depends on the
API: a view passes its input's error on unchanged, a matrix product adds up its two factors' relative
errors, a layer norm divides its input's error by the input's spread, a gradient that sums thousands of
terms to almost zero carries the terms' errors, not its own size's. This module turns the *measured*
errors of a call's inputs (full mode: the metrics of their rows) into, for each output row,

- ``reference``: the norm the output would have if its terms did not cancel (``T``): round-off scales with
  what was summed, not with what is left of it;
- ``carried``: the error norm the inputs' errors give through the call (``P``), by the API's class
  (:mod:`~ptdbg_ascend.comparison.api_classes`), on the usual model of round-off (errors of independent
  elements add up in quadrature) and, where a sum may add them coherently, its bound;
- ``carried_worst``: the worst element error the inputs' worst elements give (``W``).

``tolerances.Tolerance.with_carried`` adds them to a row's tolerance (with the margin ``GAIN``), so a row
fails only when its call made an error beyond its own round-off and beyond what its inputs explain: the first
failing row is where a difference *starts*.

An input that no dumped call produced (the output of an API that is not dumped, such as
``scaled_dot_product_attention``, or a gradient autograd summed) cannot be traced; it may carry what the
calls just before it carried (the largest relative error among the outputs of the :data:`CONTEXT_CALLS`
calls before it, in execution order: an optimizer step reads gradients made at the end of backward), and no
more.

Summary mode (statistics only) has no measured errors: there the largest difference of a tensor's four
statistics stands in for its relative error (:func:`statistics_metrics`). Torch-free.
"""

from __future__ import annotations

import math
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

from ptdbg_ascend.comparison import api_classes as classes
from ptdbg_ascend.comparison.metrics import RELATIVE_CAP, Metrics, Status
from ptdbg_ascend.comparison.records import TensorRecord
from ptdbg_ascend.comparison.rows import CompareRow
from ptdbg_ascend.formats.naming import BACKWARD, FORWARD, split_call_name

# How many dumped calls before an untraced input (in execution order) set what it may carry.
CONTEXT_CALLS = 8
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


class Allowance(NamedTuple):
    """What an output may carry (norms, before the margin): see the module docstring. ``rule`` names the API
    class whose model gave it (``"untraced"`` for an input no dumped call produced)."""

    reference: float
    carried: float
    carried_worst: float
    rule: str


class _Tensor(object):
    """The numbers of one judged row that propagation uses."""

    __slots__ = ("row", "error", "norm", "npu_norm", "size", "worst", "scale", "relative_rms", "max_relative",
                 "shape", "statistics", "dtype")

    def __init__(self, row: CompareRow) -> None:
        metrics = row.metrics
        self.row = row
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
        deviation = spread(self.row.bench)
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


def _usable(row: CompareRow) -> bool:
    metrics = row.metrics
    return (not row.one_sided and metrics is not None and metrics.status in (Status.COMPARED, Status.SCALAR)
            and metrics.error_norm is not None and metrics.bench_norm is not None
            and row.tolerance is not None and not row.tolerance.exact)


def _unreadable_input(row: CompareRow) -> bool:
    """An input whose inf/nan sit elsewhere on the two sides: anything after it may differ."""
    return row.metrics is not None and row.metrics.status == Status.INF_NAN


def _record_index(row: CompareRow) -> int:
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


class _Call(object):
    """The judged rows of one NPU call, by side and index."""

    def __init__(self) -> None:
        self.inputs: Dict[int, _Tensor] = {}
        self.all_inputs: List[_Tensor] = []
        self.outputs: List[_Tensor] = []
        self.unreadable = False


def _value_key(record: Optional[TensorRecord]) -> Optional[Tuple]:
    """A tensor's values as the dump describes them (shape and statistics, any dtype: a cast that widens
    keeps them); None when the statistics are incomplete."""
    if record is None or any(value is None for value in record.statistics[:3]):
        return None
    return tuple(record.shape), tuple(record.statistics)


def allowances(rows: Sequence[CompareRow], statistics_only: bool = False) -> List[Optional[Allowance]]:
    """For each row, what its inputs bring in (None: nothing, e.g. a one-sided row or an integer tensor).
    ``rows`` are in NPU execution order with their metrics (full mode), or with :func:`statistics_metrics`
    (``statistics_only``, default False)."""
    calls: Dict[int, _Call] = {}
    by_name: Dict[str, _Call] = {}
    found: List[Optional[Allowance]] = [None] * len(rows)
    produced = set()  # value keys (both sides) of the output rows so far
    recent: List[Tuple[int, float]] = []  # (id(call), relative error) of the outputs so far
    for index, row in enumerate(rows):
        call = row.pair.npu_call
        if call is None or row.one_sided:
            continue
        entry = calls.get(id(call))
        if entry is None:
            entry = calls[id(call)] = by_name[call.name] = _Call()
        direction = split_call_name(call.name).direction
        if row.side == "input" and _unreadable_input(row):
            entry.unreadable = True
        if not _usable(row):
            continue
        tensor = _Tensor(row)
        key = (_value_key(row.npu), _value_key(row.bench))
        if row.side == "input":
            entry.inputs.setdefault(_record_index(row), tensor)
            entry.all_inputs.append(tensor)
            # An input that holds an earlier output's values takes that output's verdict (provenance); one
            # that none produced may carry what the calls before it carried.
            traced = key[0] is not None and key in produced
            found[index] = _untraced(tensor, recent, "input" if traced else "untraced")
            continue
        entry.outputs.append(tensor)
        forward = by_name.get(call.name[: -len(BACKWARD)] + FORWARD) if direction == BACKWARD else None
        found[index] = _output_allowance(tensor, call.name, entry, forward, statistics_only)
        produced.add(key)
        recent.append((id(call), tensor.relative))
    return found


def _untraced(tensor: _Tensor, recent: Sequence[Tuple[int, float]], rule: str) -> Allowance:
    """An input no dumped call produced: it may carry the largest relative error of the outputs of the
    :data:`CONTEXT_CALLS` calls before it."""
    seen: List[int] = []
    context = 0.0
    for call_id, relative in reversed(recent):
        if call_id not in seen:
            if len(seen) >= CONTEXT_CALLS:
                break
            seen.append(call_id)
        if math.isfinite(relative):
            context = max(context, relative)
    largest = max(tensor.norm, tensor.npu_norm)
    return Allowance(0.0, context * largest, context * tensor.scale, rule)


def _output_allowance(out: _Tensor, call_name: str, call: _Call, forward: Optional[_Call],
                      statistics_only: bool) -> Allowance:
    name = split_call_name(call_name)
    prefix, _, api = name.api.partition("_")
    kind = classes.api_class(prefix, api)
    backward = forward is not None or name.direction == BACKWARD
    own = call.all_inputs
    saved = forward.all_inputs + forward.outputs if forward is not None else []
    sources = own + saved
    largest = max(out.norm, out.npu_norm)
    if call.unreadable or (forward is not None and forward.unreadable):
        return Allowance(0.0, math.inf, math.inf, kind)
    relative_in = max([s.relative for s in sources] or [0.0])
    absolute_in = sum(s.error * s.spread_to(out.size) for s in sources)
    worst = _carried_worst(out, sources, kind)
    rule = _RULES.get(kind)
    reference, carried = out.norm, max(relative_in * largest, absolute_in)
    if kind == classes.OPTIMIZER and statistics_only and not backward:
        rule = _optimizer_by_statistics
    if rule is not None:
        computed = rule(out, api, call, forward, backward, relative_in, absolute_in, largest)
        if computed is not None:
            reference, carried = computed
    return Allowance(reference, carried, worst, kind)


def _carried_worst(out: _Tensor, sources: Sequence[_Tensor], kind: str) -> float:
    """The worst element error the sources' worst elements give: relatively to the output's largest
    magnitude, or added up (a sum of elements), whichever is larger; a division or an optimizer's update also
    passes its inputs' worst element-wise relative errors on."""
    relative = max([out.scale * s.worst / s.scale for s in sources if s.scale > 0] or [0.0])
    added = sum(s.worst for s in sources)
    carried = max(relative, added)
    if kind in (classes.QUOTIENT, classes.OPTIMIZER):
        carried = max(carried, out.scale * sum(s.max_relative for s in sources))
    return carried


# -- the rules, one per class: (reference, carried) or None for the general rule ---------------------------

def _contraction(out, api, call, forward, backward, relative_in, absolute_in, largest):
    """A sum of products: its norm without cancellation is ``sqrt(terms) * rms(p) * rms(q)``, and it carries
    the two factors' relative errors added in quadrature (a bias its error). A gradient with respect to a
    factor is the same sum with the output's gradient in that factor's place; the bias gradient sums the
    output's gradient, coherently at worst, and so may a weight's gradient (a layer with a bias: linear, conv,
    addmm)."""
    layout = classes.operands(api)
    if layout is None:
        return None
    factors = forward.inputs if forward is not None else call.inputs
    p, q = factors.get(layout.p), factors.get(layout.q)
    if p is None or q is None:
        return None
    produced = (forward.outputs if forward is not None else call.outputs)
    terms = (produced[0].size if produced else out.size) * _sum_length(layout.terms, p, q)
    if not backward:
        reference = math.sqrt(terms) * p.rms * q.rms
        carried = max(reference, largest) * math.hypot(p.relative, q.relative)
        bias = factors.get(layout.bias) if layout.bias is not None else None
        if bias is not None:
            carried += bias.error * bias.spread_to(out.size)
        return reference, carried
    gradient = call.inputs.get(0)
    if gradient is None:
        return None
    index = _record_index(out.row)
    other = q if index == layout.p else p if index == layout.q else None
    if other is None:  # the bias: a sum of the output's gradient over what the bias was added to
        return gradient.norm, gradient.error * math.sqrt(max(1.0, gradient.size / out.size))
    reference = math.sqrt(terms) * gradient.rms * other.rms
    carried = max(reference, largest) * math.hypot(gradient.relative, other.relative)
    if index == layout.q and layout.bias is not None:
        # A weight's gradient sums over every token; errors with a common source (the rounding of a weight that
        # every token used) add up coherently there, up to the Cauchy-Schwarz bound.
        carried = max(carried, gradient.error * other.norm + gradient.norm * other.error)
    return reference, carried


def _sum_length(rule: str, p: _Tensor, q: _Tensor) -> int:
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


def _additive(out, api, call, forward, backward, relative_in, absolute_in, largest):
    """Sums, concatenations, copies, casts: errors add up (each input counted as often as a broadcast uses
    it); a gradient is its output gradient summed or split, coherently at worst."""
    if backward:
        gradient = call.inputs.get(0)
        if gradient is None:
            return None
        return max(gradient.norm, out.norm), max(gradient.error * math.sqrt(max(1.0, gradient.size / out.size)),
                                                 gradient.relative * largest)
    inputs = call.all_inputs
    reference = math.sqrt(sum(s.norm ** 2 * max(1.0, out.size / s.size) for s in inputs)) if inputs else out.norm
    return max(reference, out.norm), max(absolute_in, relative_in * largest)


def _elementwise(out, api, call, forward, backward, relative_in, absolute_in, largest):
    """A function of one value: forward, its output moves with its input relatively; a gradient carries the
    output gradient's relative error and the input's error through the second derivative."""
    if not backward:
        return out.norm, relative_in * largest
    gradient, value = call.inputs.get(0), forward.inputs.get(0) if forward is not None else None
    if gradient is None:
        return None
    through_value = gradient.rms * value.error * SECOND_DERIVATIVE if value is not None else 0.0
    return out.norm, gradient.relative * largest + through_value


def _periodic(out, api, call, forward, backward, relative_in, absolute_in, largest):
    """sin, cos: the derivative is at most 1, so the output's error is at most the input's (absolutely);
    their output is not proportional to their input (sin is 0 at pi)."""
    if backward:
        return _elementwise(out, api, call, forward, backward, relative_in, absolute_in, largest)
    return out.norm, max(relative_in * largest, absolute_in)


def _exponential(out, api, call, forward, backward, relative_in, absolute_in, largest):
    """exp: the output's relative error is the input's absolute error."""
    if backward:
        return None
    absolute_rms = max([s.error / math.sqrt(s.size) for s in call.all_inputs] or [0.0])
    return out.norm, max(relative_in, absolute_rms) * largest


def _logarithm(out, api, call, forward, backward, relative_in, absolute_in, largest):
    """log: the output's absolute error is the input's element-wise relative error."""
    if backward:
        return None
    return out.norm, max(relative_in * largest,
                         math.sqrt(out.size) * sum(s.relative_rms for s in call.all_inputs))


def _quotient(out, api, call, forward, backward, relative_in, absolute_in, largest):
    """Divisions and roots: relative errors add up, each times its exponent. Where a value is small in a
    narrow-range dtype (float16 subnormals), the element-wise relative errors are what passes on. A gradient
    (``dY / b``, ``-dY * a / b**2``, ``-dY * y**3 / 2`` for rsqrt) carries the output gradient's relative error
    and up to three times its forward tensors'."""
    if backward:
        gradient = call.inputs.get(0)
        if gradient is None or forward is None:
            return None
        saved = max([s.relative for s in forward.all_inputs + forward.outputs] or [0.0])
        return out.norm, largest * (gradient.relative + QUOTIENT_GRADIENT_POWER * saved)
    powers = _QUOTIENT_POWERS.get(api.rstrip("_"), _DEFAULT_QUOTIENT)
    inputs = [call.inputs.get(i) for i in range(len(powers))]
    by_norm = sum(power * s.relative for power, s in zip(powers, inputs) if s is not None)
    carried = by_norm * largest
    if any(s is not None and s.dtype in NARROW_RANGE for s in inputs):
        carried = max(carried, largest * sum(power * s.relative_rms for power, s in zip(powers, inputs)
                                             if s is not None))
    return out.norm, carried


def _power(out, api, call, forward, backward, relative_in, absolute_in, largest):
    if backward:
        return None
    return out.norm, POWER_EXPONENT * relative_in * largest


def _normalization(out, api, call, forward, backward, relative_in, absolute_in, largest):
    """A normalisation divides its input's error by the input's spread; its weight and bias pass theirs on.
    The weight and bias gradients sum the output gradient (times the normalised input) over the tokens."""
    values = forward.inputs if forward is not None else call.inputs
    value = values.get(0)
    if value is None:
        return None
    spread_error = value.spread_relative
    others = max([s.relative for s in (forward.all_inputs if forward is not None else call.all_inputs)
                  if s is not value] or [0.0])
    if not backward:
        return out.norm, largest * max(spread_error, others)
    gradient = call.inputs.get(0)
    if gradient is None:
        return None
    if out.shape != value.shape:  # a weight or bias gradient: a sum over the tokens, coherent at worst
        reference = gradient.norm
        coherent = gradient.error * math.sqrt(max(1.0, gradient.size / out.size))
        return max(reference, out.norm), max(reference * math.hypot(gradient.relative, spread_error), coherent) + \
            largest * others
    return out.norm, largest * max(spread_error, others, gradient.relative)


def _softmax(out, api, call, forward, backward, relative_in, absolute_in, largest):
    """softmax moves with its logits' absolute error (shifting them all changes nothing)."""
    values = forward.inputs if forward is not None else call.inputs
    value = values.get(0)
    absolute_rms = value.error / math.sqrt(value.size) if value is not None else 0.0
    carried = largest * max(relative_in, absolute_rms)
    if not backward and api.startswith("log"):  # log_softmax: x - logsumexp(x), the logits' error itself
        carried = max(carried, absolute_in)
    return out.norm, carried


def _reduction(out, api, call, forward, backward, relative_in, absolute_in, largest, mean):
    """A sum or mean of M elements: same-sign elements cannot cancel, so it is as precise as they are,
    relatively; mixed signs may cancel, and their errors add up coherently at worst (M times for a sum, once
    for a mean)."""
    if backward:
        gradient = call.inputs.get(0)
        return (out.norm, gradient.relative * largest) if gradient is not None else None
    value = call.inputs.get(0)
    if value is None:
        return None
    if value.same_sign:
        return out.norm, relative_in * largest
    factor = math.sqrt(out.size / value.size) if mean else math.sqrt(value.size / out.size)
    reference = out.norm if mean else max(value.norm * factor, out.norm)
    return reference, max(value.error * factor, relative_in * largest)


def _sum(*arguments):
    return _reduction(*arguments, mean=False)


def _mean(*arguments):
    return _reduction(*arguments, mean=True)


def _spread_rule(out, api, call, forward, backward, relative_in, absolute_in, largest):
    """var/std: their input's error relative to its spread, twice for a variance."""
    if backward:
        return None
    value = call.inputs.get(0)
    if value is None:
        return None
    times = 1.0 if api.startswith("std") else 2.0
    return out.norm, times * value.spread_relative * largest


def _loss(out, api, call, forward, backward, relative_in, absolute_in, largest):
    """A loss averages per-element terms that move with the logits' absolute error (cross entropy) or with
    the inputs' relative error (mse): both, at twice."""
    values = forward.inputs if forward is not None else call.inputs
    value = values.get(0)
    if value is None:
        return None
    absolute_rms = value.error / math.sqrt(value.size)
    if backward:
        return out.norm, 2.0 * largest * max(relative_in, absolute_rms)
    return out.norm, 2.0 * max(absolute_rms * math.sqrt(out.size), relative_in * largest)


def _optimizer(out, api, call, forward, backward, relative_in, absolute_in, largest):
    """An update ``self + value * t1 op t2`` (addcdiv_, addcmul_): the quotient or product of the two
    tensors carries their element-wise relative errors (Adam's first step divides a gradient by its own size:
    a tiny gradient that changes sign moves by 2 of itself), added to ``self``'s error."""
    if backward or api.startswith("_"):
        return None
    base = call.inputs.get(0)
    terms = [call.inputs.get(1), call.inputs.get(2)]
    relative = sum(t.relative_rms for t in terms if t is not None)
    base_error = base.error if base is not None else 0.0
    base_norm = base.norm if base is not None else 0.0
    return out.norm, max(base_error + (largest + base_norm) * relative, relative_in * largest)


def _optimizer_by_statistics(out, api, call, forward, backward, relative_in, absolute_in, largest):
    """Statistics cannot show the element-wise relative errors an optimizer's quotient passes on (a gradient
    element near zero that changes sign): its update is uncertain up to its size, which the norms bound."""
    base = call.inputs.get(0)
    if base is None:
        return None
    update = abs(out.norm - base.norm) + abs(out.npu_norm - base.npu_norm)
    return out.norm, base.error + max(update, relative_in * largest)


_RULES = {
    classes.MATMUL: _contraction, classes.PRODUCT: _contraction, classes.ADDITIVE: _additive,
    classes.LAYOUT: _additive, classes.SELECTION: _additive, classes.ACTIVATION: _elementwise,
    classes.PERIODIC: _periodic, classes.EXPONENTIAL: _exponential, classes.LOGARITHM: _logarithm,
    classes.QUOTIENT: _quotient, classes.POWER: _power, classes.NORMALIZATION: _normalization,
    classes.SOFTMAX: _softmax, classes.SUM: _sum, classes.MEAN: _mean, classes.SPREAD: _spread_rule,
    classes.LOSS: _loss, classes.OPTIMIZER: _optimizer,
}



def statistics_metrics(npu: TensorRecord, bench: TensorRecord, discrepancy: Optional[float]) -> Optional[Metrics]:
    """Summary mode's stand-in for a pair's metrics, so that :func:`allowances` applies to statistics: the
    norms and magnitude from the statistics, and as "errors" the largest statistic difference
    (``verdicts.statistics_discrepancy``) times the norm and the magnitude. None when nothing can stand in."""
    if discrepancy is None or npu.shape != bench.shape:
        return None
    norm, npu_norm = bench.statistics[3], npu.statistics[3]
    if norm is None or not math.isfinite(norm):
        return None
    size = 1
    for extent in bench.shape:
        size *= extent
    scale = max([abs(v) for v in (npu.statistics[:2] + bench.statistics[:2]) if v is not None and math.isfinite(v)]
                or [0.0])
    return Metrics(Status.COMPARED, error_norm=discrepancy * norm, bench_norm=norm,
                   npu_norm=npu_norm if npu_norm is not None and math.isfinite(npu_norm) else norm, size=size,
                   max_abs_err=discrepancy * scale, scale=scale, relative_rms=min(discrepancy, RELATIVE_CAP),
                   max_relative_err=discrepancy)
