"""The one overflow policy of both front-ends: which checked calls are dumped, and when training stops.

Used by the legacy overflow observer (``register_hook(model, overflow_check)``, ``overflow/observer.py``)
and by ``PrecisionDebugger(task="overflow_check")`` (``sinks/msprobe/sink.py``); each front-end only says
how an overflowing call is written (its file format) and what its stop message is.

A check yields a flag (``overflow/detection.py``): a Python bool when the answer is known at once (CPU
tensors, inf/NaN Python floats, the NPU float status), else a 0-d bool tensor on the device. Device
flags are kept pending with what the front-end needs to dump the call, and read together, one host
sync per device, when :data:`PENDING_CALLS` calls have accumulated, at :meth:`OverflowPolicy.flush`
(switch OFF, step end) and at exit. A pending call is therefore dumped with its tensors as they are
when the batch is read, and the stop comes at most that many calls after the overflowing one.

Overflows are dumped in call order and counted; the ``limit``-th raises
:class:`~ptdbg_ascend.errors.OverflowLimitReached`, after which nothing more is checked.
"""

from __future__ import annotations

import threading
from typing import Any, Callable, List, Optional, Tuple

from ptdbg_ascend.errors import OverflowLimitReached
from ptdbg_ascend.overflow.detection import read_flags

PENDING_CALLS = 32  # device flags read per host sync; also the most calls a stop can lag behind
UNLIMITED = -1


class OverflowPolicy:
    """Counts overflowing calls against ``limit`` and batches the reads of device flags.

    Args:
        limit: stop at this overflow (``overflow_nums``); -1 never stops.
        dump: ``dump(item, k)`` writes overflow number ``k`` (1, 2, ...) and returns where it went (for
            the stop message). If it raises, the overflow is not counted and the error propagates.
        stop_message: ``stop_message(k, where)``, called when overflow ``k`` reaches the limit (a
            front-end may flush its files there); returns the message of the OverflowLimitReached.
        defer: keep device flags pending (True, the default); False reads each one at once.
        read: reads a list of flags. Default None: :func:`~ptdbg_ascend.overflow.detection.read_flags`.
    """

    def __init__(self, limit: int, dump: Callable[[Any, int], str], stop_message: Callable[[int, str], str],
                 defer: bool = True, read: Optional[Callable[[List[Any]], List[bool]]] = None) -> None:
        self.limit = limit
        self.count = 0
        self.stopped = False
        self.defer = defer
        self._dump = dump
        self._stop_message = stop_message
        self._read = read if read is not None else _read_flags
        self._pending: List[Tuple[Any, Any]] = []  # (flag, item)
        self._lock = threading.RLock()  # backward checks may run on autograd's device threads

    def check(self, flag: Any, item: Any) -> None:
        """One checked call: ``flag`` from ``overflow_flag`` (or the float status), ``item`` what
        ``dump`` needs. May dump now (and raise at the limit) or keep the call pending."""
        if flag is False or self.stopped:
            return
        with self._lock:
            if flag is True:
                self._flush_locked()  # keep the overflows in call order
                self._overflow(item)
            elif not self.defer:
                if self._read([flag])[0]:
                    self._flush_locked()
                    self._overflow(item)
            else:
                self._pending.append((flag, item))
                if len(self._pending) >= PENDING_CALLS:
                    self._flush_locked()

    def flush(self) -> None:
        """Read every pending flag (one sync per device) and dump the calls that overflowed; may raise
        OverflowLimitReached."""
        with self._lock:
            self._flush_locked()

    def _flush_locked(self) -> None:
        pending, self._pending = self._pending, []
        if not pending:
            return
        for (_flag, item), overflowed in zip(pending, self._read([flag for flag, _ in pending])):
            if overflowed and not self.stopped:
                self._overflow(item)

    def _overflow(self, item: Any) -> None:
        where = self._dump(item, self.count + 1)
        self.count += 1
        if self.limit != UNLIMITED and self.count >= self.limit:
            self.stopped = True
            self._pending = []
            raise OverflowLimitReached(self._stop_message(self.count, where))


def _read_flags(flags: List[Any]) -> List[bool]:
    return read_flags(flags)  # looked up at each read, so a test can count the reads
