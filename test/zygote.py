"""Driver of the killed-run tests: a zygote process that imports torch once and forks one training run
per trial, so each trial pays neither Python's nor torch's start-up.

The zygote script reads one output path per line on stdin, forks a child that prints ``PID {pid}``
(the child says it itself: a line of the parent could interleave with the child's log), then
``STEP {k} {time.monotonic()!r}`` after each step; the zygote prints ``DONE`` once the child is gone.
"""

from __future__ import annotations

import collections
import os
import queue
import signal
import subprocess
import sys
import threading
from typing import Iterator, Tuple

# The longest wait for one line of the zygote or its run. A run prints a step every few milliseconds; a
# silence this long means the child died or hung, and the test must fail saying so rather than wait
# for the CI's global limit (a hang here once used up a whole CI run).
LINE_TIMEOUT = 120.0


class Zygote:
    """``Zygote(script_path, *args)`` runs the zygote script; use it as a context manager.

    The zygote and every run it forks live in their own process group, which ``__exit__`` kills
    whole: a run that hung cannot outlive the test and keep the suite's pipes open.
    """

    def __init__(self, script: str, *args: str) -> None:
        env = dict(os.environ, OMP_NUM_THREADS="1")
        env.pop("RANK", None)  # the runs must resolve to rank 0
        env.pop("LOCAL_RANK", None)
        self.process = subprocess.Popen([sys.executable, script] + list(args), stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, text=True, env=env, start_new_session=True)
        # A reader thread turns the pipe into a queue, so that each wait can have a deadline.
        self._lines: queue.Queue[str] = queue.Queue()
        self._recent: collections.deque[str] = collections.deque(maxlen=5)  # for the timeout's message
        self._reader = threading.Thread(target=self._read_lines, daemon=True)
        self._reader.start()

    def _read_lines(self) -> None:
        for line in self.process.stdout:
            self._lines.put(line)
        self._lines.put("")  # end of file

    def _next_line(self, waiting_for: str) -> str:
        try:
            line = self._lines.get(timeout=LINE_TIMEOUT)
        except queue.Empty:
            raise AssertionError("the zygote printed nothing for {:.0f} s while waiting for {}; its last lines: "
                                 "{!r} (its stderr is above)".format(LINE_TIMEOUT, waiting_for, list(self._recent))) \
                from None
        self._recent.append(line)
        return line

    def __enter__(self) -> Zygote:
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.process.stdin.close()
        except OSError:
            pass
        try:
            os.killpg(self.process.pid, signal.SIGKILL)  # the zygote and any run still alive
        except ProcessLookupError:
            pass
        self.process.wait()

    def start(self, out: str) -> int:
        """Fork a training run writing to ``out``; its pid."""
        self.process.stdin.write(str(out) + "\n")
        self.process.stdin.flush()
        line = self._next_line("the run's PID line")
        while not line.startswith("PID "):
            assert line, "the zygote ended"
            line = self._next_line("the run's PID line")
        return int(line.split()[1])

    def steps(self) -> Iterator[Tuple[int, float]]:
        """``(k, monotonic time)`` of each ``STEP`` line the run prints (the tool's log is skipped)."""
        while True:
            words = self._next_line("a STEP line").split()
            assert words, "the zygote ended"
            # DONE before the kill: the run itself ended (an exception, printed on stderr above)
            assert words[0] != "DONE", "the run ended by itself before the test killed it"
            if words[0] == "STEP":
                yield int(words[1]), float(words[2])

    def kill(self, pid: int) -> None:
        """SIGKILL the run and wait until the zygote saw it end."""
        os.kill(pid, signal.SIGKILL)
        line = self._next_line("DONE after the kill")
        # The kill may cut the run's last line short (a log line half flushed): the zygote's DONE then ends
        # that line instead of starting its own (a CI run waited for a DONE line that way).
        while not line.rstrip("\n").endswith("DONE"):
            assert line, "the zygote ended"
            line = self._next_line("DONE after the kill")
