"""One writer per result CSV: an exclusive ``flock`` on ``.{result CSV name}.lock`` beside it.

Every ``run_ut``/``multi_run_ut`` that writes a result CSV (a new pair or a resumed one) holds the lock
from the moment the pair is claimed or reopened until its last write (the Compare Link column included),
so two resumes of one ``-csv_path`` started at the same moment cannot both append the same APIs: the
second gets a ParameterError naming the CSV and the holder.

Why a separate, hidden file and ``flock``: a resume replaces the CSVs atomically (rename), so a lock on
the CSV itself would be held on a file that is no longer there; the lock file is never replaced nor
removed (removing it would let a third process lock a new inode while a second still waits on the old
one). ``flock`` belongs to the open file: the kernel releases it when its holder ends, however it ends
(SIGKILL included), so there is never a stale lock to clean up; the holder's pid, host and start time
are written into the file for the message only. On NFS, Linux maps ``flock`` onto the server's locks.
"""

from __future__ import annotations

import errno
import os
import stat
import time
from typing import Optional

from ptdbg_ascend.errors import DumpPathError, ParameterError
from ptdbg_ascend.log import logger
from ptdbg_ascend.fs.writes import FILE_MODE
from ptdbg_ascend.fs.locks import host_name, try_flock

try:
    import fcntl
except ImportError:  # not on POSIX: no lock (logged)
    fcntl = None  # type: ignore[assignment]


def lock_path_of(result_csv_path: str) -> str:
    """``{dir}/.{result CSV name}.lock``."""
    directory, name = os.path.split(result_csv_path)
    return os.path.join(directory, "." + name + ".lock")


class RunLock:
    """The held lock of one result CSV; :meth:`release` (idempotent) gives it back."""

    def __init__(self, path: str, descriptor: Optional[int]) -> None:
        self.path, self._descriptor = path, descriptor

    @property
    def held(self) -> bool:
        return self._descriptor is not None

    def release(self) -> None:
        descriptor, self._descriptor = self._descriptor, None
        if descriptor is not None:
            try:
                os.ftruncate(descriptor, 0)  # no stale holder for the next process to name
            except OSError:
                pass
            os.close(descriptor)  # closing the only descriptor of the open file releases the flock


def acquire(result_csv_path: str, parameter: str = "result_csv_path") -> RunLock:
    """Take the lock of ``result_csv_path`` without waiting.

    Raises ParameterError naming ``parameter`` and the holder when another process holds it;
    DumpPathError when the lock file cannot be opened (a symlink or something else than a regular file
    there, a read-only directory)."""
    path = lock_path_of(os.path.abspath(result_csv_path))
    if fcntl is None:
        logger.debug(f"No fcntl on this platform: {result_csv_path} is not locked.")
        return RunLock(path, None)
    flags = os.O_CREAT | os.O_NOFOLLOW | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        try:
            descriptor = os.open(path, os.O_RDWR | flags, FILE_MODE)
        except PermissionError:  # another user's lock file in a shared directory: locking needs no write access
            descriptor = os.open(path, os.O_RDONLY | flags, FILE_MODE)
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise DumpPathError("The lock file {} of {} is a symlink; ptdbg_ascend does not open links. Remove it."
                                .format(path, result_csv_path)) from None
        raise DumpPathError(f"Cannot open the lock file {path} of {result_csv_path}: {error}.") from None
    try:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            raise DumpPathError(f"The lock file {path} of {result_csv_path} is not a regular file; remove it.")
        try:
            taken = try_flock(descriptor)
        except OSError as error:
            raise DumpPathError(f"Cannot lock {path} ({result_csv_path}): {error}.") from None
        if not taken:
            raise ParameterError(parameter, result_csv_path, "must not be in use by another run",
                                 "Another run_ut/multi_run_ut writes it right now ({}; lock file {}). Wait until it "
                                 "ends; a run that was killed releases it by itself.".format(_holder(descriptor), path)
                                 ) from None
        _write_holder(descriptor)
    except BaseException:
        os.close(descriptor)
        raise
    return RunLock(path, descriptor)


HOLDER_WAIT = 1.0  # seconds to wait for a holder that has just taken the lock to write who it is


def _holder(descriptor: int) -> str:
    """``pid P on host H, since T`` of the process holding the lock (it writes that right after taking
    it: a process refused at that very moment waits up to HOLDER_WAIT for it)."""
    deadline = time.time() + HOLDER_WAIT
    while True:
        try:
            text = os.pread(descriptor, 256, 0).decode("utf-8", "replace").strip()
        except OSError:
            text = ""
        if text or time.time() >= deadline:
            break
        time.sleep(0.01)
    parts = text.split(" ", 2)
    if len(parts) == 3 and parts[0].isdigit():
        return f"pid {parts[0]} on host {parts[1]}, since {parts[2]}"
    return "holder unknown"


def _write_holder(descriptor: int) -> None:
    """``{pid} {host} {time}`` into the lock file, for the message of a process that finds it taken."""
    text = f"{os.getpid()} {host_name()} {time.strftime('%Y-%m-%d %H:%M:%S')}\n".encode("utf-8")
    try:
        os.ftruncate(descriptor, 0)
        os.pwrite(descriptor, text, 0)
    except OSError:  # opened read-only (another user's file), or a full disk: the lock holds all the same
        pass
