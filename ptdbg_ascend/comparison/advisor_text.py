"""The advisor's words: :func:`render` turns the typed reason :func:`~ptdbg_ascend.comparison.advisor.classify`
decided (:class:`~ptdbg_ascend.formats.reason.Reason`) into the :class:`Advice` (the report's prose, its log
lines) and the :class:`Finding` written beside it. It decides nothing about the suspect; it only looks up in
the rows what the words name (a call's code line, the failing row's numbers, what a backward call's dump holds)."""

from __future__ import annotations

from collections import Counter
from typing import Dict, List, Optional, Sequence

from ptdbg_ascend.comparison import modules, next_steps
from ptdbg_ascend.comparison.answer_text import Advice
from ptdbg_ascend.comparison.outcome import Counts
from ptdbg_ascend.comparison.precision import Reduced, carried_text
from ptdbg_ascend.formats.records import CallRecord, call_user_line, user_line
from ptdbg_ascend.comparison.rows import CompareRow
from ptdbg_ascend.formats.finding import CAUSE, INPUT, PROPAGATION, WARNING, Finding
from ptdbg_ascend.formats.naming import api_of, split_call_name
from ptdbg_ascend.formats.reason import FP16_MAX, Decision, Reason
from ptdbg_ascend.log import logger

ALL_REACHED = "All data in comparison result meets the accuracy requirements."
STATISTICS_ONLY = "statistics only: max, min, mean and norm were compared, no tensor files"
_KIND_TEXT = {
    CAUSE: "its output differs beyond what its precision and its inputs explain",
    PROPAGATION: "the difference starts at this call; the first failing tensor carries it",
    INPUT: "an input already differs and no dumped API produced it",
}


def render(reason: Reason, rows: Sequence[CompareRow], counts: Counts) -> Advice:
    """The advice of ``reason`` about ``rows`` (its finding in ``Advice.finding``, None when no row failed and no
    call computes below its dtype's precision), and its log lines: the text of the report, word for word."""
    calls = _calls(reason, rows)
    if reason.line is not None and reason.decision is not Decision.REDUCED_WARNING:
        return _failure_advice(reason, rows, counts, calls)
    if reason.decision is Decision.INCOMPLETE:
        incomplete = _incomplete(rows, counts)
        logger.warning(incomplete)
        return Advice("NA", "NA", incomplete, (_tally(counts),))
    logger.info("All data from api input/output accuracy reached")
    verdict = ALL_REACHED + (f" ({STATISTICS_ONLY.capitalize()}.)" if reason.statistics_only else "")
    body = [_tally(counts)]
    mismatch = reason.mismatch
    if mismatch is not None:
        body.append("Note: {} is the first call that runs in {} on NPU and {} on bench; its differences, and "
                    "those of the calls after it, are within what that precision explains.".format(
                        mismatch.call, mismatch.npu_dtype, mismatch.bench_dtype))
    if reason.reduced is None:
        return Advice("NA", "NA", verdict, tuple(body))
    reduced = _reduced(reason, calls)
    warning = Finding(record=reason.record, line=reason.line, kind=CAUSE, call=reason.suspect,
                      api=split_call_name(reason.suspect).api, user_line=user_line(reduced.call.stack),
                      dtype_mismatch=None, one_sided=(), level=WARNING, precision=reduced.label, reason=reason)
    logger.warning(f"Reduced precision: {reduced.text()}")
    body.append(f"Warning: {reduced.text()}. Nothing fails because of it here. {next_steps.reduced_hint(reduced)}")
    if warning.user_line:
        body.append(f"Code: {warning.user_line}")
    return Advice("NA", "NA", verdict, tuple(body), warning)


def _calls(reason: Reason, rows: Sequence[CompareRow]) -> Dict[str, CallRecord]:
    """The NPU calls of ``rows`` by name; the calls at the rows the reason names are those very calls (a dump
    that repeats a name keeps each row's own call)."""
    calls = {row.pair.npu_call.name: row.pair.npu_call for row in rows if row.pair.npu_call is not None}
    for line in (reason.related_line, reason.reduced.line if reason.reduced else None, reason.line):
        if line is not None and rows[line - 2].pair.npu_call is not None:
            calls[rows[line - 2].pair.npu_call.name] = rows[line - 2].pair.npu_call
    return calls


def _failure_advice(reason: Reason, rows: Sequence[CompareRow], counts: Counts,
                    calls: Dict[str, CallRecord]) -> Advice:
    """The advice when a row failed: the answer lines, then what else the reason and the counts say."""
    suspect = calls[reason.suspect]
    finding = Finding(record=reason.record, line=reason.line, kind=reason.kind, call=reason.suspect,
                      api=split_call_name(reason.suspect).api, user_line=call_user_line(suspect, calls),
                      dtype_mismatch=reason.mismatch.text() if reason.mismatch else None, one_sided=reason.one_sided,
                      precision=reason.reduced.label if reason.reduced else None, reason=reason)
    advice = "\n".join(_advice_paragraphs(reason, rows, calls))
    logger.warning(f"Find {finding.record} accuracy not reached, the line is {finding.line}")
    body = ["Suspect API: {} ({}: {}){}".format(finding.call, finding.kind.capitalize(), _KIND_TEXT[finding.kind],
                                                f" [{STATISTICS_ONLY}]" if reason.statistics_only else "")]
    if finding.user_line:
        body.append(f"Code: {finding.user_line}")
    message = rows[reason.line - 2].judgement.message
    if message:
        body.append(f"First failure: {message}")
    body.extend(modules.advice_lines(rows))  # L0/mix: the first diverging module and the API inside it
    if reason.incomplete:
        body.append(_incomplete(rows, counts))
    if finding.dtype_mismatch:
        body.append(f"First dtype mismatch before it: {finding.dtype_mismatch}")
    if finding.one_sided:
        body.append(f"Calls present in one run only before it: {', '.join(finding.one_sided)}")
    body.append(_tally(counts))
    return Advice(str(finding.line), finding.record, advice, tuple(body), finding)


def _advice_paragraphs(reason: Reason, rows: Sequence[CompareRow], calls: Dict[str, CallRecord]) -> List[str]:
    """The advice of a failure, one paragraph per line: what the decision means and what to check, then the
    inputs that could not be judged, the evidence of non-determinism and a float16 overflow."""
    decision, call = reason.decision, calls[reason.failing_call]
    if decision in _CAUSE_TEXTS:
        advice = [_CAUSE_TEXTS[decision](reason, rows, calls)]
    else:
        advice = [_INPUT_TEXTS[decision](reason, rows, calls)]
    if reason.unjudged:
        advice.append("Not every input could be judged ({}), so an input difference is not ruled out."
                      .format(", ".join(reason.unjudged)))
    if reason.nondeterministic:
        advice.append("Its inputs are identical on both sides and its output differs a little: a different "
                      "kernel, or a non-deterministic one ({}). If both dumps come from the same kind of device, "
                      "enable deterministic computing with seed_all(mode=True) and dump again.".format(
                          api_of(call.name)))
    if reason.fp16_overflow:
        advice.append("FP16 overflow: a float16 tensor of {} reaches inf/nan or the float16 maximum {}. Check loss "
                      "scaling, or compute this API in float32.".format(call.name, FP16_MAX))
    return advice


def _reduced(reason: Reason, calls: Dict[str, CallRecord]) -> Reduced:
    found = reason.reduced
    return Reduced(found.line - 2, calls[found.call], found.relative_error, found.dtype, found.label)


def _lower_precision_text(reason: Reason, rows: Sequence[CompareRow], calls: Dict[str, CallRecord]) -> str:
    call = calls[reason.failing_call]
    return ("{} computes in {} on NPU and in {} on bench, and its error is beyond what that precision's round-off "
            "and its inputs explain. {} Computing it in the bench's dtype tells whether its lower precision is the "
            "reason.".format(call.name, reason.npu_precision, reason.bench_precision, next_steps.next_step(call)))


def _reduced_text(reason: Reason, rows: Sequence[CompareRow], calls: Dict[str, CallRecord]) -> str:
    root = _reduced(reason, calls)
    return f"{root.text()}. {next_steps.reduced_hint(root)}"


def _amplified_text(reason: Reason, rows: Sequence[CompareRow], calls: Dict[str, CallRecord]) -> str:
    root = _reduced(reason, calls)
    return ("{} fails, but {}: it passes on a difference made earlier. The difference starts at {}. {}".format(
        reason.failing_call, carried_text(reason.carried), root.text(), next_steps.reduced_hint(root)))


def _backward_text(reason: Reason, rows: Sequence[CompareRow], calls: Dict[str, CallRecord]) -> str:
    return next_steps.backward_advice(rows, calls[reason.failing_call])


def _differently_text(reason: Reason, rows: Sequence[CompareRow], calls: Dict[str, CallRecord]) -> str:
    call = calls[reason.failing_call]
    return ("The inputs of {} are within what their precision explains, but its output is not: this API computes "
            "differently. {}".format(call.name, next_steps.next_step(call)))


def _npu_only_text(reason: Reason, rows: Sequence[CompareRow], calls: Dict[str, CallRecord]) -> str:
    chain = reason.via
    return ("This input already differs; it comes from {} which exists on NPU only{}. Check why the NPU run calls "
            "it (a cast, an extra call) and whether the bench should too.".format(
                chain[-1], "" if len(chain) == 1 else " (through {})".format(", ".join(chain[:-1]))))


def _upstream_text(reason: Reason, rows: Sequence[CompareRow], calls: Dict[str, CallRecord]) -> str:
    root = _reduced(reason, calls)
    return ("This input already differs; the difference starts at {}, and the calls after it carry it on. {}".format(
        root.text(), next_steps.reduced_hint(root)))


def _changed_between_text(reason: Reason, rows: Sequence[CompareRow], calls: Dict[str, CallRecord]) -> str:
    made_by = calls[reason.related]
    return ("This input already differs, but {} produced it and its output still matched (CSV line {}): the value "
            "changed in between without a dumped API writing it. Look at the code between {} and this call: "
            "in-place writes through .data or numpy, APIs that are not dumped.".format(
                made_by.name, reason.related_line, call_user_line(made_by, calls) or made_by.name))


def _produced_by_text(reason: Reason, rows: Sequence[CompareRow], calls: Dict[str, CallRecord]) -> str:
    return "This input already differs; it was produced by {} (CSV line {}). Look upstream from there.".format(
        reason.related, reason.related_line)


def _gap_text(reason: Reason, rows: Sequence[CompareRow], calls: Dict[str, CallRecord]) -> str:
    # Every dumped call before this one matched: the difference was made between the two dumped calls, by code
    # the dump does not see, not by the data (the calls before consumed it too).
    previous, call = calls[reason.related], calls[reason.failing_call]
    return ("This input already differs, but every dumped call before it matched: the difference arose between {} "
            "({}) and {} ({}), in code that calls no dumped API: a torch function called through a reference the "
            "dump cannot see (a functools.partial, a closure, a list), an API outside the wrapped list (dump with "
            "extra_apis=True), or an in-place write through .data or numpy. Look at the code between these two "
            "calls.".format(previous.name, call_user_line(previous, calls) or "no stack",
                            call.name, call_user_line(call, calls) or "no stack"))


def _model_input_text(reason: Reason, rows: Sequence[CompareRow], calls: Dict[str, CallRecord]) -> str:
    return ("This input already differs and no dumped API produced it. Check what feeds the model: the data "
            "(loading order, shuffle, augmentation), seed_all() on both sides, the loaded weights and "
            "initialization, or an API that is not dumped.")


# The first paragraph of the advice, by decision: the failing tensor is an output, or an input.
_CAUSE_TEXTS = {
    Decision.LOWER_PRECISION: _lower_precision_text, Decision.REDUCED_PRECISION: _reduced_text,
    Decision.AMPLIFIED: _amplified_text, Decision.BACKWARD: _backward_text,
    Decision.COMPUTES_DIFFERENTLY: _differently_text,
}
_INPUT_TEXTS = {
    Decision.NPU_ONLY: _npu_only_text, Decision.REDUCED_UPSTREAM: _upstream_text,
    Decision.CHANGED_BETWEEN: _changed_between_text, Decision.PRODUCED_BY: _produced_by_text,
    Decision.GAP: _gap_text, Decision.MODEL_INPUT: _model_input_text,
}


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
    return [f"{count} rows: {reason}" for reason, count in reasons.most_common(3)]


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
