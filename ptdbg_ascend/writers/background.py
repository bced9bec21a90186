"""Tensor files written off the training thread.

One worker thread runs submitted jobs in order (FIFO), so a job can write an npy and then the pkl line
that describes it: the line never exists without its file. The queue is bounded in bytes; a training
step that produces data faster than the disk takes it waits instead of growing memory without limit.
An error in a job is kept and raised as :class:`DumpWriteError` by the next ``submit`` or by ``close``:
training stops rather than losing data silently.
"""

from __future__ import annotations

import collections
import threading
import time
from typing import Callable, Deque, Optional, Tuple

from ptdbg_ascend.errors import DumpWriteError

DEFAULT_MAX_PENDING_BYTES = 512 * 1024 * 1024


class BackgroundWriter(object):
    """A FIFO of write jobs run by one daemon thread.

    Args:
        max_pending_bytes: bytes of queued data above which ``submit`` blocks. Default 512 MiB.
        name: the worker thread's name (shown in stack dumps). Default "ptdbg-writer".

    Attributes:
        busy_seconds: seconds the thread has spent running jobs so far (read after :meth:`flush`).
    """

    def __init__(self, max_pending_bytes: int = DEFAULT_MAX_PENDING_BYTES, name: str = "ptdbg-writer") -> None:
        self._max_pending = max_pending_bytes
        self._jobs = collections.deque()  # type: Deque[Tuple[Callable[[], None], int]]
        self._pending_bytes = 0
        self._condition = threading.Condition()
        self._error = None  # type: Optional[BaseException]
        self._closed = False
        self._busy = False
        # Seconds spent running jobs: with the bytes written, the rate the writer sustains while it has
        # work (the benchmark compares it with np.save), apart from how fast training produces data.
        self.busy_seconds = 0.0
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, job: Callable[[], None], nbytes: int = 0) -> None:
        """Queue ``job``; blocks while more than ``max_pending_bytes`` are queued (a single job larger
        than the bound is accepted when the queue is empty)."""
        with self._condition:
            self._raise_pending_error()
            if self._closed:
                raise DumpWriteError("The dump writer is closed; no more data can be written.")
            while self._jobs and self._pending_bytes + nbytes > self._max_pending and self._error is None:
                self._condition.wait()
            self._raise_pending_error()
            self._jobs.append((job, nbytes))
            self._pending_bytes += nbytes
            self._condition.notify_all()

    def flush(self) -> None:
        """Wait until every queued job has run; raise the first error of a job, if any."""
        with self._condition:
            while (self._jobs or self._busy) and self._error is None:
                self._condition.wait()
            self._raise_pending_error()

    def close(self) -> None:
        """Run the queued jobs, stop the thread, raise the first job error. Idempotent."""
        with self._condition:
            if self._closed:
                self._raise_pending_error()
                return
        try:
            self.flush()
        finally:
            with self._condition:
                self._closed = True
                self._condition.notify_all()
            self._thread.join()

    def _raise_pending_error(self) -> None:
        if self._error is not None:
            error, self._error = self._error, None
            self._jobs.clear()
            self._pending_bytes = 0
            if isinstance(error, DumpWriteError):
                raise error
            raise DumpWriteError("Writing dump data failed: {}".format(error)) from error

    def _run(self) -> None:
        while True:
            with self._condition:
                while not self._jobs and not self._closed:
                    self._condition.wait()
                if not self._jobs and self._closed:
                    return
                job, nbytes = self._jobs.popleft()
                self._busy = True
            started = time.perf_counter()
            try:
                job()
            except BaseException as error:  # noqa: B902 - kept and re-raised on the training thread
                with self._condition:
                    if self._error is None:
                        self._error = error
            finally:
                with self._condition:
                    self.busy_seconds += time.perf_counter() - started
                    self._busy = False
                    self._pending_bytes -= nbytes
                    self._condition.notify_all()
