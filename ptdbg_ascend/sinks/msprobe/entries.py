"""The entries of one ``step{N}/rank{R}`` directory, and which of them are finished.

An entry is finished when every ``.pt`` file queued before it was added is on disk and every statistic it waits
for (read back from a device, or by the writer thread from the copy it saves) is in; an unfinished one is left
out of dump.json, or shown at its last finished version, so dump.json never names a file not yet written.
Entries are their member texts (``encoder.py``): finished ones a str, unfinished ones an ``EntryTemplate``
until their numbers are in, never dicts (which Python's garbage collector would walk again and again).

Not thread-safe: the writer (``json_writer.MsprobeJsonWriter``) calls every method under its lock.
"""

from __future__ import annotations

import json
import time
from typing import Any, Dict, Iterator, List, Optional, Tuple

from ptdbg_ascend.formats.layout import CONSTRUCT_FILE, DUMP_FILE, STACK_FILE
from ptdbg_ascend.sinks.msprobe.encoder import Entry, entry_data_names, entry_length, extended
from ptdbg_ascend.sinks.msprobe.json_text import (JsonPieces, document_pieces, list_of_texts, member_of_text,
                                                    member_text, members_pieces)
from ptdbg_ascend.sinks.msprobe.pt_files import data_names
from ptdbg_ascend.sinks.msprobe.reserve import CONSTRUCT, ENTRY, SEPARATOR, STACK, JsonReserve

# An entry shown as its text in ``StepEntries.encoded``: finished, and never changed again but by an in-place
# collective, which extends it.
_AS_TEXT: Any = object()


class StepEntries:
    """dump.json's entries, stack.json's lines and construct.json's links of one directory, and the bytes of
    the entries not yet in dump.json at their current version, for the disk reserve ``space``
    (``space.pending[ENTRY]``).

    Args:
        space: the reserve of the directory. Default None: counts of its own, for no file (tests).
    """

    def __init__(self, space: Optional[JsonReserve] = None) -> None:
        # In dump.json's order: _AS_TEXT for a finished entry (its text in ``encoded``), else the entry itself,
        # waiting for a file (``ready_at``: the number of the last ``.pt`` job queued when it last changed) or
        # for its numbers. ``previous``: the text of the finished version of an entry extended since.
        self.data: Dict[str, Any] = {}
        self.encoded: Dict[str, str] = {}
        self.ready_at: Dict[str, int] = {}
        self.previous: Dict[str, str] = {}
        self.stack: Dict[str, str] = {}  # stack.json's member texts
        self.construct: Dict[str, str] = {}  # construct.json's
        # The disk reserve: the bytes counted for each entry not in dump.json at its current version (also
        # summed in ``space.pending[ENTRY]``).
        self._space = space if space is not None else JsonReserve("")
        self.counted: Dict[str, int] = {}

    def add(self, name: str, entry: Entry, waits_for: Optional[int]) -> None:
        """Add (or extend: an in-place collective's output arrives after its input) the entry ``name``: its
        finished member text or an ``EntryTemplate`` (finished when its late leaves' numbers are in).
        ``waits_for``: the number of the last ``.pt`` job queued, when it is not written yet (None: all are)."""
        current = self.data.get(name)
        if current is None and waits_for is None and type(entry) is str and name not in self.ready_at:
            # Most entries: new and finished (the lines below would reach the same _store_text).
            self._store_text(name, entry)
            self.previous.pop(name, None)
            return
        if current is not None:
            if current is _AS_TEXT:
                old = self.encoded.pop(name)
                current = self.previous[name] = old  # shown as it was until the extended entry is finished
            entry = extended(name, current, entry)
        if waits_for is not None:
            self.ready_at[name] = waits_for
        if name not in self.ready_at and _is_read(entry):
            self._store_text(name, entry if type(entry) is str else entry.render())
            self.previous.pop(name, None)
            return
        # Waits as itself: one object for the garbage collector to walk while thousands of entries wait.
        self.data[name] = entry
        self._count(name, entry_length(entry))

    def _store_text(self, name: str, text: str) -> None:
        # The text first: a reader that runs between the two lines (the flight recorder's SIGTERM handler, on the
        # thread that was adding) finds a finished entry complete, or not yet finished.
        self.encoded[name] = text
        self.data[name] = _AS_TEXT
        self._count(name, len(text))

    def _count(self, name: str, length: int) -> None:
        """Count entry ``name`` at ``length`` bytes (and a separator) in the reserve, instead of what it was
        counted at before."""
        length += SEPARATOR
        self._space.pending[ENTRY] += length - self.counted.get(name, 0)
        self.counted[name] = length

    def add_stack(self, name: str, literals: List[str]) -> int:
        """The stack.json member ``name``, its frames given as JSON string literals; returns its text's length."""
        text = self.stack[name] = member_of_text(name, list_of_texts(literals, 1), 0)
        return len(text)

    def add_construct(self, name: str, parent: Optional[str]) -> int:
        """The construct.json member ``name`` -> ``parent``; returns its text's length."""
        text = self.construct[name] = member_text(name, parent, 0)
        return len(text)

    def texts(self, head: Tuple[str, str, Optional[str]], written: int, with_others: bool,
              space: JsonReserve) -> Tuple[List[Tuple[str, JsonPieces]], float, int]:
        """(file name, text) of dump.json (and, ``with_others``, stack.json and construct.json) with the
        finished entries (:meth:`finished_text`), the seconds spent rendering entries finished since the last
        call and the number of entries shown. ``head``: dump.json's ``(task, level, dump_data_dir)``. Counts what
        the texts leave out for the reserve ``space``."""
        data_text, rendering, shown = self.finished_text(written)
        # Shown at their current version: no longer to come. Left out, or shown at a previous (shorter)
        # version: still counted.
        counted, data = self.counted, self.data
        for name in [name for name in counted if data.get(name) is _AS_TEXT]:
            del counted[name]
        space.pending[ENTRY] = sum(counted.values())
        texts = [(DUMP_FILE, document_pieces(head[0], head[1], head[2], data_text))]
        if with_others:
            for kind, name, items in ((STACK, STACK_FILE, self.stack), (CONSTRUCT, CONSTRUCT_FILE, self.construct)):
                texts.append((name, members_pieces(list(items.values()), 0)))
                space.pending[kind] = 0
        return texts, rendering, shown

    def finished_text(self, written: int) -> Tuple[JsonPieces, float, int]:
        """dump.json's ``data`` object of the finished entries (``written``: the number of the last ``.pt``
        job on disk): an entry still waiting is left out, or shown at its last finished version. Also returns the
        seconds spent rendering entries finished since the last call and the number of entries shown."""
        ready_at = self.ready_at
        if ready_at:
            for name in [name for name, number in ready_at.items() if number <= written]:
                del ready_at[name]
        encoded, previous, data = self.encoded, self.previous, self.data
        members = []
        rendering = 0.0
        for name, entry in data.items():
            if entry is _AS_TEXT:
                members.append(encoded[name])
            elif name not in ready_at and _is_read(entry):
                before = time.perf_counter()
                text = encoded[name] = entry if type(entry) is str else entry.render()
                data[name] = _AS_TEXT  # finished: its text is all that is needed from now on
                previous.pop(name, None)
                rendering += time.perf_counter() - before
                members.append(text)
            elif name in previous:
                members.append(previous[name])
        return members_pieces(members, 1), rendering, len(members)

    def finished_items(self) -> Iterator[Tuple[str, str]]:
        """``(name, member text)`` of the finished entries as :meth:`finished_text` last left them, in dump.json's
        order."""
        encoded = self.encoded
        for name, entry in list(self.data.items()):
            if entry is _AS_TEXT:
                yield name, encoded[name]

    def drop_unfinished(self) -> List[str]:
        """Forget the entries still waiting (for a file or for statistics): back to their last finished
        version, or gone with their stack. Returns the data_names only they named, whose files are to be
        removed."""
        orphans: List[str] = []
        for name in [name for name, entry in self.data.items() if entry is not _AS_TEXT]:
            named = set(entry_data_names(self.data[name]))
            previous = self.previous.pop(name, None)
            self._space.pending[ENTRY] -= self.counted.pop(name, 0)
            if previous is None:
                del self.data[name]
                self.stack.pop(name, None)
            else:  # shown at its finished version from now on
                named -= set(data_names(json.loads("{" + previous + "}")))
                self.data[name] = _AS_TEXT
                self.encoded[name] = previous
            orphans.extend(sorted(named))
        self.ready_at.clear()
        return orphans


def _is_read(entry: Entry) -> bool:
    """Whether an entry's numbers are all in (a text has none to wait for)."""
    return type(entry) is str or entry.read()
