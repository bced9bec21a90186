"""Tensor files written off the training thread.

One worker thread runs submitted jobs in order (FIFO), so a job can write an npy and then the pkl line
that describes it: the line never exists without its file. The backlog is bounded in bytes and in time:
``submit`` blocks the training thread while more than ``max_pending_bytes`` (default 256 MiB) are queued,
while the queued jobs would take the writer more than ``max_delay`` seconds (default 1.0) to write at the
speed it has shown so far, or while the oldest queued job has waited more than ``max_delay``. A training
step that produces data faster than the disk takes it waits instead of growing memory, and a killed
process loses at most the queued jobs: at most 256 MiB of tensor data, submitted within about the last
second before the kill (``max_delay`` plus the job being written, as long as the disk keeps its speed),
plus the job being written (its files keep temporary names; see legacy_pkl.py). The bytes alone were not
a bound in time: 256 MiB take a disk at 20 MB/s 13 s.

The writer's speed is learned from the jobs it runs: seconds per byte of the jobs that write at least
``SPEED_SAMPLE_BYTES``, and the seconds of a job besides its bytes (opening, renaming, a pkl line), both
as moving averages, so a disk that slows down (a full page cache, other writers) tightens the bound within
a few jobs.
An error in a job is kept and raised as :class:`DumpWriteError` by the next ``submit`` or by ``close``:
training stops rather than losing data silently.
"""

from __future__ import annotations

import collections
import threading
import time
from typing import Callable, Deque, Optional, Tuple

from ptdbg_ascend.errors import DumpWriteError

DEFAULT_MAX_PENDING_BYTES = 256 * 1024 * 1024
# Read when a writer is made (not a default argument), so a test can tighten it.
DEFAULT_MAX_DELAY = 1.0
# Jobs of at least this many bytes measure the writer's seconds per byte; smaller ones its time per job.
SPEED_SAMPLE_BYTES = 256 * 1024
# Weight of the newest job in the moving averages of the writer's speed.
SPEED_WEIGHT = 0.25
# Until the writer has timed a job of SPEED_SAMPLE_BYTES or more it cannot tell how long its queue takes, so the
# queue holds at most this many bytes (about a second on a 16 MB/s disk): a fast training loop would otherwise
# queue seconds of writing before the first measurement arrives.
UNTIMED_PENDING_BYTES = 16 * 1024 * 1024


class BackgroundWriter:
    """A FIFO of write jobs run by one daemon thread.

    Args:
        max_pending_bytes: bytes of queued data above which ``submit`` blocks. Default 256 MiB.
        max_delay: seconds of queued work (at the speed the writer has shown) and seconds the oldest
            queued job may wait, above which ``submit`` blocks. Default None: ``DEFAULT_MAX_DELAY`` (1.0 s).
        name: the worker thread's name (shown in stack dumps). Default "ptdbg-writer".

    Attributes:
        busy_seconds: seconds the thread has spent running jobs so far (read after :meth:`flush`).
    """

    def __init__(self, max_pending_bytes: int = DEFAULT_MAX_PENDING_BYTES, name: str = "ptdbg-writer",
                 max_delay: Optional[float] = None) -> None:
        self._max_pending = max_pending_bytes
        self._max_delay = DEFAULT_MAX_DELAY if max_delay is None else max_delay
        self._jobs: Deque[Tuple[Callable[[], None], int, float]] = collections.deque()
        self._pending_bytes = 0
        self._condition = threading.Condition()
        self._error: Optional[BaseException] = None
        self._closed = False
        self._busy = False
        # The writer's speed (module docstring): seconds per byte, and seconds per job besides its bytes.
        self._seconds_per_byte = 0.0
        self._seconds_per_job = 0.0
        # Seconds spent running jobs: with the bytes written, the rate the writer sustains while it has
        # work (the benchmark compares it with np.save), apart from how fast training produces data.
        self.busy_seconds = 0.0
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, job: Callable[[], None], nbytes: int = 0) -> None:
        """Queue ``job``; blocks while more than ``max_pending_bytes`` are queued or the queued jobs would
        take the writer more than ``max_delay`` seconds (a single job larger than either bound is accepted
        when the queue is empty), or while the oldest queued job has waited more than ``max_delay`` seconds. Until
        a large job has been timed, the byte bound is at most UNTIMED_PENDING_BYTES."""
        with self._condition:
            self._raise_pending_error()
            if self._closed:
                raise DumpWriteError("The dump writer is closed; no more data can be written.")
            jobs = self._jobs
            if jobs:
                now = time.monotonic()
                while jobs and self._error is None:
                    late = now - jobs[0][2] - self._max_delay
                    limit = self._max_pending if self._seconds_per_byte else min(self._max_pending,
                                                                                 UNTIMED_PENDING_BYTES)
                    if self._pending_bytes + nbytes > limit or self._queued_seconds(nbytes) > self._max_delay:
                        self._condition.wait()  # until the thread has written a job
                    elif late > 0:
                        self._condition.wait(0.05)  # until the thread has taken it
                    else:
                        break
                    now = time.monotonic()
                self._raise_pending_error()
                jobs.append((job, nbytes, now))
            else:
                jobs.append((job, nbytes, time.monotonic()))
            self._pending_bytes += nbytes
            self._condition.notify_all()

    def _queued_seconds(self, nbytes: int) -> float:
        """How long the writer would take for the queued jobs and one more of ``nbytes``, at its speed so far
        (0.0 before it has run a job). Under the condition's lock."""
        return (len(self._jobs) + 1) * self._seconds_per_job + (self._pending_bytes + nbytes) * \
            self._seconds_per_byte

    def _learn_speed(self, nbytes: int, seconds: float) -> None:
        """Fold one job's time into the moving averages of the writer's speed. Under the condition's lock."""
        if nbytes >= SPEED_SAMPLE_BYTES:
            sample = max(0.0, seconds - self._seconds_per_job) / nbytes
            self._seconds_per_byte += SPEED_WEIGHT * (sample - self._seconds_per_byte) if self._seconds_per_byte \
                else sample
        else:
            self._seconds_per_job += SPEED_WEIGHT * (seconds - self._seconds_per_job)

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
            raise DumpWriteError(f"Writing dump data failed: {error}") from error

    def _run(self) -> None:
        while True:
            with self._condition:
                while not self._jobs and not self._closed:
                    self._condition.wait()
                if not self._jobs and self._closed:
                    return
                job, nbytes, _ = self._jobs.popleft()
                self._busy = True
            started = time.perf_counter()
            try:
                job()
            except BaseException as error:  # noqa: B902 - kept and re-raised on the training thread
                with self._condition:
                    if self._error is None:
                        self._error = error
            finally:
                # What the job holds (copies of tensors) goes now, not when the next job comes, and before
                # flush() can return: torch memory freed on this thread while the interpreter exits aborts the
                # process ("terminate called without an active exception").
                job = None
                with self._condition:
                    seconds = time.perf_counter() - started
                    self.busy_seconds += seconds
                    self._learn_speed(nbytes, seconds)
                    self._busy = False
                    self._pending_bytes -= nbytes
                    self._condition.notify_all()
