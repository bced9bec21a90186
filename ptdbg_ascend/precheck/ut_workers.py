"""The worker processes of ``multi_run_ut``: N processes, each running the run_ut core
(``call_check.check_call``) on one API call at a time, handed out by the parent.

Start method: ``forkserver`` (default; ``spawn`` on request or where forkserver does not exist). Never
``fork``: the parent has usually run torch already (its OpenMP/intra-op threads, locks held by them), and
a forked child inherits those locks but not the threads. The fork server is a fresh interpreter that only
*imports* torch and the pre-check (no torch op runs there, so no thread pool exists yet) and forks each
worker from that state: a worker starts in milliseconds instead of paying the torch import (seconds),
which also keeps a crashed worker's replacement cheap.

Hand-out: one call at a time per worker (the parent sends ``(position, call)`` when the worker is idle),
so the parent always knows which call is in flight in which worker. A worker only ever holds the
metadata of its current call (the ``DumpedCall`` is sent, not the dump) and the tensors that call loads:
memory stays bounded whatever the dump's size.

A worker that dies (segfault, SIGKILL, the OOM killer) loses only its call in flight: that call is
retried once in a fresh worker; if it kills that worker too, it becomes an ``error`` row saying so
(:func:`crash_rows`), and the run goes on. An unexpected Python exception inside a worker is a bug, not a
verdict: the run stops with :class:`WorkerProcessError` (like ``run_ut`` would), keeping what was written.
"""

from __future__ import annotations

import dataclasses
import importlib
import multiprocessing
import os
import signal
import time
import traceback
from collections import deque
from multiprocessing.connection import wait
from typing import Any, Callable, Deque, Dict, List, Optional, Sequence, Tuple

from ptdbg_ascend.errors import ParameterError, WorkerProcessError
from ptdbg_ascend.log import logger
from ptdbg_ascend.precheck import columns as col

ATTEMPTS = 2  # a call that kills its worker is retried once in a fresh one, then reported as an error row
# imported once by the fork server, so every worker starts with them already in memory; torch._dynamo,
# _refs and _decomp are what the first dry run on the meta device (call_budget) imports: ~2 s per process
PRELOAD = ("torch", "torch._dynamo", "torch._refs", "torch._decomp", "ptdbg_ascend.precheck.execution",
           "ptdbg_ascend.precheck.judge", "ptdbg_ascend.precheck.call_check", "ptdbg_ascend.precheck.ut_workers")
START_METHODS = ("forkserver", "spawn")

Rows = Tuple[List[Any], List[List[Any]]]  # (result row, details rows) of one call


@dataclasses.dataclass
class WorkerSetup:
    """What one worker needs: the run's plan without the dump's calls (``plan.UtPlan``), the error
    data directory (None: not saved), the modules to import first, its intra-op thread count."""

    plan: Any
    error_dir: Optional[str] = None
    preload: Tuple[str, ...] = ()
    threads: Optional[int] = None


def peak_rss_kib() -> int:
    """This process's peak resident set size in KiB (0 where the platform does not say)."""
    try:
        import resource
    except ImportError:  # not on POSIX
        return 0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak // 1024) if os.uname().sysname == "Darwin" else int(peak)  # macOS counts bytes


def worker_threads(workers: int) -> int:
    """Intra-op threads per worker: the CPUs this process may use, shared out (at least 1), so N
    workers do not oversubscribe the cores."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:
        cpus = os.cpu_count() or 1
    return max(1, cpus // max(1, workers))


def check_start_method(start_method: str) -> str:
    """``forkserver`` or ``spawn``, and present on this platform; ParameterError otherwise."""
    allowed = [m for m in START_METHODS if m in multiprocessing.get_all_start_methods()]
    if start_method not in allowed:
        raise ParameterError("start_method", start_method, "must be one of {} on this platform (\"fork\" is refused: "
                             "a fork after torch has run inherits its thread locks and can hang)".format(allowed))
    return start_method


def crash_rows(call: Any, exitcode: Optional[int]) -> Rows:
    """The rows of a call that killed its worker on every attempt: ``error`` forward (and backward when
    the dump has one), the message saying so; one details row ``{call}.forward.output.0``."""
    from ptdbg_ascend.precheck import standards

    message = ("not judged: the worker process running it died {} times ({}); re-run it alone "
               "(run_ut -white_list {}) to see why".format(ATTEMPTS, describe_exit(exitcode), call.api_key))
    backward = col.ERROR if call.backward else col.SPACE
    detail = [call.full_name + ".forward.output.0", col.SPACE, col.SPACE, col.SPACE]
    detail += [col.SPACE] * len(col.METRIC_COLUMNS)
    detail += [col.ERROR, message, standards.standard_of(call.api_key), col.SPACE]
    return [call.full_name, col.ERROR, backward, message], [detail]


def _innermost(trace: str) -> str:
    """``file, line N, in f`` of the innermost frame of a formatted traceback."""
    frames = [line.strip() for line in trace.splitlines() if line.strip().startswith("File ")]
    return frames[-1][len("File "):] if frames else "unknown place"


def describe_exit(exitcode: Optional[int]) -> str:
    """``killed by SIGKILL`` / ``exit code 3`` / ``exit status unknown``."""
    if exitcode is None:
        return "exit status unknown"
    if exitcode < 0:
        try:
            return "killed by " + signal.Signals(-exitcode).name
        except ValueError:
            return f"killed by signal {-exitcode}"
    return f"exit code {exitcode}"


# --- the worker process -----------------------------------------------------------------------------------

def _worker_main(conn: Any, setup: WorkerSetup) -> None:
    """A worker: set up, say ``ready``, then run each ``(position, call)`` received until ``None``."""
    # Ctrl-C goes to the whole process group: the parent stops the workers itself, without a traceback each
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        for module in setup.preload:
            importlib.import_module(module)
        import torch

        from ptdbg_ascend.precheck.call_check import check_call

        if setup.threads:
            torch.set_num_threads(setup.threads)
        source = setup.plan.source()
    except BaseException as error:  # noqa: BLE001 -- reported to the parent, which raises a clear error
        conn.send(("failed", None, f"{type(error).__name__}: {error}", traceback.format_exc()))
        return
    conn.send(("ready", os.getpid()))
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):  # the parent is gone: nothing to report to
            return
        if message is None:
            break
        position, call = message
        try:
            rows = check_call(call, source, setup.plan, setup.error_dir)
        except Exception as error:  # noqa: BLE001 -- a bug: the parent stops the run and names the API
            conn.send(("failed", position, f"{type(error).__name__}: {error}", traceback.format_exc()))
            return
        conn.send(("done", position, rows))
    conn.send(("bye", peak_rss_kib()))


# --- the parent's side ------------------------------------------------------------------------------------

class _Worker:
    def __init__(self, number: int, process: Any, conn: Any) -> None:
        self.number, self.process, self.conn = number, process, conn
        self.ready = False
        self.busy: Optional[Tuple[int, Any]] = None  # (position, call) in flight


class WorkerPool:
    """``workers`` processes made from ``setup(i)``; :meth:`run` hands out calls, :meth:`close` stops
    them (collecting their peak RSS). ``retried`` / ``crashed``: ``(API, how its worker died)`` of the
    calls retried after their worker died / reported as error rows after the second death."""

    def __init__(self, workers: int, setup: Callable[[int], WorkerSetup], start_method: str = "forkserver") -> None:
        self.size, self._setup = workers, setup
        self._context = multiprocessing.get_context(check_start_method(start_method))
        if start_method == "forkserver":
            # takes effect when this process starts its fork server (the first forkserver process)
            self._context.set_forkserver_preload(list(PRELOAD))
        self._workers: List[_Worker] = []
        self._started = 0
        self.peak_rss_workers_kib: List[int] = []
        self.retried: List[Tuple[str, str]] = []
        self.startup_seconds = 0.0  # from the first start until the first workers all said "ready"
        self._created = time.time()
        self.crashed: List[Tuple[str, str]] = []

    def _start(self) -> _Worker:
        parent_end, child_end = self._context.Pipe()
        number = self._started
        process = self._context.Process(target=_worker_main, args=(child_end, self._setup(number)),
                                        name=f"ptdbg-run-ut-worker-{number}", daemon=True)
        process.start()
        child_end.close()  # only the child holds it now: its death is an EOF here
        self._started += 1
        worker = _Worker(number, process, parent_end)
        self._workers.append(worker)
        return worker

    def run(self, items: Sequence[Tuple[int, Any]], on_rows: Callable[[int, Rows], None]) -> None:
        """Run every ``(position, call)``; ``on_rows(position, rows)`` in completion order (any order)."""
        queue: Deque[Tuple[int, Any]] = deque(items)
        attempts: Dict[int, int] = {}
        while len(self._workers) < min(self.size, len(queue)):
            self._start()
        while queue or any(w.busy for w in self._workers):
            for worker in self._workers:
                if worker.busy is None and queue:
                    worker.busy = queue.popleft()
                    attempts[worker.busy[0]] = attempts.get(worker.busy[0], 0) + 1
                    try:
                        worker.conn.send(worker.busy)
                    except (BrokenPipeError, OSError):
                        pass  # it died: its sentinel says so below
            waitables = {w.conn: w for w in self._workers}
            waitables.update({w.process.sentinel: w for w in self._workers})
            for ready in wait(list(waitables)):
                worker = waitables[ready]
                if worker in self._workers:
                    self._serve(worker, queue, attempts, on_rows)

    def _serve(self, worker: _Worker, queue: Deque[Tuple[int, Any]], attempts: Dict[int, int],
               on_rows: Callable[[int, Rows], None]) -> None:
        """Read what ``worker`` sent; a dead worker is replaced and its call retried or reported."""
        while True:
            try:
                if not worker.conn.poll():
                    break
                message = worker.conn.recv()
            except (EOFError, OSError):
                break
            kind = message[0]
            if kind == "ready":
                worker.ready = True
                if worker.number < self.size and all(w.ready for w in self._workers if w.number < self.size):
                    self.startup_seconds = time.time() - self._created
            elif kind == "done":
                worker.busy = None
                on_rows(message[1], message[2])
            elif kind == "bye":
                self.peak_rss_workers_kib.append(int(message[1]))
            elif kind == "failed":
                self.close()
                what = f"while starting (importing --preload {', '.join(self._setup(0).preload)})" \
                    if message[1] is None else f"running {worker.busy[1].full_name if worker.busy else message[1]}"
                logger.debug(f"multi_run_ut worker {worker.number}: {message[3]}")
                raise WorkerProcessError("multi_run_ut worker {} failed {}: {} (at {})".format(
                    worker.number, what, message[2], _innermost(message[3])))
        if worker.process.is_alive():
            return
        worker.process.join()
        worker.conn.close()
        self._workers.remove(worker)
        exit_text = describe_exit(worker.process.exitcode)
        if not worker.ready:
            self.close()
            raise WorkerProcessError("multi_run_ut worker {} died while starting ({}): check the preload modules "
                                     "and the memory available".format(worker.number, exit_text))
        if worker.busy is not None:
            position, call = worker.busy
            if attempts[position] < ATTEMPTS:
                logger.warning("multi_run_ut: worker {} died running {} ({}); retrying it once in a fresh worker."
                               .format(worker.number, call.full_name, exit_text))
                self.retried.append((call.full_name, exit_text))
                queue.appendleft((position, call))
            else:
                logger.warning("multi_run_ut: {} killed its worker again ({}): reported as an error row."
                               .format(call.full_name, exit_text))
                self.crashed.append((call.full_name, exit_text))
                on_rows(position, crash_rows(call, worker.process.exitcode))
        if queue and len(self._workers) < self.size:
            self._start()

    def close(self, timeout: float = 10.0) -> None:
        """Ask idle workers to stop (collecting their peak RSS), terminate the others."""
        for worker in self._workers:
            try:
                worker.conn.send(None)
            except (BrokenPipeError, OSError):
                pass
        for worker in self._workers:
            try:
                while worker.busy is None and worker.conn.poll(timeout):
                    message = worker.conn.recv()  # a late "ready" may come first
                    if message[0] == "bye":
                        self.peak_rss_workers_kib.append(int(message[1]))
                        break
            except (EOFError, OSError):
                pass
            worker.process.join(timeout if worker.busy is None else 0)
            if worker.process.is_alive():
                worker.process.terminate()
                worker.process.join(timeout)
            if worker.process.is_alive():
                worker.process.kill()
                worker.process.join()
            worker.conn.close()
        self._workers = []
