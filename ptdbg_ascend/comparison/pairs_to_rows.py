"""Turn paired records into :class:`~ptdbg_ascend.comparison.rows.CompareRow` objects, loading tensor pairs
on worker processes (or threads) with a bounded number of pairs in flight, so memory stays at a few
tensor pairs."""

from __future__ import annotations

import collections
import concurrent.futures
import os
import sys
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

from ptdbg_ascend.comparison import metrics as met
from ptdbg_ascend.comparison import propagation, tensor_pairs, verdicts
from ptdbg_ascend.comparison.matching import RowPair, dtypes_compatible
from ptdbg_ascend.comparison.rows import CompareRow
from ptdbg_ascend.comparison.tolerances import SUMMARY_GAIN, Tolerance, call_precision, magnitude, tolerance
from ptdbg_ascend import progress
from ptdbg_ascend.log import logger

# A row whose two call names differ (paired across a counter shift); the task-level warning is run.MSG_FUZZY.
MSG_FUZZY_ROW = "Fuzzy matching data, the comparison accuracy may be affected."
MSG_NO_NPU = "No NPU data matched."
PROGRESS_MIN_ROWS = 500  # a progress bar only where a comparison takes long enough to want one
PROCESS_MIN_ROWS = 64  # below this, starting worker processes costs more than it saves
MAX_NESTING = 256  # module levels followed up from a call (construct.json from a stranger may loop)


def workers() -> int:
    """Workers for tensor loading/metrics: every core, at most 8."""
    return max(1, min(8, os.cpu_count() or 1))


class _CallScales:
    """Precision and largest magnitude of each paired call (both sides), computed once per call. A module
    call (levels L0 and mix) computes in the lowest precision of the calls inside it too (construct.json's
    nesting, both sides): a layer under bfloat16 autocast records float32 inputs and outputs, but its
    linears run in bfloat16."""

    def __init__(self, pairs: Sequence[RowPair] = ()) -> None:
        self._cache: Dict[Tuple[int, int], Tuple[Optional[str], float]] = {}
        calls = {id(call): call for pair in pairs for call in (pair.npu_call, pair.bench_call) if call is not None}
        self._inside = _precisions_inside(calls.values())

    def tolerance_of(self, pair: RowPair) -> Optional[Tolerance]:
        if pair.npu is None or pair.bench is None:
            return None
        key = (id(pair.npu_call), id(pair.bench_call))
        found = self._cache.get(key)
        if found is None:
            records = list(pair.npu_call.records if pair.npu_call else ()) + \
                list(pair.bench_call.records if pair.bench_call else ())
            dtypes = [record.dtype for record in records]
            for call in (pair.npu_call, pair.bench_call):
                if call is not None and call.module is not None and call.module in self._inside:
                    dtypes.append(self._inside[call.module])
            precision = call_precision(dtypes)
            scale = max([magnitude(r.statistics[0], r.statistics[1]) for r in records] or [0.0])
            found = self._cache[key] = (precision, scale)
        return tolerance((pair.npu.dtype, pair.bench.dtype), found[0], found[1])


def _precisions_inside(calls) -> Dict[str, str]:
    """A module call's dotted name -> the lowest float dtype among the calls nested inside it, on either side,
    from the calls' ``parent`` links (both dumps name a module alike)."""
    calls = list(calls)
    modules = {call.module: call for call in calls if call.module is not None}
    lowest: Dict[str, str] = {}
    for call in calls:
        precision = call_precision(record.dtype for record in call.records)
        parent, steps = call.parent, 0
        while precision is not None and parent is not None and steps < MAX_NESTING:
            known = lowest.get(parent)
            lowest[parent] = call_precision([precision] + ([known] if known else []))
            holder = modules.get(parent)
            parent, steps = (holder.parent if holder is not None else None), steps + 1
    return lowest


def _structure_messages(pair: RowPair, fuzzy_match: bool, log: bool = True) -> List[str]:
    if pair.npu is None:
        return [MSG_NO_NPU]
    if pair.bench is None:
        return [met.MSG_NO_BENCH]
    messages = []
    if not dtypes_compatible(pair.npu.dtype, pair.bench.dtype):
        messages.append(met.MSG_DTYPE)
        if log:
            logger.warning(f"Dtype of NPU and bench Tensor do not match: {pair.npu.name}")
    if fuzzy_match and pair.npu_call is not None and pair.bench_call is not None \
            and pair.npu_call.name != pair.bench_call.name:
        messages.append(MSG_FUZZY_ROW)
    return messages


def _full_row(pair: RowPair, metrics: Optional[met.Metrics], tolerance_: Optional[Tolerance], print_log: bool,
              fuzzy_match: bool, log: bool = True) -> CompareRow:
    structure = _structure_messages(pair, fuzzy_match, log)
    if metrics is None:  # one side is missing
        return CompareRow(pair, verdicts.Judgement(verdicts.RESULT_UNMATCHED, None, None, ""), None,
                          met.Metrics(met.Status.NOT_READ), verdicts.NAN, tuple(structure))
    accuracy = verdicts.accuracy_reached(metrics)
    judgement = verdicts.judge_tensors(metrics, tolerance_, accuracy)
    row = CompareRow(pair, judgement, tolerance_, metrics, accuracy,
                     tuple(structure) + metrics.messages + ((judgement.message,) if judgement.message else ()))
    if print_log:
        logger.info("[{}] Compare result: cosine {}, max_abs_err {}, max_relative_err {}, {}, "
                    "one_thousand_err_ratio {}, five_thousand_err_ratio {}".format(
                        row.name, metrics.cell("cosine"), metrics.cell("max_abs_err"),
                        metrics.cell("max_relative_err"), row.message, metrics.cell("one_thousandth_ratio"),
                        metrics.cell("five_thousandths_ratio")))
    return row


def summary_rows(pairs: Sequence[RowPair], fuzzy_match: bool = False) -> List[CompareRow]:
    """Rows of a statistics-only comparison (no tensor files read): each statistic judged by round-off and by
    what the call's inputs' statistics differences carry in (:func:`propagation.statistics_metrics`). One
    pass: each row is measured, given its allowance (which needs the rows before it only) and judged before
    the next is measured, so no list of measured rows is ever held."""
    scales = _CallScales(pairs)
    measured: collections.deque = collections.deque()  # the row being judged: never more than one
    bar = progress.bar(len(pairs), "compare", "row", progress.MANY_ROWS)
    rows = []
    for allowance in propagation.allowances(_measured_rows(pairs, scales, measured), statistics_only=True):
        bar.update()
        row = measured.popleft()
        pair, tolerance_ = row.pair, row.tolerance
        structure = _structure_messages(pair, fuzzy_match)
        if allowance is not None and tolerance_ is not None:
            tolerance_ = tolerance_.with_carried(*allowance, gain=SUMMARY_GAIN)
        if tolerance_ is None:
            judgement = verdicts.Judgement(verdicts.RESULT_UNMATCHED, None, None, "")
        else:
            judgement = verdicts.judge_statistics(pair.npu, pair.bench, tolerance_)
            if judgement.grade == verdicts.RESULT_UNMATCHED:
                structure.append(met.MSG_SHAPE)
        rows.append(CompareRow(pair, judgement, tolerance_,
                               messages=tuple(structure) + ((judgement.message,) if judgement.message else ())))
    bar.close()
    return rows


def _measured_rows(pairs: Sequence[RowPair], scales: _CallScales, measured: collections.deque) -> Iterator[CompareRow]:
    """Each pair's row with its tolerance and the stand-in metrics of its statistics (not judged yet), also
    appended to ``measured`` for the judge to take."""
    unjudged = verdicts.Judgement(verdicts.PASS, None, None, "")  # one for all: no measured row's is read
    for pair in pairs:
        tolerance_ = scales.tolerance_of(pair)
        metrics = None
        if tolerance_ is not None:
            discrepancy = verdicts.statistics_discrepancy(pair.npu, pair.bench)
            metrics = propagation.statistics_metrics(pair.npu, pair.bench, discrepancy)
        row = CompareRow(pair, unjudged, tolerance_, metrics)
        measured.append(row)
        yield row


def full_rows(pairs: Sequence[RowPair], print_log: bool, fuzzy_match: bool = False) -> List[CompareRow]:
    """Rows of a tensor comparison, in order: the metrics on ``workers()`` processes or threads, then each row
    judged by its round-off and what its inputs' measured errors bring in (:mod:`propagation`)."""
    scales = _CallScales(pairs)
    tolerances = [scales.tolerance_of(pair) for pair in pairs]
    measured, all_metrics = [], []
    bar = progress.bar(len(pairs), "compare", "tensor", PROGRESS_MIN_ROWS)
    for pair, tolerance_, metrics in _metrics_in_order(pairs, tolerances):
        if print_log and pair.npu is not None:
            logger.info(f"start compare: {pair.npu.name}")
        measured.append(_full_row(pair, metrics, tolerance_, False, fuzzy_match, log=False))
        all_metrics.append(metrics)
        bar.update()
    bar.close()
    rows = []
    bar = progress.bar(len(pairs), "judge", "row", progress.MANY_ROWS)
    for row, metrics, allowance in zip(measured, all_metrics, propagation.allowances(measured)):
        bar.update()
        tolerance_ = row.tolerance
        if allowance is not None and tolerance_ is not None and metrics is not None:
            tolerance_ = tolerance_.with_carried(*allowance)
        rows.append(_full_row(row.pair, metrics, tolerance_, print_log and row.pair.npu is not None, fuzzy_match))
    bar.close()
    return rows


def _metrics_of_records(job) -> Optional[met.Metrics]:
    npu, bench, tolerance_ = job
    if npu is None or bench is None:
        return None
    if npu.shape != bench.shape:
        return met.not_compared(met.Status.SHAPE, met.MSG_SHAPE)  # no need to read the files
    try:
        return tensor_pairs.compare_records(npu, bench, tolerance_)
    except Exception as error:  # noqa: BLE001 -- one bad pair must never lose the rest of the report
        return met.not_compared(met.Status.NOT_READ, f"Cannot compare {npu.name}: {type(error).__name__}: {error}")


def _metrics_in_order(pairs: Sequence[RowPair], tolerances: Sequence[Optional[Tolerance]]) -> Iterator:
    """``(pair, tolerance, metrics)`` in order. Worker processes (fork) where available: most tensors are
    small, so the work is Python-bound and threads would serialize on the GIL. Each worker holds one
    pair at a time and results are small, so memory stays bounded by ``workers()`` tensor pairs."""
    count = workers()
    jobs = [(pair.npu, pair.bench, tolerance_) for pair, tolerance_ in zip(pairs, tolerances)]
    # Not in a process that has torch loaded (a training script calling compare at its end): forking
    # a process with torch's thread pools running is unsafe, so threads are used there.
    context = _fork_context() if count > 1 and len(pairs) >= PROCESS_MIN_ROWS and "torch" not in sys.modules else None
    if context is not None:
        with context.Pool(count) as pool:
            chunk = max(1, min(32, len(jobs) // (4 * count)))
            for pair, tolerance_, metrics in zip(pairs, tolerances,
                                                 pool.imap(_metrics_of_records, jobs, chunksize=chunk)):
                yield pair, tolerance_, metrics
        return
    if count == 1 or len(pairs) < 8:
        for pair, tolerance_, job in zip(pairs, tolerances, jobs):
            yield pair, tolerance_, _metrics_of_records(job)
        return
    window = 2 * count  # pairs in flight: bounds memory to a few tensor pairs
    with concurrent.futures.ThreadPoolExecutor(max_workers=count) as pool:
        pending: collections.deque = collections.deque()
        for pair, tolerance_, job in zip(pairs, tolerances, jobs):
            pending.append((pair, tolerance_, pool.submit(_metrics_of_records, job)))
            if len(pending) >= window:
                done_pair, done_tolerance, future = pending.popleft()
                yield done_pair, done_tolerance, future.result()
        while pending:
            done_pair, done_tolerance, future = pending.popleft()
            yield done_pair, done_tolerance, future.result()


def _fork_context():
    """The fork start method where the platform has it (Linux); None elsewhere (threads are used)."""
    import multiprocessing

    try:
        return multiprocessing.get_context("fork")
    except ValueError:
        return None
