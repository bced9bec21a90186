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
from the finding file ``compare_finding_{ts}.json`` the same compare wrote beside its CSV
(:mod:`ptdbg_ascend.formats.finding`: format and version checked); without either, the position is
given relative to the compare's first failing row instead, and says so. A compare written before the
finding file existed (an ``advisor_{ts}.txt`` beside failing rows, no JSON) is linked that way too,
with a warning saying to re-run compare.

The link of each failing API is a ``Compare Link`` cell written with its result row (``results``).

Row names: the legacy names our compare writes (``Functional_gelu_0_forward_output``,
``Tensor___add___1_forward_input.0``) and msprobe's dotted names (``Functional.gelu.0.forward.output.0``).
Row verdicts: the ``Result`` column (``error`` fails; ``pass``/``warning`` pass -- our compare's warning
passes; msprobe's summary-mode ``Warning``, "Need double check api accuracy", fails), else ``Accuracy
Reached or Not`` (``No`` fails, ``Yes`` passes); anything else is not judged.

No torch, no numpy: the csv module only. Cells are read back through :mod:`ptdbg_ascend.csv_cells` (the
``'`` compare and run_ut put before a formula-like name is removed), so names match as they were dumped.
"""

from __future__ import annotations

import csv
import math
import os
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

from ptdbg_ascend import csv_cells, jsonfile
from ptdbg_ascend.comparison.columns import ACCURACY, ERR_MESSAGE, NPU_NAME, RESULT
from ptdbg_ascend.errors import FileFormatError, ParameterError
from ptdbg_ascend.formats import finding as finding_file
from ptdbg_ascend.formats.layout import ADVISOR_STEM, COMPARE_RESULT_STEM
from ptdbg_ascend.formats.naming import ut_api_of_call, ut_api_of_record
from ptdbg_ascend.log import logger
from ptdbg_ascend.precheck import columns as col

FAILING, PASSING, NOT_JUDGED, ABSENT = "failing", "passing", "not judged", "absent"
IS_SUSPECT, PRECEDES, FOLLOWS = "is", "precedes", "follows"
SUSPECT, FIRST_FAILURE = "the advisor's suspect", "the compare's first failing call"
PASSING_TEXT = "inaccurate in isolation, but within tolerance in this run"

_ALLOWED = ("a compare_result_{timestamp}.csv written by compare() / ptdbg compare of the same run (its NPU side "
            "is the dump run_ut checks), or the CompareOutcome compare() returned")


@dataclass(frozen=True)
class CompareRowVerdict:
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


@dataclass(frozen=True)
class CompareReport:
    """A compare report read for linking. ``anchor``: (call, direction) of the advisor's suspect, or of
    the first failing row when the suspect is not known (``anchor_kind`` says which; None: nothing
    failed in the compare); ``anchor_order``: the first row of that call and direction."""

    path: str
    rows: Dict[str, List[CompareRowVerdict]] = field(default_factory=dict)
    anchor: Optional[Tuple[str, str]] = None
    anchor_kind: str = SUSPECT
    anchor_order: int = -1
    anchor_name: str = ""

    def describe(self) -> str:
        """One line for the run_ut summary."""
        if self.anchor is None:
            return "compare {}: no failing row".format(self.path)
        return "compare {}: {} is {}".format(self.path, self.anchor_kind, self.anchor_name)


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
            return "; it is {}".format(self.anchor_kind)
        return "; it {} {}".format("runs before" if self.position == PRECEDES else "runs after", self.anchor_kind)

    def text(self) -> str:
        """The summary line: ``failing there too: error (Relative error ...); it is the advisor's suspect``."""
        if self.state == FAILING:
            head = "failing there too: {} ({}){}".format(self.result, self.message or "no message", " [its inputs "
                                                         "already differ there]" if self.inputs_failing else "")
        elif self.state == PASSING:
            head = "passing there: " + PASSING_TEXT
        elif self.state == NOT_JUDGED:
            head = "not judged there: {}{}".format(self.result, " ({})".format(self.message) if self.message else "")
        else:
            head = "absent: the compare has no {} output row of this call".format("/".join(self.directions))
        return head + self._position_text()

    def cell(self) -> str:
        """The Compare Link cell of the result CSV: ``failing: error: <Err_message>; it is the advisor's
        suspect`` (the state first, so a spreadsheet filter on the prefix works)."""
        if self.state == FAILING:
            head = "failing: {}: {}{}".format(self.result, self.message, "; inputs already differ"
                                              if self.inputs_failing else "")
        elif self.state == PASSING:
            head = "passing: " + PASSING_TEXT
        elif self.state == NOT_JUDGED:
            head = "not judged: " + self.result
        else:
            head = ABSENT
        return head + self._position_text()


# --- reading a compare ------------------------------------------------------------------------------------

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


def _read_rows(path: str) -> Tuple[List[str], List[Dict[str, str]]]:
    try:
        with open(path, encoding="utf-8-sig", newline="") as handle:
            reader = csv.DictReader(handle)
            header = list(reader.fieldnames or [])
            rows = [csv_cells.restore_dict(row) for row in reader]  # names as compare read them from the dump
    except (OSError, UnicodeDecodeError, csv.Error) as error:
        raise FileFormatError("Cannot read the compare report {}: {}".format(path, error)) from None
    if NPU_NAME not in header or not (RESULT in header or ACCURACY in header):
        raise FileFormatError("{} is not a compare report: it lacks the column {!r} and one of {!r} / {!r} (expected "
                              "a compare_result_{{timestamp}}.csv of compare() or ptdbg compare).".format(
                                  path, NPU_NAME, RESULT, ACCURACY))
    return header, rows


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
    """The compare finding stored in ``path``; FileFormatError naming it when it is bigger than
    ``formats.finding.MAX_BYTES`` (64 MiB; not read), not JSON or not a finding of this format and version
    (``formats.finding.decode``)."""
    return finding_file.decode(jsonfile.load_json(path, "compare finding", duplicates=jsonfile.ERROR,
                                                  max_bytes=finding_file.MAX_BYTES), path)


def _warn_without_finding(csv_path: str) -> None:
    """A compare CSV with failing rows and its advisor prose but no finding file: written by a version that
    did not write the finding yet. Its prose is not parsed: the position is given to the first failing row."""
    tail = _tail_of(csv_path)
    if tail is not None and os.path.isfile(os.path.join(os.path.dirname(csv_path), ADVISOR_STEM + tail + ".txt")):
        logger.warning("{} has an advisor report but no {} beside it (written before compare recorded its finding "
                       "as a file): each failing API is placed relative to the compare's first failing call, not "
                       "the advisor's suspect. Re-run compare to link to the suspect.".format(
                           csv_path, finding_file.file_name(tail)))


def read_compare(compare: Any) -> CompareReport:
    """Read a compare report for linking: ``compare`` is the path (str or PathLike) of a
    ``compare_result_{ts}.csv`` or the ``CompareOutcome`` ``compare()`` returned (its ``csv_path`` and
    ``finding``). For a path, the suspect is read from the finding file ``compare_finding_{ts}.json``
    beside the CSV when it is there (without it the anchor is the first failing row).

    Raises ParameterError naming ``compare_csv`` for anything else (a missing file, an xlsx), and
    FileFormatError naming the file when it is not a compare CSV, or when its finding file is not a
    finding of this format and version."""
    suspect: Optional[str] = None
    finding_missing = False
    if isinstance(compare, os.PathLike):
        compare = os.fspath(compare)
    if isinstance(compare, str):
        path = compare
        if not path.endswith(".csv") or not os.path.isfile(path):
            raise ParameterError("compare_csv", compare, _ALLOWED, "Pass the .csv (not the .xlsx) of the compare."
                                 if path.endswith(".xlsx") else None)
        finding_path = finding_path_of(path)
        if finding_path is not None:
            suspect = read_finding(finding_path).call
        finding_missing = finding_path is None
    elif isinstance(getattr(compare, "csv_path", None), str) and hasattr(compare, "finding"):
        path = compare.csv_path
        if not os.path.isfile(path):
            raise ParameterError("compare_csv", path, _ALLOWED, "The CompareOutcome's csv_path no longer exists.")
        suspect = compare.finding.call if compare.finding is not None else None
    else:
        raise ParameterError("compare_csv", compare, _ALLOWED)
    _, table = _read_rows(path)
    rows: Dict[str, List[CompareRowVerdict]] = {}
    first_fail: Optional[CompareRowVerdict] = None
    for order, cells in enumerate(table):
        parsed = ut_api_of_record((cells.get(NPU_NAME) or "").strip())
        if parsed is None:
            continue  # bench-only rows ("N/A"), stack rows, modules: nothing of the NPU dump's APIs
        verdict, shown = row_verdict(cells)
        row = CompareRowVerdict(cells[NPU_NAME].strip(), parsed[0], parsed[1], parsed[2], verdict, shown,
                                (cells.get(ERR_MESSAGE) or "").strip(), order)
        rows.setdefault(row.call, []).append(row)
        if first_fail is None and verdict == FAILING:
            first_fail = row
    anchor, kind, name = None, SUSPECT, ""
    if suspect is not None and ut_api_of_call(suspect) is not None:
        anchor, name = ut_api_of_call(suspect), suspect
    elif first_fail is not None:
        anchor, kind, name = (first_fail.call, first_fail.direction), FIRST_FAILURE, first_fail.name
        if finding_missing:
            _warn_without_finding(path)
    order = -1
    if anchor is not None:
        orders = [r.order for r in rows.get(anchor[0], []) if r.direction == anchor[1]]
        order = min(orders) if orders else -1
    return CompareReport(os.path.abspath(path), rows, anchor, kind, order, name)


# --- linking ----------------------------------------------------------------------------------------------

def link(api: str, forward: str, backward: str, report: CompareReport) -> CompareLink:
    """The link of the run_ut API ``api`` (``Functional.gelu.0``) whose Forward/Backward Test Success
    are ``forward``/``backward``: only the directions that are error or warning are looked up."""
    directions = tuple(d for d, status in (("forward", forward), ("backward", backward))
                       if status in (col.ERROR, col.WARNING)) or ("forward", "backward")
    rows = [r for r in report.rows.get(api, []) if r.direction in directions]
    outputs = [r for r in rows if r.side == "output"]
    inputs_failing = any(r.verdict == FAILING for r in rows if r.side == "input")
    position = _position(api, directions, rows, report)
    base = dict(directions=directions, inputs_failing=inputs_failing, position=position,
                anchor_kind=report.anchor_kind)
    if not outputs:
        return CompareLink(ABSENT, **base)
    for state in (FAILING, PASSING, NOT_JUDGED):
        chosen = [r for r in outputs if r.verdict == state]
        if chosen:
            return CompareLink(state, row=chosen[0].name, result=chosen[0].result, message=chosen[0].message, **base)
    raise AssertionError("unreachable: every row has a verdict")


def _position(api: str, directions: Sequence[str], rows: Sequence[CompareRowVerdict],
              report: CompareReport) -> Optional[str]:
    if report.anchor is None or not rows:
        return None
    if report.anchor[0] == api and report.anchor[1] in directions:
        return IS_SUSPECT
    if report.anchor_order < 0:
        return None
    return PRECEDES if min(r.order for r in rows) < report.anchor_order else FOLLOWS


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
    return "{:.3g}x the allowed error".format(severity)
