"""What a terminal shows when a command writes to it: the command runs on a pseudo-terminal (``pty``), its
output is read from the master side as a terminal would receive it, and :func:`screen` turns those
bytes into the lines a reader sees.

A test that reads ``subprocess.run(...).stdout`` checks what the program wrote; this checks what reaches
the screen: the tty's own output processing (``\\n`` becomes ``\\r\\n``), and any control character that
would act on the terminal (an escape sequence, a carriage return that overwrites a line, a backspace)
is reported instead of being silently rendered.
"""

from __future__ import annotations

import os
import pty
import select
import subprocess
import time
from typing import List, NamedTuple, Optional, Sequence


class Screen(NamedTuple):
    """``lines``: the text lines as shown; ``controls``: every control character (other than the tty's
    own ``\\r\\n`` line ends and tabs, which only move the cursor forward) that reached the terminal, as
    ``(line number, repr)``; ``returncode``."""

    lines: List[str]
    controls: List[tuple]
    returncode: int


def screen(raw: bytes) -> List[str]:
    """The lines of ``raw`` (bytes a terminal received) split at the tty's ``\\r\\n`` line ends."""
    return raw.decode("utf-8", errors="replace").split("\r\n")


def run_on_terminal(argv: Sequence[str], env: Optional[dict] = None, cwd: Optional[str] = None,
                    timeout: float = 300.0) -> Screen:
    """Run ``argv`` with stdout and stderr on a new pseudo-terminal; what the terminal received, as lines."""
    master, slave = pty.openpty()
    try:
        process = subprocess.Popen(list(argv), stdin=subprocess.DEVNULL, stdout=slave, stderr=slave, env=env,
                                   cwd=cwd, close_fds=True)
    finally:
        os.close(slave)
    chunks = []
    deadline = time.time() + timeout
    try:
        while True:
            if time.time() > deadline:
                process.kill()
                raise AssertionError(f"{argv} ran past {timeout} s; it showed: {b''.join(chunks)[-2000:]!r}")
            ready, _, _ = select.select([master], [], [], 0.5)
            if not ready:
                if process.poll() is not None:
                    break
                continue
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: every writer has closed the slave side
                break
            if not data:
                break
            chunks.append(data)
        returncode = process.wait(timeout=60)
    finally:
        os.close(master)
    lines = screen(b"".join(chunks))
    controls = [(number, repr(char)) for number, line in enumerate(lines) for char in line
                if char != "\t" and (ord(char) < 0x20 or 0x7F <= ord(char) < 0xA0 or 0x202A <= ord(char) <= 0x202E
                    or 0x2066 <= ord(char) <= 0x2069)]
    return Screen(lines, controls, returncode)
