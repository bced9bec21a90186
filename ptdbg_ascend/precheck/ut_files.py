"""The files of one ``run_ut``: the result/details CSV pair (new, or resumed), written line by line, and
the error data of failing APIs.

Write order, per API: its details rows, then its result row, each followed by a flush; the result row is
the commit mark of the API. A run killed at any moment therefore leaves (a) result rows of finished APIs
only, (b) perhaps the details rows of the API in flight and (c) perhaps a half-written last line. Resuming
(:func:`resume_pair`) drops a torn last line, and the details rows of APIs without a result row, so the
resumed run appends exactly what an uninterrupted run would have written.

Cells go through :mod:`ptdbg_ascend.csv_cells`: written with a ``'`` before text a spreadsheet would run
(an API name or message from the dump starting with ``=``...), read back without it, so a resume and the
summary see the text the run produced.
"""

from __future__ import annotations

import csv
import io
import os
import re
from typing import IO, Any, Iterable, List, Optional, Sequence, Set, Tuple

from ptdbg_ascend import csv_cells
from ptdbg_ascend.errors import DumpPathError, FileFormatError, ParameterError
from ptdbg_ascend.precheck import columns as col
from ptdbg_ascend.precheck import csv_files
from ptdbg_ascend.writers.safe_fs import replace_file, write_all

RESULT_STEM = "accuracy_checking_result_"
DETAILS_STEM = "accuracy_checking_details_"
ERROR_DATA_STEM = "ut_error_data"
BOM = "\ufeff"  # 1.0.4 writes its CSVs as utf-8-sig (Excel shows the Chinese titles)
_ROW_NAME = re.compile(r"^(?P<api>.+)\.(forward|backward)\.output\.\d+$")


class UtFiles(object):
    """The open result/details pair; :meth:`write_api` appends one API and flushes."""

    def __init__(self, result_path: str, result: IO[str], details_path: str, details: IO[str], tail: str) -> None:
        self.result_path, self.details_path, self.tail = result_path, details_path, tail
        self._result, self._details = result, details
        self._result_writer, self._details_writer = csv_cells.writer(result), csv_cells.writer(details)

    def write_api(self, result_row: Sequence[Any], detail_rows: Iterable[Sequence[Any]]) -> None:
        for row in detail_rows:
            self._details_writer.writerow(row)
        self._details.flush()
        self._result_writer.writerow(result_row)
        self._result.flush()

    def close(self) -> None:
        self._result.close()
        self._details.close()


def new_pair(out_dir: str) -> UtFiles:
    """Claim ``accuracy_checking_result_{ts}.csv`` + ``accuracy_checking_details_{ts}.csv`` (same tail,
    ``_1``... when taken, created with O_EXCL) and write the header lines."""
    result_path, result, details_path, details = csv_files.claim_pair(out_dir, RESULT_STEM, DETAILS_STEM)
    tail = os.path.basename(result_path)[len(RESULT_STEM):-len(".csv")]
    for handle, header in ((result, col.RESULT_COLUMNS), (details, col.DETAIL_COLUMNS)):
        handle.write(BOM)
        csv_cells.writer(handle).writerow(header)
        handle.flush()
    return UtFiles(result_path, result, details_path, details, tail)


def details_path_of(result_csv_path: str) -> str:
    """The details CSV that belongs to a result CSV (``result`` -> ``details`` in the file name)."""
    name = os.path.basename(result_csv_path)
    return os.path.join(os.path.dirname(result_csv_path), DETAILS_STEM + name[len(RESULT_STEM):])


def check_resumable(result_csv_path: str) -> Tuple[str, str]:
    """``(result path, details path)`` of a run to resume; ParameterError naming ``result_csv_path`` when
    it is not an existing ``accuracy_checking_result_*.csv`` with its details CSV beside it."""
    allowed = ("an existing accuracy_checking_result_{timestamp}.csv written by run_ut, with its "
               "accuracy_checking_details_{timestamp}.csv beside it")
    if not isinstance(result_csv_path, str) or not os.path.isfile(result_csv_path):
        raise ParameterError("result_csv_path", result_csv_path, allowed)
    name = os.path.basename(result_csv_path)
    if not (name.startswith(RESULT_STEM) and name.endswith(".csv")):
        raise ParameterError("result_csv_path", result_csv_path, allowed, "Keep the file name run_ut gave it.")
    details = details_path_of(result_csv_path)
    if not os.path.isfile(details):
        raise ParameterError("result_csv_path", result_csv_path, allowed, "{} is missing.".format(details))
    _check_header(result_csv_path, col.RESULT_COLUMNS)
    _check_header(details, col.DETAIL_COLUMNS)
    return os.path.abspath(result_csv_path), os.path.abspath(details)


def _read_text(path: str) -> str:
    try:
        with open(path, encoding="utf-8-sig", newline="") as handle:
            return handle.read()
    except (OSError, UnicodeDecodeError) as error:
        raise FileFormatError("Cannot read {}: {}".format(path, error)) from None


def _check_header(path: str, header: Sequence[str]) -> None:
    try:
        with open(path, encoding="utf-8-sig", newline="") as handle:
            first = handle.readline().rstrip("\r\n")  # the header line only, not the whole file
    except (OSError, UnicodeDecodeError) as error:
        raise FileFormatError("Cannot read {}: {}".format(path, error)) from None
    if csv_cells.restore_row(next(csv.reader([first]), [])) != list(header):
        raise FileFormatError("{} does not start with the run_ut header line ({}...): not a run_ut CSV of this "
                              "version.".format(path, ", ".join(header[:3])))


def _complete_rows(path: str) -> List[List[str]]:
    """The CSV's rows after the header, without a torn last line (text after the last newline); cells
    as the text they stand for (csv_cells.restore_cell)."""
    text = _read_text(path)
    if not text.endswith("\n"):
        text = text[:text.rfind("\n") + 1]  # a half-written last line: the API in flight when killed
    try:
        rows = list(csv.reader(io.StringIO(text)))
    except csv.Error as error:
        raise FileFormatError("{} is not a readable CSV: {}".format(path, error)) from None
    return [csv_cells.restore_row(row) for row in rows[1:]]


def api_of_row(name: str) -> str:
    """``Functional.linear.0.forward.output.1`` -> ``Functional.linear.0``."""
    match = _ROW_NAME.match(name)
    return match.group("api") if match else name


def resume_pair(result_csv_path: str) -> Tuple[UtFiles, Set[str]]:
    """Reopen an interrupted run for appending; returns the files and the APIs already done. Both CSVs
    are first rewritten (atomically) without a torn last line and without details rows of unfinished
    APIs."""
    result_path, details_path = check_resumable(result_csv_path)
    results = [row for row in _complete_rows(result_path) if row]
    done = {row[0] for row in results}
    details = [row for row in _complete_rows(details_path) if row and api_of_row(row[0]) in done]
    rewrite_csv(result_path, col.RESULT_COLUMNS, results)
    rewrite_csv(details_path, col.DETAIL_COLUMNS, details)
    tail = os.path.basename(result_path)[len(RESULT_STEM):-len(".csv")]
    result = open(result_path, "a", newline="", encoding="utf-8")
    details_handle = open(details_path, "a", newline="", encoding="utf-8")
    return UtFiles(result_path, result, details_path, details_handle, tail), done


def rewrite_csv(path: str, header: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    """Replace ``path`` atomically with ``header`` and ``rows`` (utf-8 with a BOM, as run_ut writes; cells
    through csv_cells.safe_cell, so ``rows`` hold the text as read by :func:`read_results`)."""
    buffer = io.StringIO(newline="")
    buffer.write(BOM)
    writer = csv_cells.writer(buffer)
    writer.writerow(header)
    writer.writerows(rows)
    data = buffer.getvalue().encode("utf-8")
    replace_file(path, lambda descriptor: write_all(descriptor, data), "the run_ut CSV")


def read_results(files: UtFiles) -> Tuple[List[List[str]], List[List[str]]]:
    """(result rows, details rows) of the pair as written so far (headers left out)."""
    return _complete_rows(files.result_path), _complete_rows(files.details_path)


# --- error data ---------------------------------------------------------------------------------------

def error_data_dir(error_data_path: str, tail: str) -> str:
    """``{error_data_path}/ut_error_data{tail}`` (created); ``error_data_path`` must exist."""
    if not isinstance(error_data_path, str) or not os.path.isdir(error_data_path):
        raise ParameterError("error_data_path", error_data_path, "must be an existing directory (save_error_data "
                                                                 "writes the failing APIs' data under it)")
    path = os.path.join(os.path.realpath(error_data_path), ERROR_DATA_STEM + tail)
    if os.path.islink(path) or (os.path.exists(path) and not os.path.isdir(path)):
        raise DumpPathError("Cannot write the error data into {}: something else than a directory is there."
                            .format(path))
    os.makedirs(path, mode=0o750, exist_ok=True)
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
