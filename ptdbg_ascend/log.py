"""Logging in the original tool's line format: ``{YYYY-mm-dd HH:MM:SS}({pid})-[LEVEL]{message}``.

Users grep their training logs for these lines, so the format is kept; the id is the process id
(the original printed the group id by mistake).
"""

from __future__ import annotations

import logging
import os
import sys
import time

from ptdbg_ascend.terminal import printable

LOGGER_NAME = "ptdbg_ascend"


class _LegacyFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(record.created))
        # Messages quote names and lines from dumps: their control characters are escaped here as well
        # (defence in depth), keeping the newlines of our own multi-line messages.
        message = printable(record.getMessage(), keep_newlines=True)
        return f"{stamp}({os.getpid()})-[{record.levelname}]{message}"


class _StdoutHandler(logging.StreamHandler):
    """Writes to whatever ``sys.stdout`` is at emit time, so pytest's capsys and redirections see it."""

    def __init__(self) -> None:
        super().__init__(sys.stdout)

    def emit(self, record: logging.LogRecord) -> None:
        self.stream = sys.stdout
        super().emit(record)


def get_logger() -> logging.Logger:
    """The package logger (INFO and above to stdout, not propagated to the root logger)."""
    logger = logging.getLogger(LOGGER_NAME)
    if not logger.handlers:
        handler = _StdoutHandler()
        handler.setFormatter(_LegacyFormatter())
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False
    return logger


logger = get_logger()
