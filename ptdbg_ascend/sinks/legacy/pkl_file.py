"""The files a legacy pkl writer starts from: its directories owned, a fresh run's old pkl and npy directory
removed, and the pkl opened for appending, never through a link."""

from __future__ import annotations

import errno
import os
import shutil
from typing import Optional, Tuple

from ptdbg_ascend.errors import DumpPathError, DumpWriteError
from ptdbg_ascend.fs.writes import FILE_MODE, open_new, own_dir, own_dirs


def open_pkl(pkl_path: str, npy_dir: Optional[str], fresh: bool, own_levels: int) -> Tuple[int, int]:
    """Open ``pkl_path`` for appending: ``(descriptor, size)``. ``fresh`` True deletes an existing pkl and
    ``npy_dir`` of the same names first; ``own_levels`` innermost directories of the pkl are owned (see
    :class:`LegacyPklWriter`). Raises DumpPathError for a link or directory in the way, DumpWriteError
    when the file cannot be created."""
    parent = os.path.dirname(os.path.abspath(pkl_path))
    # The directories this writer owns (the pkl's ``own_levels`` innermost ones and the npy dir) are
    # created, or checked with lstat: a symlink there is a DumpPathError, never followed.
    own_dirs(parent, own_levels)
    try:
        if fresh:
            if os.path.islink(pkl_path) or os.path.isdir(pkl_path):
                raise DumpPathError(f"The dump file {pkl_path} is a symlink or a directory; remove it first.")
            if os.path.exists(pkl_path):
                os.remove(pkl_path)
            if npy_dir is not None and os.path.isdir(npy_dir) and not os.path.islink(npy_dir):
                shutil.rmtree(npy_dir)
        if npy_dir is not None:
            own_dir(npy_dir)
        # A raw descriptor in append mode: each call's lines go out in one os.write, so they reach
        # the kernel (and survive a killed process) without a Python buffer to flush. Never through
        # a link; a fresh file is a new one (O_EXCL).
        flags = os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW
        if fresh:
            descriptor = open_new(pkl_path, flags)
        else:
            descriptor = os.open(pkl_path, flags | os.O_CREAT, FILE_MODE)
        return descriptor, os.fstat(descriptor).st_size
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise DumpPathError("The dump file {} is a symlink; ptdbg_ascend does not write through links. "
                                "Remove it first.".format(pkl_path)) from error
        raise DumpWriteError(f"Cannot create the dump file {pkl_path}: {error}") from error
