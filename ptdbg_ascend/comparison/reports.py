"""Write the result rows: the ``.csv`` (the legacy file) and an ``.xlsx`` beside it (``xlsx_report.py``).

This is the one place where typed rows become cells: numbers stay numbers for the xlsx, the CSV writes
metric values as ``'{:.12f}'`` (as the original did) and the legacy words where a number cannot be given.
Record names, dtypes and stack lines come from the dumps: the CSV writes them through
:func:`ptdbg_ascend.csv_cells.safe_cell` (``=HYPERLINK(...)`` becomes ``'=HYPERLINK(...)``), the xlsx as
text cells.
"""

from __future__ import annotations

import os
from typing import IO, Dict, Iterator, List, Optional, Sequence, Tuple

from ptdbg_ascend import csv_cells, progress
from ptdbg_ascend.comparison import columns as col
from ptdbg_ascend.comparison.metrics import EXTRA_FIELDS, LEGACY_FIELDS, NAN
from ptdbg_ascend.formats.records import TensorRecord, user_stack_text
from ptdbg_ascend.comparison.rows import CompareRow
from ptdbg_ascend.errors import DumpWriteError
from ptdbg_ascend.fs import reports as fs_reports
from ptdbg_ascend.fs.writes import FILE_MODE
from ptdbg_ascend.formats.layout import COMPARE_RESULT_STEM
from ptdbg_ascend.formats.naming import FORWARD, split_call_name
from ptdbg_ascend.log import logger

METRIC_FIELDS = dict(zip(col.METRICS + col.EXTRA_METRICS, LEGACY_FIELDS + EXTRA_FIELDS))
# Metric cells the CSV writes with 12 decimals (the original's format).
FIXED_DECIMALS = frozenset(col.METRICS + col.EXTRA_METRICS)


def open_new(path: str):
    """``path`` opened for writing text as a new 0640 file (a same-named report is replaced, as the
    legacy tool did)."""
    if os.path.lexists(path):
        os.remove(path)
    return os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE), "w", newline="", encoding="utf-8")


def claim_report(output_path: str, tail: str, others: Sequence[Tuple[str, str]] = (),
                 stem: str = COMPARE_RESULT_STEM) -> Tuple[str, str, IO[str]]:
    """Claim a fresh report name: ``compare_result_{tail}.csv`` when free (the legacy name), else
    ``compare_result_{tail}_1.csv``, ``_2``... (:func:`ptdbg_ascend.fs.reports.claim_report`: created with
    ``O_EXCL``, a name taken only when the files of ``others``, ``(prefix, extension)`` pairs, are free too).
    Returns ``(tail, csv path, open csv handle)``. ``stem`` (default ``compare_result_``) names other reports."""
    return fs_reports.claim_report(output_path, tail, others, stem)


def _statistics_cells(prefix_columns: Sequence[str], record: Optional[TensorRecord]) -> Dict[str, object]:
    if record is None:
        return {name: NAN for name in prefix_columns}
    return {name: (NAN if value is None else value) for name, value in zip(prefix_columns, record.statistics)}


def row_cells(row: CompareRow, stack_mode: bool) -> Dict[str, object]:
    """The typed cells of one row by column name: numbers as float/int, legacy words as str."""
    npu, bench = row.npu, row.bench
    cells: Dict[str, object] = {
        col.NPU_NAME: npu.name if npu else NAN, col.BENCH_NAME: bench.name if bench else NAN,
        "NPU Tensor Dtype": npu.dtype if npu else NAN, "Bench Tensor Dtype": bench.dtype if bench else NAN,
        "NPU Tensor Shape": str(list(npu.shape)) if npu else NAN,
        "Bench Tensor Shape": str(list(bench.shape)) if bench else NAN,
    }
    cells.update(_statistics_cells(col.STATISTICS[:4], npu))
    cells.update(_statistics_cells(col.STATISTICS[4:], bench))
    if row.metrics is not None:
        for name, field in METRIC_FIELDS.items():
            cells[name] = row.metrics.cell(field)
        cells[col.ACCURACY] = row.accuracy
        worst = row.metrics.worst_index
        cells[col.WORST_INDEX] = str(tuple(worst)) if (worst is not None and row.failed) else ""
    else:
        for index, name in enumerate(col.SUMMARY_DIFFS):
            n_value = npu.statistics[index] if npu else None
            b_value = bench.statistics[index] if bench else None
            cells[name] = (n_value - b_value) if (n_value is not None and b_value is not None) else NAN
    cells[col.RESULT] = row.result
    cells[col.ERR_MESSAGE] = row.message
    tolerance = row.tolerance if (row.tolerance is not None and not row.tolerance.exact) else None
    cells[col.ALLOWED_RTOL] = tolerance.rtol if tolerance is not None else ""
    needed = row.judgement.needed_rtol
    cells[col.NEEDED_RTOL] = needed if needed is not None else ""
    cells[col.CARRIED_THROUGH] = tolerance.rule if tolerance is not None and tolerance.carried else ""
    share = row.judgement.share
    cells[col.SHARE] = share if share is not None else ""
    metrics = row.metrics
    if tolerance is not None and metrics is not None and metrics.bench_norm and metrics.size is not None:
        cells[col.ALLOWED_RELATIVE] = tolerance.norm_allowed(metrics.bench_norm, metrics.size) / metrics.bench_norm
    else:
        cells[col.ALLOWED_RELATIVE] = ""
    if stack_mode:
        call = row.pair.npu_call  # the column holds NPU stacks only; a bench-only row leaves it empty
        cells[col.STACK] = user_stack_text(call.stack) if (row.pair.first_of_call and call is not None
                                                           and call.stack) else ""
    return cells


class Table(Sequence[List[object]]):
    """The rows as lists of typed cells in ``columns`` order, each made when it is read: the CSV and the
    .xlsx read the table once each, so a 10^6-row compare never holds 25 x 10^6 cells (row_cells costs
    about 10 us a row, so the two reads cost 20 s at 10^6 rows: less than what keeping them would have
    cost the machine's memory)."""

    def __init__(self, rows: Sequence[CompareRow], columns: Sequence[str], stack_mode: bool) -> None:
        self._rows, self._columns, self._stack_mode = rows, tuple(columns), stack_mode

    def __len__(self) -> int:
        return len(self._rows)

    def __getitem__(self, index):  # type: ignore[override]
        if isinstance(index, slice):
            return [self._cells(row) for row in self._rows[index]]
        return self._cells(self._rows[index])

    def __iter__(self) -> Iterator[List[object]]:
        return (self._cells(row) for row in self._rows)

    def _cells(self, row: CompareRow) -> List[object]:
        cells = row_cells(row, self._stack_mode)
        return [cells.get(name, "") for name in self._columns]


def table_of(rows: Sequence[CompareRow], columns: Sequence[str], stack_mode: bool) -> Table:
    """The rows as lists of typed cells in ``columns`` order (a :class:`Table`: each row's cells made when
    it is read)."""
    return Table(rows, columns, stack_mode)


def _csv_cell(name: str, value: object) -> object:
    if isinstance(value, float) and name in FIXED_DECIMALS:
        return f"{value:.12f}"
    return value


def write_csv(path: str, columns: Sequence[str], table: Sequence[Sequence[object]],
              handle: Optional[IO[str]] = None) -> None:
    """Columns in the given order; metric numbers with 12 decimals; text that a spreadsheet would run
    (``=``, ``+``, ``-``, ``@``... first) with a ``'`` in front (:mod:`ptdbg_ascend.csv_cells`). ``handle``
    (default None: ``path`` is created, replacing a same-named file): the open file of ``path`` from
    :func:`claim_report`; closed here."""
    try:
        with (handle if handle is not None else open_new(path)) as handle:
            writer = csv_cells.writer(handle)
            writer.writerow(columns)
            bar = progress.bar(len(table), "write csv", "row", progress.MANY_ROWS)
            for cells in table:
                writer.writerow([_csv_cell(name, value) for name, value in zip(columns, cells)])
                bar.update()
            bar.close()
    except OSError as error:
        raise DumpWriteError(f"Cannot write the compare result {path}: {error}") from None


def write_xlsx(path: str, columns: Sequence[str], table: Sequence[Sequence[object]], rows: Sequence[CompareRow],
               first_failure: Optional[int]) -> Optional[str]:
    """The same table as an ``.xlsx`` (see :func:`ptdbg_ascend.comparison.xlsx_report.write_xlsx`); returns
    ``path``, or None with a warning when the table has more rows than a sheet holds (the CSV has them all)."""
    from ptdbg_ascend.comparison import xlsx_report

    if len(table) + 1 > xlsx_report.EXCEL_MAX_ROWS:
        logger.warning(f"No .xlsx written: its {len(table)} rows are more than a sheet holds "
                       f"({xlsx_report.EXCEL_MAX_ROWS - 1}); the CSV holds them all.")
        return None
    points = [(row.judgement.share, split_call_name(row.call.name).direction if row.call is not None else FORWARD)
              for row in rows]
    xlsx_report.write_xlsx(path, columns, table, [row.result for row in rows], first_failure, points)
    return path
