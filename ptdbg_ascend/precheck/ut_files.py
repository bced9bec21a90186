"""The files of one ``run_ut``: the result/details CSV pair (new, or resumed), written line by line, and
the error data of failing APIs.

Write order, per API (``ut_commit``): its details rows, then its result row, then its run file line, each
written through to the kernel; the result row is the commit mark of the API. A run killed at any moment
therefore leaves (a) result rows of finished APIs only, (b) perhaps the details rows of the API in flight and
(c) perhaps a half-written last line. Resuming (:func:`resume_pair`) drops a torn last line, and the details
rows of APIs without a result row, so the resumed run appends exactly what an uninterrupted run would have
written. A signal that stops the run (Ctrl-C, SIGTERM) is held while one API's rows are written, so an
interrupted run leaves whole APIs; a write that fails (a full disk) cuts the files back to the last whole
API and stops the run with one error naming the file and the CSV to resume.

A run linked to a compare (``compare_csv``) writes the result CSV with the Compare Link column after
1.0.4's four, each row with its cell; a resume rewrites the pair once, with or without that column as the
resumed run links or not (:func:`read_pair`, then :func:`resume_pair`).

Cells go through :mod:`ptdbg_ascend.csv_cells`: written with a ``'`` before text a spreadsheet would run
(an API name or message from the dump starting with ``=``...), read back without it, so a resume and the
summary see the text the run produced.

Beside the pair: ``accuracy_checking_run_{tail}.jsonl`` (``ut_identity``: which dump.json the rows belong to,
and a chain digest of the APIs committed, appended after each API's result row; checked on resume) and the
hidden lock file ``.accuracy_checking_result_{tail}.csv.lock`` (``ut_lock``: one
writer at a time, held until :meth:`UtFiles.close`). A resumed CSV must be a regular file (never a link).
"""

from __future__ import annotations

import csv
import io
import os
import stat
import tempfile
from typing import Any, List, Optional, Sequence, Tuple

from ptdbg_ascend import csv_cells
from ptdbg_ascend.errors import DumpPathError, DumpWriteError, FileFormatError, ParameterError
from ptdbg_ascend.formats.naming import ut_api_of_row
from ptdbg_ascend.precheck import columns as col
from ptdbg_ascend.precheck import csv_files, ut_identity, ut_lock
from ptdbg_ascend.precheck.ut_commit import UtFiles
from ptdbg_ascend.fs.writes import remove_quietly, replace_file, replace_text_file, write_all

RESULT_STEM = "accuracy_checking_result_"
DETAILS_STEM = "accuracy_checking_details_"
ERROR_DATA_STEM = "ut_error_data"
BOM = "\ufeff"  # 1.0.4 writes its CSVs as utf-8-sig (Excel shows the Chinese titles)


def result_header(linked: bool) -> List[str]:
    """The result CSV's titles: 1.0.4's four, then the Compare Link column when ``linked``."""
    return col.RESULT_COLUMNS + [col.LINK_COLUMN] if linked else list(col.RESULT_COLUMNS)


def new_pair(out_dir: str, identity: Optional[ut_identity.RunIdentity] = None, linked: bool = False) -> UtFiles:
    """Claim ``accuracy_checking_result_{ts}.csv`` + ``accuracy_checking_details_{ts}.csv`` (same tail,
    ``_1``... when taken, created with O_EXCL), take their lock, write the header lines and the run file
    ``accuracy_checking_run_{ts}.jsonl`` of ``identity`` (None: no run file; such a pair cannot be resumed).
    ``linked`` (default False): the result CSV has the Compare Link column (each result row then carries
    its cell). A write that fails (a full disk) removes what was made: DumpWriteError naming the file."""
    try:
        result_path, result, details_path, details = csv_files.claim_pair(out_dir, RESULT_STEM, DETAILS_STEM)
    except DumpWriteError as error:
        raise DumpWriteError(f"{error}. Nothing was written.") from None
    tail = os.path.basename(result_path)[len(RESULT_STEM):-len(".csv")]
    identity_path = ut_identity.path_of(result_path, RESULT_STEM)
    lock: Optional[ut_lock.RunLock] = None
    writing = result_path
    try:
        try:
            lock = ut_lock.acquire(result_path, parameter="out_path")
            for path, handle, header in ((result_path, result, result_header(linked)),
                                         (details_path, details, col.DETAIL_COLUMNS)):
                writing = path
                handle.write(BOM)
                csv_cells.writer(handle).writerow(header)
                handle.flush()
        finally:
            for handle in (result, details):
                try:
                    handle.close()
                except OSError:  # what the failed flush left: the files are removed below
                    pass
        writing = identity_path
        chain = ut_identity.write(identity_path, identity, tail) if identity is not None else None
        return UtFiles(result_path, details_path, tail, lock, chain, apis=0, new=True)
    except BaseException as error:
        for path in (result_path, details_path, identity_path):
            remove_quietly(path)
        if lock is not None:
            if lock.held:
                remove_quietly(lock.path)
            lock.release()
        if isinstance(error, DumpWriteError):
            raise DumpWriteError("{}. Nothing was written: the new CSV pair is removed. Free space (or fix the "
                                 "cause) and run again.".format(error)) from None
        if isinstance(error, OSError):
            raise DumpWriteError("Cannot write {}: {}. Nothing was written: the new CSV pair is removed. Free space "
                                 "(or fix the cause) and run again.".format(writing, error)) from None
        raise


def details_path_of(result_csv_path: str) -> str:
    """The details CSV that belongs to a result CSV (``result`` -> ``details`` in the file name)."""
    name = os.path.basename(result_csv_path)
    return os.path.join(os.path.dirname(result_csv_path), DETAILS_STEM + name[len(RESULT_STEM):])


def check_resumable(result_csv_path: str, extra_result_columns: Sequence[str] = ()) -> Tuple[str, str]:
    """``(result path, details path)`` of a run to resume; ParameterError naming ``result_csv_path`` when
    it is not an existing ``accuracy_checking_result_*.csv`` with its details CSV beside it, both regular
    files (a symlink, even to a good CSV, or a FIFO is refused before anything is opened). Only reads (the
    header lines). ``extra_result_columns``: titles the result header may have after 1.0.4's (default ():
    none; the Compare Link column)."""
    allowed = ("an existing accuracy_checking_result_{timestamp}.csv written by run_ut, with its "
               "accuracy_checking_details_{timestamp}.csv beside it")
    if not isinstance(result_csv_path, str) or not result_csv_path:
        raise ParameterError("result_csv_path", result_csv_path, allowed)
    name = os.path.basename(result_csv_path)
    if not (name.startswith(RESULT_STEM) and name.endswith(".csv")):
        raise ParameterError("result_csv_path", result_csv_path, allowed, "Keep the file name run_ut gave it.")
    details = details_path_of(result_csv_path)
    for path in (result_csv_path, details):
        _check_regular(path, result_csv_path, allowed)
    _check_header(result_csv_path, col.RESULT_COLUMNS, extra_result_columns)
    _check_header(details, col.DETAIL_COLUMNS)
    return os.path.abspath(result_csv_path), os.path.abspath(details)


def _check_regular(path: str, result_csv_path: str, allowed: str) -> None:
    """``path`` is a regular file, not a link (``lstat``: nothing is opened)."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        raise ParameterError("result_csv_path", result_csv_path, allowed, f"{path} does not exist.") from None
    except OSError as error:
        raise ParameterError("result_csv_path", result_csv_path, allowed, f"{path}: {error}.") from None
    if stat.S_ISLNK(mode):
        raise ParameterError("result_csv_path", result_csv_path, allowed + ", both regular files",
                             "{} is a symlink (to {}); a resume rewrites the CSVs and never does so through a link: "
                             "pass the file itself.".format(path, os.readlink(path)))
    if not stat.S_ISREG(mode):
        kind = "a directory" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode) else "not a regular file"
        raise ParameterError("result_csv_path", result_csv_path, allowed + ", both regular files",
                             f"{path} is {kind}.")


def check_identity(result_csv_path: str, identity: ut_identity.RunIdentity) -> None:
    """The run file beside ``result_csv_path`` was written for it and records ``identity``
    (``ut_identity.check``; only reads its first line)."""
    ut_identity.check(ut_identity.path_of(result_csv_path, RESULT_STEM), result_csv_path, identity, RESULT_STEM)


def verify_rows(result_csv_path: str, results: Sequence[Sequence[str]],
                details: Sequence[Sequence[str]]) -> Tuple[int, List[str]]:
    """``(APIs kept, run file lines kept)``: the rows :func:`read_pair` gave are the ones the run file
    records (``ut_identity.verify_rows``)."""
    return ut_identity.verify_rows(ut_identity.path_of(result_csv_path, RESULT_STEM), result_csv_path, results,
                                   details)


def _whole_lines_text(path: str) -> str:
    """The text of ``path`` up to its last newline. A half-written last line (the API in flight when the
    run was killed) is dropped as bytes, before decoding: a kill can cut it inside a multi-byte character."""
    try:
        with open(path, "rb") as handle:
            data = handle.read()
        return data[:data.rfind(b"\n") + 1].decode("utf-8-sig")
    except (OSError, UnicodeDecodeError) as error:
        raise FileFormatError(f"Cannot read {path}: {error}") from None


def _check_header(path: str, header: Sequence[str], extra: Sequence[str] = ()) -> List[str]:
    """The titles of ``path``'s header line, once they are ``header`` (+ ``extra``); FileFormatError else."""
    try:
        with open(path, encoding="utf-8-sig", newline="") as handle:
            first = handle.readline().rstrip("\r\n")  # the header line only, not the whole file
    except (OSError, UnicodeDecodeError) as error:
        raise FileFormatError(f"Cannot read {path}: {error}") from None
    titles = csv_cells.restore_row(next(csv.reader([first]), []))
    if titles != list(header) and titles != list(header) + list(extra):
        raise FileFormatError("{} does not start with the run_ut header line ({}...): not a run_ut CSV of this "
                              "version.".format(path, ", ".join(header[:3])))
    return titles


def _complete_rows(path: str) -> List[List[str]]:
    """The CSV's rows after the header, without a torn last line (text after the last newline); cells
    as the text they stand for (csv_cells.restore_cell)."""
    text = _whole_lines_text(path)
    try:
        rows = list(csv.reader(io.StringIO(text)))
    except csv.Error as error:
        raise FileFormatError(f"{path} is not a readable CSV: {error}") from None
    return [csv_cells.restore_row(row) for row in rows[1:]]


def read_pair(result_csv_path: str) -> Tuple[List[List[str]], List[List[str]]]:
    """What an interrupted run holds: ``(result rows, details rows)`` without a torn last line, without the
    details rows of APIs that have no result row, and result rows without their Compare Link cell (a
    linked run's: the link is written again by a run that links). Cells as the text they stand for."""
    result_path, details_path = check_resumable(result_csv_path, extra_result_columns=(col.LINK_COLUMN,))
    linked = len(_check_header(result_path, col.RESULT_COLUMNS, (col.LINK_COLUMN,))) > len(col.RESULT_COLUMNS)
    width = len(col.RESULT_COLUMNS)
    results = [row[:width] if linked else row for row in _complete_rows(result_path) if row]
    done = {row[0] for row in results}
    details = [row for row in _complete_rows(details_path) if row and ut_api_of_row(row[0]) in done]
    return results, details


def resume_pair(result_csv_path: str, results: Sequence[Sequence[str]], details: Sequence[Sequence[str]],
                lock: Optional[ut_lock.RunLock] = None, linked: bool = False,
                run_file_lines: Sequence[str] = ()) -> UtFiles:
    """Reopen an interrupted run for appending: both CSVs are first rewritten (atomically) with the rows
    :func:`read_pair` gave (``results`` with their Compare Link cell when ``linked``, default False), and
    the run file with ``run_file_lines`` (those :func:`verify_rows` kept; default (): the run file is left
    alone and not appended to). ``lock``: the run's lock, already held (``ut_lock.acquire``); the files
    release it on close."""
    result_path, details_path = os.path.abspath(result_csv_path), details_path_of(os.path.abspath(result_csv_path))
    rewrite_csv(result_path, result_header(linked), results)
    rewrite_csv(details_path, col.DETAIL_COLUMNS, details)
    tail = os.path.basename(result_path)[len(RESULT_STEM):-len(".csv")]
    chain = None
    if run_file_lines:
        chain = ut_identity.write(ut_identity.path_of(result_path, RESULT_STEM), None, tail, run_file_lines)
    return UtFiles(result_path, details_path, tail, lock, chain, apis=len(results), new=False)


def rewrite_csv(path: str, header: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    """Replace ``path`` atomically with ``header`` and ``rows`` (utf-8 with a BOM, as run_ut writes; cells
    through csv_cells.safe_cell, so ``rows`` hold the text as read by :func:`read_pair`)."""
    buffer = io.StringIO(newline="")
    buffer.write(BOM)
    writer = csv_cells.writer(buffer)
    writer.writerow(header)
    writer.writerows(rows)
    replace_text_file(path, [buffer.getvalue()], "the run_ut CSV")


# --- error data ---------------------------------------------------------------------------------------

ERROR_DATA_ALLOWED = "must be an existing directory (save_error_data writes the failing APIs' data under it)"


def check_error_data_path(error_data_path: Any, defaulted: bool = False) -> str:
    """``error_data_path`` as given, once it is an existing directory this process can write: a
    temporary directory is really created in it and removed (permission bits say nothing to root, nor
    about a read-only mount). ParameterError naming ``error_data_path`` otherwise; ``defaulted``: the
    value is the output directory (error_data_path not given), which the message says."""
    hint = "(error_data_path not given: the output directory is used)" if defaulted else None
    if not isinstance(error_data_path, str) or not os.path.isdir(error_data_path):
        raise ParameterError("error_data_path", error_data_path, ERROR_DATA_ALLOWED, hint)
    try:
        probe = tempfile.mkdtemp(prefix=".ptdbg_write_check_", dir=error_data_path)
        os.rmdir(probe)
    except OSError as error:
        raise ParameterError("error_data_path", error_data_path, "must be a directory this process can write "
                             "(save_error_data writes the failing APIs' data under it)",
                             "Creating a directory in it failed: {}.{}".format(
                                 error.strerror or error, " " + hint if hint else "")) from None
    return error_data_path


def error_data_dir(error_data_path: str, tail: str) -> str:
    """``{error_data_path}/ut_error_data{tail}`` (created); ``error_data_path`` must exist."""
    if not isinstance(error_data_path, str) or not os.path.isdir(error_data_path):
        raise ParameterError("error_data_path", error_data_path, ERROR_DATA_ALLOWED)
    path = os.path.join(os.path.realpath(error_data_path), ERROR_DATA_STEM + tail)
    if os.path.islink(path) or (os.path.exists(path) and not os.path.isdir(path)):
        raise DumpPathError(f"Cannot write the error data into {path}: something else than a directory is there.")
    try:
        os.makedirs(path, mode=0o750, exist_ok=True)
    except OSError as error:
        raise DumpWriteError(f"Cannot create the error data directory {path}: {error}") from None
    return path


def save_tensor(directory: str, name: str, value: Any) -> Optional[str]:
    """Write one tensor as ``{directory}/{name}.pt`` (atomically, never through a link); non-tensors
    are not written. Returns the path, None when nothing was written."""
    import torch

    if not isinstance(value, torch.Tensor):
        return None
    path = os.path.join(directory, name + ".pt")
    tensor = value.detach().cpu().contiguous()

    def write(descriptor: int) -> None:
        buffer = io.BytesIO()
        torch.save(tensor, buffer)
        write_all(descriptor, buffer.getbuffer())

    replace_file(path, write, "the error data file")
    return path
