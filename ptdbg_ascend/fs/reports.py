"""Claiming a fresh report name: the compare's ``compare_result_{tail}.csv`` and the pre-check's CSV pairs are
created here, so two runs in one second (two processes included) never replace each other's reports. On the
ground floor: the compare (``comparison/reports``) and the pre-check (``precheck/csv_files``) both claim their
files through it, and neither imports the other for it."""

from __future__ import annotations

import os
from typing import IO, Sequence, Tuple

from ptdbg_ascend.errors import DumpWriteError
from ptdbg_ascend.fs.writes import FILE_MODE

MAX_SAME_SECOND = 1000  # reports of one stem in one directory before giving up


def claim_report(output_path: str, tail: str, others: Sequence[Tuple[str, str]], stem: str, extension: str = ".csv",
                 what: str = "the compare result") -> Tuple[str, str, IO[str]]:
    """Claim ``{stem}{tail}{extension}`` when free, else ``{stem}{tail}_1{extension}``, ``_2``... The file is created
    with ``O_EXCL`` (0640); a name is taken only when the files named ``{prefix}{tail}{extension}`` for each
    ``(prefix, extension)`` of ``others`` (``("advisor_", ".txt")``...) are free too. ``extension`` (default
    ".csv") and ``what`` (the messages' name of the file) serve other reports (compare_distributed's HTML index).
    Returns ``(tail, path, open text handle)``; a DumpWriteError when the directory cannot be written or every name
    is taken."""
    for number in range(MAX_SAME_SECOND):
        candidate = tail if number == 0 else f"{tail}_{number}"
        if any(os.path.lexists(os.path.join(output_path, prefix + candidate + extension))
               for prefix, extension in others):
            continue
        path = os.path.join(output_path, stem + candidate + extension)
        try:
            descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
        except FileExistsError:
            continue
        except OSError as error:
            raise DumpWriteError(f"Cannot write {what} {path}: {error}") from None
        return candidate, path, os.fdopen(descriptor, "w", newline="", encoding="utf-8")
    raise DumpWriteError("Cannot write {} in {}: {}{}{} and {} more of that name exist already.".format(
        what, output_path, stem, tail, extension, MAX_SAME_SECOND - 1))
