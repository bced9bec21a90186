"""Why a legacy dump has no npy for a record: the writer's ``.ptdbg.no_npy`` in the npy directory
(``sinks/legacy/missing_npy.py``), one JSON line ``[record name, why]`` per record it left without its npy
(out of memory while copying the tensor). Compare puts the reason in the row of a record whose file is
missing, so "not found" says whether the dump never wrote it or it went missing since.

A file from someone else: read once per directory, through the same confinement as the tensor files (inside
the data directory, ``O_NOFOLLOW``, a regular file), at most :data:`MAX_BYTES`; a line that is not a pair of
strings is skipped; a reason is kept to :data:`MAX_REASON` characters. Torch-free.
"""

from __future__ import annotations

import json
import os
import stat
from typing import Dict, Optional

from ptdbg_ascend.formats.layout import NO_NPY_FILE
from ptdbg_ascend.log import logger

MAX_BYTES = 4 * 1024 * 1024
MAX_REASON = 400

# By the file's real path: (its size and mtime when read, the reasons by record name). Asked only for records
# whose file is missing; read again when the file changed (a directory dumped again).
_READ: Dict[str, Tuple[Tuple[int, int], Dict[str, str]]] = {}


def reason(data_dir: Optional[str], record: str) -> Optional[str]:
    """Why the dump wrote no tensor file for ``record`` (its record name) in ``data_dir``, as the writer noted
    it; None when it did not note any (the file was written, then lost, or never named)."""
    if not data_dir:
        return None
    path = os.path.join(os.path.realpath(data_dir), NO_NPY_FILE)
    try:
        status = os.lstat(path)
    except OSError:
        return None
    signature = (status.st_size, status.st_mtime_ns)
    known = _READ.get(path)
    if known is None or known[0] != signature:
        known = _READ[path] = (signature, _read(path))
    return known[1].get(record)


def _read(path: str) -> Dict[str, str]:
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:  # none (nothing was missing), or a link: nothing is taken from it
        return {}
    try:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            return {}
        data = os.read(descriptor, MAX_BYTES)
    except OSError:
        return {}
    finally:
        os.close(descriptor)
    reasons: Dict[str, str] = {}
    skipped = 0
    for line in data.split(b"\n"):
        if not line.strip():
            continue
        try:
            value = json.loads(line.decode("utf-8"))
        except (ValueError, UnicodeDecodeError):
            value = None
        if not (isinstance(value, list) and len(value) == 2 and all(isinstance(item, str) for item in value)):
            skipped += 1
            continue
        reasons.setdefault(value[0], value[1][:MAX_REASON])
    if skipped:
        logger.warning("Skipped {} line{} of {} that {} not [record name, reason].".format(
            skipped, "" if skipped == 1 else "s", path, "is" if skipped == 1 else "are"))
    return reasons
