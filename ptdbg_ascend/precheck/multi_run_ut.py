"""``multi_run_ut``: ``run_ut`` on N worker processes, and across machines under ``torchrun``
(msprobe 1.0.4 ``multi_run_ut``).

The parent reads the dump.json once (metadata only), chooses the calls exactly as ``run_ut`` does (white /
black lists, filter_same, the APIs a resumed CSV holds) and hands them out one at a time to N workers
(``ut_workers``: forkserver processes, each loading only the tensors of the call it runs). It alone writes
the CSVs: each API's rows are committed **in dump order** (a finished API waits in memory until every API
before it is written), so the files are byte for byte what one ``run_ut`` writes (but for the timestamp
in their names), and a run killed at any moment has written a prefix of them: ``result_csv_path`` resumes
it exactly like ``run_ut``'s.

Under ``torchrun`` (``RANK``/``WORLD_SIZE`` > 1, ``ut_cluster``) every rank runs its share of the calls
(position % WORLD_SIZE == RANK) on its own N workers, block by block; after each block rank 0 gathers the
rows (gloo ``gather_object``) and writes them in dump order, so a killed cluster run resumes the same way.
Ranks other than 0 write no CSV (with ``save_error_data`` each rank writes the error data of the APIs it
ran, under its own ``error_data_path``).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

from ptdbg_ascend.errors import ParameterError, PtdbgError, RunInterrupted, WorkerProcessError
from ptdbg_ascend.log import logger
from ptdbg_ascend.precheck import ut_cluster, ut_workers
from ptdbg_ascend.precheck.api_inputs import Dump
from ptdbg_ascend.precheck.plan import UtPlan, plan_run, run_device, select_calls
from ptdbg_ascend.precheck.main_guard import check_main_guard
from ptdbg_ascend.precheck.results import RunResults, RunUtOutcome, open_results

MAX_WORKERS = 64  # msprobe 1.0.4's -n range (1..64)
BLOCK_PER_WORKER = 8  # under torchrun: calls per worker between two gathers (a killed run loses <= 1 block)


@dataclasses.dataclass
class MultiRunUtOutcome(RunUtOutcome):
    """A :class:`RunUtOutcome` (of the whole run, on rank 0) plus: ``workers`` per rank, ``world_size``
    and ``rank`` (1 and 0 without torchrun), peak RSS of this parent and of each worker that finished
    (KiB; under torchrun rank 0 reports every rank's), the calls ``retried`` after their worker died and
    those ``crashed`` (error rows), each as ``(API, how the worker died)``. On a rank other than 0
    ``result_csv``/``details_csv`` are empty and ``apis_run`` counts that rank's calls."""

    workers: int = 0
    world_size: int = 1
    rank: int = 0
    start_method: str = ""
    startup_seconds: float = 0.0  # of ``seconds``: until the workers were ready (rank 0's, under torchrun)
    peak_rss_parent_kib: List[int] = dataclasses.field(default_factory=list)
    peak_rss_workers_kib: List[int] = dataclasses.field(default_factory=list)
    retried: List[Tuple[str, str]] = dataclasses.field(default_factory=list)
    crashed: List[Tuple[str, str]] = dataclasses.field(default_factory=list)

    def summary_lines(self) -> List[str]:
        """run_ut's summary lines, with the workers, their peak memory and the worker deaths (``summary()``
        escapes each line once)."""
        if not self.result_csv:
            return ["multi_run_ut rank {}/{}: {} API calls run by {}; rank 0 writes the CSVs.".format(
                self.rank, self.world_size, self.apis_run, _workers(self.workers))]
        lines = super().summary_lines()
        lines[0] = lines[0].replace("run_ut: ", "multi_run_ut: ", 1)
        where = f"{_workers(self.workers)} ({self.start_method}, ready after {self.startup_seconds:.1f} s)"
        if self.world_size > 1:
            where += f" on each of {self.world_size} ranks"
        lines.append("  {}; peak RSS: parent {}, one worker {}".format(
            where, _mib(max(self.peak_rss_parent_kib, default=0)), _mib(max(self.peak_rss_workers_kib, default=0))))
        for name, how in self.retried:
            lines.append(f"  retried {name}: its worker died ({how})")
        for name, how in self.crashed:
            lines.append(f"  error   {name}: killed its worker on both attempts ({how}); not judged")
        return lines


def _workers(count: int) -> str:
    return f"{count} worker{'' if count == 1 else 's'}"


def _mib(kib: int) -> str:
    return f"{kib / 1024.0:.0f} MiB" if kib else "-"


class _InOrder:
    """Commits rows by position: rows that arrive early wait until every position before them is in."""

    def __init__(self, write: Callable[[List[Any], List[List[Any]]], None], first: int = 0) -> None:
        self._write, self.next = write, first
        self._waiting: Dict[int, ut_workers.Rows] = {}

    def add(self, position: int, rows: ut_workers.Rows) -> None:
        self._waiting[position] = rows
        while self.next in self._waiting:
            self._write(*self._waiting.pop(self.next))
            self.next += 1


def _check_options(n: Any, devices: Union[str, Sequence[str]], preload: Sequence[str],
                   start_method: str) -> Tuple[int, List[str], Tuple[str, ...]]:
    if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= MAX_WORKERS:
        raise ParameterError("n", n, f"must be an int from 1 to {MAX_WORKERS} (the number of worker processes)")
    device_list = [devices] if isinstance(devices, str) else list(devices)
    if not device_list or not all(isinstance(d, str) for d in device_list):
        raise ParameterError("devices", devices, "must be one device name or a list of them (\"cpu\", \"cuda:0\", ...)")
    device_list = [run_device(d) for d in device_list]
    if isinstance(preload, str) or not all(isinstance(m, str) for m in preload):
        raise ParameterError("preload", preload, "must be a list of module names")
    for module in preload:
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            raise ParameterError("preload", list(preload), f"every module must be importable here; {module!r} is not")
    ut_workers.check_start_method(start_method)
    return n, device_list, tuple(preload)


def _local_ranks() -> int:
    """Ranks on this machine under torchrun (``LOCAL_WORLD_SIZE``), 1 when it does not say."""
    try:
        return max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    except ValueError:
        return 1


def _check_threads(threads_per_worker: Optional[int]) -> int:
    if threads_per_worker is None:
        import torch

        return torch.get_num_threads()
    if not isinstance(threads_per_worker, int) or isinstance(threads_per_worker, bool) or threads_per_worker < 1:
        raise ParameterError("threads_per_worker", threads_per_worker, "must be None (run_ut's thread count) or an "
                             "int >= 1")
    return threads_per_worker


def multi_run_ut(api_info: str, n: int = 8, out_path: str = ".", save_error_data: bool = False,
                 filter_same: bool = False, result_csv_path: Optional[str] = None, white_list: Sequence[str] = (),
                 black_list: Sequence[str] = (), error_data_path: Optional[str] = None,
                 random_data: Optional[bool] = None, seed: int = 1234, progress: bool = True,
                 dumped_outputs: bool = False, devices: Union[str, Sequence[str]] = "cpu",
                 compare_csv: Optional[Any] = None, preload: Sequence[str] = (),
                 start_method: str = "forkserver", threads_per_worker: Optional[int] = None,
                 memory_budget: Optional[Any] = None, data_dir: Optional[str] = None,
                 cluster_timeout: float = ut_cluster.DEFAULT_TIMEOUT) -> MultiRunUtOutcome:
    """``run_ut`` (same arguments, same CSVs) on ``n`` worker processes; see the module doc.

    Args (beyond :func:`ptdbg_ascend.precheck.run_ut.run_ut`'s, whose defaults are the same):
        n: worker processes (per rank under torchrun), 1..64. Default 8 (msprobe's). Fewer are started
            when there are fewer calls.
        devices: where the dumped-dtype runs happen: one device, or a list the workers take in turn
            (worker i uses ``devices[i % len(devices)]``). Default "cpu".
        preload: modules every worker imports before its first call (custom ops, or patches that were
            active in the dumped run); each must be importable here. Default (): none.
        start_method: "forkserver" (default) or "spawn"; "fork" is refused (see ``ut_workers``).
        threads_per_worker: torch intra-op threads of each worker. Default None: this process's
            ``torch.get_num_threads()``, what ``run_ut`` here would use: float32 results depend on the
            thread count (the reduction order of matmul/linear changes), and the same count keeps the CSVs
            identical to run_ut's. ``max(1, cpus // n)`` avoids oversubscribing the cores, at the price of
            metrics that differ from run_ut's in their last digits (verdicts do not change).
        memory_budget: the memory one call may take in one worker (run_ut's meaning). Default None: a
            quarter of the memory available, shared by the workers running at once on this machine
            (``n``, times ``LOCAL_WORLD_SIZE`` under torchrun).
        cluster_timeout: under torchrun (RANK/WORLD_SIZE > 1 in the environment), the seconds every rank
            has to join before this one gives up with a ClusterJoinError naming RANK/WORLD_SIZE/MASTER_ADDR/
            MASTER_PORT. Default 300 (torch's own would wait 30 minutes). Ignored without torchrun.

    A worker that dies (segfault, SIGKILL)
    loses only its call in flight: it is retried once in a fresh worker, then written as an error row
    saying so. Under torchrun the CSVs are written by rank 0 only.

    Raises (before anything is written): what run_ut raises; ParameterError for n, devices, preload,
    start_method, cluster_timeout; ClusterJoinError when the ranks do not all join; WorkerProcessError when the main
    script calls multi_run_ut at its top level without ``if __name__ == "__main__":`` (said before any worker
    starts), when a worker cannot start or an API raises an unexpected error inside a worker (what was written
    before stays, ``result_csv_path`` resumes).
    """
    workers, device_list, modules = _check_options(n, devices, preload, start_method)
    check_main_guard(start_method)  # workers import the main script again: an unguarded call is named now
    threads = _check_threads(threads_per_worker)
    cluster_timeout = ut_cluster.check_timeout(cluster_timeout)
    options = dict(out_path=out_path, save_error_data=save_error_data, filter_same=filter_same,
                   result_csv_path=result_csv_path, white_list=white_list, black_list=black_list,
                   error_data_path=error_data_path, random_data=random_data, seed=seed,
                   dumped_outputs=dumped_outputs, device=device_list[0], compare_csv=compare_csv,
                   memory_budget=memory_budget, data_dir=data_dir)
    ranks = ut_cluster.launched_ranks()
    options["processes"] = workers * (_local_ranks() if ranks is not None else 1)
    run = _Run(workers, device_list, modules, start_method, progress, threads)
    if ranks is not None:
        return run.on_cluster(api_info, options, *ranks, timeout=cluster_timeout)
    return run.alone(api_info, options)


class _Run:
    """One multi_run_ut invocation: the worker pool settings and the two ways to run."""

    def __init__(self, workers: int, devices: List[str], preload: Tuple[str, ...], start_method: str,
                 progress: bool, threads: int) -> None:
        self.workers, self.devices, self.preload = workers, devices, preload
        self.start_method, self.progress, self.threads = start_method, progress, threads

    def _pool(self, plan: UtPlan, error_dir: Optional[str], calls: int) -> ut_workers.WorkerPool:
        size = max(1, min(self.workers, calls))
        # the workers get the plan without the dump's calls: each is sent only the call it runs
        light = dataclasses.replace(plan, dump=Dump(plan.dump.path, plan.dump.task, plan.dump.data_dir, [],
                                                    plan.dump.has_tensors), compare_report=None)
        threads = self.threads

        def setup(number: int) -> ut_workers.WorkerSetup:
            device_plan = dataclasses.replace(light, device=self.devices[number % len(self.devices)])
            return ut_workers.WorkerSetup(device_plan, error_dir, self.preload, threads)

        return ut_workers.WorkerPool(size, setup, self.start_method)

    def _bar(self, total: int) -> Any:
        from tqdm import tqdm

        return tqdm(total=total, desc="multi_run_ut", unit="API", smoothing=0, dynamic_ncols=True,
                    disable=not self.progress)

    def _outcome(self, files: Any, plan: UtPlan, resumed: int, size: int) -> MultiRunUtOutcome:
        return MultiRunUtOutcome(files.result_path, files.details_path, random_data=plan.use_random,
                                 apis_resumed=resumed, workers=size, start_method=self.start_method)

    def alone(self, api_info: str, options: Dict[str, Any]) -> MultiRunUtOutcome:
        """One machine: N workers, the parent writes as the rows come (in dump order)."""
        plan = plan_run(api_info, **options)
        results = open_results(plan)
        files, done = results.files, results.done
        calls = select_calls(plan.dump, plan.white_list, plan.black_list, plan.filter_same, done)
        outcome = self._outcome(files, plan, len(done), max(1, min(self.workers, len(calls))) if calls else 0)
        bar = self._bar(len(calls))
        started = time.time()
        commit = _InOrder(results.write_api)
        try:
            error_dir = plan.error_dir(files.tail)
            outcome.error_data_dir = error_dir
            logger.info("multi_run_ut: {} API calls to run on {} ({} done before); results in {}".format(
                len(calls), _workers(outcome.workers), len(done), files.result_path))

            def on_rows(position: int, rows: ut_workers.Rows) -> None:
                commit.add(position, rows)
                bar.update(1)

            pool = self._pool(plan, error_dir, len(calls))
            try:
                started = time.time()  # the rate counts the API runs (worker start included), not the dump
                pool.run(list(enumerate(calls)), on_rows)
            finally:
                pool.close()
            outcome.apis_run = commit.next
            outcome.retried, outcome.crashed = pool.retried, pool.crashed
            outcome.startup_seconds = pool.startup_seconds
            outcome.peak_rss_workers_kib = pool.peak_rss_workers_kib
            outcome.seconds = time.time() - started
            outcome.peak_rss_parent_kib = [ut_workers.peak_rss_kib()]
            results.fill(outcome)  # counts and failures from the rows as they were committed
        except KeyboardInterrupt as interrupt:  # the pair stays, even empty: the message names it to resume
            raise RunInterrupted(files.result_path) from interrupt
        except BaseException:
            if commit.next == 0 and not plan.result_csv_path:
                files.remove()  # e.g. no worker could start: leave no empty pair behind
            raise
        finally:
            bar.close()
            files.close()
        return outcome

    def on_cluster(self, api_info: str, options: Dict[str, Any], rank: int, world_size: int,
                   timeout: float = ut_cluster.DEFAULT_TIMEOUT) -> MultiRunUtOutcome:
        """Under torchrun: this rank's share on its N workers; rank 0 gathers and writes (module doc)."""
        cluster = ut_cluster.join(rank, world_size, timeout)
        try:
            return self._cluster_run(cluster, api_info, options)
        finally:
            cluster.leave()

    def _cluster_start(self, cluster: ut_cluster.Cluster, api_info: str,
                       options: Dict[str, Any]) -> Tuple[UtPlan, Optional[RunResults], List[Any], str, int]:
        """Every rank checks its options; rank 0 opens the CSVs (its results) and decides the calls. Any
        rank's error stops every rank (no rank waits for one that gave up); a fresh CSV pair is then removed."""
        files, problem, plan, results = None, None, None, None
        try:
            plan = plan_run(api_info, writes_csv=cluster.rank == 0, **options)
            if cluster.rank == 0:
                results = open_results(plan)
                files, done = results.files, results.done
                calls = select_calls(plan.dump, plan.white_list, plan.black_list, plan.filter_same, done)
                decided = ([c.full_name for c in calls], files.tail, len(done))
        except PtdbgError as error:
            problem = error
        problems = cluster.all_gather(None if problem is None else str(problem))
        if any(problems):
            if files is not None:
                if not options.get("result_csv_path"):  # only the header lines: leave no empty pair behind
                    files.remove()
                files.close()
            if problem is not None:
                raise problem
            first = next(i for i, text in enumerate(problems) if text)
            raise WorkerProcessError(f"multi_run_ut: rank {first} could not start: {problems[first]}")
        names, tail, resumed = cluster.broadcast(decided if cluster.rank == 0 else None)
        by_name = {call.full_name: call for call in plan.dump.calls}
        missing = [name for name in names if name not in by_name]
        if missing:
            raise ParameterError("api_info", api_info, "must be the same dump.json on every rank; rank {}'s lacks {}"
                                 .format(cluster.rank, ", ".join(missing[:5])))
        return plan, results, [by_name[name] for name in names], tail, resumed

    def _cluster_run(self, cluster: ut_cluster.Cluster, api_info: str, options: Dict[str, Any]) -> MultiRunUtOutcome:
        plan, results, calls, tail, resumed = self._cluster_start(cluster, api_info, options)
        writes = cluster.rank == 0
        files = results.files if results is not None else None
        mine = cluster.share(list(enumerate(calls)))
        size = max(1, min(self.workers, len(mine))) if mine else 0
        outcome = MultiRunUtOutcome(files.result_path if writes else "", files.details_path if writes else "",
                                    random_data=plan.use_random, apis_resumed=resumed, workers=size,
                                    world_size=cluster.world_size, rank=cluster.rank, start_method=self.start_method)
        bar = self._bar(len(calls)) if writes else None
        started = time.time()
        pool = None
        try:
            error_dir = plan.error_dir(tail)
            outcome.error_data_dir = error_dir
            pool = self._pool(plan, error_dir, len(mine))
            commit = _InOrder(results.write_api) if writes else None
            block = cluster.world_size * max(1, self.workers) * BLOCK_PER_WORKER
            for start in range(0, len(calls), block):
                rows: Dict[int, ut_workers.Rows] = {}
                pool.run([item for item in mine if start <= item[0] < start + block], rows.__setitem__)
                outcome.apis_run += len(rows) if not writes else 0
                gathered = cluster.gather(rows)
                if writes:
                    for part in gathered:
                        for position in sorted(part):
                            commit.add(position, part[position])
                    bar.update(commit.next - bar.n)
            pool.close()
            outcome.startup_seconds = pool.startup_seconds
            stats = cluster.gather((pool.peak_rss_workers_kib, ut_workers.peak_rss_kib(), pool.retried, pool.crashed))
            outcome.seconds = time.time() - started
            if writes:
                outcome.apis_run = commit.next
                for workers_kib, parent_kib, retried, crashed in stats:
                    outcome.peak_rss_workers_kib += workers_kib
                    outcome.peak_rss_parent_kib.append(parent_kib)
                    outcome.retried += retried
                    outcome.crashed += crashed
                results.fill(outcome)
        except KeyboardInterrupt as interrupt:
            if writes:
                raise RunInterrupted(files.result_path) from interrupt
            raise
        finally:
            if pool is not None:
                pool.close()
            if bar is not None:
                bar.close()
            if files is not None:
                files.close()
        return outcome
