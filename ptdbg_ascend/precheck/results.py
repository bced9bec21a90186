"""The results of a pre-check run: each API's rows as they are committed, and what the run reports.

:class:`RunResults` takes the rows of each API in dump order (from ``call_check``, in this process or a
``multi_run_ut`` worker), writes them to the CSV pair (``ut_files``; the result row with its Compare Link
cell when the run links to a compare) and counts them as they pass: the counts, the failing APIs and the
SKIP reasons of :class:`RunUtOutcome` come from memory, not from reading the CSVs back. Only what a resumed
CSV already holds is parsed from it, once (:func:`open_results`), and counted the same way.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Set, Tuple

from ptdbg_ascend.formats.naming import ut_api_of_row
from ptdbg_ascend.log import logger
from ptdbg_ascend.precheck import columns as col
from ptdbg_ascend.precheck import ut_files, ut_lock
from ptdbg_ascend.precheck.compare_link import CompareLink, CompareReport, link_failure, times_allowed
from ptdbg_ascend.precheck.plan import UtPlan
from ptdbg_ascend.terminal import printable

SUMMARY_FAILURES = 15  # failing APIs listed by the summary (one screen)
# where a details row holds what the summary shows (the last column of a title, as a dict by title would)
_DETAIL_INDEX = {title: index for index, title in enumerate(col.DETAIL_COLUMNS)}
_FAILING_ORDER = {col.ERROR: 0, col.WARNING: 1}


@dataclass
class FailingApi:
    """An API whose forward or backward is error/warning: its worst row and the user's code line."""

    name: str
    forward: str
    backward: str
    status: str
    severity: float
    worst_row: str
    message: str
    code_line: Optional[str]
    link: Optional[CompareLink] = None  # when run with compare_csv


@dataclass
class RunUtOutcome:
    """What a run_ut produced. ``counts``: APIs by overall status (pass / warning / error / SKIP) over
    the whole result CSV (a resumed run included); ``failures``: error then warning APIs, worst first;
    ``skipped``: (API, reason); ``apis_run``/``seconds``: this invocation's work."""

    result_csv: str
    details_csv: str
    counts: Dict[str, int] = field(default_factory=dict)
    failures: List[FailingApi] = field(default_factory=list)
    skipped: List[Tuple[str, str]] = field(default_factory=list)
    apis_run: int = 0
    apis_resumed: int = 0
    seconds: float = 0.0
    random_data: bool = False
    error_data_dir: Optional[str] = None
    compare: Optional[CompareReport] = None  # when run with compare_csv

    @property
    def failed(self) -> bool:
        """Whether an API's accuracy is an error (warnings alone are not a failure)."""
        return self.counts.get(col.ERROR, 0) > 0

    def summary(self) -> str:
        """The one-screen summary: counts, then the failing APIs worst first with their code lines.

        API names, code lines, messages and SKIP reasons come from the dump and the CSVs: each line of
        :meth:`summary_lines` has its control characters escaped (``printable``), once, and the lines are
        joined with real newlines, so an item never spills over lines and the summary never glues them."""
        return "\n".join(printable(line) for line in self.summary_lines())

    def summary_lines(self) -> List[str]:
        """The lines of :meth:`summary` as they are, before escaping (a subclass adds its own here, so that
        escaping happens once, line by line, in ``summary``)."""
        total = sum(self.counts.values())
        rate = self.apis_run / self.seconds if self.seconds > 0 else float("nan")
        lines = ["run_ut: {} APIs: {} pass, {} warning, {} error, {} SKIP{} ({} run now in {:.1f} s, {:.1f} APIs/s{})"
                 .format(total, self.counts.get(col.PASS, 0), self.counts.get(col.WARNING, 0),
                         self.counts.get(col.ERROR, 0), self.counts.get(col.SKIP, 0),
                         "; random inputs" if self.random_data else "", self.apis_run, self.seconds, rate,
                         f"; {self.apis_resumed} done before" if self.apis_resumed else ""),
                 "  result:  " + self.result_csv, "  details: " + self.details_csv]
        if self.error_data_dir:
            lines.append("  error data: " + self.error_data_dir)
        if self.compare is not None:
            lines.append("  linked to " + self.compare.describe())
        if self.failures:
            lines.append("Failing APIs, worst first (by error size; 1x = at the error threshold of the dtype):")
            for failure in self.failures[:SUMMARY_FAILURES]:
                lines.append("  {:<7} {}  forward {} / backward {}  {}".format(
                    failure.status, failure.name, failure.forward, failure.backward.strip() or "-",
                    times_allowed(failure.severity)))
                lines.append(f"          {failure.code_line or '(no stack.json line)'}")
                if failure.link is not None:
                    lines.append("          compare: " + failure.link.text())
            if len(self.failures) > SUMMARY_FAILURES:
                lines.append(f"  ... and {len(self.failures) - SUMMARY_FAILURES} more in the result CSV.")
        else:
            lines.append("No failing API.")
        if self.skipped:
            reasons: Dict[str, int] = {}
            for _, reason in self.skipped:
                reasons[reason[:90]] = reasons.get(reason[:90], 0) + 1
            lines.append("SKIP reasons: " + "; ".join(f"{n}x {r}" for r, n in
                                                     sorted(reasons.items(), key=lambda item: -item[1])[:5]))
        return lines


# --- the rows of a run ----------------------------------------------------------------------------------

def _worst_row(detail_rows: Sequence[Sequence[Any]]) -> Tuple[float, str, str]:
    """``(severity or -1.0 when not measured, row name, message)`` of an API's worst error/warning details
    row (the first of equal ones); ``(-1.0, "", "")`` when none is."""
    worst: Optional[Tuple[float, str, str]] = None
    for row in detail_rows:
        if len(row) < len(col.DETAIL_COLUMNS) or row[_DETAIL_INDEX[col.STATUS]] not in (col.ERROR, col.WARNING):
            continue
        try:
            severity = float(row[_DETAIL_INDEX[col.SEVERITY]])
        except ValueError:  # SPACE: not measured
            severity = float("nan")
        rank = -1.0 if math.isnan(severity) else severity
        if worst is None or rank > worst[0]:
            worst = (rank, row[_DETAIL_INDEX[col.API_NAME]], row[_DETAIL_INDEX[col.MESSAGE]])
    return worst if worst is not None else (-1.0, "", "")


class RunResults:
    """One run's results (module doc). ``files``: the open CSV pair (:func:`open_results` sets it);
    ``done``: the APIs the resumed CSV held; ``calls``: the dump's calls by name (for their code lines);
    ``report``: the compare the failures are linked to (None, the default: not linked)."""

    def __init__(self, calls: Mapping[str, Any], report: Optional[CompareReport] = None) -> None:
        self.files: Optional[ut_files.UtFiles] = None
        self.done: Set[str] = set()
        self.calls, self.report = calls, report
        self._counts: Dict[str, int] = {}
        self._failures: List[FailingApi] = []
        self._skipped: List[Tuple[str, str]] = []

    def _judged(self, result_row: Sequence[Any], detail_rows: Sequence[Sequence[Any]]
                ) -> Tuple[Optional[str], Optional[FailingApi]]:
        """(the API's overall status, None for a row too short to hold one; the FailingApi when error or
        warning, linked when the run links)."""
        if len(result_row) < 3:
            return None, None
        name, forward, backward = result_row[0], result_row[1], result_row[2]
        status = col.overall_status(forward, backward)
        if status not in (col.ERROR, col.WARNING):
            return status, None
        rank, row_name, message = _worst_row(detail_rows)
        call = self.calls.get(name)
        failure = FailingApi(name, forward, backward, status, float("nan") if rank < 0 else rank, row_name, message,
                             call.code_line if call else None)
        if self.report is not None:
            failure.link = link_failure(name, forward, backward, self.report)
        return status, failure

    def _count(self, result_row: Sequence[Any], status: Optional[str], failure: Optional[FailingApi]) -> None:
        if status is None:
            return
        self._counts[status] = self._counts.get(status, 0) + 1
        if status == col.SKIP:
            self._skipped.append((result_row[0], result_row[3] if len(result_row) > 3 else ""))
        elif failure is not None:
            self._failures.append(failure)

    def _result_cells(self, result_row: Sequence[Any], failure: Optional[FailingApi]) -> List[Any]:
        """The row as the result CSV holds it: 1.0.4's four cells, then the Compare Link cell when linked
        (empty for an API that does not fail)."""
        if self.report is None:
            return list(result_row)
        return list(result_row[:len(col.RESULT_COLUMNS)]) + [failure.link.cell() if failure is not None else ""]

    def write_api(self, result_row: Sequence[Any], detail_rows: Sequence[Sequence[Any]]) -> None:
        """Commit one API: its rows to the CSV pair (``UtFiles.write_api``), then into the counts."""
        status, failure = self._judged(result_row, detail_rows)
        self.files.write_api(self._result_cells(result_row, failure), detail_rows)
        self._count(result_row, status, failure)

    def resume(self, results: Sequence[Sequence[str]], details: Sequence[Sequence[str]]) -> List[List[str]]:
        """Count what a resumed CSV holds (``ut_files.read_pair``); returns its result rows as the
        resumed run rewrites them (with their Compare Link cells when it links)."""
        by_api: Dict[str, List[Sequence[str]]] = {}
        for row in details:
            by_api.setdefault(ut_api_of_row(row[0]), []).append(row)
        rows = []
        for row in results:
            status, failure = self._judged(row, by_api.get(row[0], ()))
            self._count(row, status, failure)
            rows.append(self._result_cells(row, failure))
            self.done.add(row[0])
        return rows

    def fill(self, outcome: RunUtOutcome) -> None:
        """The counts, failing APIs (error then warning, worst first) and SKIP reasons of the whole result
        CSV (a resumed run's included), and the compare when linked."""
        outcome.counts = dict(self._counts)
        outcome.failures = sorted(self._failures, key=lambda f: (
            _FAILING_ORDER[f.status], -(f.severity if not math.isnan(f.severity) else -1.0), f.name))
        outcome.skipped = list(self._skipped)
        if self.report is not None:
            outcome.compare = self.report


def open_results(plan: UtPlan) -> RunResults:
    """The results of the run ``plan`` with its CSV pair open (resumed, or new in ``base_dir``); the
    pair's lock is held until the files are closed (``ut_lock``: a second run on it is refused)."""
    results = RunResults({call.full_name: call for call in plan.dump.calls}, plan.compare_report)
    linked = plan.compare_report is not None
    if plan.result_csv_path:
        lock = ut_lock.acquire(plan.result_csv_path)
        try:
            rows, details = ut_files.read_pair(plan.result_csv_path)
            kept, run_file_lines = ut_files.verify_rows(plan.result_csv_path, rows, details)  # the run's own rows
            if kept < len(rows):
                logger.warning("{}: the last API, {}, has its rows but no line in the run file yet (the run stopped "
                               "while committing it): it is run again.".format(plan.result_csv_path, rows[-1][0]))
                rows = rows[:kept]
                done = {row[0] for row in rows}
                details = [row for row in details if ut_api_of_row(row[0]) in done]
            results.files = ut_files.resume_pair(plan.result_csv_path, results.resume(rows, details), details,
                                                 lock, linked, run_file_lines)
        except BaseException:
            lock.release()
            raise
    else:
        results.files = ut_files.new_pair(plan.base_dir, plan.identity, linked)
    return results
