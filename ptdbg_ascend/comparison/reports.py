"""Write the result rows: ``.csv`` (the legacy file) and an ``.xlsx`` beside it (openpyxl, imported only
here) with failing rows highlighted and a chart of Cosine/MaxAbsErr along execution order."""

from __future__ import annotations

import csv
import os
from typing import Dict, Optional, Sequence

from ptdbg_ascend.comparison import columns as col
from ptdbg_ascend.errors import DumpWriteError

FILE_MODE = 0o640
RED, YELLOW = "FFC7CE", "FFEB9C"
HIGHLIGHTED = (col.NPU_NAME, col.BENCH_NAME, col.ACCURACY, col.RESULT, col.ERR_MESSAGE)


def open_new(path: str):
    """``path`` opened for writing text as a new 0640 file (a same-named report is replaced, as the
    legacy tool did)."""
    if os.path.lexists(path):
        os.remove(path)
    return os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE), "w", newline="", encoding="utf-8")


def write_csv(path: str, columns: Sequence[str], rows: Sequence[Dict[str, object]]) -> None:
    """Columns in the given order; a missing cell is written empty."""
    try:
        with open_new(path) as handle:
            writer = csv.writer(handle)
            writer.writerow(columns)
            for row in rows:
                writer.writerow([row.get(name, "") for name in columns])
    except OSError as error:
        raise DumpWriteError("Cannot write the compare result {}: {}".format(path, error)) from None


def _float(value: object) -> Optional[float]:
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None


def write_xlsx(path: str, columns: Sequence[str], rows: Sequence[Dict[str, object]],
               first_failure: Optional[int]) -> None:
    """The same table; rows whose Result is error red, warning yellow (name and verdict cells); sheet "chart" plots Cosine and
    MaxAbsErr by row with the first failing row marked (full mode only)."""
    from openpyxl import Workbook
    from openpyxl.cell import WriteOnlyCell
    from openpyxl.chart import LineChart, Reference
    from openpyxl.styles import PatternFill

    # write-only mode streams rows: several times faster than the normal mode on thousands of rows
    book = Workbook(write_only=True)
    sheet = book.create_sheet("compare_result")
    sheet.freeze_panes = "C2"
    sheet.append(list(columns))
    fills = {"error": PatternFill("solid", fgColor=RED), "warning": PatternFill("solid", fgColor=YELLOW)}
    highlighted = [i for i, name in enumerate(columns) if name in HIGHLIGHTED]
    for row in rows:
        fill = fills.get(str(row.get(col.RESULT, "")))
        values = [_xlsx_cell(row.get(name, "")) for name in columns]
        if fill is not None:
            # Style only the cells a reader scans (name, verdicts): styling all ~30 cells of every
            # failing row doubles the time openpyxl takes.
            for index in highlighted:
                cell = WriteOnlyCell(sheet, value=values[index])
                cell.fill = fill
                values[index] = cell
        sheet.append(values)
    if col.COSINE in columns and rows:
        _add_chart(book, rows, first_failure, LineChart, Reference)
    try:
        if os.path.lexists(path):
            os.remove(path)
        book.save(path)
        os.chmod(path, FILE_MODE)
    except OSError as error:
        raise DumpWriteError("Cannot write the compare result {}: {}".format(path, error)) from None


def _xlsx_cell(value: object) -> object:
    number = _float(value) if isinstance(value, str) and value[:1] in "-0123456789" else None
    return number if number is not None else value


def _add_chart(book, rows, first_failure, LineChart, Reference) -> None:
    data = book.create_sheet("chart")
    data.append(["Row", col.COSINE, col.MAX_ABS, "First failure"])
    for index, row in enumerate(rows):
        cosine = _float(row.get(col.COSINE))
        data.append([index + 2, cosine, _float(row.get(col.MAX_ABS)),
                     cosine if index == first_failure else None])
    chart = LineChart()
    title = "Cosine and MaxAbsErr along execution order"
    if first_failure is not None:
        title += " (first failure: CSV line {})".format(first_failure + 2)
    chart.title = title
    chart.x_axis.title = "CSV line"
    chart.y_axis.title = "value"
    chart.add_data(Reference(data, min_col=2, max_col=4, min_row=1, max_row=len(rows) + 1), titles_from_data=True)
    chart.set_categories(Reference(data, min_col=1, min_row=2, max_row=len(rows) + 1))
    marker = chart.series[2]
    marker.marker.symbol = "diamond"
    marker.marker.size = 10
    marker.graphicalProperties.line.noFill = True
    chart.width, chart.height = 28, 12
    data.add_chart(chart, "F2")
