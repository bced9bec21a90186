"""Tolerance travels with the tensor: a row judged where the tensor was made, not again where it is used.

Each row is first judged with the tolerance of its own call (:mod:`~ptdbg_ascend.comparison.tolerances`: the
call's precision and largest magnitude). A tensor passed from one call to the next is judged twice, and the
two verdicts can disagree: a BatchNorm bias gradient that is mathematically zero is ~1e-7 of noise on both
sides, "within round-off" in the backward that makes it (its magnitudes are ~1) and an error in the
optimizer's ``add_`` that reads it (a bias of ~1e-8 sets that call's scale). :func:`carry_verdicts` fixes
both ends:

- an **input** holding the same values as an earlier call's output, on both sides (same shape and
  max/min/mean/norm: the dump's statistics of one tensor; in full mode also the same error numbers), takes
  that output's verdict and tolerance; so does a **module's output** holding the output of a call inside it
  (levels mix: the module returns what its last call made);
- an **output** that fails although every input passes, where the inputs that differ are zero up to
  round-off where they were made (their error within the absolute floor ``atol·√N``) and the output's error
  is no larger than :data:`CARRY` times theirs (rms), carries their round-off: it passes, saying so;
- the gradient of a **branch** (relu, a max pool, a clamp...) whose forward input differs only within
  round-off flips at the elements sitting on the branch point: a few elements (at most :data:`BRANCH_SHARE`)
  differ by all of themselves. Two devices summing in another order do this (cuDNN against the CPU, TF32 off). It passes
  as "branch flips", and the calls that carry those flips on (their error explained by their inputs',
  ``precision.explained_by_inputs``) pass with it;
- the gradient of a tensor used twice is the **sum** autograd makes of the two gradients, and that sum is
  no dumped call (resnet's residual: the gradient reaching a block's input is its conv's plus the skip's; a
  weight tied to two layers, whose ``.grad`` the optimizer reads). A failing input that no dumped output
  holds, but whose statistics are, on both sides, those of the sum of two or three earlier backward outputs
  of its shape (the means add up, the extremes stay within the sums'), is judged by them: it passes when they
  all pass and its error is no more than theirs added.

Torch-free; only rows are rewritten (the metrics stay the row's own numbers).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from typing import Dict, List, Optional, Sequence, Tuple

from ptdbg_ascend.comparison.precision import carried_inputs, explained_by_inputs, is_branch_backward
from ptdbg_ascend.formats.records import TensorRecord
from ptdbg_ascend.comparison.rows import CompareRow
from ptdbg_ascend.comparison.tolerances import EPSILON
from ptdbg_ascend.comparison.verdicts import ERROR, PASS, Judgement
from ptdbg_ascend.formats.naming import api_of

# An output's error rms may be this many times the sum of its inputs' error rms and still be only their
# round-off carried on: add/sub/mul by a factor of at most ~1 (optimizer updates, momentum buffers) pass
# errors on at most at that size.
CARRY = 2.0
# A branch flip touches the elements that sit on the branch point: at most this share of the tensor is off by
# all of itself (the metrics' ``gross`` count; the other elements carry their inputs' round-off).
BRANCH_SHARE = 0.01
# How closely the means of an autograd sum's terms must add up to its mean, relative to the sum's size
# (rms or terms' means): float32 means of a sum agree with the sum of the means to ~1e-7 of that; a sum
# rounded to a lower precision (float32 terms of a bfloat16 gradient) to SUM_ULPS units of that precision.
SUM_RTOL = 1e-5
SUM_ULPS = 4.0
# The earlier outputs of the same shape searched for an autograd sum's terms (the latest ones).
SUM_CANDIDATES = 12


def _key(record: Optional[TensorRecord]) -> Optional[Tuple]:
    """What identifies one tensor's values in the dump: shape, max, min, mean and norm (None if max/min/mean
    are unknown; a missing norm is part of the key as None). Not the dtype: a cast that widens (bfloat16 logits
    to float32 for the loss) keeps every value, and so the statistics, which the dump computes in float64."""
    if record is None or any(value is None for value in record.statistics[:3]):
        return None
    return tuple(record.shape), tuple(record.statistics)


def _same_errors(a: CompareRow, b: CompareRow) -> bool:
    """In full mode, the same pair of tensors gives the same error numbers: statistics alone cannot tell a
    tensor from a permutation of it."""
    if a.metrics is None or b.metrics is None:
        return a.metrics is None and b.metrics is None
    return a.metrics.error_norm == b.metrics.error_norm and a.metrics.max_abs_err == b.metrics.max_abs_err


def _rms_error(row: CompareRow) -> Optional[float]:
    metrics = row.metrics
    if metrics is None or metrics.error_norm is None or not metrics.size:
        return None
    return metrics.error_norm / math.sqrt(metrics.size)


def _with(row: CompareRow, judgement: Judgement, tolerance=None) -> CompareRow:
    messages = tuple(part for part in row.messages if part != row.judgement.message) + (judgement.message,)
    return dataclasses.replace(row, judgement=judgement, tolerance=tolerance or row.tolerance, messages=messages)


def _inherit(row: CompareRow, producer: CompareRow, line: int) -> CompareRow:
    said = producer.judgement.message or f"it {'passes' if producer.passed else 'fails'}."
    message = f"Same tensor as {producer.name} (CSV line {line}), judged there: {said}"
    judgement = producer.judgement._replace(message=message)
    return _with(row, judgement, producer.tolerance)


def _noise_level(row: CompareRow) -> bool:
    """Whether an input row is zero up to round-off where judged: its error within the absolute floor."""
    rms = _rms_error(row)
    return rms is not None and row.tolerance is not None and not row.tolerance.exact and rms <= row.tolerance.atol


def _carried(row: CompareRow, inputs: Sequence[CompareRow]) -> Optional[CompareRow]:
    """``row`` (a failing output) as a pass when its error is its inputs' round-off carried on; else None."""
    out_rms = _rms_error(row)
    if out_rms is None or not inputs or not all(r.passed and r.metrics is not None for r in inputs):
        return None
    differing = [r for r in inputs if (_rms_error(r) or 0.0) > 0.0]
    if not differing or not all(_noise_level(r) for r in differing):
        return None
    carried_in = sum(_rms_error(r) or 0.0 for r in differing)
    if out_rms > CARRY * carried_in:
        return None
    message = "Round-off carried in: error rms {:.3g} <= {:g} x its inputs' {:.3g}, which are zero up to round-off " \
              "where they were made ({}).".format(out_rms, CARRY, carried_in, ", ".join(r.name for r in differing[:3]))
    # The output keeps the absolute floor its inputs were made with, for the calls that read it next.
    floor = max(r.tolerance.atol for r in differing)
    tolerance = row.tolerance._replace(atol=max(row.tolerance.atol, floor)) if row.tolerance is not None else None
    return _with(row, Judgement(PASS, row.judgement.relative_error, None, message), tolerance)


def _branch_flips(row: CompareRow, rows: Sequence[CompareRow]) -> Optional[CompareRow]:
    """``row`` (a failing backward output of a branch API) as a pass when its forward input differs only within
    round-off and few elements differ (see the module docstring); else None."""
    call = row.pair.npu_call
    metrics = row.metrics
    if not is_branch_backward(call.name):
        return None
    if metrics is None or not metrics.mismatched or not metrics.size:
        return None
    flipped = metrics.gross if metrics.gross is not None else metrics.mismatched
    inputs = carried_inputs(rows, call)
    if flipped > BRANCH_SHARE * metrics.size:
        return None
    if not inputs or not all(r.passed for r in inputs) or not any(r.metrics.error_norm for r in inputs):
        return None
    message = "Branch flips: {} of {} elements ({:.2g}%) differ by all of themselves, where round-off in the " \
              "forward input moved values across the branch point of {}; the others carry their inputs' " \
              "round-off.".format(flipped, metrics.size, 100.0 * flipped / metrics.size, api_of(call.name).rstrip("_"))
    return _with(row, Judgement(PASS, row.judgement.relative_error, None, message))


def _carries_flips(row: CompareRow, inputs: Sequence[CompareRow],
                   flipped: Sequence[CompareRow]) -> Optional[CompareRow]:
    """``row`` (a failing output) as a pass when its inputs all pass, one holds branch flips, and its error is
    explained by theirs; else None."""
    if not flipped or not all(r.passed for r in inputs):
        return None
    reason = explained_by_inputs(row, inputs)
    if reason is None:
        return None
    message = f"Carries the branch flips of {flipped[0].name}: {reason}."
    return _with(row, Judgement(PASS, row.judgement.relative_error, None, message))


def _sums_to(total: TensorRecord, terms: Sequence[TensorRecord]) -> bool:
    """Whether ``total``'s statistics are those of the element-wise sum of ``terms``: the means add up
    (within :data:`SUM_RTOL`), the maximum is no more than the maxima's sum and the minimum no less than the
    minima's."""
    high, low, mean = total.statistics[:3]
    norm = total.statistics[3] if len(total.statistics) > 3 else None
    parts = [term.statistics[:3] for term in terms]
    if any(value is None for value in (high, low, mean)) or any(v is None for part in parts for v in part):
        return False
    scale = sum(abs(part[2]) for part in parts)
    if norm is not None and total.shape:
        scale = max(scale, norm / math.sqrt(max(math.prod(total.shape), 1)))
    precision = max([EPSILON.get(record.dtype, 0.0) for record in (total,) + tuple(terms)] or [0.0])
    slack = max(SUM_RTOL, SUM_ULPS * precision / 2.0) * scale
    return abs(mean - sum(part[2] for part in parts)) <= slack and \
        high <= sum(part[0] for part in parts) + slack and low >= sum(part[1] for part in parts) - slack


def _autograd_sum(row: CompareRow, rows: Sequence[CompareRow], candidates: Sequence[int]) -> Optional[List[int]]:
    """Indices of the earlier outputs whose sum ``row`` (a backward input no dumped output holds) is, on both
    sides; None when no two or three of ``candidates`` add up to it."""
    # the latest first: the terms of a sum are usually the outputs just before it
    usable = [i for i in reversed(candidates) if rows[i].bench is not None and rows[i].compared]
    for size in (2, 3):
        for combination in itertools.combinations(usable, size):
            if _sums_to(row.npu, [rows[i].npu for i in combination]) and \
                    _sums_to(row.bench, [rows[i].bench for i in combination]):
                return sorted(combination)
    return None


def _judged_as_sum(row: CompareRow, terms: Sequence[CompareRow]) -> Optional[CompareRow]:
    """``row`` (a failing sum) as a pass when its terms pass and its error is within theirs added; else None."""
    own = _rms_error(row)
    added = sum(_rms_error(term) or 0.0 for term in terms)
    if own is None or not all(term.passed for term in terms) or own > CARRY * added:
        return None
    message = "Sum of {} (autograd adds the gradients of a tensor used twice; the sum is no dumped call): they " \
              "pass, and its error rms {:.3g} is within theirs added, {:.3g}.".format(
                  " and ".join(term.name for term in terms), own, added)
    return _with(row, Judgement(PASS, row.judgement.relative_error, None, message))


def carry_verdicts(rows: Sequence[CompareRow]) -> List[CompareRow]:
    """The rows, with inputs that hold an earlier output's values judged as that output, and outputs that
    only carry their inputs' round-off passing (see the module docstring). Rows are taken in order, so a
    verdict travels along a chain of calls."""
    out = list(rows)
    outputs: Dict[Tuple, int] = {}  # NPU output key -> index of the latest row holding it
    inputs_of: Dict[int, List[int]] = {}  # id(NPU call) -> indices of its input rows so far
    flipped = set()  # indices of rows passed as branch flips, or holding them
    by_shape: Dict[Tuple, List[int]] = {}  # shape -> indices of the latest backward outputs (any dtype: a cast)
    for index, row in enumerate(rows):
        if row.one_sided or not row.compared:
            continue
        call_id = id(row.pair.npu_call)
        if row.side == "input":
            inputs_of.setdefault(call_id, []).append(index)
            found = outputs.get(_key(row.npu))
            if found is not None:
                producer = out[found]
                if producer.pair.npu_call is not row.pair.npu_call and _key(producer.bench) == _key(row.bench) \
                        and producer.compared and producer.result != row.result and _same_errors(producer, row):
                    out[index] = _inherit(row, producer, found + 2)
                if found in flipped and _key(producer.bench) == _key(row.bench):
                    flipped.add(index)
            elif row.judgement.grade == ERROR:  # a gradient autograd summed (a backward input, an optimizer's)
                terms = _autograd_sum(row, out, by_shape.get(tuple(row.npu.shape), ())[-SUM_CANDIDATES:])
                judged = _judged_as_sum(row, [out[i] for i in terms]) if terms else None
                if judged is not None:
                    out[index] = judged
                    if any(i in flipped for i in terms):
                        flipped.add(index)
        elif row.side == "output":
            found = outputs.get(_key(row.npu)) if row.pair.npu_call.module is not None else None
            if found is not None:
                # A module's output is the output of the last call inside it (levels mix): judged there.
                producer = out[found]
                if _key(producer.bench) == _key(row.bench) and producer.compared and \
                        producer.result != row.result and _same_errors(producer, row):
                    out[index] = _inherit(row, producer, found + 2)
            elif row.judgement.grade == ERROR:
                own = inputs_of.get(call_id, ())
                carried = _carried(row, [out[i] for i in own])
                flips = None if carried is not None else (
                    _branch_flips(row, out) or
                    _carries_flips(row, [out[i] for i in own], [out[i] for i in own if i in flipped]))
                if flips is not None:
                    flipped.add(index)
                if carried or flips:
                    out[index] = carried or flips
            key = _key(row.npu)
            if key is not None:
                outputs[key] = index
                if row.pair.npu_call.name.endswith("_backward"):
                    by_shape.setdefault(tuple(row.npu.shape), []).append(index)
    return out
