"""compare's HTML report, ``compare_report_{tail}.html`` beside ``compare_result_{tail}.csv``: the run as one
self-contained page a person reads in 30 seconds. The answer first (verdict, suspect and kind, code line,
first failure, a re-run verdict when the finding carries one, coverage), then each row's error relative to
what it was allowed along the call sequence (forward and backward apart, the first failure marked, zoomable),
the module tree coloured by where the divergence starts (:mod:`html_tree`), and the failing rows with their
statistics and stacks, searchable and paged.

Its size is bounded whatever the run's: at most :data:`MAX_CHART_POINTS` points per direction (beyond that,
per bucket of rows the one with the largest share of its allowance, errors first, and one not compared row),
:data:`MAX_TABLE_ROWS` table rows (errors first), :data:`~html_tree.MAX_TREE_NODES` tree nodes, texts cut at
:data:`MAX_TEXT` characters (stacks at :data:`MAX_STACK_TEXT`). A row that was not compared (one side only,
a shape mismatch, a file that could not be read) is drawn as such, never as a pass. Torch-free.
"""

from __future__ import annotations

import math
import os
from typing import Any, Dict, List, NamedTuple, Optional, Sequence, Tuple

from ptdbg_ascend.comparison import columns as col
from ptdbg_ascend.comparison import html_page
from ptdbg_ascend.comparison.answer_text import Advice
from ptdbg_ascend.comparison.html_tree import SOURCE_CONSTRUCT, call_stack, module_tree
from ptdbg_ascend.comparison.outcome import Counts
from ptdbg_ascend.comparison.reports import row_cells
from ptdbg_ascend.comparison.rows import CompareRow
from ptdbg_ascend.comparison.verdicts import ERROR, NOT_COMPARED, PASS, RESULT_UNMATCHED, WARNING
from ptdbg_ascend.comparison.xlsx_report import SHARE_CEILING, SHARE_FLOOR
from ptdbg_ascend.formats.naming import BACKWARD, FORWARD
from ptdbg_ascend.formats.records import CallRecord, user_stack_text
from ptdbg_ascend.fs.writes import replace_text_file

FORMAT, VERSION = "ptdbg_ascend.html_report", 1
# A chart 1,200 px wide shows about 1,000 distinct x positions: 4,000 points keep every pixel's worst row.
MAX_CHART_POINTS = 4000
# Failing rows embedded (errors first): a million-row run's table stays a few MB; the CSV holds them all.
MAX_TABLE_ROWS = 2000
PAGE_ROWS = 200  # table rows per page
MAX_TEXT, MAX_STACK_TEXT = 500, 4000  # characters of a name or message, of a stack (a dump may hold any length)
SIGNIFICANT = 4  # digits kept of the numbers drawn and listed
GRADES = (PASS, WARNING, ERROR, RESULT_UNMATCHED, NOT_COMPARED)  # the page's grade codes are these indices
CODE = {grade: code for code, grade in enumerate(GRADES)}
JUDGED = frozenset((CODE[PASS], CODE[WARNING], CODE[ERROR]))  # the others were not compared
VERDICTS = {
    "failed": "Failed: a compared tensor is beyond what its precision explains",
    "incomplete": "Incomplete: nothing failed, but part of the run was not compared",
    "warning": "Passed, with a warning: a call computes below its dtype's precision",
    "passed": "Passed: every compared tensor is within what its precision explains, and the run was compared",
}
# The advisor's answer lines by their label; a label not listed stays in the text.
LABELS = {"Suspect API": "Suspect", "Re-run": "Re-run", "Code": "Code", "First failure": "First failure",
          "Diverging module": "Diverging module", "Next step": "Next step", "Incomplete": "Incomplete",
          "Too little could be compared": "Too little could be compared",
          "Nothing could be compared": "Nothing could be compared"}
TABLE_HEADERS = ("CSV line", "NPU name", "Result", "error / allowed", "allowed rel. err", "rel. err", "Cosine",
                 "MaxAbsErr", "dtype NPU / bench", "shape", "statistics NPU, bench (max / min / mean / norm)",
                 "message", "stack")


class ReportFiles(NamedTuple):
    """The names of the files beside the page it links to (None: not written)."""

    csv: str
    xlsx: Optional[str] = None
    advisor: Optional[str] = None


def _cut(value: str, limit: int = MAX_TEXT) -> str:
    return value if len(value) <= limit else value[:limit - 1] + "\u2026"


def _number(value: object) -> object:
    """A cell as the page's JSON holds it: a float with :data:`SIGNIFICANT` digits, ``"inf"``/``"-inf"``/
    ``"nan"`` for what JSON cannot hold, a word (``"Nan"``, ``"unsupported"``) as it is, "" as None."""
    if isinstance(value, bool) or value is None or value == "":
        return None
    if isinstance(value, (int, float)):
        value = float(value)
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return float(f"{value:.{SIGNIFICANT}g}")
    return _cut(str(value))


def _share(row: CompareRow, code: int) -> object:
    """How much of its allowance a row of grade ``code`` used (None: not judged by a ratio; ``"inf"``: nothing
    allowed and something differs)."""
    share = row.judgement.share if code in JUDGED else None
    if share is None or math.isnan(share):
        return None
    return "inf" if math.isinf(share) else float(f"{share:.{SIGNIFICANT}g}")


def _code(row: CompareRow) -> int:
    """The row's grade code; a row that was not compared is never a pass (nor a warning, nor an error)."""
    code = CODE.get(row.judgement.grade, CODE[NOT_COMPARED])
    pair = row.pair
    return CODE[NOT_COMPARED] if code in JUDGED and (pair.npu is None or pair.bench is None) else code


def _status(failing: Optional[int], counts: Counts, advice: Advice) -> str:
    if failing is not None:
        return "failed"
    if not counts.complete:
        return "incomplete"
    return "warning" if advice.finding is not None else "passed"


def _rerun_text(rerun: Any) -> Optional[str]:
    """The finding's re-run verdict (``{"verdict", "ratio", "reason"}``, as a mapping or attributes), or None."""
    if rerun is None:
        return None
    field = (lambda name: rerun.get(name)) if isinstance(rerun, dict) else (lambda name: getattr(rerun, name, None))
    verdict, ratio, reason = field("verdict"), field("ratio"), field("reason")
    ratio_text = f" ({ratio:.3g} x the allowed error)" if isinstance(ratio, (int, float)) and \
        not isinstance(ratio, bool) else ""
    return f"{verdict}{ratio_text}" + (f": {reason}" if reason else "")


def answer_lines(advice: Advice, counts: Counts) -> Tuple[List[Tuple[str, str]], List[str]]:
    """The answer as ``(label, text)`` lines in the advisor file's order (its own words), the re-run verdict
    after the first failure when the finding has one, then ``Coverage``; and the advisor's other lines."""
    opening, rest = advice.sections()
    finding = advice.finding
    lines: List[Tuple[str, str]] = []
    for line in opening:
        label, separator, value = line.partition(": ")
        lines.append((LABELS[label], value) if separator and label in LABELS else ("Answer", line))
    if finding is not None and not any(label == "Suspect" for label, _ in lines):
        lines.insert(0, ("Suspect", "{} ({}{})".format(finding.call, finding.kind, f", {finding.precision}"
                                                       if finding.precision else "")))
    rerun = _rerun_text(getattr(finding, "rerun", None))
    if rerun is not None and not any(label == "Re-run" for label, _ in lines):  # (the advisor's own line first)
        after = next((i + 1 for i, (label, _) in enumerate(lines) if label == "First failure"), len(lines))
        lines.insert(after, ("Re-run", rerun))
    coverage = [line for line in rest if line.startswith("Compared: ")]
    notes = [line for line in rest if not line.startswith("Compared: ")]
    for problem in counts.coverage_problems():
        coverage.append("Not compared: " + problem)
    lines.extend(("Coverage", line[len("Compared: "):] if line.startswith("Compared: ") else line)
                 for line in coverage)
    return [(label, _cut(value, 4 * MAX_TEXT)) for label, value in lines], [_cut(note, 4 * MAX_TEXT) for note in notes]


def _direction(row: CompareRow) -> str:
    """The row's direction: its call name's last field (a row of neither direction counts as forward)."""
    call = row.call
    return BACKWARD if call is not None and call.name.endswith("_" + BACKWARD) else FORWARD


def _top(lines: List[int], shares: List[object], codes: List[int], start: int, end: int,
         first_line: Optional[int]) -> List[int]:
    """The points drawn of bucket ``[start, end)``: the judged one with errors first, then the largest share (no
    ratio: the lowest), one that was not compared, and the first failure; in order."""
    best, best_key, unjudged, first = -1, (False, -2.0), -1, -1
    for index in range(start, end):
        code = codes[index]
        if code in JUDGED:
            share = shares[index]
            key = (code == CODE[ERROR], math.inf if share == "inf" else (-1.0 if share is None else share))
            if key > best_key:
                best, best_key = index, key
        elif unjudged < 0:
            unjudged = index
        if lines[index] == first_line:
            first = index
    return sorted({index for index in (best, unjudged, first) if index >= 0})


def _series(lines: List[int], shares: List[object], codes: List[int], limit: int,
            first_line: Optional[int]) -> Dict[str, Any]:
    """One direction's points as parallel lists (CSV line, share, code); more than ``limit`` are cut to
    ``limit / 2`` buckets of rows, each keeping its :func:`_top` points."""
    total = len(lines)
    failing = [line for line, code in zip(lines, codes) if code == CODE[ERROR]]
    found = {"rows": total, "failing": len(failing), "first_line": failing[0] if failing else None,
             "lo": lines[0] if lines else 2, "hi": lines[-1] if lines else 2, "downsampled": total > limit}
    if total > limit:
        size = math.ceil(total / (limit // 2))
        kept = [index for start in range(0, total, size)
                for index in _top(lines, shares, codes, start, min(start + size, total), first_line)]
        lines, shares, codes = [lines[i] for i in kept], [shares[i] for i in kept], [codes[i] for i in kept]
    found.update(lines=lines, shares=shares, codes=codes)
    return found


def chart_data(rows: Sequence[CompareRow], failing: Optional[int], limit: int = MAX_CHART_POINTS) -> Dict[str, Any]:
    """The two series (forward, backward), each as parallel lists ``lines`` (CSV line), ``shares`` (error /
    allowed; None: no ratio; "inf"), ``codes`` (index into :data:`GRADES`); at most ``limit`` points each."""
    # Parallel lists, not a tuple per row: a million tuples would set the garbage collector scanning them.
    columns: Dict[str, Tuple[List[int], List[object], List[int]]] = {FORWARD: ([], [], []), BACKWARD: ([], [], [])}
    for line, row in enumerate(rows, 2):
        code = _code(row)
        lines, shares, codes = columns[_direction(row)]
        lines.append(line)
        shares.append(_share(row, code))
        codes.append(code)
    first_line = failing + 2 if failing is not None else None
    return {"floor": SHARE_FLOOR, "ceiling": SHARE_CEILING,
            FORWARD: _series(*columns[FORWARD], limit, first_line),
            BACKWARD: _series(*columns[BACKWARD], limit, first_line)}


def _table_indices(rows: Sequence[CompareRow], failing: Optional[int], limit: int) -> List[int]:
    """The rows the table lists, in CSV order: errors first, then the rest of the first failure's call (its
    inputs: do they pass?), then warnings and rows not compared; at most ``limit``."""
    errors, others = [], []
    for index, row in enumerate(rows):
        if row.failed:
            errors.append(index)
        elif row.result != PASS or not row.compared:
            others.append(index)
    context: List[int] = []
    if failing is not None and rows[failing].pair.npu_call is not None:
        call = rows[failing].pair.npu_call
        low, high = max(0, failing - 64), min(len(rows), failing + 64)  # a call's rows are together
        context = [i for i in range(low, high) if rows[i].pair.npu_call is call and not rows[i].failed]
    chosen: List[int] = []
    seen = set()
    for index in errors + context + others:
        if len(chosen) >= limit:
            break
        if index not in seen:
            seen.add(index)
            chosen.append(index)
    return sorted(chosen)


def _stack_of(call: Optional[CallRecord], forward_of: Dict[str, CallRecord]) -> str:
    stack = call_stack(call, forward_of) if call is not None else ()
    return _cut(user_stack_text(stack), MAX_STACK_TEXT) if stack else ""


def table_data(rows: Sequence[CompareRow], failing: Optional[int], limit: int = MAX_TABLE_ROWS) -> Dict[str, Any]:
    """The listed rows as lists: ``[CSV line, NPU name, bench name (None: the same), grade code, share, allowed
    relative error, relative error, cosine, max abs error, NPU dtype, bench dtype, shape, NPU statistics,
    bench statistics, message, stack index]``; stacks once each in ``stacks``; counts of what was left out."""
    forward_of = {row.pair.npu_call.name: row.pair.npu_call for row in rows if row.pair.npu_call is not None}
    stacks: Dict[str, int] = {}
    listed = []
    for index in _table_indices(rows, failing, limit):
        row = rows[index]
        code = _code(row)
        cells = row_cells(row, False)
        npu, bench = row.npu, row.bench
        names = [_cut(record.name) if record is not None else None for record in (npu, bench)]
        stack = _stack_of(row.call, forward_of)
        stack_index = stacks.setdefault(stack, len(stacks)) if stack else None
        listed.append([
            index + 2, names[0] or names[1], names[1] if names[0] and names[1] != names[0] else None, code,
            _share(row, code), _number(cells.get(col.ALLOWED_RELATIVE)), _number(row.judgement.relative_error),
            _number(cells.get(col.COSINE)), _number(cells.get(col.MAX_ABS)),
            _cut(npu.dtype) if npu else "", _cut(bench.dtype) if bench else "",
            _cut(str(list((npu or bench).shape))) if (npu or bench) else "",
            [_number(v) for v in npu.statistics] if npu else None,
            [_number(v) for v in bench.statistics] if bench else None,
            _cut(row.message), stack_index])
    failed = sum(1 for row in rows if row.failed)
    return {"headers": list(TABLE_HEADERS), "rows": listed, "stacks": list(stacks), "failing": failed,
            "failing_listed": sum(1 for item in listed if item[3] == CODE[ERROR])}


def report_data(rows: Sequence[CompareRow], counts: Counts, advice: Advice, failing: Optional[int]) -> Dict[str, Any]:
    """Everything the page's script draws, as JSON-ready data (``format``/``version`` first)."""
    finding = advice.finding
    record = rows[failing].name if failing is not None else None
    rerun = getattr(finding, "rerun", None)
    answer = {"status": _status(failing, counts, advice), "record": record,
              "line": failing + 2 if failing is not None else None,
              "suspect": finding.call if finding is not None else None,
              "kind": finding.kind if finding is not None else None,
              "user_line": finding.user_line if finding is not None else None,
              "rerun": _rerun_text(rerun)}
    return {"format": FORMAT, "version": VERSION, "grades": list(GRADES), "page_rows": PAGE_ROWS, "answer": answer,
            "rows": len(rows), "chart": chart_data(rows, failing), "table": table_data(rows, failing),
            "tree": module_tree(rows, failing, answer["suspect"])}


def _sizes(data: Dict[str, Any]) -> str:
    chart, table, tree = data["chart"], data["table"], data["tree"]
    parts = []
    for direction in (FORWARD, BACKWARD):
        series = chart[direction]
        drawn = len(series["lines"])
        parts.append(f"{direction}: {series['rows']} rows" + (
            f" drawn as {drawn} points (per bucket of rows the largest error / allowed, errors first, and a row "
            "not compared)" if series["downsampled"] else ""))
    parts.append("table: {} rows listed, {} of the {} failing rows{}".format(
        len(table["rows"]), table["failing_listed"], table["failing"],
        " (the CSV holds them all)" if table["failing_listed"] < table["failing"] else ""))
    if tree is not None:
        parts.append(f"tree: {len(tree['nodes'])} of {tree['total']} nodes")
    return "This page holds " + "; ".join(parts) + "."


def write_html_report(path: str, rows: Sequence[CompareRow], counts: Counts, advice: Advice,
                      failing: Optional[int], files: ReportFiles) -> str:
    """Write the page to ``path`` (a new 0640 file, made atomically; a same-named page is replaced) and return
    ``path``. ``failing``: 0-based index of the first failing row (None: none); ``files``: the reports beside
    it, linked from the answer. Raises :class:`~ptdbg_ascend.errors.DumpWriteError` naming ``path``."""
    data = report_data(rows, counts, advice, failing)
    lines, notes = answer_lines(advice, counts)
    links = [(label, name) for label, name in (("CSV", files.csv), ("xlsx", files.xlsx), ("advisor", files.advisor))
             if name]
    answer = html_page.answer_markup(data["answer"]["status"], VERDICTS[data["answer"]["status"]], lines, notes,
                                     links)
    tree = data["tree"]
    if tree is None:
        tree_note = "The dumps hold neither module records (construct.json) nor stacks: there is no tree to draw."
    else:
        tree_note = ("From construct.json: each module call holds the calls made inside it." if tree["source"] ==
                     SOURCE_CONSTRUCT else "From the stacks: each of your code's frames holds the calls made from it "
                     "(a backward call sits where its forward call ran).") + \
            " Dark red: where the divergence starts (the first failure); pink: failing later; green: passing; " \
            "grey: not compared. Click a call to list its rows."
    subtitle = f"{os.path.basename(files.csv)} \u00b7 {len(rows)} rows \u00b7 {counts.compared} of {counts.paired} " \
        f"paired tensors compared{' by their statistics' if counts.statistics_only else ''}"
    replace_text_file(path, html_page.page(subtitle, answer, data, _sizes(data), tree_note), "the HTML report")
    return path
