"""What ``compare`` returns: a :class:`CompareOutcome` that answers ``bool()`` (did every compared tensor
reach the accuracy, and was the run compared: enough tensors judged, both directions paired, few NPU rows
left without a partner?), prints a one-line summary, and carries the advisor's
:class:`~ptdbg_ascend.formats.finding.Finding` and the row :class:`Counts` with their coverage."""

from __future__ import annotations

from typing import NamedTuple, Optional, Sequence, Tuple

from ptdbg_ascend.comparison.api_classes import LAYOUT, api_class
from ptdbg_ascend.readers.dump_state import ENDED, RUNNING, TornDump
from ptdbg_ascend.comparison.rows import CompareRow
from ptdbg_ascend.comparison.verdicts import NOT_COMPARED, WARNING
from ptdbg_ascend.formats.finding import WARNING as WARNING_LEVEL
from ptdbg_ascend.formats.finding import Finding
from ptdbg_ascend.formats.naming import BACKWARD, FORWARD, split_call_name

# Below this share of the paired tensors actually compared, a comparison proves nothing.
MIN_COMPARED_SHARE = 0.5
# Above this share of the NPU rows without a bench partner, the compare is incomplete: a pass would speak for
# rows it never compared. A few one-sided rows are normal (an extra cast on one side).
MAX_UNPAIRED_SHARE = 0.05


class Counts(NamedTuple):
    """How many rows of each kind. ``paired``: both sides present; ``compared``: paired and judged;
    ``not_compared``: paired but not judged (a missing or unreadable file); ``npu_only``/``bench_only``:
    one-sided rows (and shape mismatches are ``unmatched``). By direction: ``npu_forward``/``npu_backward``
    (NPU rows, paired or not), ``bench_forward``/``bench_backward``, ``paired_forward``/``paired_backward``.
    ``statistics_only``: the tensors were judged by their statistics (no tensor files compared; default
    False)."""

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
    npu_forward: int = 0
    npu_backward: int = 0
    bench_forward: int = 0
    bench_backward: int = 0
    paired_forward: int = 0
    paired_backward: int = 0
    statistics_only: bool = False
    # NPU-only rows of calls that compute something: a cast, view or copy on one side only is no gap (what
    # reads its output is compared), nor is a forward call re-run by gradient checkpointing (compared at its
    # first pass), so neither is counted here.
    npu_unpaired: int = 0

    @classmethod
    def of(cls, rows: Sequence[CompareRow], statistics_only: bool = False) -> Counts:
        paired = [row for row in rows if not row.one_sided]
        by_direction = {(side, direction): 0 for side in ("npu", "bench", "paired")
                        for direction in (FORWARD, BACKWARD)}
        unpaired = 0
        for row in rows:
            call = row.call
            direction = split_call_name(call.name).direction if call is not None else FORWARD
            if row.bench is None and call is not None and not row.pair.recomputed and not _moves_values(call.name):
                unpaired += 1
            if row.npu is not None:
                by_direction["npu", direction] += 1
            if row.bench is not None:
                by_direction["bench", direction] += 1
            if not row.one_sided:
                by_direction["paired", direction] += 1
        return cls(
            rows=len(rows), paired=len(paired), compared=sum(1 for row in paired if row.compared),
            passed=sum(1 for row in rows if row.passed), warnings=sum(1 for row in rows if row.result == WARNING),
            failed=sum(1 for row in rows if row.failed),
            not_compared=sum(1 for row in paired if row.result == NOT_COMPARED),
            unmatched=sum(1 for row in paired if not row.compared and row.result != NOT_COMPARED),
            npu_only=sum(1 for row in rows if row.bench is None), bench_only=sum(1 for row in rows if row.npu is None),
            npu_forward=by_direction["npu", FORWARD], npu_backward=by_direction["npu", BACKWARD],
            bench_forward=by_direction["bench", FORWARD], bench_backward=by_direction["bench", BACKWARD],
            paired_forward=by_direction["paired", FORWARD], paired_backward=by_direction["paired", BACKWARD],
            statistics_only=statistics_only, npu_unpaired=unpaired)

    @property
    def enough_compared(self) -> bool:
        """At least one tensor compared, and at least half of the paired ones."""
        return self.compared > 0 and self.compared >= MIN_COMPARED_SHARE * self.paired

    @property
    def npu_rows(self) -> int:
        return self.npu_forward + self.npu_backward

    def coverage_problems(self) -> Tuple[str, ...]:
        """What of the run was not compared, one phrase each (empty: the run was compared): a direction one
        dump has and the other lacks, more than :data:`MAX_UNPAIRED_SHARE` of the NPU rows without a bench
        partner, too few paired tensors judged."""
        problems = []
        for direction, npu, bench in ((FORWARD, self.npu_forward, self.bench_forward),
                                      (BACKWARD, self.npu_backward, self.bench_backward)):
            if npu and not bench:
                problems.append("the bench dump has no {} calls: {} NPU {} rows were never paired{}".format(
                    direction, npu, direction, " (a forward-only bench dump?)" if direction == BACKWARD else ""))
            elif bench and not npu:
                problems.append("the NPU dump has no {} calls: {} bench {} rows were never paired{}".format(
                    direction, bench, direction, " (a forward-only NPU dump?)" if direction == BACKWARD else ""))
        if self.npu_rows and self.npu_unpaired > MAX_UNPAIRED_SHARE * self.npu_rows and not problems:
            problems.append("{} of {} NPU rows ({:.0%}) have no bench partner (different models, dump modes or "
                            "filters: list, range, api_list, scope?)".format(self.npu_unpaired, self.npu_rows,
                                                                              self.npu_unpaired / self.npu_rows))
        if not self.enough_compared:
            if self.compared == 0:
                problems.append(f"none of the {self.paired} paired tensors was judged")
            else:
                problems.append(f"only {self.compared} of {self.paired} paired tensors were judged")
        return tuple(problems)

    @property
    def complete(self) -> bool:
        """The run was compared: no :meth:`coverage_problems`."""
        return not self.coverage_problems()


def _moves_values(call_name: str) -> bool:
    """Whether a call only moves, selects or casts values (api_classes.LAYOUT)."""
    prefix, _, api = split_call_name(call_name).api.partition("_")
    return api_class(prefix, api) == LAYOUT


class CompareOutcome(NamedTuple):
    """What one compare wrote and found. ``first_failure``: NPU record name of the first failing row or
    None. ``rows``: the number of report rows. ``bool(outcome)``: True when nothing failed and the run was
    compared (:attr:`complete`: see :meth:`Counts.coverage_problems`); a warning-level ``finding`` (a call
    computing below its dtype's precision, nothing failing) leaves it True. ``torn``: the dumps read that were
    not closed cleanly (still being written, or killed), with how far each got (default: none); they do not
    change ``bool()``: what was read was compared. ``html_path``: the HTML report (None: not written)."""

    csv_path: str
    xlsx_path: Optional[str]
    advisor_path: Optional[str]
    first_failure: Optional[str]
    rows: int
    finding: Optional[Finding] = None
    counts: Optional[Counts] = None
    torn: Tuple[TornDump, ...] = ()
    html_path: Optional[str] = None

    def __bool__(self) -> bool:
        return self.first_failure is None and self.complete

    @property
    def complete(self) -> bool:
        """Whether the run was compared (True without counts)."""
        return self.counts is None or self.counts.complete

    @property
    def status(self) -> str:
        """``"passed"``, ``"failed"`` (a compared tensor failed) or ``"incomplete"`` (nothing failed, but part
        of the run was not compared)."""
        if self.first_failure is not None:
            return "failed"
        return "passed" if self.complete else "incomplete"

    def __str__(self) -> str:
        counts = self.counts
        tally = "" if counts is None else " ({} of {} paired tensors compared{}, {} failing)".format(
            counts.compared, counts.paired, " by their statistics" if counts.statistics_only else "", counts.failed)
        if counts is not None and not counts.complete:
            tally += "; incomplete: " + "; ".join(counts.coverage_problems())
        torn = "".join(f" [{dump.side} dump torn: {_torn_summary(dump)}]" for dump in self.torn)
        finding = self.finding
        reduced = "" if finding is None or finding.precision is None else \
            f", computing below its dtype's precision ({finding.precision})"
        if finding is not None and finding.level == WARNING_LEVEL:  # nothing failed: a warning only
            head = "all compared tensors reached the accuracy" if self.complete else \
                "nothing failed, but the run was not compared in full"
            return f"{head}{tally}{torn}; warning: {finding.kind} at {finding.call}{reduced}"
        if finding is not None:
            return "first failure {} (line {}): {} at {}{}{}{}".format(
                finding.record, finding.line, finding.kind, finding.call, reduced, tally, torn)
        if self.first_failure is not None:
            return f"first failure {self.first_failure}{tally}{torn}"
        if counts is not None and not counts.enough_compared:
            return f"not enough could be compared{tally}{torn}"
        if counts is not None and not counts.complete:
            return f"nothing failed, but the run was not compared in full{tally}{torn}"
        return f"all compared tensors reached the accuracy{tally}{torn}"


def _torn_summary(dump: TornDump) -> str:
    state = {RUNNING: "still being written", ENDED: "ended without a clean close"}.get(dump.state,
                                                                                 "lock of another host")
    last = f", last {dump.last_call}" if dump.last_call else ""
    return f"{state}, {dump.calls} calls read{last}"
