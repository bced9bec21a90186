"""File-system guards of the dump writers: path checks, no writes through links, one writer per dump.

* :func:`check_path_text`: a user path (``set_dump_path``'s ``fpath``, the config's ``dump_path``) is a
  ``str`` without NUL bytes, no component over 255 bytes and at most 4096 bytes in all (Linux's
  NAME_MAX and PATH_MAX): checked at the call, not later inside the user's forward.
* :func:`own_dir`: a directory the tool writes into (tag, rank, npy, step dirs) is created; when it
  already exists it is checked with ``lstat``: a symlink (or a file) there is a :class:`DumpPathError`
  naming the path, never followed.
* :func:`open_new`: new files are created with ``O_CREAT | O_EXCL | O_NOFOLLOW``.
* :func:`temporary_beside`: a temporary file with an unpredictable name in the target's directory
  (``tempfile.mkstemp``), to be renamed into place: a final name never holds a partial file.
* :func:`replace_file`: write through :func:`temporary_beside` and rename, the one way every final
  file (npy, .pt, json, config, migrated script) is written.
* :class:`DumpLock`: ``.ptdbg.lock`` (pid and host) in the rank directory while a window writes.
"""

from __future__ import annotations

import errno
import os
import socket
import stat
import tempfile
from typing import Any, Callable, List, Optional, Tuple

from ptdbg_ascend.errors import DumpPathError, DumpWriteError, ParameterError

NAME_MAX = 255
PATH_MAX = 4096
DIR_MODE = 0o750
FILE_MODE = 0o640
LOCK_NAME = ".ptdbg.lock"
TEMP_SUFFIX = ".tmp"


def check_path_text(parameter: str, value: Any) -> str:
    """``value`` if it is a usable path string, else a :class:`ParameterError` naming ``parameter``."""
    if not isinstance(value, str):
        raise ParameterError(parameter, value, "must be a path string")
    if "\x00" in value:
        raise ParameterError(parameter, value, "must not contain NUL bytes")
    try:
        encoded = os.fsencode(value)
    except UnicodeError as error:
        raise ParameterError(parameter, value, "must be encodable as a file name ({})".format(error)) from error
    if len(encoded) > PATH_MAX:
        raise ParameterError(parameter, _short(value), "is {} bytes long; a path has at most {} bytes".format(
            len(encoded), PATH_MAX))
    for part in encoded.split(b"/"):
        if len(part) > NAME_MAX:
            raise ParameterError(parameter, _short(value), "has a component of {} bytes ({!r}...); a file or directory "
                                 "name has at most {} bytes".format(len(part), part[:32].decode(errors="replace"),
                                                                  NAME_MAX))
    return value


def _short(value: str) -> str:
    return value if len(value) <= 80 else value[:64] + "..."


def own_dir(path: str) -> bool:
    """Create the directory ``path`` (its parent must exist), or check that the existing one is a real
    directory: a symlink or anything else there raises :class:`DumpPathError`; it is never followed.
    Returns whether it was created."""
    try:
        os.mkdir(path, DIR_MODE)
        return True
    except FileExistsError:
        pass
    except OSError as error:
        raise DumpWriteError("Cannot create the dump directory {}: {}".format(path, error)) from error
    check_real_dir(path)
    return False


def check_real_dir(path: str) -> None:
    """:class:`DumpPathError` unless ``path`` is a directory itself (not a symlink to one)."""
    try:
        mode = os.lstat(path).st_mode
    except OSError as error:
        raise DumpWriteError("Cannot read the dump directory {}: {}".format(path, error)) from error
    if stat.S_ISLNK(mode):
        raise DumpPathError("{} is a symlink; ptdbg_ascend does not write through links. Remove it, or choose "
                            "another dump path.".format(path))
    if not stat.S_ISDIR(mode):
        raise DumpPathError("{} exists and is not a directory; remove it, or choose another dump path.".format(path))


def own_dirs(path: str, levels: int) -> List[str]:
    """``os.makedirs`` of ``path``'s ancestors above its last ``levels`` components (the user's dump
    directory), then :func:`own_dir` for each of those ``levels`` directories (the tool's own)."""
    owned = []
    top = path
    for _ in range(levels):
        owned.append(top)
        top = os.path.dirname(top)
    try:
        os.makedirs(top, mode=DIR_MODE, exist_ok=True)
    except OSError as error:
        raise DumpWriteError("Cannot create the dump directory {}: {}".format(top, error)) from error
    created = []
    for directory in reversed(owned):
        if own_dir(directory):
            created.insert(0, directory)
    return created


def remove_empty_dirs(directories: List[str]) -> None:
    """``rmdir`` each of ``directories`` (innermost first) that is empty; others are left alone."""
    for directory in directories:
        try:
            os.rmdir(directory)
        except OSError:
            return


def open_new(path: str, flags: int = os.O_WRONLY) -> int:
    """A descriptor of the new file ``path`` (``O_CREAT | O_EXCL | O_NOFOLLOW``)."""
    return os.open(path, flags | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, FILE_MODE)


def temporary_beside(path: str) -> Tuple[int, str]:
    """``(descriptor, name)`` of a new temporary file with an unpredictable name in ``path``'s directory
    (``.{basename}.XXXXXXXX.tmp``: no ``.npy``/``.pt``/``.json`` ending, so it is never taken for a dump
    file), mode 0640."""
    directory, name = os.path.split(path)
    descriptor, temporary = tempfile.mkstemp(prefix="." + name + ".", suffix=TEMP_SUFFIX, dir=directory or ".")
    try:
        os.fchmod(descriptor, FILE_MODE)
    except OSError:
        pass
    return descriptor, temporary


def replace_file(path: str, write: Callable[[int], None], what: str = "") -> None:
    """Create ``path`` atomically: ``write(descriptor)`` fills a :func:`temporary_beside` file, which is
    then renamed to ``path``. The final name never holds a partial file and is never written through a
    link (the rename replaces a symlink there, it does not follow it); on failure the temporary file is
    removed and a :class:`DumpWriteError` names ``path`` (``what``, e.g. "the tensor file", prefixes it).
    ``write`` must not close the descriptor."""
    temporary = None
    try:
        descriptor, temporary = temporary_beside(path)
        try:
            write(descriptor)
        finally:
            os.close(descriptor)
        os.replace(temporary, path)
    except BaseException as error:  # the temporary file never stays behind, whatever stopped the write
        if temporary is not None:
            remove_quietly(temporary)
        if isinstance(error, OSError):
            raise DumpWriteError("Cannot write {}{}: {}".format(what + " " if what else "", path, error)) from error
        raise


def write_all(descriptor: int, data: Any) -> None:
    """``os.write`` until all of ``data`` (bytes-like) is written (one call releases the GIL)."""
    view = memoryview(data)
    while len(view):
        written = os.write(descriptor, view)
        view = view[written:]


def remove_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


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
            descriptor = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW)
        except FileNotFoundError:
            return None
        except OSError as error:
            raise DumpPathError("The dump lock {} cannot be read ({}); remove it.".format(self.path, error)) from error
        try:
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
