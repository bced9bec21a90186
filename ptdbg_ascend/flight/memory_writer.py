"""One step of the flight recorder, kept in memory (:class:`MemoryStepWriter`): the msprobe sink writes its entries,
stack lines and construct links here as it writes them to a ``MsprobeJsonWriter``, and nothing reaches the disk
until :meth:`MemoryStepWriter.write` (a trigger). The texts are the msprobe writer's own (``entries.StepEntries``,
``json_text``), so a written step is an ordinary ``step{N}/rank{R}`` dump, comparable like any other.
"""

from __future__ import annotations

import json
import threading
from typing import Any, Iterator, List, Optional, Tuple

from ptdbg_ascend.formats.layout import CONSTRUCT_FILE
from ptdbg_ascend.fs.writes import own_dirs
from ptdbg_ascend.sinks.msprobe.encoder import entry_length
from ptdbg_ascend.sinks.msprobe.entries import StepEntries
from ptdbg_ascend.sinks.msprobe.json_files import write_files
from ptdbg_ascend.sinks.msprobe.late_statistics import LateStatistics
from ptdbg_ascend.sinks.msprobe.reserve import JsonReserve

# What a kept member costs besides its text: its str header and its slots in the entries' dicts (counted, so the
# bound holds for many small members too). With it the count is a little above what tracemalloc sees (bench model: 1.63 vs 1.62 MB).
MEMBER_OVERHEAD = 200


class MemoryStepWriter:
    """The entries of one step, in memory; duck-typed as the msprobe sink's writer (``sink.MsprobeSink``).

    Args:
        directory: the ``step{N}/rank{R}`` directory it is written to on a trigger (nothing is created before).
        step: the step it holds.
        level: dump.json's ``level`` ("L1", or "mix" with module records).
        room: ``room(extra_bytes)`` whether this many more bytes may be kept (the recorder's bound, which drops
            older steps first); False: the member is left out and :attr:`truncated` set.

    Attributes:
        bytes: what the kept texts take (text lengths plus :data:`MEMBER_OVERHEAD` per member).
        truncated: members were left out for the memory bound.
    """

    saves_tensors = False  # statistics only: no .pt file, no copy

    def __init__(self, directory: str, step: int, level: str, room: Any) -> None:
        self.directory = directory
        self.step = step
        self.level = level
        self.bytes = 0
        self.truncated = False
        self._room = room
        self._space = JsonReserve("")  # counts only: never asked to hold space (no file before a trigger)
        self._entries = StepEntries(self._space)
        # Backward hooks may run on autograd's threads; reentrant, because a SIGTERM handler (recorder.py) may
        # write the step from the main thread while that thread was adding to it.
        self._lock = threading.RLock()
        self.late = LateStatistics()

    # -- the sink's writer interface ------------------------------------------------------------
    def add_entry(self, name: str, entry: Any) -> None:
        """Keep the entry ``name`` (its member text or an ``EntryTemplate``) when the bound has room for it."""
        size = entry_length(entry) + MEMBER_OVERHEAD
        if not self._keeps(size):
            return
        with self._lock:
            self._entries.add(name, entry, None)

    def add_stack_literals(self, name: str, literals: List[str]) -> None:
        size = sum(map(len, literals)) + len(name) + MEMBER_OVERHEAD
        if not self._keeps(size):
            return
        with self._lock:
            self._entries.add_stack(name, literals)

    def add_construct(self, name: str, parent: Optional[str]) -> None:
        if not self._keeps(len(name) + len(parent or "") + MEMBER_OVERHEAD):
            return
        with self._lock:
            self._entries.add_construct(name, parent)

    def flush(self, json_only: bool = False) -> None:
        """Nothing: a kept step is written by :meth:`write` only (a trigger)."""

    def claim(self) -> None:
        """Nothing: no directory and no lock before a trigger."""

    def release(self, cut: str = "") -> bool:
        """Nothing held: False."""
        return False

    # -- the recorder's -------------------------------------------------------------------------
    def resolve(self) -> None:
        """Read back the statistics still pending on a device (one sync per device)."""
        self.late.batch.resolve()

    def finished(self) -> Iterator[Tuple[str, str]]:
        """``(name, member text)`` of the entries whose numbers are in, in call order (after :meth:`resolve`)."""
        with self._lock:
            self._entries.finished_text(0)  # renders the entries whose numbers came in since
            return iter(list(self._entries.finished_items()))

    def stack_lines(self, name: str) -> List[str]:
        """The stack.json lines kept for entry ``name`` (empty when none was kept)."""
        with self._lock:
            text = self._entries.stack.get(name)
        try:
            lines = json.loads("{" + text + "}")[name] if text is not None else []
        except ValueError:  # (a member text is always one JSON member: cannot happen)
            return []
        return [line for line in lines if isinstance(line, str)]

    def write(self) -> str:
        """Write dump.json, stack.json and construct.json (level mix) in :attr:`directory`; returns it. Raises
        ``DumpWriteError`` (the path and the error) or ``DumpPathError`` (a symlink in the way)."""
        self.resolve()
        with self._lock:
            texts, _, _ = self._entries.texts(("statistics", self.level, None), 0, True, self._space)
        if self.level not in ("L0", "mix"):
            texts = [(name, text) for name, text in texts if name != CONSTRUCT_FILE]
        own_dirs(self.directory, 2)
        write_files(self.directory, texts)
        return self.directory

    def _keeps(self, size: int) -> bool:
        if self.truncated or not self._room(size):
            self.truncated = True
            return False
        self.bytes += size
        return True

