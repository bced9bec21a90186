"""Where ``ptdbg convert`` may read and write, and how.

* Names taken from the input (pkl record names, dump.json call names and ``data_name``s) become file
  names only when :func:`~ptdbg_ascend.formats.records.file_name_problem` accepts them (the grammar
  compare uses: letters, digits, ``_ . + -``, no ``..``, no leading dot, no separator).
* Every output path is built by :func:`output_path`: plain components joined under the output root,
  and the resolved result (``realpath``) must lie inside the resolved root. Directories are created
  with :func:`~ptdbg_ascend.fs.writes.own_dir` (an existing symlink there is an error, never
  followed); files through :func:`~ptdbg_ascend.fs.writes.replace_file` (an unpredictable
  temporary name beside the target, renamed into place).
* Tensor files are read by the comparison readers' own loader
  (:func:`~ptdbg_ascend.fs.confined.load_tensor`: resolved inside the input's data directory,
  ``O_NOFOLLOW``, regular files only, ``.npy`` without pickle, ``.pt`` with ``weights_only=True``).
"""

from __future__ import annotations

import os
import stat
from typing import Any, Optional, Tuple

from ptdbg_ascend.fs.confined import OutsideRoot, load_tensor, resolve_inside
from ptdbg_ascend.formats.layout import PKL_SUFFIX
from ptdbg_ascend.errors import DumpPathError, DumpWriteError, FileFormatError, ParameterError
from ptdbg_ascend.log import logger
from ptdbg_ascend.fs.writes import NAME_MAX, TEMP_SUFFIX, check_path_text, own_dir, replace_file, write_all

# replace_file writes "{name}" through ".{name}.XXXXXXXX.tmp" (tempfile's 8 random characters): that name
# must fit in NAME_MAX too.
TEMP_EXTRA = len("." + "." + "X" * 8 + TEMP_SUFFIX)


def check_plain_name(parameter: str, value: Any) -> str:
    """``value`` if it can be one directory name inside the output directory (``--name``): a non-empty
    str without ``/`` or ``\\``, not ``.`` or ``..``, without NUL, short enough for ``{value}.pkl`` (and
    its temporary name): at most 237 bytes; else a :class:`ParameterError` naming ``parameter`` and the value."""
    check_path_text(parameter, value)
    if value in ("", ".", "..") or "/" in value or "\\" in value:
        raise ParameterError(parameter, value, "must be a plain directory name (not empty, not '.' or '..', no '/' "
                                               "or '\\'), e.g. 'dump'")
    limit = NAME_MAX - len(PKL_SUFFIX) - TEMP_EXTRA
    if len(os.fsencode(value)) > limit:
        raise ParameterError(parameter, value, "is too long: at most {} bytes (it names '{}{}' and its temporary "
                                               "file)".format(limit, value, PKL_SUFFIX))
    return value


def writable_name_problem(name: str) -> Optional[str]:
    """Why the output file ``name`` (a plain name from the input) cannot be written: its temporary name
    ``.{name}.XXXXXXXX.tmp`` would be longer than a file name can be. None when it can."""
    size = len(os.fsencode(name)) + TEMP_EXTRA
    if size <= NAME_MAX:
        return None
    return ("the file name {} and its temporary name (.{}.XXXXXXXX{}) would take {} bytes, more than the {} a file "
            "name can".format(name, name, TEMP_SUFFIX, size, NAME_MAX))


def _is_plain(part: str) -> bool:
    return bool(part) and part not in (".", "..") and "/" not in part and "\\" not in part and "\x00" not in part


def output_path(root: str, *parts: str) -> str:
    """``root/part/...``: each part one plain name, and the resolved path inside the resolved ``root``.

    :raises DumpPathError: a part is not a plain name, or the path resolves outside ``root`` (nothing
        is written there).
    """
    for part in parts:
        if not isinstance(part, str) or not _is_plain(part):
            raise DumpPathError(f"ptdbg convert refuses to write {part!r} under {root}: not a plain name.")
    path = os.path.join(root, *parts)
    try:
        resolve_inside(path, root, "the output directory")
    except OutsideRoot:
        raise DumpPathError("ptdbg convert refuses to write {}: it resolves to {}, outside the output directory {}."
                            .format(path, os.path.realpath(path), root)) from None
    return path


def make_dirs(root: str, *parts: str) -> str:
    """Create ``root/part/...`` one level at a time (:func:`own_dir`: a symlink there is an error);
    existing real directories are kept. Returns the path."""
    for depth in range(1, len(parts) + 1):
        own_dir(output_path(root, *parts[:depth]))
    return output_path(root, *parts)


def write_bytes(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` (from :func:`output_path`) atomically, never through a link."""
    replace_file(path, lambda descriptor: write_all(descriptor, data), "the converted file")


def save_npy(path: str, value: Any) -> None:
    """``np.save`` of ``value`` to ``path`` (no pickle), atomically."""
    import numpy as np

    array = np.asarray(value)

    def write(descriptor: int) -> None:
        with os.fdopen(os.dup(descriptor), "wb") as handle:
            np.save(handle, array, allow_pickle=False)

    replace_file(path, write, "the tensor file")


def read_tensor(path: str, root: str, record: str, where: str) -> Optional[Any]:
    """The array in the tensor file ``path`` of the record ``record`` (``where``: the input file, for
    the message), read only if it resolves inside ``root`` (the input's data directory).

    Returns None, with a warning naming the record and the reason, when the file lies outside ``root``
    (a symlink out of the dump) or is not a regular file: the record keeps its statistics, nothing is
    opened. :raises FileNotFoundError: no such file (the caller decides what a missing file means).
    :raises FileFormatError: the file exists but cannot be loaded safely.
    """
    try:
        return load_tensor(path, root)  # confined and checked to be a regular file as it is opened
    except OutsideRoot as error:
        logger.warning(f"{where}: record {record} keeps its statistics but not its tensor: {error}.")
        return None
    except FileNotFoundError:
        raise
    except Exception as error:  # noqa: BLE001 -- torch raises many kinds (RuntimeError...) for a corrupt file
        raise FileFormatError(f"Cannot read {path}: {error}") from None


def check_target(target: str) -> None:
    """``target`` must not exist, or be an empty real directory (checked with ``lstat``: a symlink there,
    even to an empty directory, is a :class:`DumpPathError`)."""
    try:
        mode = os.lstat(target).st_mode
    except FileNotFoundError:
        return
    except OSError as error:
        raise DumpPathError(f"Cannot use the target {target}: {error}") from None
    if stat.S_ISLNK(mode):
        raise DumpPathError("The target {} is a symlink; ptdbg convert does not write through links. Remove it "
                            "or choose another target. Nothing was written.".format(target))
    if not stat.S_ISDIR(mode) or os.listdir(target):
        raise ParameterError("target", target, "a new or empty directory", "Nothing was written.")


def move_into_place(work: str, target: str) -> None:
    """Rename the finished ``work`` directory to ``target``. ``rename`` of a directory onto anything but
    an empty directory fails (a symlink planted meanwhile included): then nothing is moved."""
    try:
        if os.path.lexists(target):
            check_target(target)
            os.rmdir(target)
        os.rename(work, target)
    except OSError as error:
        raise DumpWriteError("Cannot move the converted dump into {}: {}. Nothing was written there.".format(
            target, error)) from None


def relative_parts(relative: str) -> Tuple[str, ...]:
    """``"step0/rank0"`` -> ``("step0", "rank0")`` (``""`` -> ``()``)."""
    return tuple(part for part in relative.split("/") if part)


class TensorDir:
    """The output's tensor directory (``root/.../name``), created at its first file; file paths are
    checked by :func:`output_path`."""

    def __init__(self, root: str, parent: str, name: str) -> None:
        self.root, self.path, self.made = root, os.path.join(parent, name), False

    def file(self, name: str) -> str:
        if not self.made:
            make_dirs(self.root, *relative_parts(os.path.relpath(self.path, self.root)))
            self.made = True
        return output_path(self.path, name)
