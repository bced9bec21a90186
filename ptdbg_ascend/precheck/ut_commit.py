"""Committing one API to an open run_ut CSV pair: its details rows, its result row (the commit mark),
then its run file line (``ut_identity``), all of them or none.

Each file is appended through its own descriptor (``O_APPEND | O_NOFOLLOW``, no Python buffer, so nothing
is left pending to be written later), with Ctrl-C/SIGTERM held for the duration. When a write fails (a
full disk, a quota, an I/O error), every file is cut back to the size it had after the last whole API, so
the CSVs end at a whole row and the run file records exactly their APIs; the run stops with one
:class:`DumpWriteError` naming the file that failed, the error, how many APIs the result CSV holds and how
to resume it (``-csv_path``), and every later write raises it again. A new pair that holds no API yet is
removed instead (its message says so: there is nothing to resume).
"""

from __future__ import annotations

import contextlib
import io
import os
import signal
import threading
from typing import Any, Iterable, Iterator, List, Optional, Sequence

from ptdbg_ascend import csv_cells
from ptdbg_ascend.errors import DumpWriteError
from ptdbg_ascend.fs.writes import remove_quietly, write_all
from ptdbg_ascend.precheck import ut_identity, ut_lock

RESULT_STEM = "accuracy_checking_result_"

# the signals that end a run: held while one API's rows are written (delivered right after)
_HELD_SIGNALS = frozenset(getattr(signal, name) for name in ("SIGINT", "SIGTERM") if hasattr(signal, name))


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """Block Ctrl-C/SIGTERM in the main thread for the duration (no-op elsewhere or without sigmask)."""
    if not hasattr(signal, "pthread_sigmask") or threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, _HELD_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def rows_text(rows: Iterable[Sequence[Any]]) -> str:
    """The CSV text of ``rows``, every cell through csv_cells (no cell a spreadsheet would run)."""
    buffer = io.StringIO(newline="")
    csv_cells.writer(buffer).writerows(rows)
    return buffer.getvalue()


class _Appended:
    """One file of the pair, open for appending: ``size`` is its length after the last whole API."""

    __slots__ = ("path", "descriptor", "size")

    def __init__(self, path: str) -> None:
        self.path = path
        try:
            self.descriptor = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
            self.size = os.fstat(self.descriptor).st_size
        except OSError as error:
            raise DumpWriteError(f"Cannot append to {path}: {error}") from None


class UtFiles:
    """The open result/details pair of one run (and its run file when ``chain`` is given), appended one
    API at a time by :meth:`write_api`; :meth:`close` closes them and releases the run's lock (``lock``,
    a ``ut_lock.RunLock``; None: not locked). ``apis``: the APIs the result CSV holds (a resumed run's
    included); ``new``: the pair was created by this run (default True). ``chain``: the run file's
    chain (``ut_identity.RowChain``; None, the default: the APIs are not recorded and the pair cannot be
    resumed)."""

    def __init__(self, result_path: str, details_path: str, tail: str, lock: Optional[ut_lock.RunLock] = None,
                 chain: Optional[ut_identity.RowChain] = None, apis: int = 0, new: bool = True) -> None:
        self.result_path, self.details_path, self.tail = result_path, details_path, tail
        self.identity_path = ut_identity.path_of(result_path, RESULT_STEM)
        self.lock, self.chain, self.apis, self.new = lock, chain, apis, new
        self._failure: Optional[DumpWriteError] = None
        self._closed = False
        self._files: List[_Appended] = []
        try:
            for path in [details_path, result_path] + ([self.identity_path] if chain is not None else []):
                self._files.append(_Appended(path))
        except BaseException:
            self._close_descriptors()
            raise

    def write_api(self, result_row: Sequence[Any], detail_rows: Iterable[Sequence[Any]]) -> None:
        """Append one API: its details rows, its result row, its run file line (DumpWriteError when a
        write fails: see the module doc)."""
        if self._failure is not None:
            raise self._failure
        details, result = rows_text(detail_rows), rows_text([result_row])
        parts = [details.encode("utf-8"), result.encode("utf-8")]
        chain_after = None
        if self.chain is not None:  # the rows as a resume will read them back
            row = ut_identity.as_read_back(result)[0]
            line, chain_after = self.chain.line(row[0], row, ut_identity.as_read_back(details))
            parts.append(line.encode("utf-8"))
        with signals_held():
            for target, data in zip(self._files, parts):
                try:
                    write_all(target.descriptor, data)
                except OSError as error:
                    raise self._fail(target.path, error, str(result_row[0]) if result_row else "") from None
        for target, data in zip(self._files, parts):
            target.size += len(data)
        if chain_after is not None:
            self.chain.accept(chain_after)
        self.apis += 1

    def _fail(self, path: str, error: OSError, api: str) -> DumpWriteError:
        """Cut every file back to its last whole API, and the error the run stops with."""
        uncut = []
        for target in self._files:
            try:
                os.ftruncate(target.descriptor, target.size)
            except OSError as cut_error:
                uncut.append(f"{target.path} ({cut_error})")
        if self.new and self.apis == 0:
            self.remove()
            kept = ("Nothing was kept: the new CSV pair held no API yet and is removed. Free space (or fix the cause) "
                    "and run again.")
        else:
            kept = ("The result CSV {} holds the {} API{} finished before it (their details rows too; nothing of {} "
                    "was kept). Free space (or fix the cause), then resume with -csv_path {}".format(
                        self.result_path, self.apis, "" if self.apis == 1 else "s", api, self.result_path))
            if uncut:
                kept += " (could not be cut back to the last whole API: {}; a resume drops what follows it)".format(
                    "; ".join(uncut))
        self._failure = DumpWriteError(f"Cannot write {path}: {error}. {kept}")
        return self._failure

    def _close_descriptors(self) -> None:
        for target in self._files:
            try:
                os.close(target.descriptor)
            except OSError:
                pass
        self._files = []

    def close(self) -> None:
        """Close the files and release the lock (idempotent)."""
        if self._closed:
            return
        self._closed = True
        try:
            self._close_descriptors()
        finally:
            if self.lock is not None:
                self.lock.release()

    def remove(self) -> None:
        """Close and delete a fresh pair that holds no API, with its run file and lock file (removed while
        still locked: with the CSVs gone there is nothing left for another run to take). Idempotent."""
        if self._closed:
            return
        self._close_descriptors()
        paths = [self.result_path, self.details_path, self.identity_path]
        if self.lock is not None and self.lock.held:
            paths.append(self.lock.path)
        for path in paths:
            remove_quietly(path)
        self.close()

