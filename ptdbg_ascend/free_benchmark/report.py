"""``{dump_path}/free_benchmark.csv``: one row per call whose perturbed run is beyond the standard.

The columns are msprobe 1.0.4's (``rank, pert_mode, stage, step, api_name, max_rel, dtype, shape, output_index``;
dtype and shape as 1.0.4 writes them, ``torch.bfloat16`` and ``torch.Size([4, 8])``; ``output_index`` empty for a
single output, the output's index otherwise, or the input's for a gradient), then two of ours: ``threshold`` (the
standard the call was held to) and ``code_line`` (the user's line that made the call).

Every rank appends to the one file, as 1.0.4: each row is one ``write`` on a descriptor opened with ``O_APPEND``,
so rows of several processes never interleave, and a kill loses at most the row being written. The file is
created whole with its header (a temporary file linked into place), so a second rank never writes a row before
the header. An existing file with another header is refused (its path named), never appended to.
"""

from __future__ import annotations

import csv
import io
import os
from typing import Any, List, NamedTuple, Optional

from ptdbg_ascend import csv_cells
from ptdbg_ascend.errors import DumpPathError
from ptdbg_ascend.fs.writes import own_dir, remove_quietly, temporary_beside, write_all

FILE_NAME = "free_benchmark.csv"
COLUMNS = ("rank", "pert_mode", "stage", "step", "api_name", "max_rel", "dtype", "shape", "output_index",
           "threshold", "code_line")
HEADER_LIMIT = 4096


class UnequalRow(NamedTuple):
    """One reported call (the CSV's columns)."""

    rank: int
    pert_mode: str
    stage: str
    step: int
    api_name: str
    max_rel: float
    dtype: str
    shape: str
    output_index: Optional[int]
    threshold: float
    code_line: str


def row_text(row: UnequalRow) -> str:
    buffer = io.StringIO()
    values: List[Any] = list(row)
    values[COLUMNS.index("output_index")] = "" if row.output_index is None else row.output_index
    csv_cells.writer(buffer, lineterminator="\n").writerow(values)
    return buffer.getvalue()


class CsvAppender:
    """Appends rows to ``{dump_path}/free_benchmark.csv`` (made, with its header, at the first row)."""

    def __init__(self, dump_path: str) -> None:
        self.path = os.path.join(dump_path, FILE_NAME)
        self._dump_path = dump_path
        self._descriptor: Optional[int] = None
        self.rows = 0

    def append(self, row: UnequalRow) -> None:
        if self._descriptor is None:
            self._descriptor = self._open()
        write_all(self._descriptor, row_text(row).encode("utf-8"))
        self.rows += 1

    def close(self) -> None:
        if self._descriptor is not None:
            os.close(self._descriptor)
            self._descriptor = None

    def _open(self) -> int:
        own_dir(self._dump_path)
        header = ",".join(COLUMNS) + "\n"
        if not os.path.lexists(self.path):
            descriptor, temporary = temporary_beside(self.path)
            try:
                write_all(descriptor, header.encode("utf-8"))
                os.close(descriptor)
                os.link(temporary, self.path)  # fails if another rank made it first: theirs is kept
            except FileExistsError:
                pass
            finally:
                remove_quietly(temporary)
        try:
            descriptor = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_NOFOLLOW)
        except OSError as error:
            raise DumpPathError(f"Cannot append to {self.path}: {error} (a symlink is never followed).") from None
        first = os.pread(descriptor, HEADER_LIMIT, 0).split(b"\n", 1)[0] + b"\n"
        if first != header.encode("utf-8"):
            os.close(descriptor)
            raise DumpPathError("{} holds another table (its first line is not the free_benchmark header {}). "
                                "Move it away or choose another dump_path.".format(self.path, header.strip()))
        return descriptor


def read_rows(path: str) -> List[dict]:
    """The rows of a free_benchmark.csv as dicts of text (for tests and tools; cells restored)."""
    with open(path, encoding="utf-8", newline="") as handle:
        return [csv_cells.restore_dict(row) for row in csv.DictReader(handle)]
