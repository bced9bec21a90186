"""One writer per dump directory: :class:`DumpLock` (``.ptdbg.lock``, held with an exclusive ``flock``, holding
pid and host) and :class:`RankDirectoryClaim` (a rank directory claimed by one process), with the two facts
they rest on, :func:`host_name` and :func:`pid_alive`, and :func:`remove_leftover_temporaries` (what a killed
writer left, removed by the one that takes its lock over).

Why ``flock`` and not ``O_EXCL`` alone: a killed writer's lock must be taken over, and a takeover that removes
the file and creates it again races with another process doing the same (each removes what is there by then,
the other's fresh lock included, and both write). The flock makes the takeover a rewrite of the file by the one
process the kernel lets hold it; the kernel releases it when that process ends, however it ends. The file
still exists exactly while a window writes (compare reads a lock left behind as a torn dump), so a release
removes it, under the flock, and a taker checks that the file it locked is still the one at the path.
"""

from __future__ import annotations

import errno
import fcntl
import os
import socket
import stat
import time
from typing import Dict, List, NamedTuple, Optional

from ptdbg_ascend.errors import DumpPathError, DumpWriteError
from ptdbg_ascend.fs.writes import FILE_MODE, LOCK_NAME, is_temporary_name, own_dirs, remove_empty_dirs


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


class LockHolder(NamedTuple):
    """What a ``.ptdbg.lock`` says: the writer's ``pid`` and ``host`` (``pid`` -1 when the file is empty: its
    writer was creating it, or died doing so) and ``cut``, the note a writer leaves when its process ended
    with the dump window still on (:meth:`DumpLock.leave_cut`; "" otherwise)."""

    pid: int
    host: str
    cut: str = ""


class DumpLock:
    """``{directory}/.ptdbg.lock`` holding ``"{pid} {host}"``: one writing process per rank directory.

    :meth:`acquire` opens (or creates) the file and takes an exclusive ``flock`` on it without waiting; the
    flock is what makes one writer: the kernel gives it to one process at a time and releases it when
    that process ends, however it ends. The text inside names the holder, for the messages and for
    ``readers/dump_state.py``, which reads a lock left in a rank directory as a dump not closed cleanly.

    * another process holds the flock: :class:`DumpPathError` naming the path and the holder;
    * nobody holds it and the text names a live process on this host (a writer without flock: an older
      ptdbg_ascend) or another host (a dump shared over the network, or copied): :class:`DumpPathError` too;
    * nobody holds it and the text names a dead pid (a killed run) or nothing: taken over with a warning,
      by rewriting the text under the flock (never by removing the file: a removal could take away a lock
      another process has just taken); the killed run's temporary files are removed
      (:func:`remove_leftover_temporaries`);
    * a second writer of this process on the same directory (an overflow dump beside a legacy dump) shares
      the flock: the file goes when the last one lets go.

    :meth:`release` removes the file (while holding the flock, so whoever opens it next finds a new file
    or learns that it opened the removed one) and closes it; :meth:`leave_cut` keeps it, noting why.
    A ``.ptdbg.lock`` that is not a regular file (a directory, a FIFO) is a :class:`DumpPathError` naming it.
    """

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.path = os.path.join(directory, LOCK_NAME)
        self.held = False

    def acquire(self) -> None:
        if self.held:
            return
        key = os.path.abspath(self.path)
        shared = _HELD.get(key)
        if shared is not None and shared.pid == os.getpid():  # this process holds it already (another writer)
            shared.holders += 1
            self.held = True
            return
        _HELD[key] = _HeldLock(self._take(), os.getpid())
        self.held = True

    def _take(self) -> int:
        """The descriptor of the lock file, flocked, holding this process's text."""
        from ptdbg_ascend.log import logger

        host = host_name()
        for _ in range(100):  # another process removed the file we opened (its release): open the new one
            descriptor = self._open()
            try:
                if not self._flock(descriptor):
                    raise self._held_by_another(self._wait_for_holder(descriptor))
                if not self._is_at_path(descriptor):
                    os.close(descriptor)
                    continue
                previous = _parse_holder(self.path, _read_text(descriptor, self.path))
                if previous is not None and previous.pid >= 0 and previous.pid != os.getpid():
                    if previous.host != host or pid_alive(previous.pid):
                        raise self._held_by_another(previous)
                    logger.warning("Taking over the stale dump lock {} of process {} (no longer running{}).".format(
                        self.path, previous.pid, "; " + previous.cut if previous.cut else ""))
                    remove_leftover_temporaries(self.directory)
                elif previous is not None and previous.pid < 0:  # empty: its creator died before writing it
                    remove_leftover_temporaries(self.directory)
                try:
                    _write_text(descriptor, f"{os.getpid()} {host}\n", self.path)
                except DumpWriteError:  # a full disk: the file we created must not stay (empty, it reads as taken)
                    if previous is None or previous.pid < 0:
                        os.unlink(self.path)
                    raise
            except BaseException:
                os.close(descriptor)
                raise
            return descriptor
        raise DumpPathError(f"Cannot take the dump lock {self.path}: it keeps changing (another process?).")

    def holder(self) -> Optional[LockHolder]:
        """What the lock says (read with O_NOFOLLOW): ``LockHolder(-1, ...)`` while its creator writes it,
        None when there is no lock; a lock that cannot be read (not a regular file, not "pid host") is a
        :class:`DumpPathError` naming it."""
        try:
            descriptor = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except FileNotFoundError:
            return None
        except OSError as error:
            raise DumpPathError(f"The dump lock {self.path} cannot be read ({error}); remove it.") from error
        try:
            _check_regular(descriptor, self.path)
            return _parse_holder(self.path, _read_text(descriptor, self.path))
        finally:
            os.close(descriptor)

    def release(self) -> None:
        """Remove the lock and give the flock back (when no other writer of this process holds it too).
        Idempotent."""
        held = self._let_go()
        if held is None:
            return
        try:
            if held.cut:
                _write_text(held.descriptor, f"{held.pid} {host_name()}\ncut: {held.cut}\n", self.path)
            elif self._is_at_path(held.descriptor):
                os.unlink(self.path)
        except (OSError, DumpPathError):  # a full disk: the lock stays as it was ("not closed cleanly" too)
            pass
        finally:
            os.close(held.descriptor)

    def leave_cut(self, why: str) -> None:
        """:meth:`release`, but the lock file stays, with ``why`` on its second line: this process ends while
        its dump window is on (an uncaught exception), so the dump is cut, and whoever reads it is told
        (``readers/dump_state.py``). The next writer takes it over as a dead process's lock."""
        if self.held:
            held = _HELD.get(os.path.abspath(self.path))
            if held is not None:
                held.cut = held.cut or " ".join(why.split())
        self.release()

    def _let_go(self) -> Optional[_HeldLock]:
        """Drop this object's hold; the shared record when it was the last one (then forgotten)."""
        if not self.held:
            return None
        self.held = False
        key = os.path.abspath(self.path)
        held = _HELD.get(key)
        if held is None or held.pid != os.getpid():  # a forked child: the parent's lock is not its to release
            return None
        held.holders -= 1
        if held.holders > 0:
            return None
        del _HELD[key]
        return held

    # -- internals -----------------------------------------------------------------------------
    def _open(self) -> int:
        # O_NONBLOCK: a FIFO put there must not block the open; O_NOFOLLOW: never through a link.
        flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        try:
            descriptor = os.open(self.path, flags, FILE_MODE)
        except OSError as error:
            if error.errno == errno.ELOOP:
                raise DumpPathError(f"{self.path} is a symlink; ptdbg_ascend does not write through links.") from error
            if error.errno == errno.EISDIR:
                raise DumpPathError("The dump lock {} is not a regular file (a directory); remove it, or choose "
                                    "another dump path.".format(self.path)) from error
            raise DumpWriteError(f"Cannot create the dump lock {self.path}: {error}") from error
        try:
            _check_regular(descriptor, self.path)
        except BaseException:
            os.close(descriptor)
            raise
        return descriptor

    def _flock(self, descriptor: int) -> bool:
        """Take the flock without waiting: False when another open file holds it."""
        try:
            return try_flock(descriptor)
        except OSError as error:
            raise DumpWriteError(f"Cannot lock the dump lock {self.path}: {error}") from error

    def _is_at_path(self, descriptor: int) -> bool:
        """Whether the file we hold open is still the one named by the path (its holder may have removed
        it between our open and our flock)."""
        try:
            named = os.lstat(self.path)
        except FileNotFoundError:
            return False
        except OSError as error:
            raise DumpWriteError(f"Cannot read the dump lock {self.path}: {error}") from error
        held = os.fstat(descriptor)
        return (named.st_dev, named.st_ino) == (held.st_dev, held.st_ino)

    def _wait_for_holder(self, descriptor: int) -> LockHolder:
        """The holder's text. A holder that has just taken the flock writes it at once, over the text of the
        killed run it takes over (a dead pid) or an empty file: wait for it up to HOLDER_WAIT seconds."""
        deadline = time.monotonic() + HOLDER_WAIT
        host = host_name()
        while True:
            try:
                holder = _parse_holder(self.path, _read_text(descriptor, self.path))
            except DumpPathError:  # half rewritten: read it again
                holder = None
            written = holder is not None and holder.pid >= 0 and (holder.host != host or pid_alive(holder.pid))
            if written or time.monotonic() >= deadline:
                return holder if holder is not None else LockHolder(-1, "(unknown)")
            time.sleep(0.01)

    def _held_by_another(self, holder: LockHolder) -> DumpPathError:
        who = (f"pid {holder.pid} on host {holder.host}" if holder.pid >= 0
               else "a process that has not written its pid yet")
        return DumpPathError(
            "Another process writes to {}: the lock {} is held by {}. Use another dump path or rank; if that "
            "process is gone (another host), remove the lock file.".format(self.directory, self.path, who))


HOLDER_WAIT = 1.0  # seconds a refused process waits for the holder's pid, for its message


class _HeldLock:
    """A lock this process holds: its flocked descriptor, shared by every :class:`DumpLock` of the same path
    in the process (``holders``; a second flock of the same file from one process would be refused), and
    the cut note the last one writes (:meth:`DumpLock.leave_cut`)."""

    __slots__ = ("descriptor", "pid", "holders", "cut")

    def __init__(self, descriptor: int, pid: int) -> None:
        self.descriptor = descriptor
        self.pid = pid
        self.holders = 1
        self.cut = ""


_HELD: Dict[str, _HeldLock] = {}  # by the lock's absolute path


def try_flock(descriptor: int) -> bool:
    """Take an exclusive ``flock`` on ``descriptor`` without waiting: False when another open file holds it.
    Any other failure is the OSError, for each lock to say in its own words. The one locking mechanism of the
    tool: the dump lock here and the pre-check's result CSV lock (``precheck/ut_lock.py``)."""
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as error:
        if error.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            return False
        raise
    return True


def _check_regular(descriptor: int, path: str) -> None:
    mode = os.fstat(descriptor).st_mode
    if not stat.S_ISREG(mode):
        kind = "a directory" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode) else "a special file"
        raise DumpPathError("The dump lock {} is not a regular file ({}); remove it, or choose another dump "
                            "path.".format(path, kind))


def _read_text(descriptor: int, path: str) -> str:
    try:
        return os.pread(descriptor, 4096, 0).decode("utf-8", "replace")
    except OSError as error:
        raise DumpPathError(f"The dump lock {path} cannot be read ({error}); remove it.") from error


def _write_text(descriptor: int, text: str, path: str) -> None:
    """The text first, then the length: a reader meanwhile sees the new first line (what it parses)."""
    data = text.encode("utf-8")
    try:
        if os.pwrite(descriptor, data, 0) != len(data):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        os.ftruncate(descriptor, len(data))
    except OSError as error:
        raise DumpWriteError(f"Cannot write the dump lock {path}: {error}") from error


def _parse_holder(path: str, text: str) -> Optional[LockHolder]:
    """``LockHolder`` of a lock's text: "pid host" on the first line, an optional "cut: why" on the second;
    an empty text is ``pid`` -1 (being written). Anything else is a :class:`DumpPathError` naming ``path``."""
    if not text:
        return LockHolder(-1, "(being created)")
    lines = text.split("\n")
    parts = lines[0].split()
    if len(parts) != 2 or not parts[0].isdigit():
        raise DumpPathError(f"The dump lock {path} holds {text[:200]!r}, not 'pid host'; remove it.")
    cut = ""
    if len(lines) > 1 and lines[1].startswith("cut: "):
        cut = lines[1][len("cut: "):]
    return LockHolder(int(parts[0]), parts[1], cut)


def remove_leftover_temporaries(rank_dir: str) -> int:
    """Remove the temporary files (``.{name}.XXXXXXXX.tmp``, ``fs.writes.temporary_beside``) a killed writer
    left in ``rank_dir`` and in its directories one level down (npy, ``dump_tensor_data``). Called by the
    writer that has just taken over the killed one's lock, so no live writer owns them. Returns how many were
    removed (logged)."""
    from ptdbg_ascend.log import logger

    removed = 0
    directories = [rank_dir]
    try:
        with os.scandir(rank_dir) as entries:
            directories.extend(entry.path for entry in entries if entry.is_dir(follow_symlinks=False))
    except OSError:
        return 0
    for directory in directories:
        try:
            with os.scandir(directory) as entries:
                names = [entry.name for entry in entries if is_temporary_name(entry.name)
                         and entry.is_file(follow_symlinks=False)]
        except OSError:
            continue
        for name in names:
            try:
                os.unlink(os.path.join(directory, name))
                removed += 1
            except OSError:
                pass
    if removed:
        logger.warning("Removed {} temporary file{} that the killed run left in {}.".format(
            removed, "" if removed == 1 else "s", rank_dir))
    return removed


class RankDirectoryClaim:
    """The rank directory one writer owns: created with its parent (or checked, never a symlink) and
    locked (:class:`DumpLock`), so a second process writing there gets a DumpPathError naming the holder.
    :meth:`release` unlocks it and removes the directories the claim created if they stayed empty (a
    window that wrote nothing leaves nothing behind)."""

    def __init__(self) -> None:
        self.lock: Optional[DumpLock] = None
        self._created: List[str] = []

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

    def release(self, cut: str = "") -> bool:
        """Unlock, and remove the directories this claim created if they are empty; whether there was a
        claim. Idempotent. ``cut`` (default "": a clean close) says why the dump ends cut short: the lock
        then stays, holding it (:meth:`DumpLock.leave_cut`)."""
        lock, self.lock = self.lock, None
        if lock is None:
            return False
        if cut:
            lock.leave_cut(cut)
        else:
            lock.release()
        remove_empty_dirs(self._created)
        self._created = []
        return True
