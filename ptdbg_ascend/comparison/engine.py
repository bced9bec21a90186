"""Turn paired records into report rows (dicts keyed by column name), loading tensor pairs on a small
thread pool with a bounded number of pairs in flight, so memory stays at a few tensor pairs."""

from __future__ import annotations

import collections
import concurrent.futures
import os
import sys
from typing import Dict, Iterator, List, Optional, Sequence

from ptdbg_ascend.comparison import columns as col
from ptdbg_ascend.comparison import metrics as met
from ptdbg_ascend.comparison import verdicts
from ptdbg_ascend.comparison.matching import RowPair, dtypes_compatible
from ptdbg_ascend.comparison.records import TensorRecord, format_stack
from ptdbg_ascend.log import logger

MISSING = met.NAN  # the cell of a value that cannot be given (the verdicts test for this word)
MSG_FUZZY = "Fuzzy matching data, the comparison accuracy may be affected."
MSG_NO_NPU = "No NPU data matched."
PROGRESS_MIN_ROWS = 500  # a progress bar only where a comparison takes long enough to want one
PROCESS_MIN_ROWS = 64  # below this, starting worker processes costs more than it saves
Row = Dict[str, object]


def workers() -> int:
    """Workers for tensor loading/metrics: every core, at most 8."""
    return max(1, min(8, os.cpu_count() or 1))


def _number_cell(value: object) -> object:
    return "{:.12f}".format(value) if isinstance(value, float) else value


def _stat_cells(names: Sequence[str], record: Optional[TensorRecord]) -> Row:
    """The four statistics cells named ``names`` (``col.STATISTICS[:4]`` or ``[4:]``)."""
    if record is None:
        return {name: MISSING for name in names}
    return {name: (MISSING if value is None else value) for name, value in zip(names, record.statistics)}


def _basic_cells(pair: RowPair, stack_mode: bool) -> Row:
    npu, bench = pair.npu, pair.bench
    row: Row = {
        col.NPU_NAME: npu.name if npu else MISSING, col.BENCH_NAME: bench.name if bench else MISSING,
        "NPU Tensor Dtype": npu.dtype if npu else MISSING, "Bench Tensor Dtype": bench.dtype if bench else MISSING,
        "NPU Tensor Shape": str(list(npu.shape)) if npu else MISSING,
        "Bench Tensor Shape": str(list(bench.shape)) if bench else MISSING,
    }
    row.update(_stat_cells(col.STATISTICS[:4], npu))
    row.update(_stat_cells(col.STATISTICS[4:], bench))
    if stack_mode:
        call = pair.npu_call  # the column holds NPU stacks only; a bench-only row leaves it empty
        row[col.STACK] = format_stack(call.stack) if (pair.first_of_call and call is not None and call.stack) else ""
    return row


def _structure_messages(pair: RowPair) -> List[str]:
    messages = []
    if pair.npu is None:
        return [MSG_NO_NPU]
    if pair.bench is None:
        return [met.MSG_NO_BENCH]
    if not dtypes_compatible(pair.npu.dtype, pair.bench.dtype):
        messages.append(met.MSG_DTYPE)
        logger.warning("Dtype of NPU and bench Tensor do not match: {}".format(pair.npu.name))
    if pair.npu_call is not None and pair.bench_call is not None and pair.npu_call.name != pair.bench_call.name:
        messages.append(MSG_FUZZY)
    return messages


def _full_row(pair: RowPair, metrics: Optional[met.Metrics], stack_mode: bool, print_log: bool) -> Row:
    row = _basic_cells(pair, stack_mode)
    compared = metrics  # None exactly when one side is missing (then every metric cell is "Nan")
    if metrics is None:
        metrics = met.uniform(MISSING, "")._replace(messages=())
    values = list(metrics[:8])
    for name, value in zip(col.METRICS + col.EXTRA_METRICS, values):
        row[name] = _number_cell(value)
    accuracy = verdicts.accuracy_reached(metrics.cosine, metrics.max_abs_err)
    row[col.ACCURACY] = accuracy
    row[col.RESULT] = verdicts.graded_result(accuracy, compared)
    row[col.ERR_MESSAGE] = " ".join(_structure_messages(pair) + list(metrics.messages))
    if print_log and pair.npu is not None:
        logger.info("[{}] Compare result: cosine {}, max_abs_err {}, max_relative_err {}, {}, "
                    "one_thousand_err_ratio {}, five_thousand_err_ratio {}".format(
                        pair.npu.name, *(values[:3] + [row[col.ERR_MESSAGE]] + values[3:5])))
    return row


def _summary_row(pair: RowPair, stack_mode: bool) -> Row:
    row = _basic_cells(pair, stack_mode)
    warning = False
    for index, name in enumerate(col.SUMMARY_DIFFS):
        npu = pair.npu.statistics[index] if pair.npu else None
        bench = pair.bench.statistics[index] if pair.bench else None
        row[name] = (npu - bench) if (npu is not None and bench is not None) else MISSING
        warning = warning or verdicts.summary_result(npu, bench)
    messages = _structure_messages(pair)
    if pair.npu is None or pair.bench is None:
        row[col.RESULT] = verdicts.RESULT_UNMATCHED
    elif pair.npu.shape != pair.bench.shape:
        row[col.RESULT] = verdicts.RESULT_UNMATCHED
        messages.append(met.MSG_SHAPE)
    elif warning:
        row[col.RESULT] = verdicts.WARNING
        messages.append("Need double check api accuracy.")
    else:
        row[col.RESULT] = verdicts.PASS
    row[col.ERR_MESSAGE] = " ".join(messages)
    return row


def summary_rows(pairs: Sequence[RowPair], stack_mode: bool) -> List[Row]:
    """Rows of a statistics-only comparison (no tensor files read)."""
    return [_summary_row(pair, stack_mode) for pair in pairs]


def full_rows(pairs: Sequence[RowPair], stack_mode: bool, print_log: bool) -> List[Row]:
    """Rows of a tensor comparison, in order, computed on ``workers()`` threads."""
    rows = []
    progress = _progress(len(pairs))
    for pair, metrics in _metrics_in_order(pairs):
        if print_log and pair.npu is not None:
            logger.info("start compare: {}".format(pair.npu.name))
        rows.append(_full_row(pair, metrics, stack_mode, print_log))
        if progress is not None:
            progress.update(1)
    if progress is not None:
        progress.close()
    return rows


def _metrics_of_records(records) -> Optional[met.Metrics]:
    npu, bench = records
    if npu is None or bench is None:
        return None
    if npu.shape != bench.shape:
        return met.uniform(met.SHAPE_UNMATCHED, met.MSG_SHAPE)  # no need to read the files
    try:
        return met.compare_files(npu.data_path, bench.data_path)
    except Exception as error:  # noqa: BLE001 -- one bad pair must never lose the rest of the report
        return met.uniform(met.NAN, "Cannot compare {}: {}: {}".format(npu.name, type(error).__name__, error))


def _metrics_in_order(pairs: Sequence[RowPair]) -> Iterator:
    """``(pair, metrics)`` in order. Worker processes (fork) where available: most tensors are small, so
    the work is Python-bound and threads would serialize on the GIL. Each worker holds one pair at a
    time and results are small, so memory stays bounded by ``workers()`` tensor pairs."""
    count = workers()
    records = [(pair.npu, pair.bench) for pair in pairs]
    # Not in a process that has torch loaded (a training script calling compare at its end): forking
    # a process with torch's thread pools running is unsafe, so threads are used there.
    context = _fork_context() if count > 1 and len(pairs) >= PROCESS_MIN_ROWS and "torch" not in sys.modules else None
    if context is not None:
        with context.Pool(count) as pool:
            chunk = max(1, min(32, len(records) // (4 * count)))
            for pair, metrics in zip(pairs, pool.imap(_metrics_of_records, records, chunksize=chunk)):
                yield pair, metrics
        return
    if count == 1 or len(pairs) < 8:
        for pair, record in zip(pairs, records):
            yield pair, _metrics_of_records(record)
        return
    window = 2 * count  # pairs in flight: bounds memory to a few tensor pairs
    with concurrent.futures.ThreadPoolExecutor(max_workers=count) as pool:
        pending: collections.deque = collections.deque()
        for pair, record in zip(pairs, records):
            pending.append((pair, pool.submit(_metrics_of_records, record)))
            if len(pending) >= window:
                done_pair, future = pending.popleft()
                yield done_pair, future.result()
        while pending:
            done_pair, future = pending.popleft()
            yield done_pair, future.result()


def _fork_context():
    """The fork start method where the platform has it (Linux); None elsewhere (threads are used)."""
    import multiprocessing

    try:
        return multiprocessing.get_context("fork")
    except ValueError:
        return None


def _progress(total: int):
    if total < PROGRESS_MIN_ROWS or not sys.stderr.isatty():
        return None
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm(total=total, desc="compare", unit="tensor")
