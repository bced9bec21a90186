"""Small CSV helpers shared by the pre-check: claim a pair of fresh report files, read a CSV by column
title with clear errors. The csv module only (pandas is a test extra, not a dependency).
"""

from __future__ import annotations

import csv
import os
import time
from typing import IO, Dict, List, Optional, Sequence, Tuple

from ptdbg_ascend import csv_cells
from ptdbg_ascend.errors import DumpPathError, DumpWriteError, FileFormatError, ParameterError
from ptdbg_ascend.fs.reports import claim_report
from ptdbg_ascend.fs.writes import FILE_MODE


def timestamp() -> str:
    """The ``{timestamp}`` of the report names: ``%Y%m%d%H%M%S`` local time, as msprobe 1.0.4."""
    return time.strftime("%Y%m%d%H%M%S")


def ensure_out_dir(out_path: str, parameter: str = "out_path") -> str:
    """``out_path`` as an existing directory (created if absent); a file there is a DumpPathError."""
    path = os.path.realpath(out_path or ".")
    if os.path.exists(path) and not os.path.isdir(path):
        raise DumpPathError(f"Invalid {parameter}={out_path!r}: a file is there, a directory is needed.")
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as error:
        raise DumpPathError(f"Invalid {parameter}={out_path!r}: cannot create the directory: {error}.") from None
    return path


def claim_pair(out_dir: str, first_stem: str, second_stem: str,
               tail: Optional[str] = None) -> Tuple[str, IO[str], str, IO[str]]:
    """Create two fresh CSVs ``{first_stem}{tail}.csv`` and ``{second_stem}{tail}.csv`` sharing one tail
    (``tail`` defaults to :func:`timestamp`; ``_1``, ``_2``... are appended when a name is taken, so two
    runs in one second never overwrite each other). Both are created with O_EXCL. Returns
    ``(first path, first handle, second path, second handle)``, open for writing text."""
    tail = tail or timestamp()
    while True:
        taken, first_path, first = claim_report(out_dir, tail, [(second_stem, ".csv")], first_stem)
        second_path = os.path.join(out_dir, second_stem + taken + ".csv")
        try:
            descriptor = os.open(second_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
        except FileExistsError:  # another process took it between the check and here: try the next name
            first.close()
            os.remove(first_path)
            tail = taken + "_x"
            continue
        except OSError as error:
            first.close()
            raise DumpWriteError(f"Cannot write {second_path}: {error}") from None
        return first_path, first, second_path, os.fdopen(descriptor, "w", newline="", encoding="utf-8")


def writer(handle: IO[str]) -> csv_cells.SafeWriter:
    """A csv writer for a file from :func:`claim_pair` (the dialect every pre-check CSV uses); text cells
    a spreadsheet would run get a ``'`` in front (:func:`ptdbg_ascend.csv_cells.safe_cell`)."""
    return csv_cells.writer(handle)


def read_rows(path: str, required: Sequence[str], parameter: str) -> List[Dict[str, str]]:
    """The rows of the CSV ``path`` as dicts by column title (a UTF-8 BOM is accepted), each cell as the
    text it stands for (the ``'`` run_ut put before a formula-like cell removed: csv_cells.restore_cell).

    Raises ParameterError naming ``parameter`` when ``path`` is not a file, FileFormatError naming the
    path when it is not a readable CSV or lacks a column of ``required``."""
    if not path or not os.path.isfile(path):
        raise ParameterError(parameter, path, "an existing CSV file (an accuracy_checking_details_{timestamp}.csv "
                                              "written by run_ut)")
    try:
        with open(path, newline="", encoding="utf-8-sig") as handle:
            reader = csv.DictReader(handle)
            header = reader.fieldnames
            if not header:
                raise FileFormatError(f"{path} is empty: a CSV with a header line is needed.")
            missing = [title for title in required if title not in header]
            if missing:
                raise FileFormatError("{} lacks the column(s) {}: is it an accuracy_checking_details CSV?"
                                      .format(path, ", ".join(repr(t) for t in missing)))
            rows = []
            for row in reader:
                if None in row:  # more cells than titles
                    raise FileFormatError(f"{path}, line {reader.line_num}: more cells than column titles.")
                rows.append(csv_cells.restore_dict(row))
            return rows
    except UnicodeDecodeError as error:
        raise FileFormatError(f"{path} is not UTF-8 text: {error}.") from None
    except csv.Error as error:
        raise FileFormatError(f"{path} is not a readable CSV: {error}.") from None
