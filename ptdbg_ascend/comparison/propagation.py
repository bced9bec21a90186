"""What a call's inputs bring in: the error its output may carry because its inputs already differ.

A tensor computed from inputs that differ by their round-off differs too, and by how much depends on the
API: a view passes its input's error on unchanged, a matrix product adds up its two factors' relative
errors, a layer norm divides its input's error by the input's spread, a gradient that sums thousands of
terms to almost zero carries the terms' errors, not its own size's. This module turns the *measured*
errors of a call's inputs (full mode: the metrics of their rows) into, for each output row,

- ``reference``: the norm the output would have if its terms did not cancel (``T``): round-off scales with
  what was summed, not with what is left of it;
- ``carried``: the error norm the inputs' errors give through the call (``P``), by the API's class
  (:mod:`~ptdbg_ascend.comparison.api_classes`; the rule of each class: :mod:`~ptdbg_ascend.comparison.transfer`),
  on the usual model of round-off (errors of independent elements add up in quadrature) and, where a sum may
  add them coherently, its bound;
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
from typing import Dict, Iterable, Iterator, List, NamedTuple, Optional, Sequence, Tuple

from ptdbg_ascend.comparison import api_classes as classes
from ptdbg_ascend.comparison import transfer
from ptdbg_ascend.comparison.metrics import RELATIVE_CAP, Metrics, Status
from ptdbg_ascend.comparison.transfer import CallTensors, Measured, record_index
from ptdbg_ascend.formats.records import TensorRecord
from ptdbg_ascend.comparison.rows import CompareRow
from ptdbg_ascend.formats.naming import BACKWARD, FORWARD, split_call_name

# How many dumped calls before an untraced input (in execution order) set what it may carry.
CONTEXT_CALLS = 8


class Allowance(NamedTuple):
    """What an output may carry (norms, before the margin): see the module docstring. ``rule`` names the API
    class whose model gave it (``"untraced"`` for an input no dumped call produced)."""

    reference: float
    carried: float
    carried_worst: float
    rule: str


def _usable(row: CompareRow) -> bool:
    metrics = row.metrics
    return (not row.one_sided and metrics is not None and metrics.status in (Status.COMPARED, Status.SCALAR)
            and metrics.error_norm is not None and metrics.bench_norm is not None
            and row.tolerance is not None and not row.tolerance.exact)


def _unreadable_input(row: CompareRow) -> bool:
    """An input whose inf/nan sit elsewhere on the two sides: anything after it may differ."""
    return row.metrics is not None and row.metrics.status == Status.INF_NAN


def _value_key(record: Optional[TensorRecord]) -> Optional[Tuple]:
    """A tensor's values as the dump describes them (shape and statistics, any dtype: a cast that widens
    keeps them); None when the statistics are incomplete."""
    if record is None or any(value is None for value in record.statistics[:3]):
        return None
    return tuple(record.shape), tuple(record.statistics)


def allowances(rows: Iterable[CompareRow], statistics_only: bool = False) -> Iterator[Optional[Allowance]]:
    """For each row, what its inputs bring in (None: nothing, e.g. a one-sided row or an integer tensor).
    ``rows`` are in NPU execution order with their metrics (full mode), or with :func:`statistics_metrics`
    (``statistics_only``, default False). A row's allowance depends on the rows before it only: each is given
    before the next row is taken, so a caller may make the rows as it goes and let each go once judged."""
    calls: Dict[int, CallTensors] = {}
    by_name: Dict[str, CallTensors] = {}
    produced = set()  # value keys (both sides) of the output rows so far
    recent: List[Tuple[int, float]] = []  # (id(call), relative error) of the outputs so far
    for row in rows:
        call = row.pair.npu_call
        if call is None or row.one_sided:
            yield None
            continue
        entry = calls.get(id(call))
        if entry is None:
            entry = calls[id(call)] = by_name[call.name] = CallTensors()
        direction = split_call_name(call.name).direction
        if row.side == "input" and _unreadable_input(row):
            entry.unreadable = True
        if not _usable(row):
            yield None
            continue
        tensor = Measured(row)
        key = (_value_key(row.npu), _value_key(row.bench))
        if row.side == "input":
            entry.inputs.setdefault(record_index(row), tensor)
            entry.all_inputs.append(tensor)
            # An input that holds an earlier output's values takes that output's verdict (provenance); one
            # that none produced may carry what the calls before it carried.
            traced = key[0] is not None and key in produced
            yield _untraced(tensor, recent, "input" if traced else "untraced")
            continue
        entry.outputs.append(tensor)
        forward = by_name.get(call.name[: -len(BACKWARD)] + FORWARD) if direction == BACKWARD else None
        allowance = _output_allowance(tensor, call.name, entry, forward, statistics_only)
        produced.add(key)
        recent.append((id(call), tensor.relative))
        yield allowance


def _untraced(tensor: Measured, recent: Sequence[Tuple[int, float]], rule: str) -> Allowance:
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


def _output_allowance(out: Measured, call_name: str, call: CallTensors, forward: Optional[CallTensors],
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
    rule = transfer.RULES.get(kind)
    reference, carried = out.norm, max(relative_in * largest, absolute_in)
    if kind == classes.OPTIMIZER and statistics_only and not backward:
        rule = transfer.optimizer_by_statistics
    if rule is not None:
        computed = rule(transfer.Through(out, api, call, forward, backward, relative_in, absolute_in, largest))
        if computed is not None:
            reference, carried = computed
    return Allowance(reference, carried, worst, kind)


def _carried_worst(out: Measured, sources: Sequence[Measured], kind: str) -> float:
    """The worst element error the sources' worst elements give: relatively to the output's largest
    magnitude, or added up (a sum of elements), whichever is larger; a division or an optimizer's update also
    passes its inputs' worst element-wise relative errors on."""
    relative = max([out.scale * s.worst / s.scale for s in sources if s.scale > 0] or [0.0])
    added = sum(s.worst for s in sources)
    carried = max(relative, added)
    if kind in (classes.QUOTIENT, classes.OPTIMIZER):
        carried = max(carried, out.scale * sum(s.max_relative for s in sources))
    return carried


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
