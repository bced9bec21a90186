"""``compare_distributed``'s rank pairs compared on N local processes (``workers``).

Start method: ``forkserver`` where the platform has it, else ``spawn``; never ``fork``: the caller may have run
torch already (its intra-op threads, and under torchrun gloo's threads), and a forked child inherits their locks
but not the threads. The fork server is a fresh interpreter that imports the compare side once; each worker is
forked from it (no torch imported there: the compare is torch-free until the advisor's re-run).

Each worker compares one rank pair at a time (:func:`compare_pair`), and at most ``workers`` pairs are handed out
at once: a worker's memory is one pair's compare (the two dumps' records, the rows and the reports of that pair;
that compare's own tensor-loading processes come with it), whatever the number of ranks. What comes back is small:
the pair's :class:`~ptdbg_ascend.comparison.rank_summary.PairResult` and its CompareOutcome (paths, counts, the
advisor's finding; no rows). A pair whose compare raises (a corrupt dump) comes back with its error and the others
go on. A worker that dies (SIGKILL, the OOM killer) breaks the pool: the pairs then in flight are compared again in a
fresh pool, and a pair in flight at a second break is "lost: worker process died". Torch-free.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from typing import Any, Callable, Dict, Iterator, List, NamedTuple, Optional, Sequence

from ptdbg_ascend.comparison.inputs import CompareInputs, CompareOptions, check_dump_file
from ptdbg_ascend.comparison.rank_records import PairTask, write_record
from ptdbg_ascend.comparison.rank_summary import PairResult
from ptdbg_ascend.errors import ParameterError, PtdbgError, WorkerProcessError
from ptdbg_ascend.log import logger

LOST_WORKER = "lost: worker process died"
ATTEMPTS = 2  # a pair in flight when its pool broke is compared once more, then it is lost
PROGRESS_MIN_PAIRS = 8  # below this a compare of the ranks is over before a bar says anything


class PairDone(NamedTuple):
    """One rank pair's end: its result and outcome, or the error that stopped its compare (``""``: none)."""

    pair: str
    result: Optional[PairResult]
    outcome: Any  # the CompareOutcome (None with an error)
    error: str = ""


class PoolJob(NamedTuple):
    """What every worker needs beside its pair: the checked options, the log flag, the record key."""

    options: CompareOptions
    print_log: bool
    record_key: str


def check_workers(workers: Any) -> Optional[int]:
    """``workers`` checked: None (the default: the cores) or an int >= 1; ParameterError naming workers."""
    if workers is None:
        return None
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ParameterError("workers", workers, "must be an int >= 1 (the processes comparing rank pairs; 1: in "
                             "this process) or None (default: the cores this process may use, at most the pairs)")
    return workers


def cores() -> int:
    """The cores this process may run on (its affinity where the platform says, else the CPU count)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def usable_workers(count: int, asked: Optional[int]) -> int:
    """``count``, or 1 when worker processes would run the main script again (forkserver and spawn workers import
    it: a script calling compare_distributed at its top level without ``if __name__ == "__main__":``; see
    ``precheck.main_guard``): with the default ``workers`` (``asked`` None) the pairs are compared in this process
    and a warning says why; asked for explicitly, that WorkerProcessError is raised."""
    if count <= 1:
        return count
    from ptdbg_ascend.precheck.main_guard import check_main_guard

    try:
        check_main_guard(_context().get_start_method(), "compare_distributed")
    except WorkerProcessError as error:
        if asked is not None:
            raise
        logger.warning(f"Comparing the rank pairs in this process (workers=1): {error}")
        return 1
    return count


def compare_pair(task: PairTask, job: PoolJob) -> PairDone:
    """Compare one rank pair (the core compare, suffix = the pair) and write its completion record after its
    reports. A compare error (a corrupt or missing file) is returned with the pair, never raised."""
    from ptdbg_ascend.comparison.run import compare_dumps

    try:
        inputs = CompareInputs(check_dump_file("npu", task.npu_dump), check_dump_file("bench", task.bench_dump),
                               task.npu_data, task.bench_data, task.npu_stack, job.print_log)
        outcome = compare_dumps(inputs, job.options._replace(suffix=task.pair))
        result = PairResult.of(task.pair, task.rank, outcome, task.npu_dump)
        write_record(job.options.output_path, task, job.record_key, result)
    except (PtdbgError, OSError, ValueError) as error:
        return PairDone(task.pair, None, None, f"{type(error).__name__}: {error}")
    return PairDone(task.pair, result, outcome)


def run_pairs(tasks: Sequence[PairTask], job: PoolJob, workers: int,
              on_done: Optional[Callable[[PairDone], None]] = None) -> List[PairDone]:
    """Every task's :class:`PairDone`, in the order of ``tasks``: on ``workers`` processes (1: in this process).
    ``on_done`` (default None) is called in this process as each pair ends, in the order they end."""
    ended: Dict[str, PairDone] = {}
    bar = _progress(len(tasks))
    for done in (_in_process(tasks, job) if workers == 1 or len(tasks) <= 1 else _in_pool(tasks, job, workers)):
        ended[done.pair] = done
        if on_done is not None:
            on_done(done)
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()
    return [ended[task.pair] for task in tasks]


def _in_process(tasks: Sequence[PairTask], job: PoolJob) -> Iterator[PairDone]:
    for task in tasks:
        yield compare_pair(task, job)


def _in_pool(tasks: Sequence[PairTask], job: PoolJob, workers: int) -> Iterator[PairDone]:
    """Hand out at most ``workers`` pairs at once. When a worker dies the pool breaks: each pair then in flight
    is handed out again in a fresh pool, and a pair in flight at a second break is lost (it may be the killer)."""
    waiting = list(reversed(tasks))
    strikes: Dict[str, int] = {}
    while waiting:
        with ProcessPoolExecutor(max_workers=min(workers, len(waiting)), mp_context=_context()) as pool:
            flying = {}
            try:
                while waiting or flying:
                    while waiting and len(flying) < workers:  # off the list once submitted (a broken pool refuses)
                        flying[pool.submit(compare_pair, waiting[-1], job)] = waiting[-1]
                        waiting.pop()
                    finished, _ = wait(flying, return_when=FIRST_COMPLETED)
                    for future in finished:
                        done = future.result()  # a broken pool raises here, with the pair still in flight
                        del flying[future]
                        yield done
            except BrokenProcessPool:
                for future, task in flying.items():
                    if future.done() and future.exception() is None:  # ended before the break
                        yield future.result()
                        continue
                    strikes[task.pair] = strikes.get(task.pair, 0) + 1
                    if strikes[task.pair] >= ATTEMPTS:
                        yield PairDone(task.pair, None, None, LOST_WORKER)
                    else:
                        logger.warning(f"A compare worker died with {task.pair} in flight: comparing it again.")
                        waiting.append(task)


def _context() -> multiprocessing.context.BaseContext:
    """forkserver (its server imports the compare side once), else spawn (see the module doc)."""
    try:
        context = multiprocessing.get_context("forkserver")
    except ValueError:
        return multiprocessing.get_context("spawn")
    context.set_forkserver_preload(["ptdbg_ascend.comparison.rank_pool", "ptdbg_ascend.comparison.run"])
    return context


def _progress(total: int):
    """A tqdm bar over the rank pairs on stderr, only at a terminal and for enough pairs (None otherwise)."""
    if total < PROGRESS_MIN_PAIRS or not sys.stderr.isatty():
        return None
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm(total=total, desc="compare ranks", unit="pair")
