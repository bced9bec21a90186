"""Where ``ptdbg convert`` finds a dump: one rank's files (:func:`locate`), or the ranks of a tag or step
directory (:func:`plan`); and what a conversion returns (:class:`ConvertResult`)."""

from __future__ import annotations

import glob
import os
from typing import Dict, List, NamedTuple, Optional, Tuple

from ptdbg_ascend.errors import FileFormatError, ParameterError
from ptdbg_ascend.formats import layout


class DumpFiles(NamedTuple):
    """Where one rank's dump lives. ``kind`` is "legacy" (pkl + npy dir) or "msprobe" (dump.json,
    stack.json, dump_tensor_data); a missing optional part is None."""

    kind: str
    metadata: str
    data_dir: Optional[str]
    stack: Optional[str]


def locate(path: str) -> DumpFiles:
    """Find the dump in ``path``: a ``.pkl`` file, a ``dump.json`` file, or a rank directory holding one."""
    if os.path.isdir(path):
        if os.path.isfile(layout.dump_file(path)):
            return locate(layout.dump_file(path))
        pkls = sorted(glob.glob(os.path.join(path, "*" + layout.PKL_SUFFIX)))
        if len(pkls) != 1:
            raise ParameterError("source", path, "a rank directory with dump.json or exactly one .pkl (found {} .pkl)"
                                 .format(len(pkls)), "Pass the .pkl file itself.")
        return locate(pkls[0])
    if not os.path.isfile(path):
        raise FileFormatError(f"Dump {path} does not exist.")
    directory = os.path.dirname(path)
    if path.endswith(layout.PKL_SUFFIX):
        data_dir = layout.npy_dir(path)
        return DumpFiles("legacy", path, data_dir if os.path.isdir(data_dir) else None, None)
    if layout.is_dump_json(path):
        data_dir = layout.tensor_dir(directory)
        stack = layout.stack_file(directory)
        return DumpFiles("msprobe", path, data_dir if os.path.isdir(data_dir) else None,
                         stack if os.path.isfile(stack) else None)
    raise ParameterError("source", path, "a .pkl file, a dump.json file or a rank directory")


class ConvertResult(NamedTuple):
    """What was written: the metadata file (the first rank's in a tree), the number of tensor files, the
    dropped values by kind, and every metadata file written."""

    metadata: str
    tensor_files: int
    dropped: Dict[str, int]
    written: Tuple[str, ...] = ()


def plan(source: str) -> List[Tuple[DumpFiles, str]]:
    """``(dump, directory relative to the target)`` for one rank, or for every ``rank*`` directory of a
    legacy tag directory (-> ``step0/rank{R}``) or an msprobe step directory (-> ``rank{R}``)."""
    if os.path.isdir(source) and not os.path.isfile(layout.dump_file(source)) \
            and not glob.glob(os.path.join(source, "*" + layout.PKL_SUFFIX)):
        ranks = sorted((entry for entry in os.listdir(source)
                        if layout.RANK_DIR.match(entry) and os.path.isdir(os.path.join(source, entry))),
                       key=lambda entry: int(layout.RANK_DIR.match(entry).group(1) or 0))
        if ranks:
            plan = []
            for rank in ranks:
                files = locate(os.path.join(source, rank))
                relative = os.path.join("step0", rank) if files.kind == "legacy" else (rank if rank != "rank" else "rank0")
                plan.append((files, relative))
            if len({files.kind for files, _ in plan}) != 1:
                raise ParameterError("source", source, "rank directories of one format (found both pkl and dump.json)")
            return plan
    return [(locate(source), "")]
