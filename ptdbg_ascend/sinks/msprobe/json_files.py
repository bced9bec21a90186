"""Writing an msprobe directory's JSON files: each replaced atomically, a chunk at a time (a temporary file, then a
rename: a crash leaves the previous complete file), and a failed write tried again in the disk reserve's space."""

from __future__ import annotations

import os
from typing import Callable, List, Optional, Tuple

from ptdbg_ascend.errors import DumpWriteError
from ptdbg_ascend.formats.layout import CONSTRUCT_FILE, DUMP_FILE, STACK_FILE
from ptdbg_ascend.fs.writes import replace_text_file
from ptdbg_ascend.sinks.msprobe.json_text import JsonPieces
from ptdbg_ascend.sinks.msprobe.reserve import JsonReserve

# ``write(path, text)``: replace the file at ``path`` with ``text``; raises DumpWriteError.
WriteFile = Callable[[str, JsonPieces], None]
Texts = List[Tuple[str, JsonPieces]]  # (file name, text)


def write_atomic(path: str, text: JsonPieces) -> None:
    """Write ``text`` to ``path`` atomically, a chunk at a time (``fs.writes.replace_text_file``)."""
    replace_text_file(path, text.chunks())


def write_files(directory: str, texts: Texts, write: WriteFile = write_atomic) -> None:
    """Write each ``(file name, text)`` of ``texts`` in ``directory``, in order."""
    for name, text in texts:
        write(os.path.join(directory, name), text)


def write_with_reserve(directory: str, texts: Texts, space: JsonReserve, keep_reserve: bool,
                       write: WriteFile = write_atomic) -> Tuple[bool, Optional[str]]:
    """Write the files; one that fails is tried again in the reserve's space (given back for it). ``keep_reserve``:
    then grow the reserve for the next rewrite. Returns (whether the files were written, why something failed or
    None)."""
    try:
        try:
            write_files(directory, texts, write)
        except DumpWriteError:
            if not space.size:
                raise
            space.release()  # held for exactly this rewrite
            write_files(directory, texts, write)
    except DumpWriteError as error:
        return False, str(error)
    sizes = dict(texts)
    stack, construct = sizes.get(STACK_FILE), sizes.get(CONSTRUCT_FILE)
    space.written(len(sizes[DUMP_FILE]), stack and len(stack), construct and len(construct))
    if keep_reserve:
        try:
            space.ensure()
        except OSError as error:
            return True, space.error_text(error)
    return True, None
