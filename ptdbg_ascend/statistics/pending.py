"""The one value of statistics that are computed later: :class:`PendingStatistics`.

Statistics are computed now (a plain list), later on the device (``device_batch.DeviceStatisticsBatch`` reads
a batch back at once) or later on the writer thread (from the copy it saves). Whoever holds a pending value
asks :meth:`~PendingStatistics.done` before showing its numbers; the planner (``planner.py``) decides which
of the three a tensor gets.
"""

from __future__ import annotations

from typing import Any, List, Optional

Statistics = List[Optional[float]]

# Where the numbers of a pending value come from (``PendingStatistics.source``).
DEVICE = "device"  # a device batch's read-back
WRITER = "writer"  # the writer thread, from the copy of the tensor it saves


class PendingStatistics(list):
    """Statistics still to come: a list of ``None`` (four, or more where extras such as msprobe's finite pair
    follow) until they are filled in place, all at once (:meth:`fill`). A list, so that a line or leaf that
    holds it shows the numbers once they are in, with no second lookup.

    Attributes:
        values: not None while pending (the device batch keeps the tensor's device parts here, the writer
            thread's value holds ``True``); None once filled.
        count: the element count of a tensor in a device batch (0: a 0-d value; see ``device_batch``).
        source: :data:`DEVICE` or :data:`WRITER`.
    """

    __slots__ = ("values", "count", "source")

    def done(self) -> bool:
        """Whether the numbers are in."""
        return self.values is None

    def result(self) -> Statistics:
        """The numbers (a copy), once :meth:`done`."""
        return list(self)

    def fill(self, numbers: Statistics) -> None:
        """Put the numbers in, then mark it done (last: other threads read the numbers once it is done)."""
        self[:] = numbers
        self.values = None


def pending_on_writer(size: int = 4) -> PendingStatistics:
    """A new pending value that the writer thread fills from the copy it saves (``size`` Nones, default 4)."""
    pending = PendingStatistics([None] * size)
    pending.values = True
    pending.count = 0
    pending.source = WRITER
    return pending


def is_pending(statistics: Any) -> bool:
    """Whether ``statistics`` is a :class:`PendingStatistics` whose numbers are still to come."""
    return type(statistics) is PendingStatistics and statistics.values is not None
