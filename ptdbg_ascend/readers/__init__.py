"""Readers turn a dump (legacy ``.pkl`` + npy dir, or msprobe ``dump.json`` + ``dump_tensor_data``) into
:class:`~ptdbg_ascend.formats.records.CallRecord` lists, so nothing downstream knows the format."""

from __future__ import annotations

import os
from typing import List, Optional

from ptdbg_ascend.formats.records import CallRecord
from ptdbg_ascend.errors import FileFormatError
from ptdbg_ascend.formats.layout import is_dump_json


def read_dump(path: str, data_dir: Optional[str] = None, stack_path: Optional[str] = None,
              overflow_statistics: bool = False) -> List[CallRecord]:
    """Read a dump by its file type: ``*.json`` is msprobe dump.json, anything else a legacy pkl.

    ``data_dir`` (default None = summary only) is where the tensor files are; ``stack_path`` (msprobe
    only, default None) the stack.json; ``overflow_statistics`` (legacy only, default False) keeps the
    statistics of overflow records, which compare ignores.
    """
    if is_dump_json(path):
        from ptdbg_ascend.readers import msprobe_json

        check_dump_json_exists(path)

        return msprobe_json.read(path, data_dir, stack_path)
    from ptdbg_ascend.readers import legacy_pkl

    return legacy_pkl.read(path, data_dir, overflow_statistics)


def check_dump_json_exists(path: str, what: str = "Dump file") -> None:
    """A missing dump.json whose directory shows a killed run (its lock, tensor files written before the
    step's first flush) is a FileFormatError saying so (``readers/dump_state.missing_dump_note``);
    ``what`` starts the message. A dump.json that exists, or a missing one in a directory without those
    marks, passes (the reader says what is wrong with it)."""
    if os.path.lexists(path):
        return
    from ptdbg_ascend.readers.dump_state import missing_dump_note

    note = missing_dump_note(path)
    if note:
        raise FileFormatError(f"{what} {path} does not exist: {note}")
