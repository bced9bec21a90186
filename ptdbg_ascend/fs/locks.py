"""One writer per dump directory: :class:`DumpLock` (``.ptdbg.lock`` holding pid and host) and
:class:`RankDirectoryClaim` (a rank directory claimed by one process), with the two facts they rest on,
:func:`host_name` and :func:`pid_alive`."""

from __future__ import annotations

import errno
import os
import stat
import socket
from typing import Optional, Tuple

from ptdbg_ascend.errors import DumpPathError, DumpWriteError
from ptdbg_ascend.fs.writes import LOCK_NAME, open_new, own_dirs, remove_empty_dirs, remove_quietly, write_all


def host_name() -> str:
    try:
        return socket.gethostname()
    except OSError:
        return "unknown"


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except OSError:
        return True
    return True


class DumpLock(object):
    """``{directory}/.ptdbg.lock`` holding ``"{pid} {host}"``: one writing process per rank directory.

    :meth:`acquire` creates it with ``O_EXCL``; a lock of a live process (or of another host) raises
    :class:`DumpPathError` naming the path and the holder; a lock whose holder pid is dead on this host
    (a killed run) is taken over with a warning; this process's own lock is taken back silently.
    :meth:`release` removes it (only if it is still ours)."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.path = os.path.join(directory, LOCK_NAME)
        self.held = False
        self._text = ""

    def acquire(self) -> None:
        from ptdbg_ascend.log import logger

        if self.held:
            return
        host = host_name()
        text = "{} {}\n".format(os.getpid(), host)
        for _ in range(3):
            try:
                descriptor = open_new(self.path)
            except FileExistsError:
                holder = self.holder()
                if holder is None:  # vanished or unreadable between the two calls: try again
                    continue
                pid, holder_host = holder
                if holder_host == host and (pid == os.getpid() or not pid_alive(pid)):
                    if pid != os.getpid():
                        logger.warning("Taking over the stale dump lock {} of process {} (no longer running)."
                                       .format(self.path, pid))
                    remove_quietly(self.path)
                    continue
                raise DumpPathError(
                    "Another process writes to {}: the lock {} is held by pid {} on host {}. Use another dump "
                    "path or rank; if that process is gone (another host), remove the lock file.".format(
                        self.directory, self.path, pid, holder_host))
            except OSError as error:
                if error.errno == errno.ELOOP:
                    raise DumpPathError("{} is a symlink; ptdbg_ascend does not write through links.".format(
                        self.path)) from error
                raise DumpWriteError("Cannot create the dump lock {}: {}".format(self.path, error)) from error
            try:
                try:
                    write_all(descriptor, text.encode("utf-8"))
                finally:
                    os.close(descriptor)
            except OSError as error:  # a full disk: no empty lock left behind (it reads as "being created")
                remove_quietly(self.path)
                raise DumpWriteError("Cannot write the dump lock {}: {}".format(self.path, error)) from error
            self.held = True
            self._text = text
            return
        raise DumpPathError("Cannot take the dump lock {}: it keeps changing (another process?).".format(self.path))

    def holder(self) -> Optional[Tuple[int, str]]:
        """``(pid, host)`` written in the lock (read with O_NOFOLLOW), ``(-1, ...)`` while its creator
        writes it, None when there is no lock; a lock that cannot be read is a DumpPathError."""
        try:
            # O_NONBLOCK: a FIFO planted at the lock's name must not block whoever reads it (compare, parse)
            descriptor = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_NONBLOCK", 0))
        except FileNotFoundError:
            return None
        except OSError as error:
            raise DumpPathError("The dump lock {} cannot be read ({}); remove it.".format(self.path, error)) from error
        try:
            if not stat.S_ISREG(os.fstat(descriptor).st_mode):
                raise DumpPathError("The dump lock {} is not a regular file; remove it.".format(self.path))
            text = os.read(descriptor, 4096).decode("utf-8", "replace")
        finally:
            os.close(descriptor)
        parts = text.split()
        if len(parts) != 2 or not parts[0].isdigit():
            if not text:  # being written by its creator right now
                return (-1, "(being created)")
            raise DumpPathError("The dump lock {} holds {!r}, not 'pid host'; remove it.".format(self.path, text))
        return int(parts[0]), parts[1]

    def release(self) -> None:
        if not self.held:
            return
        self.held = False
        try:
            descriptor = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW)
            try:
                text = os.read(descriptor, 4096).decode("utf-8", "replace")
            finally:
                os.close(descriptor)
            if text == self._text:
                os.unlink(self.path)
        except OSError:
            pass


class RankDirectoryClaim(object):
    """The rank directory one writer owns: created with its parent (or checked, never a symlink) and
    locked (:class:`DumpLock`), so a second process writing there gets a DumpPathError naming the holder.
    :meth:`release` unlocks it and removes the directories the claim created if they stayed empty (a
    window that wrote nothing leaves nothing behind)."""

    def __init__(self) -> None:
        self.lock = None  # type: Optional[DumpLock]
        self._created = []  # type: List[str]

    def claim(self, rank_dir: str, levels: int = 2) -> None:
        """Own ``rank_dir`` (and its ``levels - 1`` parents); a claim of another directory is released
        first, the same one is kept."""
        if self.lock is not None:
            if self.lock.directory == rank_dir:
                return
            self.release()
        created = own_dirs(rank_dir, levels)
        lock = DumpLock(rank_dir)
        try:
            lock.acquire()
        except BaseException:
            remove_empty_dirs(created)
            raise
        self.lock, self._created = lock, created

    def release(self) -> None:
        """Unlock, and remove the directories this claim created if they are empty. Idempotent."""
        lock, self.lock = self.lock, None
        if lock is not None:
            lock.release()
            remove_empty_dirs(self._created)
            self._created = []
