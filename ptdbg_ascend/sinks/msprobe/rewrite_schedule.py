"""When an msprobe writer rewrites its JSON files while entries arrive (:class:`RewriteSchedule`): at most once per
``max_delay`` seconds (or after ``flush_every`` new entries), and never sooner than :data:`REWRITE_COST_FACTOR`
times the last rewrite's duration after it, so a huge dump spends at most ~10 % of its time rewriting."""

from __future__ import annotations

import time
from typing import Optional

# A periodic rewrite waits at least this many times the last one's duration after it: rewriting a
# dump.json of n entries is O(n), so on a huge dump the rewrites take at most ~1/(1 + factor) of the time.
REWRITE_COST_FACTOR = 10


class RewriteSchedule:
    """The periodic rewrites of one writer. Not thread-safe: the writer calls it under its lock.

    Args:
        max_delay: seconds between periodic rewrites while entries arrive.
        flush_every: also rewrite after this many new entries (None: by time only).

    Attributes:
        queued: a periodic rewrite is queued or running. ``unflushed``: entries added since the last rewrite.
        next, earliest: the monotonic times of the next rewrite by delay and by the cost floor.
        rewrites, seconds: the periodic rewrites done so far and the time they took.
    """

    __slots__ = ("max_delay", "flush_every", "queued", "unflushed", "next", "earliest", "rewrites", "seconds")

    def __init__(self, max_delay: float, flush_every: Optional[int]) -> None:
        self.max_delay, self.flush_every = max_delay, flush_every
        self.queued = False
        self.unflushed = 0
        self.next = time.monotonic() + max_delay
        self.earliest = 0.0
        self.rewrites = 0
        self.seconds = 0.0

    def due(self) -> bool:
        """Whether a periodic rewrite starts now, after one more entry (marks it queued)."""
        self.unflushed += 1
        if self.queued:
            return False
        now = time.monotonic()
        if now < self.next and not (self.flush_every and self.unflushed >= self.flush_every):
            return False
        if now < self.earliest:  # flush_every too waits out the cost floor
            return False
        self.queued = True
        return True

    def done(self, started: float, ended: float, rendering: float, periodic: bool) -> None:
        """A rewrite ran from ``started`` to ``ended``, ``rendering`` seconds of it spent on entries finished since
        the last one. The cost floor counts what a rewrite repeats (joining and writing every entry), not the
        rendering of new entries: that is done once per entry, rewrites or not."""
        self.earliest = ended + REWRITE_COST_FACTOR * max(0.0, ended - started - rendering)
        self.next = max(ended + self.max_delay, self.earliest)
        if periodic:
            self.rewrites += 1
            self.seconds += ended - started
