"""Confined reads: a file named by a dump (an npy, a .pt) is read only when it resolves inside the
directory the user gave and is a regular file; tensors are loaded through the sized readers of
``fs/tensor_files.py`` under a memory limit (``$PTDBG_MAX_TENSOR_BYTES``, else a quarter of the memory
available)."""

from __future__ import annotations

import os
import stat
from typing import Optional

import numpy as np


class OutsideRoot(ValueError):
    """A data file that is not read: it resolves outside the directory the user gave, or it is not a
    regular file (:func:`resolve_inside`, :func:`open_inside`)."""


def resolve_inside(path: str, root: str, what: str = "the data directory") -> str:
    """``path`` resolved (``os.path.realpath``: every symlink followed), which must lie inside the resolved
    ``root``; ``what`` names ``root`` in the message (default "the data directory").

    :raises OutsideRoot: (a ValueError) it resolves to a place outside ``root``.
    """
    real = os.path.realpath(path)
    real_root = os.path.realpath(root)
    if os.path.commonpath([real, real_root]) != real_root:
        raise OutsideRoot(f"{path} resolves to {real}, outside {what} {root}; it is not read")
    return real


def open_inside(path: str, root: Optional[str] = None):
    """``path`` opened for binary reading, after resolving it (``os.path.realpath``): with ``root`` (the
    data directory the user gave) the resolved file must lie inside the resolved ``root``; it must be a
    regular file (a FIFO would block). The resolved path itself is opened (``O_NOFOLLOW``), so what was
    checked is what is read.

    :raises OutsideRoot: (a ValueError) the file lies outside ``root`` or is not a regular file.
    :raises OSError: it cannot be opened (FileNotFoundError when missing).
    """
    real = resolve_inside(path, root) if root is not None else os.path.realpath(path)
    descriptor = os.open(real, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    try:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            raise OutsideRoot(f"{path} is not a regular file; it is not read")
        return os.fdopen(descriptor, "rb")
    except BaseException:
        os.close(descriptor)
        raise


def load_tensor(path: str, root: Optional[str] = None, max_bytes: Optional[int] = None) -> np.ndarray:
    """Load a dumped tensor: ``.npy`` with allow_pickle=False, ``.pt`` with torch (lazily) and
    ``weights_only=True`` only: a file holding other Python objects, or a torch too old to load without
    unpickling code, is refused, never worked around. ``root`` (default None): the directory the file must
    lie inside (:func:`open_inside`). ``max_bytes`` (default None: :func:`ptdbg_ascend.memory.default_budget`):
    the memory the tensor may take, checked from the file's header before anything is allocated
    (``tensor_files``). Refusals are ValueErrors whose message names the file.
    """
    from ptdbg_ascend.fs import tensor_files

    limit = _default_read_limit() if max_bytes is None else max_bytes
    with open_inside(path, root) as handle:
        if not path.endswith(".pt"):
            return tensor_files.load_npy(handle, path, limit)
        tensor = tensor_files.load_pt(handle, path, limit)
    from ptdbg_ascend.numpy_view import tensor_to_numpy

    return tensor_to_numpy(tensor)  # bf16, float8, complex32 widened exactly, as the npy files


_READ_LIMIT = []  # the default read limit, computed once per process (reading /proc for every file costs)
READ_LIMIT_VARIABLE = "PTDBG_MAX_TENSOR_BYTES"


def _default_read_limit() -> int:
    """The memory one tensor file may take when read: ``$PTDBG_MAX_TENSOR_BYTES`` (``"16G"``, bytes...)
    when set, else :func:`ptdbg_ascend.memory.default_budget` (a quarter of the memory available)."""
    if not _READ_LIMIT:
        from ptdbg_ascend.memory import default_budget, parse_size

        value = os.environ.get(READ_LIMIT_VARIABLE)
        _READ_LIMIT.append(parse_size(READ_LIMIT_VARIABLE, value) if value else default_budget())
    return _READ_LIMIT[0]
