"""A compare report read for the pre-check's link (``compare_link``): the compare CSV, streamed once, and
the finding file beside it, checked against that CSV.

The CSV (``compare_result_{ts}.csv``) may be huge (one row per tensor: a million rows is 400 MB and took
3 GB as a list of dicts). It is read row by row and only what the link needs is kept, per run_ut call and
direction (``calls``: the calls of the dump being checked): the first row's position, whether an input
fails, and the first output row of each verdict. Memory is a few hundred bytes per call kept, whatever the
CSV holds besides (its other columns, rows of calls not in the dump, bench-only rows).

The finding file (``compare_finding_{ts}.json``, :mod:`ptdbg_ascend.formats.finding`, decoded there: format
and version checked) names the advisor's suspect, which the CSV alone cannot tell. It is taken at its word
only once it is the finding of *this* CSV (:func:`_check_finding`): the row at its ``line`` is its
``record``; at level "error" that row is the CSV's first failing row, at level "warning" no row fails;
and its suspect ``call`` has a row at or before that line (the advisor traces back, never forward). A
finding copied from another compare, forged, truncated or of another version is a FileFormatError naming
both files. It is read only when it is a regular file of at most 1 MiB.

Row names: ours (``Functional_gelu_0_forward_output``) and msprobe's (``Functional.gelu.0.forward.output.0``).
Row verdicts: ``Result`` (``error`` fails; ``pass``/``warning`` pass -- our compare's warning passes;
msprobe's summary-mode ``Warning``, "Need double check api accuracy", fails), else ``Accuracy Reached or
Not`` (``No`` fails, ``Yes`` passes); anything else is not judged. Cells are read back through
:mod:`ptdbg_ascend.csv_cells` (the ``'`` before a formula-like name is removed). No torch, no numpy.
"""

from __future__ import annotations

import csv
import os
import sys
from dataclasses import dataclass, field
from typing import AbstractSet, Any, Dict, Iterator, List, NamedTuple, Optional, Tuple

from ptdbg_ascend import csv_cells, jsonfile
from ptdbg_ascend.formats.compare_columns import ACCURACY, ERR_MESSAGE, NPU_NAME, RESULT
from ptdbg_ascend.errors import FileFormatError, ParameterError
from ptdbg_ascend.formats import finding as finding_file
from ptdbg_ascend.formats.layout import ADVISOR_STEM, COMPARE_RESULT_STEM
from ptdbg_ascend.formats.naming import ut_api_of_call, ut_api_of_record
from ptdbg_ascend.log import logger

FAILING, PASSING, NOT_JUDGED = "failing", "passing", "not judged"
SUSPECT, FIRST_FAILURE = "the advisor's suspect", "the compare's first failing call"
MAX_FINDING_BYTES = 1024 * 1024  # a finding holds a few names and one code line: a few KiB
MAX_MESSAGE = 1000  # characters of an Err_message kept for a link (a cell may hold 128 KiB)
# a physical line of a compare CSV: ~30 cells of at most csv's 128 KiB field limit each; a longer one is read
# no further (a file of one endless line would otherwise be read whole before csv sees it)
MAX_LINE_CHARACTERS = 8 * 1024 * 1024

_ALLOWED = ("a compare_result_{timestamp}.csv written by compare() / ptdbg compare of the same run (its NPU side "
            "is the dump run_ut checks), or the CompareOutcome compare() returned")


class CompareRowVerdict(NamedTuple):
    """One compare row as the link needs it. ``call``: the run_ut API name (``Functional.gelu.0``);
    ``side``: input/output; ``verdict``: FAILING / PASSING / NOT_JUDGED; ``order``: the row's position."""

    name: str
    call: str
    direction: str
    side: str
    verdict: str
    result: str
    message: str
    order: int


class DirectionRows:
    """What the compare holds of one call in one direction: ``first_order``, the position of its first
    row; ``inputs_failing``: an input row fails; ``outputs``: its first output row of each verdict (a
    list of at most three: one of each). Slots: a report may keep a quarter of a million of these."""

    __slots__ = ("first_order", "inputs_failing", "outputs")

    def __init__(self, first_order: int) -> None:
        self.first_order, self.inputs_failing = first_order, False
        self.outputs: List[CompareRowVerdict] = []

    def output(self, verdict: str) -> Optional[CompareRowVerdict]:
        """The first output row whose verdict is ``verdict``; None when there is none."""
        return next((row for row in self.outputs if row.verdict == verdict), None)


@dataclass(frozen=True)
class CompareReport:
    """A compare report read for linking. ``rows``: per (run_ut call, direction), what the link needs
    (:class:`DirectionRows`). ``anchor``: (call, direction) of the advisor's suspect, or of the first
    failing row when the suspect is not known (``anchor_kind`` says which; None: nothing failed in the
    compare); ``anchor_order``: the first row of that call and direction."""

    path: str
    rows: Dict[Tuple[str, str], DirectionRows] = field(default_factory=dict)
    anchor: Optional[Tuple[str, str]] = None
    anchor_kind: str = SUSPECT
    anchor_order: int = -1
    anchor_name: str = ""

    def describe(self) -> str:
        """One line for the run_ut summary."""
        if self.anchor is None:
            return f"compare {self.path}: no failing row"
        return f"compare {self.path}: {self.anchor_kind} is {self.anchor_name}"


def row_verdict(cells: Dict[str, str]) -> Tuple[str, str]:
    """(FAILING / PASSING / NOT_JUDGED, the verdict word shown) of one compare row (see the module doc)."""
    result = (cells.get(RESULT) or "").strip()
    if result:
        if result.lower() == "error" or result == "Warning":  # msprobe's summary "Warning": double check
            return FAILING, result
        if result in ("pass", "warning"):
            return PASSING, result
        return NOT_JUDGED, result
    accuracy = (cells.get(ACCURACY) or "").strip()
    if accuracy == "No":
        return FAILING, "Accuracy Reached or Not: No"
    if accuracy == "Yes":
        return PASSING, "Accuracy Reached or Not: Yes"
    if RESULT in cells and ACCURACY not in cells:  # msprobe summary mode: an empty Result is no finding
        return PASSING, "no finding"
    return NOT_JUDGED, accuracy or "not judged"


# --- the finding file -----------------------------------------------------------------------------------

def _tail_of(csv_path: str) -> Optional[str]:
    """``{tail}`` of ``compare_result_{tail}.csv``; None for a file not named so."""
    name = os.path.basename(csv_path)
    if not (name.startswith(COMPARE_RESULT_STEM) and name.endswith(".csv")):
        return None
    return name[len(COMPARE_RESULT_STEM):-len(".csv")]


def finding_path_of(csv_path: str) -> Optional[str]:
    """The finding file ``compare_finding_{tail}.json`` compare wrote beside ``compare_result_{tail}.csv``;
    None when the CSV is not named so or has no finding beside it (nothing failed, ``auto_analyze=False``,
    the CSV was copied alone, or an older compare)."""
    tail = _tail_of(csv_path)
    if tail is None:
        return None
    path = os.path.join(os.path.dirname(csv_path), finding_file.file_name(tail))
    return path if os.path.lexists(path) else None


def read_finding(path: str) -> finding_file.Finding:
    """The compare finding stored in ``path``; FileFormatError naming it when it is not a regular file of
    at most MAX_FINDING_BYTES, not JSON (a truncated file), or not a finding of this format and a version it
    reads (``formats.finding.decode``: 4, or 3 without the re-run, or 2 without the advisor's ``reason`` either;
    only the fields every version has are used here)."""
    value = jsonfile.load_json(path, "compare finding", " (cut short?)", duplicates=jsonfile.ERROR,
                               max_bytes=MAX_FINDING_BYTES)
    return finding_file.decode(value, path)


def _warn_without_finding(csv_path: str) -> None:
    """A compare CSV with failing rows and its advisor prose but no finding file: written by a version that
    did not write the finding yet. Its prose is not parsed: the position is given to the first failing row."""
    tail = _tail_of(csv_path)
    if tail is not None and os.path.isfile(os.path.join(os.path.dirname(csv_path), ADVISOR_STEM + tail + ".txt")):
        logger.warning("{} has an advisor report but no {} beside it (written before compare recorded its finding "
                       "as a file): each failing API is placed relative to the compare's first failing call, not "
                       "the advisor's suspect. Re-run compare to link to the suspect.".format(
                           csv_path, finding_file.file_name(tail)))


# --- reading the CSV --------------------------------------------------------------------------------------

class _Reading:
    """One pass over the CSV's rows: the kept calls' rows, the first failing row, and what the finding's
    check needs (the name at its line, the suspect's first row)."""

    def __init__(self, calls: Optional[AbstractSet[str]], finding: Optional[finding_file.Finding]) -> None:
        self.calls, self.finding = calls, finding
        self.rows: Dict[Tuple[str, str], DirectionRows] = {}
        self.first_fail: Optional[CompareRowVerdict] = None
        self.first_fail_start = -1  # where the first failing row's run of rows of its call and direction began
        self.record_at_line: Optional[str] = None
        self.count = 0
        self.suspect = ut_api_of_call(finding.call) if finding is not None else None
        self.suspect_order = -1
        self._run: Tuple[Optional[Tuple[str, str]], int] = (None, -1)

    def add(self, order: int, name: str, result: str, accuracy: str, message: str, has_result: bool,
            has_accuracy: bool) -> None:
        self.count = order + 1
        if self.finding is not None and order == self.finding.line - 2:
            self.record_at_line = name
        parsed = ut_api_of_record(name)
        if parsed is None:
            return  # bench-only rows ("N/A"), stack rows, modules: nothing of the NPU dump's APIs
        call, direction, side = sys.intern(parsed[0]), sys.intern(parsed[1]), sys.intern(parsed[2])
        key = (call, direction)
        if self._run[0] != key:
            self._run = (key, order)
        cells = {RESULT: result} if has_result else {}
        if has_accuracy:
            cells[ACCURACY] = accuracy
        verdict, shown = row_verdict(cells)
        shown = sys.intern(shown)  # "pass", "error"...: one string for every row
        if self.suspect == key and self.suspect_order < 0:
            self.suspect_order = order
        if self.first_fail is None and verdict == FAILING:
            self.first_fail = CompareRowVerdict(name, call, direction, side, verdict, shown, _short(message), order)
            self.first_fail_start = self._run[1]
        if self.calls is not None and call not in self.calls:
            return
        kept = self.rows.get(key)
        if kept is None:
            kept = self.rows[key] = DirectionRows(order)
        if side == "input":
            kept.inputs_failing = kept.inputs_failing or verdict == FAILING
        elif kept.output(verdict) is None:
            kept.outputs.append(CompareRowVerdict(name, call, direction, side, verdict, shown, _short(message), order))


def _short(message: str) -> str:
    return message if len(message) <= MAX_MESSAGE else message[:MAX_MESSAGE] + "... [cut]"


def _stream(path: str, reading: _Reading) -> None:
    """Feed the rows of the compare CSV ``path`` to ``reading``; FileFormatError naming it when it is not
    a compare CSV."""
    try:
        with open(path, encoding="utf-8-sig", newline="") as handle:
            reader = csv.reader(_bounded_lines(handle, path))
            header = next(reader, [])
            if NPU_NAME not in header or not (RESULT in header or ACCURACY in header):
                raise FileFormatError("{} is not a compare report: it lacks the column {!r} and one of {!r} / {!r} "
                                      "(expected a compare_result_{{timestamp}}.csv of compare() or ptdbg compare)."
                                      .format(path, NPU_NAME, RESULT, ACCURACY))
            index = {title: header.index(title) for title in (NPU_NAME, RESULT, ACCURACY, ERR_MESSAGE) if title in header}

            def cell(row: List[str], title: str) -> str:
                position = index.get(title)
                return csv_cells.restore_cell(row[position]) if position is not None and position < len(row) else ""

            has_result, has_accuracy = RESULT in index, ACCURACY in index
            for order, row in enumerate(reader):
                reading.add(order, cell(row, NPU_NAME).strip(), cell(row, RESULT), cell(row, ACCURACY),
                            cell(row, ERR_MESSAGE).strip(), has_result, has_accuracy)
    except (OSError, UnicodeDecodeError, csv.Error) as error:
        raise FileFormatError(f"Cannot read the compare report {path}: {error}") from None


def _bounded_lines(handle: Any, path: str) -> Iterator[str]:
    """The physical lines of ``handle``, each at most MAX_LINE_CHARACTERS (FileFormatError beyond)."""
    number = 0
    while True:
        line = handle.readline(MAX_LINE_CHARACTERS + 1)
        if not line:
            return
        number += 1
        if len(line) > MAX_LINE_CHARACTERS:
            raise FileFormatError("{}, line {}: longer than {} characters, which no compare CSV line is (its cells "
                                  "hold at most 128 KiB each); it is read no further.".format(
                                      path, number, MAX_LINE_CHARACTERS))
        yield line


def _check_finding(finding: finding_file.Finding, reading: _Reading, csv_path: str, finding_path: str) -> None:
    """The finding is the one compare wrote for this CSV (the module doc); FileFormatError naming both."""
    def refuse(problem: str) -> FileFormatError:
        return FileFormatError("{} is not the finding of {}: {}. A finding copied from another compare, or edited, "
                               "names a suspect the CSV does not back. Re-run compare to write both again (or link "
                               "without it: the CSV alone is linked to its first failing row).".format(
                                   finding_path, csv_path, problem))

    first = reading.first_fail
    if not 2 <= finding.line <= reading.count + 1:
        raise refuse("its first failing row {} is at line {}, but the CSV has rows on lines 2 to {} only".format(
            finding.record, finding.line, reading.count + 1))
    if reading.record_at_line != finding.record:
        raise refuse("its first failing row is {} at line {}, but line {} of the CSV is {}".format(
            finding.record, finding.line, finding.line, reading.record_at_line))
    if finding.level == finding_file.ERROR and (first is None or first.order != finding.line - 2):
        raise refuse("its first failing row is {} at line {}, but {}".format(
            finding.record, finding.line, "no row of the CSV fails" if first is None else
            f"the CSV's first failing row is {first.name} at line {first.order + 2}"))
    if finding.level == finding_file.WARNING and first is not None:
        raise refuse(f"it says nothing fails, but {first.name} fails at line {first.order + 2}")
    # a suspect that is no API call (a module of an L0 dump) is not an anchor: the link uses the first failure
    if reading.suspect is not None and not 0 <= reading.suspect_order <= finding.line - 2:
        raise refuse(f"its suspect {finding.call} has no row at or before line {finding.line} in the CSV")


def read_compare(compare: Any, calls: Optional[AbstractSet[str]] = None) -> CompareReport:
    """Read a compare report for linking: ``compare`` is the path (str or PathLike) of a
    ``compare_result_{ts}.csv`` or the ``CompareOutcome`` ``compare()`` returned (its ``csv_path`` and
    ``finding``). For a path, the suspect is read from the finding file ``compare_finding_{ts}.json``
    beside the CSV when it is there, once it is checked against the CSV (without it the anchor is the
    first failing row). ``calls``: the run_ut API names (``Functional.gelu.0``) whose rows are kept for
    linking; default None: every call's.

    Raises ParameterError naming ``compare_csv`` for anything else (a missing file, an xlsx), and
    FileFormatError naming the file when it is not a compare CSV, or when its finding file is not a
    finding of this format and version, or not this CSV's."""
    finding: Optional[finding_file.Finding] = None
    finding_path: Optional[str] = None
    if isinstance(compare, os.PathLike):
        compare = os.fspath(compare)
    from_path = isinstance(compare, str)
    if from_path:
        path = compare
        if not path.endswith(".csv") or not os.path.isfile(path):
            raise ParameterError("compare_csv", compare, _ALLOWED, "Pass the .csv (not the .xlsx) of the compare."
                                 if path.endswith(".xlsx") else None)
        finding_path = finding_path_of(path)
        if finding_path is not None:
            finding = read_finding(finding_path)
    elif isinstance(getattr(compare, "csv_path", None), str) and hasattr(compare, "finding"):
        path = compare.csv_path
        if not os.path.isfile(path):
            raise ParameterError("compare_csv", path, _ALLOWED, "The CompareOutcome's csv_path no longer exists.")
        finding = compare.finding  # made by compare() in this process
    else:
        raise ParameterError("compare_csv", compare, _ALLOWED)
    reading = _Reading(calls, finding)
    _stream(path, reading)
    if finding is not None and finding_path is not None:
        _check_finding(finding, reading, path, finding_path)
    anchor, kind, name, order = None, SUSPECT, "", -1
    if reading.suspect is not None:
        anchor, name, order = reading.suspect, finding.call, reading.suspect_order
    elif reading.first_fail is not None:
        first = reading.first_fail
        anchor, kind, name, order = (first.call, first.direction), FIRST_FAILURE, first.name, reading.first_fail_start
        if from_path and finding_path is None:
            _warn_without_finding(path)
    return CompareReport(os.path.abspath(path), reading.rows, anchor, kind, order, name)
