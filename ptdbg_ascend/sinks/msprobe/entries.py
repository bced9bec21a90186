"""The entries of one ``step{N}/rank{R}`` directory, and which of them are finished.

An entry is finished when every ``.pt`` file queued before it was added is on disk and every statistic it
defers (``statistics/device_batch.DeviceStatisticsBatch``) is read back; an unfinished one is left out of dump.json,
or shown at its last finished version, so dump.json never names a file not yet written. Member texts are
encoded once each however often a file is rewritten (pure-Python ``indent=1`` encoding is slow).

Not thread-safe: the writer (``json_writer.MsprobeJsonWriter``) calls every method under its lock.
"""

from __future__ import annotations

import json
import time
from typing import Any, Dict, List, Optional, Tuple

from ptdbg_ascend.formats.layout import CONSTRUCT_FILE, DUMP_FILE, STACK_FILE
from ptdbg_ascend.sinks.msprobe.leaves import fill_statistics
from ptdbg_ascend.sinks.msprobe.entry_text import EntryTemplate, late_text_value
from ptdbg_ascend.sinks.msprobe.json_text import (JsonPieces, document_pieces, encode_missing, list_of_texts,
                                                    member_of_text, member_text, members_pieces, object_pieces)
from ptdbg_ascend.sinks.msprobe.pt_files import data_names
from ptdbg_ascend.sinks.msprobe.reserve import CONSTRUCT, ENTRY, STACK, JsonReserve
from ptdbg_ascend.sinks.msprobe.text_length import SEPARATOR, member_length_bound


# An entry kept as its text only (``StepEntries.encoded``): finished, and never changed again but by an
# in-place collective, which decodes it back.
_AS_TEXT = object()


def entry_length(name: str, entry: Any, late_leaves: int = 0) -> int:
    """An upper bound of the length of entry ``name``'s member text, for the disk reserve: a text's own
    length, a template's longest rendering, a dict's bound (``text_length.py``; ``late_leaves`` of its
    tensor leaves get their statistics later)."""
    if type(entry) is str:
        return len(entry)
    if type(entry) is EntryTemplate:
        return entry.longest()
    return member_length_bound(name, entry, 1, late_leaves)


class StepEntries(object):
    """dump.json's entries, stack.json's lines and construct.json's links of one directory, and the bytes of
    the entries not yet in dump.json at their current version, for the disk reserve ``space``
    (``space.pending[ENTRY]``).

    Args:
        space: the reserve of the directory. Default None: counts of its own, for no file (tests).
    """

    def __init__(self, space: Optional[JsonReserve] = None) -> None:
        self.data = {}  # type: Dict[str, Any]
        self.stack = {}  # type: Dict[str, List[str]]
        self.construct = {}  # type: Dict[str, Optional[str]]
        # Member texts; dump.json's hold finished versions only.
        self.encoded = {}  # type: Dict[str, str]
        self.stack_encoded = {}  # type: Dict[str, str]
        self.construct_encoded = {}  # type: Dict[str, str]
        # An entry that may still wait for a file is in ``ready_at`` (name -> the number of the last ``.pt``
        # job queued when it last changed); ``previous`` keeps the member text of the finished version of
        # an entry extended since; ``stat_waiting``: per entry the leaves whose statistics are still on
        # the device (with their pending reads), or its EntryTemplate (which knows its own).
        self.ready_at = {}  # type: Dict[str, int]
        self.previous = {}  # type: Dict[str, str]
        self.stat_waiting = {}  # type: Dict[str, Any]
        # The disk reserve: the bytes counted for each entry not in dump.json at its current version
        # (``counted``, also summed in ``space.pending[ENTRY]``), and the dict entries added since the
        # last :meth:`measure`, counted then (a bound of a dict's text costs a walk of it: done off the
        # training thread where there is a writer thread).
        self._space = space if space is not None else JsonReserve("")
        self.counted = {}  # type: Dict[str, int]
        self.unmeasured = []  # type: List[str]

    def add(self, name: str, entry: Any, waits_for: Optional[int], deferred: List[Tuple[Dict[str, Any], Any]],
            length: Optional[int] = None) -> None:
        """Add (or extend: an in-place collective's output arrives after its input) the entry ``name``: a dict,
        its finished member text (``entry_text.py``: no file, nothing deferred), or an ``EntryTemplate`` (no
        file; finished when its late leaves' numbers are read back). ``waits_for``: the number
        of the last ``.pt`` job queued, when it is not written yet (None: all are); ``deferred``: its leaves
        whose statistics are still on the device. An entry finished now is kept as its text only
        (:meth:`_keep_text`). ``length``: a bound of a waiting dict entry's text, when the caller has one
        (default None: :meth:`measure` counts it later)."""
        if type(entry) is str:
            if name not in self.data:
                self._store_text(name, entry)
                return
            entry = json.loads("{" + entry + "}")[name]  # extending an entry: as a dict (rare)
        elif type(entry) is EntryTemplate:
            if name not in self.data and waits_for is None and not deferred:
                if entry.read():  # its numbers were read back meanwhile (a batch that was full)
                    self._store_text(name, entry.render())
                else:
                    # Waits as itself, not as a list of (leaf, pending) pairs: two objects fewer per entry for
                    # the garbage collector to walk while thousands of entries wait for their batch.
                    self.data[name] = self.stat_waiting[name] = entry
                    self._count(name, entry.longest())
                return
            deferred = list(deferred)  # (take_new may hand over its own empty list)
            entry = _as_dict(name, entry, deferred)  # extending an entry (rare): as a dict, its leaves waiting
        current = self.data.get(name)
        if type(current) is EntryTemplate:  # extending a template (rare): as a dict, its leaves waiting as dicts
            waiting = []  # type: List[Tuple[Dict[str, Any], Any]]
            current = self.data[name] = _as_dict(name, current, waiting)
            self.stat_waiting.pop(name, None)
            if waiting:
                self.stat_waiting[name] = waiting
        if deferred:
            self.stat_waiting.setdefault(name, []).extend(deferred)
        if current is not None:
            if current is _AS_TEXT:  # back to a dict to extend it (rare: an in-place collective's output)
                current = self.data[name] = json.loads("{" + self.encoded[name] + "}")[name]
            current.update(entry)
            old = self.encoded.pop(name, None)
            if (waits_for is not None or deferred) and old is not None:  # encoded holds finished versions only
                self.previous[name] = old
        else:
            self.data[name] = entry
        if waits_for is not None:
            self.ready_at[name] = waits_for
        elif name not in self.stat_waiting and name not in self.ready_at:
            self._keep_text(name)
            return
        if length is not None:
            self._count(name, length)
        else:
            self.unmeasured.append(name)

    def _keep_text(self, name: str) -> None:
        """Encode the finished entry ``name`` and drop its dict. Why now: a step's entries would otherwise
        stay in memory as millions of small dicts and lists until the step ends, which Python's garbage
        collector walks again and again (measured: one window in three of the per-call benchmark ran ~2x
        slower); a str is never walked. Its text is the one the next rewrite would have made."""
        self._store_text(name, member_text(name, self.data[name], 1))

    def _store_text(self, name: str, text: str) -> None:
        self.data[name] = _AS_TEXT
        self.encoded[name] = text
        self._count(name, len(text))

    def _count(self, name: str, length: int) -> None:
        """Count entry ``name`` at ``length`` bytes (and a separator) in the reserve, instead of what it was
        counted at before."""
        length += SEPARATOR
        self._space.pending[ENTRY] += length - self.counted.get(name, 0)
        self.counted[name] = length

    def measure(self) -> None:
        """Count the dict entries added since the last call at a bound of their text (``text_length.py``),
        those of their leaves whose statistics come later filled. Under the writer's lock, before the
        reserve is grown."""
        unmeasured, self.unmeasured = self.unmeasured, []
        for name in unmeasured:
            entry = self.data.get(name)
            if type(entry) is dict:
                late = self.stat_waiting.get(name)
                self._count(name, member_length_bound(name, entry, 1, len(late) if type(late) is list else 0))

    def add_stack(self, name: str, literals: List[str]) -> int:
        """The stack.json member ``name``, its frames given as JSON string literals; returns its text's length.
        Kept as its text (a str, which the garbage collector never walks; see :meth:`_keep_text`) under both
        ``stack`` and ``stack_encoded``."""
        text = self.stack[name] = self.stack_encoded[name] = member_of_text(name, list_of_texts(literals, 1), 0)
        return len(text)

    def add_construct(self, name: str, parent: Optional[str]) -> int:
        """The construct.json member ``name`` -> ``parent``, kept as its text (as :meth:`add_stack`)."""
        text = self.construct[name] = self.construct_encoded[name] = member_text(name, parent, 0)
        return len(text)

    def texts(self, head: Tuple[str, str, Optional[str]], written: int, with_others: bool,
              space: JsonReserve) -> Tuple[List[Tuple[str, JsonPieces]], float, int]:
        """(file name, text) of dump.json (and, ``with_others``, stack.json and construct.json) with the
        finished entries (:meth:`finished_text`), the seconds spent encoding new members and the number
        of entries shown. ``head``: dump.json's ``(task, level, dump_data_dir)``. Counts what the texts
        leave out, and the longest members, for the reserve ``space``."""
        self.measure()
        data_text, encoding, shown = self.finished_text(written)
        # Shown at their current version: no longer to come. Left out, or shown at a previous (shorter)
        # version: still counted.
        counted, waiting = self.counted, (self.ready_at, self.stat_waiting)
        for name in [name for name in counted if name not in waiting[0] and name not in waiting[1]]:
            del counted[name]
        space.pending[ENTRY] = sum(counted.values())
        texts = [(DUMP_FILE, document_pieces(head[0], head[1], head[2], data_text))]
        if with_others:
            for kind, name, items, encoded in ((STACK, STACK_FILE, self.stack, self.stack_encoded),
                                               (CONSTRUCT, CONSTRUCT_FILE, self.construct, self.construct_encoded)):
                encoding += encode_missing(items, encoded, 0)[0]
                texts.append((name, object_pieces(items, encoded, 0)))
                space.pending[kind] = 0
        return texts, encoding, shown

    def finished_text(self, written: int) -> Tuple[JsonPieces, float, int]:
        """dump.json's ``data`` object of the finished entries (``written``: the number of the last ``.pt``
        job on disk): an entry waiting for a file is left out, or shown at its last finished version. Also
        returns the seconds spent encoding entries not encoded before and the number of entries shown."""
        ready_at = self.ready_at
        stat_waiting = self.stat_waiting
        if stat_waiting:
            for name in [name for name, items in stat_waiting.items() if _all_read(items)]:
                items = stat_waiting.pop(name)
                if type(items) is not EntryTemplate:  # (a template is rendered below)
                    for leaf, pending in items:
                        fill_statistics(leaf, list(pending))
                if name not in ready_at:
                    self.previous.pop(name, None)
        if ready_at:
            for name in [name for name, number in ready_at.items() if number <= written]:
                del ready_at[name]
                if name not in stat_waiting:
                    self.previous.pop(name, None)
        encoded = self.encoded
        previous = self.previous
        data = self.data
        members = []
        encoding = 0.0
        for name, entry in data.items():
            if name in ready_at or name in stat_waiting:
                text = previous.get(name)
                if text is None:
                    continue
            else:
                text = encoded.get(name)
                if text is None:
                    before = time.perf_counter()
                    text = encoded[name] = entry.render() if type(entry) is EntryTemplate else member_text(name, entry, 1)
                    data[name] = _AS_TEXT  # finished: its text is all that is needed from now on
                    encoding += time.perf_counter() - before
            members.append(text)
        return members_pieces(members, 1), encoding, len(members)

    def drop_unfinished(self) -> List[str]:
        """Forget the entries still waiting (for a file or for statistics): back to their last finished
        version, or gone with their stack. Returns the data_names only they named, whose files are to be
        removed."""
        orphans = []  # type: List[str]
        for name in set(self.ready_at) | set(self.stat_waiting):
            entry = self.data.get(name)
            named = set(data_names(entry))
            previous = self.previous.pop(name, None)
            self._space.pending[ENTRY] -= self.counted.pop(name, 0)
            if previous is None:
                self.data.pop(name, None)
                self.encoded.pop(name, None)
                self.stack.pop(name, None)
                self.stack_encoded.pop(name, None)
            else:  # shown at its finished version from now on (its dict keeps the newer keys: never shown)
                named -= set(data_names(json.loads("{" + previous + "}")))
                self.encoded[name] = previous
            orphans.extend(sorted(named))
        self.ready_at.clear()
        self.stat_waiting.clear()
        return orphans


def _all_read(items: Any) -> bool:
    """Whether the numbers an entry waits for are in: its template's, or those of its ``(leaf, pending)`` pairs
    (a device batch's pending list, a copy's statistics)."""
    if type(items) is EntryTemplate:
        return items.read()
    return all(pending.done() for _, pending in items)


def _as_dict(name: str, template: EntryTemplate, waiting: List[Tuple[Dict[str, Any], Any]]) -> Dict[str, Any]:
    """The entry of ``template`` as dicts (``entry_text.late_text_value``: leaves still waiting go to ``waiting``)."""
    return late_text_value("{" + template.text + "}", template.late, waiting)[name]
