"""Driver of the killed-run tests: a zygote process that imports torch once and forks one training run
per trial, so each trial pays neither Python's nor torch's start-up.

The zygote script reads one output path per line on stdin, forks a child that prints ``PID {pid}``
(the child says it itself: a line of the parent could interleave with the child's log), then
``STEP {k} {time.monotonic()!r}`` after each step; the zygote prints ``DONE`` once the child is gone.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from typing import Iterator, Tuple


class Zygote(object):
    """``Zygote(script_path, *args)`` runs the zygote script; use it as a context manager."""

    def __init__(self, script: str, *args: str) -> None:
        env = dict(os.environ, OMP_NUM_THREADS="1")
        env.pop("RANK", None)  # the runs must resolve to rank 0
        env.pop("LOCAL_RANK", None)
        self.process = subprocess.Popen([sys.executable, script] + list(args), stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, text=True, env=env)

    def __enter__(self) -> "Zygote":
        return self

    def __exit__(self, *exc: object) -> None:
        self.process.stdin.close()
        self.process.kill()
        self.process.wait()

    def start(self, out: str) -> int:
        """Fork a training run writing to ``out``; its pid."""
        self.process.stdin.write(str(out) + "\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        while not line.startswith("PID "):
            assert line, "the zygote ended"
            line = self.process.stdout.readline()
        return int(line.split()[1])

    def steps(self) -> Iterator[Tuple[int, float]]:
        """``(k, monotonic time)`` of each ``STEP`` line the run prints (the tool's log is skipped)."""
        while True:
            words = self.process.stdout.readline().split()
            assert words, "the run ended"
            if words[0] == "STEP":
                yield int(words[1]), float(words[2])

    def kill(self, pid: int) -> None:
        """SIGKILL the run and wait until the zygote saw it end."""
        os.kill(pid, signal.SIGKILL)
        while self.process.stdout.readline().strip() != "DONE":
            pass
