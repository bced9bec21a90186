"""The advisor: name the first failing API after alignment, tell cause from propagation from the
(pre-call) inputs, give the user's own code line, the first dtype mismatch and the one-sided calls
before the failure, and advice that fits the finding. Says so plainly when too little was compared.

It decides here and writes elsewhere: :func:`classify` returns the typed
:class:`~ptdbg_ascend.formats.reason.Reason` (the decision and its evidence), and
:func:`ptdbg_ascend.comparison.advisor_text.render` turns it into words. Its answer is written twice: as prose
(``advisor_{tail}.txt``, for people) and, when a row failed, as the versioned finding file beside it
(``compare_finding_{tail}.json``, :mod:`ptdbg_ascend.formats.finding`, which carries the reason) that a later
run reads (``run_ut``'s compare link)."""

from __future__ import annotations

import dataclasses
import math
from typing import List, Optional, Sequence, Tuple

from ptdbg_ascend.comparison import next_steps
from ptdbg_ascend.comparison.answer_text import Advice
from ptdbg_ascend.comparison.advisor_text import render
from ptdbg_ascend.comparison.outcome import Counts
from ptdbg_ascend.comparison.precision import Reduced, carried_error, carried_inputs, reduced_precision_root
from ptdbg_ascend.formats.records import CallRecord, TensorRecord
from ptdbg_ascend.comparison.rows import CompareRow
from ptdbg_ascend.comparison.tolerances import EPSILON, call_precision
from ptdbg_ascend.formats.finding import Finding
from ptdbg_ascend.formats.naming import split_call_name
from ptdbg_ascend.formats.reason import FP16_MAX, ONE_SIDED_SHOWN, Decision, Mismatch, Reason, ReducedPrecision

# Calls that change a dtype: shown first among the one-sided calls.
CASTS = ("_to_", "_type_", "_float_", "_half_", "_bfloat16_", "_double_", "_to_copy_", "_npu_format_cast_")


def _precision(records: Sequence[TensorRecord]) -> Optional[str]:
    return call_precision(record.dtype for record in records)


def _lower_precision(npu: Optional[str], bench: Optional[str]) -> bool:
    return npu is not None and bench is not None and EPSILON[npu] > EPSILON[bench]


def _same_tensor(a: TensorRecord, b: TensorRecord) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and a.statistics[:3] == b.statistics[:3] \
        and all(v is not None for v in a.statistics[:3])


class _Report:
    """The rows with the lookups the advisor needs."""

    def __init__(self, rows: Sequence[CompareRow]) -> None:
        self.rows = rows

    def producer(self, index: int, record: TensorRecord, call: Optional[CallRecord]) -> Optional[int]:
        """Index of the latest earlier NPU output row holding the same tensor as ``record`` (by dtype,
        shape, max/min/mean) and belonging to another call."""
        for earlier in range(index - 1, -1, -1):
            candidate = self.rows[earlier].npu
            if candidate is not None and candidate.side == "output" and self.rows[earlier].pair.npu_call is not call \
                    and _same_tensor(candidate, record):
                return earlier
        return None

    def first_input_row(self, call: CallRecord) -> Optional[int]:
        for index, row in enumerate(self.rows):
            if row.pair.npu_call is call and row.npu is not None and row.npu.side == "input":
                return index
        return None

    def trace(self, index: int) -> Tuple[Optional[int], List[CallRecord]]:
        """From the failing input row ``index``, follow producers back through calls present on the NPU
        side only (casts, extra calls); returns the first producing row that has a bench side (or None)
        and the one-sided calls passed on the way, nearest first."""
        one_sided: List[CallRecord] = []
        row = self.rows[index]
        record, call = row.npu, row.pair.npu_call
        for _ in range(64):  # a cast chain is short; the bound keeps a pathological dump linear
            producer = self.producer(index, record, call)
            if producer is None:
                return None, one_sided
            found = self.rows[producer]
            if found.bench is not None:
                return producer, one_sided
            one_sided.append(found.pair.npu_call)
            start = self.first_input_row(found.pair.npu_call)
            if start is None:
                return None, one_sided
            index, record, call = start, self.rows[start].npu, found.pair.npu_call
        return None, one_sided


def first_failure(rows: Sequence[CompareRow]) -> Optional[int]:
    """Index of the first row whose robust verdict is ``error``."""
    for index, row in enumerate(rows):
        if row.failed:
            return index
    return None


def _first_dtype_mismatch(rows: Sequence[CompareRow], end: int) -> Optional[Mismatch]:
    """The first paired row before ``end`` whose dtypes differ, preferring a call that computes in a
    lower float precision on NPU than on bench."""
    first = None
    for row in rows[:end]:
        if row.npu is None or row.bench is None or row.npu.dtype == row.bench.dtype:
            continue
        lower = _lower_precision(_precision(row.pair.npu_call.records), _precision(row.pair.bench_call.records))
        found = Mismatch(row.pair.npu_call.name, row.npu.dtype, row.bench.dtype, lower)
        if lower:
            return found
        first = first or found
    return first


def _one_sided_before(rows: Sequence[CompareRow], end: int) -> List[str]:
    """One-sided calls before row ``end``, nearest first, casts before other calls."""
    seen, names = set(), []
    for row in reversed(rows[:end]):
        if not row.one_sided or row.call is None or row.call.name in seen:
            continue
        seen.add(row.call.name)
        names.append(row.call.name + (" (NPU only)" if row.bench is None else " (bench only)"))
    casts = [name for name in names if any(cast in name for cast in CASTS)]
    return casts + [name for name in names if name not in casts]


def _fp16_overflow(records: Sequence[TensorRecord]) -> bool:
    for record in records:
        if record.dtype != "torch.float16":
            continue
        for value in record.statistics[:2]:
            if value is not None and (math.isinf(value) or math.isnan(value) or abs(value) >= FP16_MAX):
                return True
    return False


def diagnose(rows: Sequence[CompareRow], counts: Counts, failing: Optional[int]) -> Tuple[Advice, Optional[Finding]]:
    """The advice for the report and the finding for row ``failing``, the first failing row (see
    :func:`first_failure`; None: no row failed): :func:`classify`, then
    :func:`~ptdbg_ascend.comparison.advisor_text.render`."""
    advice = render(classify(rows, counts, failing), rows, counts)
    return advice, advice.finding


def classify(rows: Sequence[CompareRow], counts: Counts, failing: Optional[int]) -> Reason:
    """The advisor's decision about ``rows`` and its evidence; ``failing`` is the first failing row (None: no row
    failed). Whether the run was compared in full (:meth:`Counts.coverage_problems`) and whether only statistics
    were compared are in the reason too."""
    incomplete = bool(counts.coverage_problems())
    if failing is not None:
        return _classify_failure(rows, failing, counts.statistics_only, incomplete)
    if incomplete:
        return Reason(Decision.INCOMPLETE, statistics_only=counts.statistics_only, incomplete=True)
    mismatch = _first_dtype_mismatch(rows, len(rows))
    reduced = reduced_precision_root(rows, len(rows))
    if reduced is None:
        return Reason(Decision.NOTHING_FAILED, mismatch=mismatch, statistics_only=counts.statistics_only)
    # Nothing fails, but a call computes below its dtype's precision: a warning-level finding.
    return Reason(Decision.REDUCED_WARNING, suspect=reduced.call.name, record=rows[reduced.index].name,
                  line=reduced.index + 2, failing_call=reduced.call.name, reduced=_evidence(reduced),
                  mismatch=mismatch, statistics_only=counts.statistics_only)


def _evidence(reduced: Reduced) -> ReducedPrecision:
    return ReducedPrecision(reduced.call.name, reduced.index + 2, reduced.relative_error, reduced.precision,
                            reduced.label)


def _classify_failure(rows: Sequence[CompareRow], failing: int, statistics_only: bool, incomplete: bool) -> Reason:
    """The reason for the first failing row: from its call's output or from an input that already differs,
    with what holds for either (the dtype mismatch and one-sided calls before it, a float16 overflow)."""
    row = rows[failing]
    call = row.pair.npu_call
    mismatch = _first_dtype_mismatch(rows, failing + 1)
    # A call computing below its dtype's precision at the same dtype (TF32/HF32): the root of what follows.
    root = reduced_precision_root(rows, failing + 1)
    if row.side == "output":
        reason = _classify_output(rows, row, root, mismatch)
    else:
        reason = _classify_input(rows, failing, root)
    return dataclasses.replace(
        reason, record=row.name, line=failing + 2, failing_call=call.name, mismatch=mismatch,
        one_sided=tuple(_one_sided_before(rows, failing)[:ONE_SIDED_SHOWN]),
        fp16_overflow=call is not None and _fp16_overflow(call.records), statistics_only=statistics_only,
        incomplete=incomplete)


def _classify_output(rows: Sequence[CompareRow], row: CompareRow, root: Optional[Reduced],
                     mismatch: Optional[Mismatch]) -> Reason:
    """The failing tensor is an output: where its error comes from, given its call's inputs."""
    call = row.pair.npu_call
    inputs = carried_inputs(rows, call)  # its own inputs, and a backward call's forward inputs too
    own_inputs = [r for r in rows if r.pair.npu_call is call and r.npu is not None and r.npu.side == "input"]
    unjudged = tuple(r.name for r in own_inputs if not r.passed)[:3]
    npu_precision, bench_precision = _precision(call.records), _precision(row.pair.bench_call.records)
    carried = carried_error(row, inputs) if root is not None else None
    if _lower_precision(npu_precision, bench_precision):
        reason = Reason(Decision.LOWER_PRECISION, suspect=call.name, npu_precision=npu_precision,
                        bench_precision=bench_precision)
    elif root is not None and root.call is call:
        reason = Reason(Decision.REDUCED_PRECISION, suspect=call.name, reduced=_evidence(root))
    elif root is not None and carried is not None:
        # The failing call amplifies (subtracts, normalises) what the reduced-precision call made.
        reason = Reason(Decision.AMPLIFIED, suspect=root.call.name, reduced=_evidence(root), carried=carried)
    elif split_call_name(call.name).direction == "backward":
        reason = Reason(Decision.BACKWARD, suspect=call.name)
    else:
        reason = Reason(Decision.COMPUTES_DIFFERENTLY, suspect=call.name)
    label = reason.reduced.label if reason.reduced is not None else None
    return dataclasses.replace(reason, unjudged=unjudged,
                               nondeterministic=next_steps.nondeterminism_evidence(row, inputs, mismatch, label))


def _classify_input(rows: Sequence[CompareRow], failing: int, root: Optional[Reduced]) -> Reason:
    """The failing tensor is an input that already differs: follow it back to where the difference starts."""
    call = rows[failing].pair.npu_call
    producer, chain = _Report(rows).trace(failing)
    if chain:
        return Reason(Decision.NPU_ONLY, suspect=chain[-1].name, via=tuple(c.name for c in chain))
    if root is not None:
        return Reason(Decision.REDUCED_UPSTREAM, suspect=root.call.name, reduced=_evidence(root))
    if producer is not None:
        made_by = rows[producer].pair.npu_call
        if rows[producer].passed:
            return Reason(Decision.CHANGED_BETWEEN, suspect=call.name, related=made_by.name,
                          related_line=producer + 2)
        return Reason(Decision.PRODUCED_BY, suspect=made_by.name, related=made_by.name, related_line=producer + 2)
    previous = _previous_call(rows, failing, call)
    if previous is not None:
        return Reason(Decision.GAP, suspect=call.name, related=previous.name)
    return Reason(Decision.MODEL_INPUT, suspect=call.name)


def _previous_call(rows: Sequence[CompareRow], failing: int, call: Optional[CallRecord]) -> Optional[CallRecord]:
    """The NPU call of the nearest row before ``failing`` that belongs to another call (None: none)."""
    for row in reversed(rows[:failing]):
        if row.pair.npu_call is not None and row.pair.npu_call is not call:
            return row.pair.npu_call
    return None
