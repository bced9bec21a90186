"""Whether the current thread is inside a wrapped torch API: the wrappers record only the outermost call, and
the tool's own torch calls (statistics, tensor copies, hooks) run inside so that they are never recorded.

Below every package (it imports nothing of ours): the engine's wrappers set it, and the statistics service,
which sits below the engine, marks its own reductions with it.
"""

from __future__ import annotations

import threading
from typing import Any

# Per-thread "inside a wrapped API" flag (`inside`). Module level because the wrappers are module-level
# functions; it holds no dump state, only whether the current thread is inside a wrapped API.
THREAD_STATE = threading.local()


class Inside:
    """Context manager marking the current thread as inside a wrapped API (re-entrant)."""

    __slots__ = ("previous",)

    def __enter__(self) -> Inside:
        self.previous = getattr(THREAD_STATE, "inside", False)
        THREAD_STATE.inside = True
        return self

    def __exit__(self, *exc: Any) -> None:
        THREAD_STATE.inside = self.previous
