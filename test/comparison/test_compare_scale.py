"""A large compare: the legacy pkl reader holds one line at a time, a corrupt line is still told from a cut last
one, and each stage of a compare shows a progress bar at a terminal only (bench/bench_compare_scale.py measures
the time and memory of 10^4 to 10^6 rows)."""

from __future__ import annotations

import io
import sys
import tracemalloc

import pytest

from ptdbg_ascend import progress
from ptdbg_ascend.comparison.api import compare
from ptdbg_ascend.formats.pkl import record_line
from ptdbg_ascend.readers import legacy_pkl

pytestmark = pytest.mark.torchfree

BAR_NAMES = ("read npu.pkl", "read bench.pkl", "compare", "write csv", "write xlsx")


def write_pkl(path, calls: int, shift: float = 0.0) -> str:
    """``calls`` Functional_relu calls of one input and one output each."""
    with open(path, "w") as handle:
        for index in range(calls):
            for suffix in ("input.0", "output"):
                handle.write(record_line(f"Functional_relu_{index}_forward_{suffix}", "torch.float32", [4, 8],
                                         [1.0 + shift, 0.0, 0.25 + index * 1e-3, 3.0]) + "\n")
    return str(path)


def peak_while_reading(path: str) -> int:
    tracemalloc.start()
    try:
        for _ in legacy_pkl.iter_lines(path):
            pass
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_reading_a_pkl_holds_one_line_whatever_its_length(tmp_path):
    small = write_pkl(tmp_path / "small.pkl", 500)
    large = write_pkl(tmp_path / "large.pkl", 10_000)  # 2 MB: read whole, it would be the peak
    small_peak, large_peak = peak_while_reading(small), peak_while_reading(large)
    assert large_peak < 2 * small_peak + 64_000, (small_peak, large_peak)
    assert large_peak < 500_000


def test_a_corrupt_line_before_others_is_not_called_a_cut_last_line(tmp_path, capsys):
    good = record_line("Torch_relu_0_forward_input.0", "torch.float32", [2], [1.0, -1.0, 0.0, 1.4]) + "\n"
    path = tmp_path / "dump.pkl"
    path.write_text(good + '["Torch_relu_0_forward_out\n\n' + good.replace("input.0", "output") + "\n"
                    + '["Torch_relu_1_forward_inp\n\n\n')
    lines = legacy_pkl.read_lines(str(path))
    assert [number for number, _ in lines] == [1, 4]
    out = capsys.readouterr().out
    assert f"Skipped corrupt line 2 of {path}." in out
    assert f"Skipped corrupt line 6 of {path} (truncated last line: was the run killed?)." in out


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("stderr, shown", [(Terminal(), True), (io.StringIO(), False)], ids=["terminal", "pipe"])
def test_each_stage_of_a_large_compare_shows_a_bar_at_a_terminal_only(tmp_path, monkeypatch, stderr, shown):
    pytest.importorskip("tqdm")
    pytest.importorskip("openpyxl")
    # The thresholds of a large compare brought down to this small one: 8 MB of pkl, 20,000 rows.
    monkeypatch.setattr(legacy_pkl, "PROGRESS_MIN_BYTES", 1)
    monkeypatch.setattr(progress, "MANY_ROWS", 1)
    monkeypatch.setattr(sys, "stderr", stderr)
    npu, bench = write_pkl(tmp_path / "npu.pkl", 50, 1e-9), write_pkl(tmp_path / "bench.pkl", 50)
    outcome = compare({"npu_pkl_path": npu, "bench_pkl_path": bench}, str(tmp_path / "out"), html=False)
    assert outcome.rows == 100
    text = stderr.getvalue()
    for name in BAR_NAMES:
        assert (f"{name}:" in text) is shown, (name, text[-400:])
    if shown:
        assert "100/100" in text and "write xlsx: 100%" in text


def test_a_table_longer_than_a_chart_can_reference_gets_an_xlsx_without_chart(tmp_path, monkeypatch, capsys):
    openpyxl = pytest.importorskip("openpyxl")
    from ptdbg_ascend.comparison import xlsx_report

    monkeypatch.setattr(xlsx_report, "CHART_MAX_ROW", 100)  # openpyxl's is 1,000,000: a 10^6-row compare
    npu, bench = write_pkl(tmp_path / "npu.pkl", 50, 1e-9), write_pkl(tmp_path / "bench.pkl", 50)
    outcome = compare({"npu_pkl_path": npu, "bench_pkl_path": bench}, str(tmp_path / "out"), html=False)
    assert openpyxl.load_workbook(outcome.xlsx_path, read_only=True).sheetnames == ["compare_result"]
    assert "The .xlsx has no chart sheet: its 100 rows are more than a chart can reference (99)" in \
        capsys.readouterr().out


def test_a_table_longer_than_a_sheet_gets_no_xlsx_and_says_so(tmp_path, monkeypatch, capsys):
    from ptdbg_ascend.comparison import xlsx_report

    monkeypatch.setattr(xlsx_report, "EXCEL_MAX_ROWS", 100)  # Excel's is 1,048,576
    npu, bench = write_pkl(tmp_path / "npu.pkl", 50, 1e-9), write_pkl(tmp_path / "bench.pkl", 50)
    outcome = compare({"npu_pkl_path": npu, "bench_pkl_path": bench}, str(tmp_path / "out"), html=False)
    assert outcome.xlsx_path is None and not list((tmp_path / "out").glob("*.xlsx"))
    assert "No .xlsx written: its 100 rows are more than a sheet holds (99); the CSV holds them all." in \
        capsys.readouterr().out
