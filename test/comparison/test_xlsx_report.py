"""The .xlsx report, read back with openpyxl: colours, the first failure selected, the chart, cell types."""

from __future__ import annotations

import os
import stat

import pytest

from ptdbg_ascend.comparison import columns as col
from ptdbg_ascend.comparison.xlsx_report import write_xlsx
from ptdbg_ascend.errors import DumpWriteError

openpyxl = pytest.importorskip("openpyxl")

pytestmark = pytest.mark.torchfree

COLUMNS = [col.NPU_NAME, col.BENCH_NAME, "NPU Tensor Dtype", col.COSINE, col.MAX_ABS, col.ACCURACY,
           col.ERR_MESSAGE, col.STACK, col.RESULT]
STACK_TEXT = ('File "/work/train.py", line 90, in <module>\n    model(x)\n'
              'File "/work/model.py", line 42, in forward\n    x = self.norm(x)')
CHECK = "Need double check api accuracy."


def row(index, cosine, max_abs, result, stack=""):
    name = f"Torch_layer_norm_{index}_forward_output"
    failed = result in ("error", "warning")
    return [name, name, "torch.float32", cosine, max_abs, "No" if failed else "Yes", CHECK if failed else "",
            stack, result]


def golden_table():
    """12 rows (CSV lines 2-13): passes, then the first error at row 8 (line 10), a warning, one more error."""
    table = [row(i, 1.0 - i * 1e-6, 1e-5 * (i + 1), "pass", STACK_TEXT if i == 0 else "") for i in range(8)]
    table += [row(8, 0.41, 2.5, "error", STACK_TEXT), row(9, 0.999, 0.0, "pass"), row(10, 0.995, 0.03, "warning"),
              row(11, "Nan", "N/A", "error")]
    return table, [line[-1] for line in table]


# Each golden row's share of its allowance and direction: forward passes, the first failure (2.5 times what
# was allowed), an identical row (0: drawn on the floor), a backward warning and a backward inf/nan error.
GOLDEN_POINTS = [(0.1 * i, "forward") for i in range(8)] + [(2.5, "forward"), (0.0, "forward"),
                                                             (0.9, "backward"), (None, "backward")]


def written(tmp_path, columns, table, results, first_failure, name="compare_result.xlsx", points=None):
    path = str(tmp_path / name)
    write_xlsx(path, columns, table, results, first_failure, points)
    return path, openpyxl.load_workbook(path)


def fill_of(cell):
    return cell.fill.fgColor.rgb[-6:] if cell.fill.fill_type == "solid" else None


def test_failing_rows_are_coloured_whole(tmp_path):
    table, results = golden_table()
    _, book = written(tmp_path, COLUMNS, table, results, first_failure=8)
    sheet = book["compare_result"]
    assert [fill_of(cell) for cell in sheet[12]] == ["FFEB9C"] * len(COLUMNS)  # CSV line 12: a warning
    assert [fill_of(cell) for cell in sheet[13]] == ["FFC7CE"] * len(COLUMNS)  # CSV line 13: an error
    assert {fill_of(cell) for cell in sheet[9]} == {fill_of(cell) for cell in sheet[11]} == {None}  # passes
    assert not sheet["A13"].font.b


def test_first_failure_is_bold_dark_red_selected_and_scrolled_to(tmp_path):
    table, results = golden_table()
    _, book = written(tmp_path, COLUMNS, table, results, first_failure=8)
    sheet = book["compare_result"]
    assert book.active.title == "compare_result"
    assert [fill_of(cell) for cell in sheet[10]] == ["FF7C80"] * len(COLUMNS)
    assert all(cell.font.b for cell in sheet[10])
    pane = sheet.sheet_view.pane
    # still frozen at C2 (two columns, one row); scrolled so that line 10 shows with 5 lines above it
    assert (pane.xSplit, pane.ySplit, pane.state, pane.activePane) == (2, 1, "frozen", "bottomRight")
    assert pane.topLeftCell == "C5"
    active = [selection for selection in sheet.sheet_view.selection if selection.pane == pane.activePane]
    assert [(selection.activeCell, selection.sqref) for selection in active] == [("A10", "A10:I10")]


def test_layout_header_filter_and_widths(tmp_path):
    table, results = golden_table()
    _, book = written(tmp_path, COLUMNS, table, results, first_failure=8)
    sheet = book["compare_result"]
    # The verdict columns sit next to the names; the others follow in the given (CSV) order.
    assert [cell.value for cell in sheet[1]] == [col.NPU_NAME, col.BENCH_NAME, col.ACCURACY, col.RESULT,
                                                 col.ERR_MESSAGE, "NPU Tensor Dtype", col.COSINE, col.MAX_ABS,
                                                 col.STACK]
    assert [cell.value for cell in sheet[10]][2:5] == ["No", "error", CHECK]  # the values move with their names
    assert all(cell.font.b for cell in sheet[1])
    assert sheet.auto_filter.ref == "A1:I13"
    widths = {letter: sheet.column_dimensions[letter].width for letter in "ABCDEFGHI"}
    assert widths == {"A": 48, "B": 48, "C": 12, "D": 12, "E": 50, "F": 18, "G": 14, "H": 14, "I": 90}
    # the stack cell wraps, bottom-aligned, and its row is as tall as its 4 lines
    assert sheet["I2"].alignment.wrap_text and sheet["I2"].alignment.vertical == "bottom"
    assert sheet["I2"].value == STACK_TEXT
    assert sheet.row_dimensions[2].height == 60
    assert sheet.row_dimensions[3].height is None


def test_chart_plots_each_rows_share_of_its_allowance_by_direction_and_grade(tmp_path):
    table, results = golden_table()
    _, book = written(tmp_path, COLUMNS, table, results, first_failure=8, points=GOLDEN_POINTS)
    data = book["chart"]
    assert [cell.value for cell in data[1]] == [
        "CSV line", "forward pass", "forward warning", "forward error", "backward pass", "backward warning",
        "backward error", "allowed (1)", "first failure"]
    rows = [[cell.value for cell in line] for line in data.iter_rows(min_row=2)]
    assert [line[0] for line in rows] == list(range(2, 14))
    assert rows[3] == [5, pytest.approx(0.3), None, None, None, None, None, 1.0, None]
    assert rows[8] == [10, None, None, 2.5, None, None, None, 1.0, 2.5]  # the first failure, marked
    assert rows[9][1] == 1e-3  # identical: on the floor of the log axis
    assert rows[10][5] == 0.9 and rows[11][6] is None  # a backward warning; an error with no share: a gap
    assert [line[8] for line in rows].count(None) == 11  # the marker has one point only

    forward, backward = data._charts
    assert forward.title.tx.rich.p[0].r[0].t == ("Forward calls: error / allowed along execution order - first "
                                                 "failure: CSV line 10, Torch_layer_norm_8_forward_output")
    assert backward.title.tx.rich.p[0].r[0].t == ("Backward calls: error / allowed along execution order: failing "
                                                  "rows after the first failure")
    passes, warnings, errors, limit, marker = forward.series
    assert (passes.yVal.numRef.f, errors.yVal.numRef.f, limit.yVal.numRef.f, marker.yVal.numRef.f) == (
        "'chart'!$B$2:$B$13", "'chart'!$D$2:$D$13", "'chart'!$H$2:$H$13", "'chart'!$I$2:$I$13")
    assert errors.marker.graphicalProperties.solidFill.srgbClr == "C00000"
    assert (marker.marker.symbol, marker.marker.size, marker.graphicalProperties.line.noFill) == ("diamond", 14, True)
    assert len(backward.series) == 4  # no marker where the first failure is not
    assert (forward.y_axis.scaling.logBase, forward.y_axis.scaling.min, forward.y_axis.scaling.max) == (10, 1e-3, 1e3)


def test_no_failure_no_marker_and_nothing_selected(tmp_path):
    table = [row(i, 1.0, 1e-6 * (i + 1), "pass") for i in range(5)] + [row(5, 1.0, 0.0, "unmatched")]
    points = [(0.2, "forward")] * 5 + [(None, "forward")]
    _, book = written(tmp_path, COLUMNS, table, [line[-1] for line in table], first_failure=None, points=points)
    sheet = book["compare_result"]
    assert sheet.sheet_view.pane.topLeftCell == "C2"
    assert {fill_of(cell) for line in sheet.iter_rows(min_row=2) for cell in line} == {None}
    forward, backward = book["chart"]._charts
    assert forward.title.tx.rich.p[0].r[0].t == "Forward calls: error / allowed along execution order: no failure"
    assert [len(chart.series) for chart in (forward, backward)] == [4, 4]


def test_cells_keep_their_types(tmp_path):
    cells = [0.5, "Nan", None, "0.5", float("nan"), float("-inf"), 3, "=SUM(A1)", "bad\x01char"]
    columns = [f"c{i}" for i in range(len(cells))]
    _, book = written(tmp_path, columns, [cells], ["pass"], first_failure=None)
    sheet = book["compare_result"]
    assert [cell.value for cell in sheet[2]] == [0.5, "Nan", None, "0.5", "nan", "-inf", 3, "=SUM(A1)", "bad?char"]
    assert [cell.data_type for cell in sheet[2]] == ["n", "s", "n", "s", "s", "s", "n", "s", "s"]
    assert "chart" not in book.sheetnames  # no points given, no chart


def test_summary_columns_without_rows(tmp_path):
    columns = col.summary_columns(stack_mode=False)
    _, book = written(tmp_path, columns, [], [], first_failure=None)
    assert book.sheetnames == ["compare_result"]
    expected = columns[:2] + [col.RESULT, col.ERR_MESSAGE] + [c for c in columns[2:] if c not in (col.RESULT,
                                                                                                 col.ERR_MESSAGE)]
    assert [cell.value for cell in book["compare_result"][1]] == expected


def test_replaces_a_same_named_file_with_mode_0640(tmp_path):
    path = tmp_path / "compare_result.xlsx"
    path.write_text("old report")
    os.chmod(str(path), 0o666)
    table, results = golden_table()
    written(tmp_path, COLUMNS, table, results, first_failure=8, points=GOLDEN_POINTS)
    assert stat.S_IMODE(os.stat(str(path)).st_mode) == 0o640
    assert openpyxl.load_workbook(str(path)).sheetnames == ["compare_result", "chart"]


@pytest.mark.parametrize("where", ["missing_dir/compare_result.xlsx", "a_directory"])
def test_unwritable_path_is_a_dump_write_error_naming_it(tmp_path, where):
    (tmp_path / "a_directory").mkdir()
    path = str(tmp_path / where)
    table, results = golden_table()
    with pytest.raises(DumpWriteError, match=f"Cannot write the compare result {path}"):
        write_xlsx(path, COLUMNS, table, results, 8)


def test_mismatched_arguments_are_refused(tmp_path):
    table, results = golden_table()
    with pytest.raises(ValueError, match="11 results for 12 rows"):
        write_xlsx(str(tmp_path / "r.xlsx"), COLUMNS, table, results[:-1], None)
    with pytest.raises(ValueError, match="first_failure=12 is not a row index of a 12-row table"):
        write_xlsx(str(tmp_path / "r.xlsx"), COLUMNS, table, results, 12)
    with pytest.raises(ValueError, match="11 chart points for 12 rows"):
        write_xlsx(str(tmp_path / "r.xlsx"), COLUMNS, table, results, None, GOLDEN_POINTS[:-1])
