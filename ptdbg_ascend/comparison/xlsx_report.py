"""The ``.xlsx`` compare report: the CSV's table on sheet "compare_result" with failing rows coloured and
the first failure selected, and on sheet "chart" each row's error relative to what it was allowed (1 = the
limit) along execution order, forward and backward calls in two charts, coloured pass / warning / error, the
first failure marked.

openpyxl is imported when :func:`write_xlsx` runs only, so importing the package stays light.
"""

from __future__ import annotations

import math
import numbers
import os
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

from ptdbg_ascend import progress
from ptdbg_ascend.comparison import columns as col
from ptdbg_ascend.fs.writes import replace_file
from ptdbg_ascend.log import logger

RESULT_SHEET, CHART_SHEET = "compare_result", "chart"
# Excel's standard "bad" / "neutral" fills; the first failure gets a darker red so it stands out of a red block.
FILLS = {"error": "FFC7CE", "warning": "FFEB9C"}
FIRST_FAILURE_FILL = "FF7C80"
HEADER_FILL = "D9D9D9"
# Column widths in characters: names hold typical API names (~45 chars), the stack several source lines.
NAME_WIDTH, NUMBER_WIDTH, TEXT_WIDTH, STACK_WIDTH = 48, 14, 50, 90
WIDTHS = {col.NPU_NAME: NAME_WIDTH, col.BENCH_NAME: NAME_WIDTH, col.ERR_MESSAGE: TEXT_WIDTH,
          col.STACK: STACK_WIDTH, col.ACCURACY: 12, col.RESULT: 12}
SHAPE_OR_DTYPE_WIDTH = 18
# Excel refuses longer cell text (the file would need repair): longer text is cut and says so.
MAX_CELL_TEXT = 32767
# A stack of 20 frames is 40 lines: a row shows its last lines (the frames nearest the API, as the cell is
# bottom-aligned); the whole text is in the cell. Taller rows would leave a few rows per screen.
STACK_LINES_SHOWN, LINE_HEIGHT = 6, 15
# Excel's rows per sheet (the header included): a longer table cannot be one sheet, the CSV holds it.
EXCEL_MAX_ROWS = 1_048_576
# The last row a chart may reference (openpyxl's limit on a Reference): a longer table gets no chart sheet.
CHART_MAX_ROW = 1_000_000
# Rows of context kept above the first failure when the sheet opens scrolled to it.
CONTEXT_ROWS = 5
# The sheet puts the verdict right after the names, where people read (the CSV keeps the legacy order, which
# scripts read by position): the rest follows in the CSV's order.
VERDICT_COLUMNS = (col.ACCURACY, col.RESULT, col.ERR_MESSAGE)


def sheet_order(columns: Sequence[str]) -> List[int]:
    """Indices into ``columns`` (the CSV's order) in the sheet's order: the two name columns, then those of
    VERDICT_COLUMNS present (Accuracy Reached or Not, Result, Err_message), then the others as they come."""
    front = [columns.index(name) for name in (col.NPU_NAME, col.BENCH_NAME) + VERDICT_COLUMNS if name in columns]
    return front + [index for index in range(len(columns)) if index not in front]


def write_xlsx(path: str, columns: Sequence[str], table: Sequence[Sequence[object]], results: Sequence[str],
               first_failure: Optional[int], points: Optional[Sequence[Tuple[Optional[float], str]]] = None) -> None:
    """Write the compare table to ``path`` as a new 0640 ``.xlsx`` (a same-named file is replaced).

    :param path: the ``.xlsx`` file to write.
    :param columns: header names, in the CSV's order (names from :mod:`columns`); the sheet shows them in
        :func:`sheet_order` (the verdict columns next to the names).
    :param table: one sequence of cells per row, in column order. ``int``/``float`` are written as numbers
        (NaN and infinities, which Excel cannot hold as numbers, as the text ``nan``/``inf``/``-inf``),
        ``str`` as text (never parsed back to a number), ``None`` as an empty cell.
    :param results: the graded result word of each row ("pass", "warning", "error", "unmatched",
        "unknown", "not compared"); "error" rows are filled red, "warning" rows yellow.
    :param first_failure: 0-based index into ``table`` of the row the advisor names, or ``None``. That
        row is bold on a darker red, selected, and scrolled into view when the file opens, and marked
        on the chart.
    :param points: per row, ``(share, direction)``: how much of its allowance the row used (None: not
        judged) and "forward"/"backward"; the chart plots them (default None: no chart).
    :raises DumpWriteError: the file cannot be written (the message names ``path``).
    """
    if len(table) + 1 > EXCEL_MAX_ROWS:
        raise ValueError(f"write_xlsx: {len(table)} rows do not fit a sheet ({EXCEL_MAX_ROWS - 1} rows at most)")
    if len(results) != len(table):
        raise ValueError(f"write_xlsx: {len(results)} results for {len(table)} rows")
    if points is not None and len(points) != len(table):
        raise ValueError(f"write_xlsx: {len(points)} chart points for {len(table)} rows")
    if first_failure is not None and not 0 <= first_failure < len(table):
        raise ValueError(f"write_xlsx: first_failure={first_failure} is not a row index of a {len(table)}-row table")
    order = sheet_order(columns)
    if order != list(range(len(columns))):
        columns = [columns[index] for index in order]
        table = _Reordered(table, order)

    def write(descriptor: int) -> None:
        with os.fdopen(os.dup(descriptor), "wb") as handle:
            _workbook(columns, table, results, first_failure, points).save(handle)

    # A temporary file renamed into place: a same-named report is replaced, a failed write leaves no
    # half-written zip (Excel would offer a repair), and the file is 0640 whatever the umask.
    replace_file(path, write, "the compare result")


class _Reordered(Sequence[List[object]]):
    """``table`` with each row's cells in ``order``, made when a row is read (the table may be 10^6 rows)."""

    def __init__(self, table: Sequence[Sequence[object]], order: Sequence[int]) -> None:
        self._table, self._order = table, tuple(order)

    def __len__(self) -> int:
        return len(self._table)

    def __getitem__(self, index):  # type: ignore[override]
        if isinstance(index, slice):
            return [[line[i] for i in self._order] for line in self._table[index]]
        line = self._table[index]
        return [line[i] for i in self._order]

    def __iter__(self) -> Iterator[List[object]]:
        order = self._order
        return ([line[i] for i in order] for line in self._table)


def _workbook(columns: Sequence[str], table: Sequence[Sequence[object]], results: Sequence[str],
              first_failure: Optional[int], points: Optional[Sequence[Tuple[Optional[float], str]]]):
    from openpyxl import Workbook

    # Write-only mode streams rows to a temporary file: memory stays flat and it is faster (5,000 x 25
    # numbers: 0.8 s against 1.1 s in the normal mode, measured). What it cannot do, change the sheet's
    # top (widths, panes, selection, row heights) once later rows are written, is not needed: all of it is
    # known before each row; the autofilter and the chart go at the end of the file anyway.
    book = Workbook(write_only=True)
    _write_table(book.create_sheet(RESULT_SHEET), columns, table, results, first_failure)
    if points is not None and table and len(table) + 1 > CHART_MAX_ROW:
        logger.warning(f"The .xlsx has no chart sheet: its {len(table)} rows are more than a chart can reference "
                       f"({CHART_MAX_ROW - 1}); the HTML report's chart shows every row.")
    elif points is not None and table:
        _write_chart(book.create_sheet(CHART_SHEET), columns, table, results, first_failure, points)
    return book


def _write_table(sheet, columns: Sequence[str], table: Sequence[Sequence[object]], results: Sequence[str],
                 first_failure: Optional[int]) -> None:
    from openpyxl.cell import WriteOnlyCell
    from openpyxl.styles import Alignment, Font, PatternFill
    from openpyxl.utils import get_column_letter
    from openpyxl.worksheet.views import Selection

    last_letter = get_column_letter(max(len(columns), 1))
    for index, name in enumerate(columns, 1):
        sheet.column_dimensions[get_column_letter(index)].width = _width(name)
    # Frozen: the header row and the two name columns, so a row's names stay in view while scrolling right.
    sheet.freeze_panes = "C2"
    if first_failure is not None:
        line = first_failure + 2
        pane = sheet.sheet_view.pane
        pane.topLeftCell = f"C{max(2, line - CONTEXT_ROWS)}"
        row_range = "A{0}:{1}{0}".format(line, last_letter)
        sheet.sheet_view.selection = [Selection(pane="topRight", activeCell="C1", sqref="C1"),
                                      Selection(pane="bottomLeft", activeCell=f"A{line}", sqref=row_range),
                                      Selection(pane="bottomRight", activeCell=f"A{line}", sqref=row_range)]

    header = []
    for name in columns:
        cell = WriteOnlyCell(sheet, value=name)
        cell.font = Font(name="Calibri", size=11, bold=True)
        cell.fill = PatternFill("solid", fgColor=HEADER_FILL)
        cell.alignment = Alignment(wrap_text=True, vertical="top")
        header.append(cell)
    sheet.append(header)

    # Whole failing rows are coloured. A styled cell costs openpyxl a style lookup per attribute; each style
    # is built once and copied instead: 5,000 x 25 all failing takes 2.4 s so, 5.7 s with cell.fill per
    # cell, 1.5 s with no failure (measured).
    templates = _StyleTemplates(sheet, WriteOnlyCell, PatternFill, Font, Alignment)
    stack_index = columns.index(col.STACK) if col.STACK in columns else None
    bar = progress.bar(len(table), "write xlsx", "row", progress.MANY_ROWS)
    for row_index, (row, result) in enumerate(zip(table, results)):
        bar.update()
        if row_index == first_failure:
            kind = "first_failure"
        else:
            kind = result if result in FILLS else None
        if stack_index is not None:
            _fit_stack_row(sheet, row_index + 2, row[stack_index])
        cells: List[object] = []
        for column_index, value in enumerate(row):
            value = _cell_value(value)
            wrapped = column_index == stack_index
            if kind is None and not wrapped and not (isinstance(value, str) and value[:1] == "="):
                cells.append(value)  # the fast path: a plain value, no cell object
            else:
                cells.append(templates.cell(value, kind, wrapped))
        sheet.append(cells)
    bar.close()
    sheet.auto_filter.ref = f"A1:{last_letter}{len(table) + 1}"


class _StyleTemplates:
    """Styled write-only cells, each style (fill kind x wrapped) resolved by openpyxl once: its style
    array (openpyxl's ``_style``, the ids of font, fill, alignment) is copied into each new cell."""

    def __init__(self, sheet, cell_type, fill_type, font_type, alignment_type) -> None:
        self._sheet = sheet
        self._cell_type = cell_type
        self._styles: Dict[tuple, object] = {}
        self._fill_type, self._font_type, self._alignment_type = fill_type, font_type, alignment_type

    def cell(self, value: object, kind: Optional[str], wrapped: bool):
        cell = self._cell_type(self._sheet, value=value)
        if isinstance(value, str) and value[:1] == "=":
            cell.data_type = "s"  # text such as "=..." stays text, never a formula
        if kind is not None or wrapped:
            cell._style = self._style(kind, wrapped).__copy__()
        return cell

    def _style(self, kind: Optional[str], wrapped: bool):
        style = self._styles.get((kind, wrapped))
        if style is None:
            template = self._cell_type(self._sheet)
            if kind == "first_failure":
                template.fill = self._fill_type("solid", fgColor=FIRST_FAILURE_FILL)
                template.font = self._font_type(name="Calibri", size=11, bold=True)
            elif kind is not None:
                template.fill = self._fill_type("solid", fgColor=FILLS[kind])
            if wrapped:
                template.alignment = self._alignment_type(wrap_text=True, vertical="bottom")
            style = self._styles[(kind, wrapped)] = template._style
        return style


def _fit_stack_row(sheet, line: int, stack: object) -> None:
    """A row holding a stack gets the height of its text, up to STACK_LINES_SHOWN lines. Neither Excel
    nor LibreOffice grows a row for wrapped text on opening a file, so without a height the lines would be
    cut to one (Excel) or drawn over the next rows (LibreOffice)."""
    if not isinstance(stack, str) or not stack:
        return
    lines = sum(max(1, math.ceil(len(text) / STACK_WIDTH)) for text in stack.split("\n"))
    if lines > 1:
        sheet.row_dimensions[line].height = min(lines, STACK_LINES_SHOWN) * LINE_HEIGHT


def _cell_value(value: object) -> object:
    if isinstance(value, str):
        if len(value) > MAX_CELL_TEXT:
            marker = f"... [cut: {len(value)} characters]"
            return _printable(value[:MAX_CELL_TEXT - len(marker)]) + marker
        return _printable(value)
    if value is None or type(value) is int or type(value) is bool:
        return value
    if isinstance(value, numbers.Real):  # float, numpy scalars
        if isinstance(value, numbers.Integral) or math.isfinite(value):
            return value
        return str(float(value))  # "nan", "inf", "-inf": the CSV's spelling; Excel has no such numbers
    return str(value)  # anything else as the CSV shows it (csv writes str() of a cell)


def _printable(text: str) -> str:
    from openpyxl.cell.cell import ILLEGAL_CHARACTERS_RE

    # Control characters make openpyxl raise (Excel cannot hold them); show them as "?" rather than fail.
    return ILLEGAL_CHARACTERS_RE.sub("?", text)


def _width(name: str) -> float:
    if name in WIDTHS:
        return WIDTHS[name]
    if "Dtype" in name or "Shape" in name:
        return SHAPE_OR_DTYPE_WIDTH
    return NUMBER_WIDTH


# The chart's value axis: shares are drawn between these (log scale); 0 (identical) sits on the floor.
SHARE_FLOOR, SHARE_CEILING = 1e-3, 1e3
# Point colours by Result: the xlsx's fills, darker, so they read on white.
POINT_COLOURS = {"pass": "70AD47", "warning": "BF8F00", "error": "C00000"}
GRADES = ("pass", "warning", "error")


def _plotted(share: Optional[float]) -> Optional[float]:
    """A share as drawn: clipped to [SHARE_FLOOR, SHARE_CEILING]; None (not judged) stays a gap."""
    if share is None or (isinstance(share, float) and math.isnan(share)):
        return None
    return min(max(share, SHARE_FLOOR), SHARE_CEILING)


DIRECTIONS = ("forward", "backward")


def _write_chart(sheet, columns: Sequence[str], table: Sequence[Sequence[object]], results: Sequence[str],
                 first_failure: Optional[int], points: Sequence[Tuple[Optional[float], str]]) -> None:
    """Sheet "chart": a data block (CSV line; per direction one column of shares per grade; the allowed line;
    the first failure) and two scatter charts over it, forward calls and backward calls, each row's error as a
    share of what it was allowed on a log axis, 1 being the limit: a planted error stands out as the first red
    point above the line, and round-off below it."""
    # Printed (or exported to PDF) landscape, one page wide. Set before the first row: write-only mode
    # writes the sheet's properties with it.
    sheet.page_setup.orientation = "landscape"
    sheet.page_setup.fitToWidth, sheet.page_setup.fitToHeight = 1, 0
    sheet.sheet_properties.pageSetUpPr.fitToPage = True
    width = _write_chart_data(sheet, results, first_failure, points)
    last_row = len(table) + 1
    failure_direction = points[first_failure][1] if first_failure is not None else None
    anchor_rows = {"forward": 2, "backward": 32}
    for number, direction in enumerate(DIRECTIONS):
        failing_here = any(results[i] == "error" and points[i][1] == direction for i in range(len(points)))
        title = _chart_title(columns, table, first_failure if failure_direction == direction else None,
                             direction, failing_here)
        chart = _direction_chart(sheet, number, title, last_row,
                                 first_failure if failure_direction == direction else None)
        sheet.add_chart(chart, f"{_letter(width + 2)}{anchor_rows[direction]}")


def _write_chart_data(sheet, results: Sequence[str], first_failure: Optional[int],
                      points: Sequence[Tuple[Optional[float], str]]) -> int:
    """The chart's data block: a row's share lands in the column of its direction and grade (a row without a
    grade is left out; one of neither direction counts as forward); returns the number of columns."""
    header = ["CSV line"] + [f"{direction} {grade}" for direction in DIRECTIONS for grade in GRADES] + \
        ["allowed (1)", "first failure"]
    for index in range(len(header)):
        sheet.column_dimensions[_letter(index + 1)].width = 12
    sheet.append(header)
    for row_index, (share, direction) in enumerate(points):
        grade = results[row_index] if results[row_index] in GRADES else None
        values = [None] * (len(DIRECTIONS) * len(GRADES))
        if grade is not None:
            values[DIRECTIONS.index(direction if direction in DIRECTIONS else "forward") * len(GRADES)
                   + GRADES.index(grade)] = _plotted(share)
        marked = _plotted(share) if row_index == first_failure else None
        if row_index == first_failure and marked is None:
            marked = SHARE_CEILING  # a failure without a share (inf/nan positions) is drawn at the top
        sheet.append([row_index + 2] + values + [1.0, marked])
    return len(header)


def _direction_chart(sheet, number: int, title: str, last_row: int, first_failure: Optional[int]):
    """The scatter chart of direction ``number`` over the data block: a series per grade, the dashed limit,
    and the first failure's marker when it is of this direction (``first_failure`` not None)."""
    from openpyxl.chart import Reference, ScatterChart, Series

    x_values = Reference(sheet, min_col=1, min_row=2, max_row=last_row)
    chart = ScatterChart()
    chart.title = title
    chart.style = 13
    chart.width, chart.height = 30, 14
    for offset, grade in enumerate(GRADES):
        column = 2 + number * len(GRADES) + offset
        series = Series(Reference(sheet, min_col=column, min_row=1, max_row=last_row), x_values,
                        title_from_data=True)
        series.marker.symbol = "circle"
        series.marker.size = 4
        series.marker.graphicalProperties.solidFill = POINT_COLOURS[grade]
        series.marker.graphicalProperties.line.solidFill = POINT_COLOURS[grade]
        series.graphicalProperties.line.noFill = True  # points only: a line would join unrelated rows
        chart.series.append(series)
    limit = Series(Reference(sheet, min_col=2 + 2 * len(GRADES), min_row=1, max_row=last_row), x_values,
                   title_from_data=True)
    limit.marker.symbol = "none"
    limit.smooth = False
    limit.graphicalProperties.line.solidFill = "404040"
    limit.graphicalProperties.line.dashStyle = "dash"
    chart.series.append(limit)
    if first_failure is not None:
        marker = Series(Reference(sheet, min_col=3 + 2 * len(GRADES), min_row=2, max_row=last_row), x_values,
                        title=f"first failure (CSV line {first_failure + 2})")
        marker.marker.symbol = "diamond"
        marker.marker.size = 14
        marker.marker.graphicalProperties.solidFill = "C00000"
        marker.marker.graphicalProperties.line.solidFill = "000000"
        marker.graphicalProperties.line.noFill = True
        chart.series.append(marker)
    chart.x_axis.title = "CSV line (execution order)"
    chart.y_axis.title = "error / allowed (1 = the limit)"
    chart.y_axis.scaling.logBase = 10
    chart.y_axis.scaling.min, chart.y_axis.scaling.max = SHARE_FLOOR, SHARE_CEILING
    chart.x_axis.scaling.min, chart.x_axis.scaling.max = 2, max(last_row, 3)
    # openpyxl 3.1 writes axes as deleted unless told otherwise: Excel would then draw no axis at all
    chart.x_axis.delete = chart.y_axis.delete = False
    chart.legend.position = "b"
    return chart


def _letter(number: int) -> str:
    from openpyxl.utils import get_column_letter

    return get_column_letter(number)


def _chart_title(columns: Sequence[str], table: Sequence[Sequence[object]], first_failure: Optional[int],
                 direction: str, failing: bool) -> str:
    title = f"{direction.capitalize()} calls: error / allowed along execution order"
    if first_failure is None:
        return title + (": failing rows after the first failure" if failing else ": no failure")
    title += f" - first failure: CSV line {first_failure + 2}"
    if col.NPU_NAME in columns:
        title += f", {table[first_failure][columns.index(col.NPU_NAME)]}"
    return title
