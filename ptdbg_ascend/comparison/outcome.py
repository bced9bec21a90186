"""What ``compare`` returns: a :class:`CompareOutcome` that answers ``bool()`` (did every compared tensor
reach the accuracy, and could enough be compared?), prints a one-line summary, and carries the advisor's
:class:`~ptdbg_ascend.formats.finding.Finding` and the row :class:`Counts`."""

from __future__ import annotations

from typing import NamedTuple, Optional, Sequence, Tuple

from ptdbg_ascend.comparison.dump_state import ENDED, RUNNING, TornDump
from ptdbg_ascend.comparison.rows import CompareRow
from ptdbg_ascend.comparison.verdicts import NOT_COMPARED, WARNING
from ptdbg_ascend.formats.finding import WARNING as WARNING_LEVEL
from ptdbg_ascend.formats.finding import Finding

# Below this share of the paired tensors actually compared, a comparison proves nothing.
MIN_COMPARED_SHARE = 0.5


class Counts(NamedTuple):
    """How many rows of each kind. ``paired``: both sides present; ``compared``: paired and judged;
    ``not_compared``: paired but not judged (a missing or unreadable file); ``npu_only``/``bench_only``:
    one-sided rows (and shape mismatches are ``unmatched``)."""

    rows: int
    paired: int
    compared: int
    passed: int
    warnings: int
    failed: int
    not_compared: int
    unmatched: int
    npu_only: int
    bench_only: int

    @classmethod
    def of(cls, rows: Sequence[CompareRow]) -> "Counts":
        paired = [row for row in rows if not row.one_sided]
        return cls(
            rows=len(rows), paired=len(paired), compared=sum(1 for row in paired if row.compared),
            passed=sum(1 for row in rows if row.passed), warnings=sum(1 for row in rows if row.result == WARNING),
            failed=sum(1 for row in rows if row.failed),
            not_compared=sum(1 for row in paired if row.result == NOT_COMPARED),
            unmatched=sum(1 for row in paired if not row.compared and row.result != NOT_COMPARED),
            npu_only=sum(1 for row in rows if row.bench is None), bench_only=sum(1 for row in rows if row.npu is None))

    @property
    def enough_compared(self) -> bool:
        """At least one tensor compared, and at least half of the paired ones."""
        return self.compared > 0 and self.compared >= MIN_COMPARED_SHARE * self.paired


class CompareOutcome(NamedTuple):
    """What one compare wrote and found. ``first_failure``: NPU record name of the first failing row or
    None. ``rows``: the number of report rows. ``bool(outcome)``: True when nothing failed and enough
    tensors were compared (see :class:`Counts`); a warning-level ``finding`` (a call computing below its
    dtype's precision, nothing failing) leaves it True. ``torn``: the dumps read that were not closed cleanly
    (still being written, or killed), with how far each got (default: none); they do not change ``bool()``:
    what was read was compared."""

    csv_path: str
    xlsx_path: Optional[str]
    advisor_path: Optional[str]
    first_failure: Optional[str]
    rows: int
    finding: Optional[Finding] = None
    counts: Optional[Counts] = None
    torn: Tuple[TornDump, ...] = ()

    def __bool__(self) -> bool:
        if self.counts is None:
            return self.first_failure is None
        return self.first_failure is None and self.counts.enough_compared

    def __str__(self) -> str:
        counts = self.counts
        tally = "" if counts is None else " ({} of {} paired tensors compared, {} failing)".format(
            counts.compared, counts.paired, counts.failed)
        torn = "".join(" [{} dump torn: {}]".format(dump.side, _torn_summary(dump)) for dump in self.torn)
        finding = self.finding
        reduced = "" if finding is None or finding.precision is None else \
            ", computing below its dtype's precision ({})".format(finding.precision)
        if finding is not None and finding.level == WARNING_LEVEL:  # nothing failed: a warning only
            return "all compared tensors reached the accuracy{}{}; warning: {} at {}{}".format(
                tally, torn, finding.kind, finding.call, reduced)
        if finding is not None:
            return "first failure {} (line {}): {} at {}{}{}{}".format(
                finding.record, finding.line, finding.kind, finding.call, reduced, tally, torn)
        if self.first_failure is not None:
            return "first failure {}{}{}".format(self.first_failure, tally, torn)
        if counts is not None and not counts.enough_compared:
            return "not enough could be compared{}{}".format(tally, torn)
        return "all compared tensors reached the accuracy{}{}".format(tally, torn)


def _torn_summary(dump: TornDump) -> str:
    state = {RUNNING: "still being written", ENDED: "ended without a clean close"}.get(dump.state,
                                                                                 "lock of another host")
    last = ", last {}".format(dump.last_call) if dump.last_call else ""
    return "{}, {} calls read{}".format(state, dump.calls, last)
