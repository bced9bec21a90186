"""Progress bars of long work (reading a large dump, comparing, writing the reports): tqdm on stderr, shown only
when stderr is a terminal (a log file, a pipe or a test's captured output gets none) and the work is large enough
to take seconds. tqdm is imported when a bar is shown; without tqdm there is no bar.

Torch-free.
"""

from __future__ import annotations

import sys
from typing import Any


# Rows from which a stage that takes some 10-100 us a row (comparing statistics, judging, writing the CSV or the
# .xlsx) shows a bar: 20,000 rows take a few seconds there.
MANY_ROWS = 20_000


class NoBar:
    """What :func:`bar` returns when no bar is shown: ``update`` and ``close`` do nothing."""

    def update(self, count: float = 1) -> None:
        """Nothing to move."""

    def close(self) -> None:
        """Nothing to close."""


NO_BAR = NoBar()


def bar(total: float, desc: str, unit: str, minimum: float, **options: Any) -> Any:
    """A tqdm bar on stderr of ``total`` ``unit`` named ``desc``, or :data:`NO_BAR` when ``total`` is below
    ``minimum`` or stderr is not a terminal (or tqdm is not installed). ``options`` go to tqdm
    (``unit_scale=True`` for bytes)."""
    stream = sys.stderr
    if total < minimum or stream is None or not stream.isatty():
        return NO_BAR
    try:
        from tqdm import tqdm
    except ImportError:
        return NO_BAR
    return tqdm(total=total, desc=desc, unit=unit, file=stream, **options)
