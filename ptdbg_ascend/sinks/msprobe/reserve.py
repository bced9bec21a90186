"""Disk space held back for the JSON files of a PrecisionDebugger dump, so that a full disk still ends
with a complete ``dump.json``.

Rewriting ``dump.json`` (and ``stack.json``, ``construct.json``) needs free space exactly when a tensor
file has just failed for lack of it. :class:`JsonReserve` keeps ``.ptdbg.reserve`` in the rank directory
at least as large as the next rewrite needs and gives it back when a write fails, so that rewrite fits.

Sizing. The files are replaced one after another (temporary file, then rename), so a rewrite needs at
most the largest file as last written plus what all three grew since: ``largest file + growth +
SLACK``. The growth is bounded by the members (dump.json entries, stack.json and construct.json items)
added since the last rewrite, or left out of it (an entry still waiting for its ``.pt`` files), each
counted at ``GROWTH_FACTOR`` times the longest member text of its kind seen so far. The first
``CALIBRATION`` members of each kind are measured as they are added (before any rewrite has encoded
one); every rewrite then measures the members it encodes. The file grows by at least a quarter at a
time, so a growing dump costs a few ``fallocate`` calls, not one per entry.

The blocks are allocated (``posix_fallocate``; zeros written where that is not supported), not a
sparse file: a file system that compresses or deduplicates zeros (ZFS, btrfs with compression) may
still hold less than it seems.
"""

from __future__ import annotations

import errno
import os
import threading
from typing import List, Optional

from ptdbg_ascend.fs.writes import open_new, remove_quietly

RESERVE_NAME = ".ptdbg.reserve"
# Members of each kind, by index in the counters below.
ENTRY, STACK, CONSTRUCT = 0, 1, 2
# A member is counted at this many times the longest one of its kind seen so far.
GROWTH_FACTOR = 2
# Members of each kind measured as they are added, before rewrites measure them.
CALIBRATION = 16
# Block rounding of three files and their temporary copies, and the document heads.
SLACK = 64 * 1024
_ZEROS = b"\0" * (1024 * 1024)


class JsonReserve(object):
    """``{directory}/.ptdbg.reserve``, sized for the next rewrite of the JSON files (see the module docstring).

    Args:
        directory: the rank directory (the JSON files' directory; it must exist when :meth:`ensure` runs).

    Attributes:
        pending: per kind (``ENTRY``, ``STACK``, ``CONSTRUCT``), the members not in the files as last
            written; the writer counts them under its own lock.
        unmeasured: per kind, how many more members to measure as they are added (:meth:`measured`;
            ``CALIBRATION`` at first, each measurement, a rewrite's too, counts one).
        size: bytes held now (0: none).
    """

    def __init__(self, directory: str) -> None:
        self.path = os.path.join(directory, RESERVE_NAME)
        self.pending = [0, 0, 0]  # type: List[int]
        self.size = 0
        self._longest = [0, 0, 0]  # type: List[int]
        self.unmeasured = [CALIBRATION] * 3  # type: List[int]
        self._file_sizes = [0, 0, 0]  # type: List[int]  # dump.json, stack.json, construct.json as last written
        self._descriptor = None  # type: Optional[int]
        self._lock = threading.Lock()

    # -- measuring -------------------------------------------------------------------------------
    def measured(self, kind: int, length: int) -> None:
        """A member text of ``kind`` is ``length`` characters long (ASCII: JSON escapes the rest)."""
        if self.unmeasured[kind]:
            self.unmeasured[kind] -= 1
        if length > self._longest[kind]:
            self._longest[kind] = length

    def written(self, dump_bytes: int, stack_bytes: Optional[int], construct_bytes: Optional[int]) -> None:
        """The files as just written (None: that file was not rewritten)."""
        sizes = self._file_sizes
        sizes[0] = dump_bytes
        if stack_bytes is not None:
            sizes[1] = stack_bytes
        if construct_bytes is not None:
            sizes[2] = construct_bytes

    def needed(self, entries: int = 0, stacks: int = 0) -> int:
        """Bytes the next rewrite may need, with ``entries`` entries and ``stacks`` stacks more than counted."""
        pending = self.pending
        longest = self._longest
        growth = ((pending[0] + entries) * longest[0] + (pending[1] + stacks) * longest[1]
                  + pending[2] * longest[2])
        return max(self._file_sizes) + GROWTH_FACTOR * growth + SLACK

    # -- the file --------------------------------------------------------------------------------
    def ensure(self, entries: int = 0, stacks: int = 0) -> None:
        """Hold at least :meth:`needed` bytes (growing the file by at least a quarter). Raises OSError
        (``ENOSPC``...) when the file system cannot give them; what was held before stays held."""
        # needed(), inline: called for every entry (statistics only) or tensor file
        pending = self.pending
        longest = self._longest
        needed = max(self._file_sizes) + SLACK + GROWTH_FACTOR * (
            (pending[0] + entries) * longest[0] + (pending[1] + stacks) * longest[1] + pending[2] * longest[2])
        if needed <= self.size:
            return
        with self._lock:
            if needed <= self.size:
                return
            target = needed + needed // 4
            if self._descriptor is None:
                remove_quietly(self.path)  # a killed run's reserve (or anything else there: never followed)
                self._descriptor = open_new(self.path, os.O_RDWR)
            try:
                _allocate(self._descriptor, self.size, target - self.size)
            except OSError:
                try:
                    os.ftruncate(self._descriptor, self.size)  # give back what a partial allocation took
                except OSError:
                    pass
                raise
            self.size = target

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
        threading.Thread(target=_close_quietly, args=(descriptor,), name="ptdbg-reserve-close", daemon=True).start()


def _close_quietly(descriptor: int) -> None:
    try:
        os.close(descriptor)
    except OSError:  # nothing to report: the name is gone, the kernel frees the blocks at exit anyway
        pass


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
