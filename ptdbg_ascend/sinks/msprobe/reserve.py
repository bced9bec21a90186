"""Disk space held back for the JSON files of a PrecisionDebugger dump, so that a full disk still ends
with a complete ``dump.json``.

Rewriting ``dump.json`` (and ``stack.json``, ``construct.json``) needs free space exactly when a tensor
file has just failed for lack of it. :class:`JsonReserve` keeps ``.ptdbg.reserve`` in the rank directory
at least as large as the next rewrite needs and gives it back when a write fails, so that rewrite fits.

Sizing, by bytes. The files are replaced one after another (dump.json, stack.json, construct.json: a
temporary file, then a rename), so a rewrite needs, at its largest, one file's new text while the files
before it already hold their new ones: ``max(file + its pending bytes + those of the files before it) +
SLACK``, each file as last written. The pending bytes are counted as members are added (a member's
text, or an upper bound of it: ``encoder.entry_length``), and set again by every rewrite to the members it left
out (an entry still waiting for its ``.pt`` files or statistics). One member to come (the entry being
added, and its stack) is counted before it exists. The file grows by at least a quarter at a time, so a
growing dump costs a few ``fallocate`` calls, not one per entry, and shrinks back when it holds more than
``SHRINK_FACTOR`` times what the next rewrite needs.

The blocks are allocated (``posix_fallocate``; zeros written where that is not supported), not a
sparse file: a file system that compresses or deduplicates zeros (ZFS, btrfs with compression) may
still hold less than it seems.
"""

from __future__ import annotations

import errno
import os
import queue
import threading
from typing import List, Optional

from ptdbg_ascend.fs.writes import open_new, remove_quietly

RESERVE_NAME = ".ptdbg.reserve"
# Members of each kind (the three files), by index in the counters below.
ENTRY, STACK, CONSTRUCT = 0, 1, 2
# What separates two members of an object: ",\n" (the indent is part of the member's text).
SEPARATOR = 2
# A stack to come (of the entry being added) is counted at this many times the longest one seen.
GROWTH_FACTOR = 2
# Block rounding of three files and their temporary copies, and the document heads.
SLACK = 64 * 1024
# The reserve is cut back when it holds more than this many times what the next rewrite needs.
SHRINK_FACTOR = 4
_ZEROS = b"\0" * (1024 * 1024)


class JsonReserve:
    """``{directory}/.ptdbg.reserve``, sized for the next rewrite of the JSON files (see the module docstring).

    Args:
        directory: the rank directory (the JSON files' directory; it must exist when :meth:`ensure` runs).

    Attributes:
        pending: per kind (``ENTRY``, ``STACK``, ``CONSTRUCT``), the bytes of the members not in the files as
            last written, separators included; the writer counts them under its own lock
            (:meth:`added`; ``entries.StepEntries`` sets ``pending[ENTRY]`` at each rewrite).
        size: bytes held now (0: none).
    """

    def __init__(self, directory: str) -> None:
        self.path = os.path.join(directory, RESERVE_NAME)
        self.pending: List[int] = [0, 0, 0]
        self.size = 0
        self._longest_stack = 0
        self._file_sizes: List[int] = [0, 0, 0]  # dump.json, stack.json, construct.json as last written
        self._descriptor: Optional[int] = None
        self._lock = threading.Lock()

    # -- measuring -------------------------------------------------------------------------------
    def added(self, kind: int, length: int) -> None:
        """A member of ``kind`` whose text is (at most) ``length`` characters long was added (ASCII: JSON
        escapes the rest)."""
        self.pending[kind] += length + SEPARATOR
        if kind == STACK and length > self._longest_stack:
            self._longest_stack = length

    def written(self, dump_bytes: int, stack_bytes: Optional[int], construct_bytes: Optional[int]) -> None:
        """The files as just written (None: that file was not rewritten)."""
        sizes = self._file_sizes
        sizes[0] = dump_bytes
        if stack_bytes is not None:
            sizes[1] = stack_bytes
        if construct_bytes is not None:
            sizes[2] = construct_bytes

    def needed(self, entry_bytes: int = 0, stacks: int = 0) -> int:
        """Bytes the next rewrite may need, with an entry of ``entry_bytes`` and ``stacks`` stacks more than
        counted."""
        sizes, pending = self._file_sizes, self.pending
        grown = [pending[0] + entry_bytes, pending[1] + stacks * GROWTH_FACTOR * self._longest_stack, pending[2]]
        # Written in this order, each while the files before it already hold their growth.
        return max(sizes[0] + grown[0], sizes[1] + grown[0] + grown[1], sizes[2] + grown[0] + grown[1] + grown[2]) \
            + SLACK

    # -- the file --------------------------------------------------------------------------------
    def ensure(self, entry_bytes: int = 0, stacks: int = 0) -> None:
        """Hold at least :meth:`needed` bytes (growing the file by at least a quarter; cutting it back when it
        holds more than ``SHRINK_FACTOR`` times that). Raises OSError (``ENOSPC``...) when the file system
        cannot give them even without the quarter; what was held before stays held."""
        needed = self.needed(entry_bytes, stacks)
        size = self.size
        if needed <= size and size <= SHRINK_FACTOR * needed:
            return
        with self._lock:
            if self._descriptor is None:
                remove_quietly(self.path)  # a killed run's reserve (or anything else there: never followed)
                self._descriptor = open_new(self.path, os.O_RDWR)
            if needed <= self.size:  # held more than SHRINK_FACTOR times what is needed: give most of it back
                if self.size > SHRINK_FACTOR * needed:
                    target = needed + needed // 4
                    try:
                        os.ftruncate(self._descriptor, target)
                    except OSError:  # nothing lost: it still holds what is needed
                        return
                    self.size = target
                return
            for target in (needed + needed // 4, needed):  # the quarter more if there is room, else exactly
                try:
                    _allocate(self._descriptor, self.size, target - self.size)
                except OSError:
                    try:
                        os.ftruncate(self._descriptor, self.size)  # give back what a partial allocation took
                    except OSError:
                        pass
                    if target == needed:
                        raise
                    continue
                self.size = target
                return

    def error_text(self, error: OSError, capital: bool = True) -> str:
        """Why the reserve could not grow: "Cannot keep N bytes free for the dump's JSON files (held in P): E"
        (``capital`` False: "cannot ...", inside another message)."""
        return "{}annot keep {} bytes free for the dump's JSON files (held in {}): {}".format(
            "C" if capital else "c", self.needed(), self.path, error)

    def release(self, wait: bool = True) -> None:
        """Remove the file. Idempotent; a later :meth:`ensure` creates it again.

        Args:
            wait: True (default): its space is free when this returns (the rewrite after a write error
                needs it). False (the end of a window): the name is removed now, while the file is still
                open, which frees nothing; a helper thread then closes it, and the file system gives
                the blocks back there (several ms for a few MB on a busy disk, paid by every step's
                stop() before). A kill meanwhile leaves nothing: the kernel closes the file.
        """
        with self._lock:
            descriptor, self._descriptor = self._descriptor, None
            self.size = 0
            if descriptor is None:
                return
            if wait or os.name == "nt":  # Windows cannot remove an open file's name
                os.close(descriptor)
                remove_quietly(self.path)
                return
            remove_quietly(self.path)
        _CLOSER.close(descriptor)


class _Closer:
    """One daemon thread that closes released reserve files, so the file system gives their blocks back off the
    training thread. One for the process, not one per release: starting a thread cost every stop() about a
    millisecond (``bench/bench_dump.py``'s 12 ms step). Started again in a forked child (threads do not survive
    a fork)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queue: Optional["queue.SimpleQueue[int]"] = None
        self._pid = 0

    def close(self, descriptor: int) -> None:
        with self._lock:
            if self._queue is None or self._pid != os.getpid():
                self._queue, self._pid = queue.SimpleQueue(), os.getpid()
                threading.Thread(target=self._run, args=(self._queue,), name="ptdbg-reserve-close",
                                 daemon=True).start()
            self._queue.put(descriptor)

    @staticmethod
    def _run(descriptors: "queue.SimpleQueue[int]") -> None:
        while True:
            _close_quietly(descriptors.get())


def _close_quietly(descriptor: int) -> None:
    try:
        os.close(descriptor)
    except OSError:  # nothing to report: the name is gone, the kernel frees the blocks at exit anyway
        pass


_CLOSER = _Closer()


def _allocate(descriptor: int, offset: int, length: int) -> None:
    """Allocate ``length`` bytes at ``offset`` (real blocks, not a hole)."""
    if length <= 0:
        return
    allocate = getattr(os, "posix_fallocate", None)
    if allocate is not None:
        try:
            allocate(descriptor, offset, length)
            return
        except OSError as error:
            if error.errno not in (errno.EINVAL, errno.EOPNOTSUPP, errno.ENOSYS):
                raise
    end = offset + length
    while offset < end:  # no fallocate here: write the zeros
        offset += os.pwrite(descriptor, _ZEROS[:min(len(_ZEROS), end - offset)], offset)
