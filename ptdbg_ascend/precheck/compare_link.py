"""Does a pre-check failure matter in this run? Link each failing API of ``run_ut`` to the compare of the
same run (beyond msprobe 1.0.4).

``run_ut`` says "this API computes inaccurately in isolation" (its device result against a float64 CPU
benchmark, from the dumped inputs). ``compare`` says "this tensor differs between two runs". The two
together answer the user's real question: is the inaccurate API the one that breaks *this* run?

For each failing API (error or warning in run_ut) this module looks up the output rows of the same call
in a compare report (``compare_result_{ts}.csv`` written by ``compare()`` / ``ptdbg compare``), in the
directions that failed (forward: ``..._forward_output``; backward: ``..._backward_output``, the gradients
the backward computes, as run_ut's ``.backward.output.`` rows), and says:

- ``failing``: a compare row of that output is an error there too (its Result and Err_message);
- ``passing``: every such row passes: inaccurate in isolation, but within tolerance in this run;
- ``not judged``: the rows exist but the compare could not judge them (unmatched, not compared);
- ``absent``: the compare has no such row (the call is not in the compare's NPU dump, or another range).

and where the call stands relative to the compare advisor's suspect: it *is* the suspect, it *precedes*
it (it ran before the suspect in the dump order: a candidate for the root cause) or it *follows* it (the
run already differed before it ran). The suspect (the advisor traces propagations back through the
records, which the CSV does not hold) comes from the ``CompareOutcome`` that ``compare()`` returned or
from the finding file ``compare_finding_{ts}.json`` the same compare wrote beside its CSV, once it is
checked to be that CSV's; without either, the position is given relative to the compare's first failing
row instead, and says so. Reading the report (streamed, the finding checked, row names and verdicts) is
:mod:`ptdbg_ascend.precheck.compare_report`.

The link of each failing API is a ``Compare Link`` cell written with its result row (``results``).
No torch, no numpy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Sequence, Tuple

from ptdbg_ascend.precheck import columns as col
from ptdbg_ascend.precheck.compare_report import (  # noqa: F401 -- the link's inputs, where callers find them
    FAILING, FIRST_FAILURE, NOT_JUDGED, PASSING, SUSPECT, CompareReport, CompareRowVerdict, DirectionRows,
    finding_path_of, read_compare, read_finding, row_verdict)

ABSENT = "absent"
IS_SUSPECT, PRECEDES, FOLLOWS = "is", "precedes", "follows"
PASSING_TEXT = "inaccurate in isolation, but within tolerance in this run"


@dataclass(frozen=True)
class CompareLink:
    """What the compare of the same run says about one failing API (see the module doc).
    ``position``: IS_SUSPECT / PRECEDES / FOLLOWS relative to ``anchor_kind``, None when unknown."""

    state: str
    directions: Tuple[str, ...]
    row: str = ""
    result: str = ""
    message: str = ""
    inputs_failing: bool = False
    position: Optional[str] = None
    anchor_kind: str = SUSPECT

    def _position_text(self) -> str:
        if self.position is None:
            return ""
        if self.position == IS_SUSPECT:
            return f"; it is {self.anchor_kind}"
        return f"; it {'runs before' if self.position == PRECEDES else 'runs after'} {self.anchor_kind}"

    def text(self) -> str:
        """The summary line: ``failing there too: error (Relative error ...); it is the advisor's suspect``."""
        if self.state == FAILING:
            head = "failing there too: {} ({}){}".format(self.result, self.message or "no message", " [its inputs "
                                                         "already differ there]" if self.inputs_failing else "")
        elif self.state == PASSING:
            head = "passing there: " + PASSING_TEXT
        elif self.state == NOT_JUDGED:
            head = f"not judged there: {self.result}{(f' ({self.message})' if self.message else '')}"
        else:
            head = f"absent: the compare has no {'/'.join(self.directions)} output row of this call"
        return head + self._position_text()

    def cell(self) -> str:
        """The Compare Link cell of the result CSV: ``failing: error: <Err_message>; it is the advisor's
        suspect`` (the state first, so a spreadsheet filter on the prefix works)."""
        if self.state == FAILING:
            head = f"failing: {self.result}: {self.message}{'; inputs already differ' if self.inputs_failing else ''}"
        elif self.state == PASSING:
            head = "passing: " + PASSING_TEXT
        elif self.state == NOT_JUDGED:
            head = "not judged: " + self.result
        else:
            head = ABSENT
        return head + self._position_text()


# --- linking ----------------------------------------------------------------------------------------------

def link(api: str, forward: str, backward: str, report: CompareReport) -> CompareLink:
    """The link of the run_ut API ``api`` (``Functional.gelu.0``) whose Forward/Backward Test Success
    are ``forward``/``backward``: only the directions that are error or warning are looked up."""
    directions = tuple(d for d, status in (("forward", forward), ("backward", backward))
                       if status in (col.ERROR, col.WARNING)) or ("forward", "backward")
    rows = [report.rows[(api, d)] for d in directions if (api, d) in report.rows]
    position = _position(api, directions, rows, report)
    base = dict(directions=directions, position=position, anchor_kind=report.anchor_kind)
    for state in (FAILING, PASSING, NOT_JUDGED):  # the first output row in that state, in either direction
        chosen = sorted((r.output(state) for r in rows if r.output(state) is not None), key=lambda row: row.order)
        if chosen:
            return CompareLink(state, row=chosen[0].name, result=chosen[0].result, message=chosen[0].message,
                               inputs_failing=_inputs_failing(api, chosen[0].direction, report), **base)
    return CompareLink(ABSENT, **base)


def _inputs_failing(api: str, direction: str, report: CompareReport) -> bool:
    """Whether the inputs of the output row shown (``direction``) already fail in the compare: a forward
    output has its forward inputs; a backward one its incoming gradients and, as a backward also reads them,
    the forward inputs. A failing backward input says nothing about a forward output, so it is not counted."""
    counted = ("forward",) if direction == "forward" else ("backward", "forward")
    return any(report.rows[(api, d)].inputs_failing for d in counted if (api, d) in report.rows)


def _position(api: str, directions: Sequence[str], rows: Sequence[DirectionRows],
              report: CompareReport) -> Optional[str]:
    if report.anchor is None or not rows:
        return None
    if report.anchor[0] == api and report.anchor[1] in directions:
        return IS_SUSPECT
    if report.anchor_order < 0:
        return None
    return PRECEDES if min(r.first_order for r in rows) < report.anchor_order else FOLLOWS


def link_failure(api: str, forward: str, backward: str, report: CompareReport) -> Optional[CompareLink]:
    """The link of a result row (``api``, Forward/Backward Test Success) when the API fails in run_ut
    (error or warning, forward or backward); None for a passing or SKIP API (its Compare Link cell is empty)."""
    if col.overall_status(forward, backward) not in (col.ERROR, col.WARNING):
        return None
    return link(api, forward, backward, report)


def times_allowed(severity: float) -> str:
    """The judge's severity as the summary shows it: ``2.98x the allowed error`` (1.0 = at the dtype's
    error threshold); inf: a type/shape/dtype mismatch; nan: not measured."""
    if math.isnan(severity):
        return "error size not measured"
    if math.isinf(severity):
        return "type/shape/dtype mismatch"
    return f"{severity:.3g}x the allowed error"
