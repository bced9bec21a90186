"""The advisor: name the first failing API after alignment, tell cause from propagation from the
(pre-call) inputs, give the user's own code line, the first dtype mismatch and the one-sided calls
before the failure, and advice that fits the finding. Says so plainly when too little was compared.

Its answer is written twice: as prose (``advisor_{tail}.txt``, for people) and, when a row failed, as
the versioned finding file beside it (``compare_finding_{tail}.json``, :mod:`ptdbg_ascend.formats.finding`)
that a later run reads (``run_ut``'s compare link)."""

from __future__ import annotations

import math
from collections import Counter
from typing import List, NamedTuple, Optional, Sequence, Tuple

from ptdbg_ascend.comparison import modules, next_steps
from ptdbg_ascend.comparison.answer_text import Advice
from ptdbg_ascend.comparison.outcome import Counts
from ptdbg_ascend.comparison.precision import Reduced, carried_inputs, explained_by_inputs, reduced_precision_root
from ptdbg_ascend.formats.records import CallRecord, TensorRecord, call_user_line, user_line
from ptdbg_ascend.comparison.rows import CompareRow
from ptdbg_ascend.comparison.tolerances import EPSILON, call_precision
from ptdbg_ascend.formats.finding import CAUSE, INPUT, PROPAGATION, WARNING, Finding
from ptdbg_ascend.formats.naming import api_of, split_call_name
from ptdbg_ascend.log import logger

FP16_MAX = 65504.0
ALL_REACHED = "All data in comparison result meets the accuracy requirements."
# Calls that change a dtype: shown first among the one-sided calls.
CASTS = ("_to_", "_type_", "_float_", "_half_", "_bfloat16_", "_double_", "_to_copy_", "_npu_format_cast_")
ONE_SIDED_SHOWN = 8
def _precision(records: Sequence[TensorRecord]) -> Optional[str]:
    return call_precision(record.dtype for record in records)


def _lower_precision(npu: Optional[str], bench: Optional[str]) -> bool:
    return npu is not None and bench is not None and EPSILON[npu] > EPSILON[bench]


def _same_tensor(a: TensorRecord, b: TensorRecord) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and a.statistics[:3] == b.statistics[:3] \
        and all(v is not None for v in a.statistics[:3])


class _Report(object):
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


class DtypeMismatch(NamedTuple):
    """A paired row whose dtypes differ: its NPU call, both dtypes, and whether the call computes in a
    lower float precision on NPU than on bench."""

    call: CallRecord
    npu_dtype: str
    bench_dtype: str
    lower: bool

    def text(self) -> str:
        return "{} (NPU {}, bench {})".format(self.call.name, self.npu_dtype, self.bench_dtype)


def _first_dtype_mismatch(rows: Sequence[CompareRow], end: int) -> Optional[DtypeMismatch]:
    """The first paired row before ``end`` whose dtypes differ, preferring a call that computes in a
    lower float precision on NPU than on bench."""
    first = None
    for row in rows[:end]:
        if row.npu is None or row.bench is None or row.npu.dtype == row.bench.dtype:
            continue
        lower = _lower_precision(_precision(row.pair.npu_call.records), _precision(row.pair.bench_call.records))
        found = DtypeMismatch(row.pair.npu_call, row.npu.dtype, row.bench.dtype, lower)
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


def _not_compared_reasons(rows: Sequence[CompareRow]) -> List[str]:
    reasons: Counter = Counter()
    for row in rows:
        if not row.one_sided and not row.compared:
            message = row.message or row.result
            if "not found" in message:
                message = "a tensor file is missing"
            elif "cannot be read" in message:
                message = "a tensor file cannot be read"
            reasons[message] += 1
    return ["{} rows: {}".format(count, reason) for reason, count in reasons.most_common(3)]


STATISTICS_ONLY = "statistics only: max, min, mean and norm were compared, no tensor files"


def _tally(counts: Counts) -> str:
    return ("Compared: {} of {} paired tensors{} ({} failing, {} warnings, {} not compared, {} unmatched); "
            "{} NPU-only and {} bench-only rows. Paired: forward {} of {} NPU rows, backward {} of {}.".format(
                counts.compared, counts.paired, " by their statistics" if counts.statistics_only else "",
                counts.failed, counts.warnings, counts.not_compared, counts.unmatched, counts.npu_only,
                counts.bench_only, counts.paired_forward, counts.npu_forward, counts.paired_backward,
                counts.npu_backward))


def _incomplete(rows: Sequence[CompareRow], counts: Counts) -> Optional[str]:
    """What of the run was not compared and why, as one sentence (None: the run was compared)."""
    problems = counts.coverage_problems()
    if not problems:
        return None
    if counts.compared == 0:
        head = "Nothing could be compared"
    elif not counts.enough_compared:
        head = "Too little could be compared"
    else:
        head = "Incomplete"
    reasons = _not_compared_reasons(rows) if not counts.enough_compared else []
    if counts.paired == 0:
        reasons.append("no call of one dump pairs with a call of the other (different models or dump modes?)")
    hint = ""
    if not counts.enough_compared:
        hint = " Check the npy directories (npu_dump_data_dir, bench_dump_data_dir)" + (
            "." if counts.statistics_only else ", or compare statistics only by leaving both out.")
    return "{}: {}{}.{} This result does not show that the runs agree.".format(
        head, "; ".join(problems), " ({})".format("; ".join(reasons)) if reasons else "", hint)


def diagnose(rows: Sequence[CompareRow], counts: Counts, failing: Optional[int]) -> Tuple[Advice, Optional[Finding]]:
    """The advice for the report and the finding for row ``failing``, the first failing row (see
    :func:`first_failure`; None: no row failed). The answer's first line says when the run was not compared in
    full (:meth:`Counts.coverage_problems`) and when only statistics were compared."""
    incomplete = _incomplete(rows, counts)
    if failing is None:
        if incomplete is not None:
            logger.warning(incomplete)
            return Advice("NA", "NA", incomplete, (_tally(counts),)), None
        logger.info("All data from api input/output accuracy reached")
        verdict = ALL_REACHED + (" ({}.)".format(STATISTICS_ONLY.capitalize()) if counts.statistics_only else "")
        body = [_tally(counts)]
        mismatch = _first_dtype_mismatch(rows, len(rows))
        if mismatch is not None:
            body.append("Note: {} is the first call that runs in {} on NPU and {} on bench; its differences, and "
                        "those of the calls after it, are within what that precision explains.".format(
                            mismatch.call.name, mismatch.npu_dtype, mismatch.bench_dtype))
        reduced = reduced_precision_root(rows, len(rows))
        if reduced is None:
            return Advice("NA", "NA", verdict, tuple(body)), None
        # Nothing fails, but a call computes below its dtype's precision: a warning-level finding.
        warning = _reduced_finding(rows, reduced)
        logger.warning("Reduced precision: {}".format(reduced.text()))
        body.append("Warning: {}. Nothing fails because of it here. {}".format(reduced.text(),
                                                                             next_steps.reduced_hint(reduced)))
        if warning.user_line:
            body.append("Code: {}".format(warning.user_line))
        return Advice("NA", "NA", verdict, tuple(body), warning), warning
    finding, advice = _analyse(rows, failing)
    logger.warning("Find {} accuracy not reached, the line is {}".format(finding.record, finding.line))
    body = ["Suspect API: {} ({}: {}){}".format(finding.call, finding.kind.capitalize(), _KIND_TEXT[finding.kind],
                                                " [{}]".format(STATISTICS_ONLY) if counts.statistics_only else "")]
    if finding.user_line:
        body.append("Code: {}".format(finding.user_line))
    if rows[failing].judgement.message:
        body.append("First failure: {}".format(rows[failing].judgement.message))
    body.extend(modules.advice_lines(rows))  # L0/mix: the first diverging module and the API inside it
    if incomplete is not None:
        body.append(incomplete)
    if finding.dtype_mismatch:
        body.append("First dtype mismatch before it: {}".format(finding.dtype_mismatch))
    if finding.one_sided:
        body.append("Calls present in one run only before it: {}".format(", ".join(finding.one_sided)))
    body.append(_tally(counts))
    return Advice(str(finding.line), finding.record, advice, tuple(body), finding), finding


def _reduced_finding(rows: Sequence[CompareRow], reduced: Reduced) -> Finding:
    call = reduced.call
    return Finding(record=rows[reduced.index].name, line=reduced.index + 2, kind=CAUSE, call=call.name,
                   api=split_call_name(call.name).api, user_line=user_line(call.stack), dtype_mismatch=None,
                   one_sided=(), level=WARNING, precision=reduced.label)


_KIND_TEXT = {
    CAUSE: "its output differs beyond what its precision and its inputs explain",
    PROPAGATION: "the difference starts at this call; the first failing tensor carries it",
    INPUT: "an input already differs and no dumped API produced it",
}


def _analyse(rows: Sequence[CompareRow], failing: int) -> Tuple[Finding, str]:
    report = _Report(rows)
    row = rows[failing]
    call = row.pair.npu_call
    mismatch = _first_dtype_mismatch(rows, failing + 1)
    mismatch_text = mismatch.text() if mismatch else None
    one_sided = _one_sided_before(rows, failing)
    advice: List[str] = []
    suspect = call
    # A call computing below its dtype's precision at the same dtype (TF32/HF32): the root of what follows.
    root = reduced_precision_root(rows, failing + 1)
    reduced_label = None
    if row.side == "output":
        kind = CAUSE
        inputs = carried_inputs(rows, call)  # its own inputs, and a backward call's forward inputs too
        own_inputs = [r for r in rows if r.pair.npu_call is call and r.npu is not None and r.npu.side == "input"]
        unjudged = [r.name for r in own_inputs if not r.passed]
        own_precision = _lower_precision(_precision(call.records), _precision(row.pair.bench_call.records))
        backward = split_call_name(call.name).direction == "backward"
        if own_precision:
            advice.append("{} computes in {} on NPU and in {} on bench, and its error is beyond what that "
                          "precision's round-off and its inputs explain. {} Computing it in the bench's dtype tells "
                          "whether its lower precision is the reason.".format(
                              call.name, _precision(call.records), _precision(row.pair.bench_call.records),
                              next_steps.next_step(call)))
        elif root is not None and root.call is call:
            reduced_label = root.label
            advice.append("{}. {}".format(root.text(), next_steps.reduced_hint(root)))
        elif root is not None and explained_by_inputs(row, inputs) is not None:
            # The failing call amplifies (subtracts, normalises) what the reduced-precision call made.
            suspect, reduced_label = root.call, root.label
            advice.append("{} fails, but {}: it passes on a difference made earlier. The difference starts at "
                          "{}. {}".format(call.name, explained_by_inputs(row, inputs), root.text(),
                                          next_steps.reduced_hint(root)))
        elif backward:
            advice.append(next_steps.backward_advice(rows, call))
        else:
            advice.append("The inputs of {} are within what their precision explains, but its output is not: this "
                          "API computes differently. {}".format(call.name, next_steps.next_step(call)))
        if unjudged:
            advice.append("Not every input could be judged ({}), so an input difference is not ruled out."
                          .format(", ".join(unjudged[:3])))
        if next_steps.nondeterminism_evidence(row, inputs, mismatch, reduced_label):
            advice.append("Its inputs are identical on both sides and its output differs a little: a different "
                          "kernel, or a non-deterministic one ({}). If both dumps come from the same kind of device, "
                          "enable deterministic computing with seed_all(mode=True) and dump again.".format(
                              api_of(call.name)))
    else:
        producer, chain = report.trace(failing)
        if chain:
            kind = PROPAGATION
            suspect = chain[-1]
            advice.append("This input already differs; it comes from {} which exists on NPU only{}. Check why the "
                          "NPU run calls it (a cast, an extra call) and whether the bench should too.".format(
                              chain[-1].name, "" if len(chain) == 1 else " (through {})".format(
                                  ", ".join(c.name for c in chain[:-1]))))
        elif root is not None:
            kind, suspect, reduced_label = CAUSE, root.call, root.label
            advice.append("This input already differs; the difference starts at {}, and the calls after it carry "
                          "it on. {}".format(root.text(), next_steps.reduced_hint(root)))
        elif producer is not None:
            kind = PROPAGATION
            made_by = rows[producer].pair.npu_call
            if rows[producer].passed:
                advice.append("This input already differs, but {} produced it and its output still matched (CSV line "
                              "{}): the value changed in between without a dumped API writing it. Look at the code "
                              "between {} and this call: in-place writes through .data or numpy, APIs that are not "
                              "dumped.".format(made_by.name, producer + 2, _code_line(rows, made_by) or made_by.name))
            else:
                suspect = made_by
                advice.append("This input already differs; it was produced by {} (CSV line {}). Look upstream from "
                              "there.".format(made_by.name, producer + 2))
        else:
            kind = INPUT
            previous = _previous_call(rows, failing, call)
            if previous is not None:
                # Every dumped call before this one matched: the difference was made between the two dumped
                # calls, by code the dump does not see, not by the data (the calls before consumed it too).
                advice.append("This input already differs, but every dumped call before it matched: the difference "
                              "arose between {} ({}) and {} ({}), in code that calls no dumped API: a torch function "
                              "called through a reference the dump cannot see (a functools.partial, a closure, a "
                              "list), an API outside the wrapped list (dump with extra_apis=True), or an in-place "
                              "write through .data or numpy. Look at the code between these two calls.".format(
                                  previous.name, _code_line(rows, previous) or "no stack",
                                  call.name, _code_line(rows, call) or "no stack"))
            else:
                advice.append("This input already differs and no dumped API produced it. Check what feeds the model: "
                              "the data (loading order, shuffle, augmentation), seed_all() on both sides, the loaded "
                              "weights and initialization, or an API that is not dumped.")
    if call is not None and _fp16_overflow(call.records):
        advice.append("FP16 overflow: a float16 tensor of {} reaches inf/nan or the float16 maximum {}. Check loss "
                      "scaling, or compute this API in float32.".format(call.name, FP16_MAX))
    finding = Finding(record=row.name, line=failing + 2, kind=kind, call=suspect.name,
                      api=split_call_name(suspect.name).api, user_line=_code_line(rows, suspect),
                      dtype_mismatch=mismatch_text, one_sided=tuple(one_sided[:ONE_SIDED_SHOWN]),
                      precision=reduced_label)
    return finding, "\n".join(advice)


def _code_line(rows: Sequence[CompareRow], call: CallRecord) -> Optional[str]:
    """The user's line of ``call``: a backward call's is its forward call's (see ``call_user_line``)."""
    calls = {row.pair.npu_call.name: row.pair.npu_call for row in rows if row.pair.npu_call is not None}
    return call_user_line(call, calls)


def _previous_call(rows: Sequence[CompareRow], failing: int, call: Optional[CallRecord]) -> Optional[CallRecord]:
    """The NPU call of the nearest row before ``failing`` that belongs to another call (None: none)."""
    for row in reversed(rows[:failing]):
        if row.pair.npu_call is not None and row.pair.npu_call is not call:
            return row.pair.npu_call
    return None
