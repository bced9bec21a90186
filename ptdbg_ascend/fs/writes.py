"""File-system guards of the dump writers: path checks, no writes through links, one writer per dump.

* :func:`check_path_text`: a user path (``set_dump_path``'s ``fpath``, the config's ``dump_path``) is a
  ``str`` without NUL bytes, no component over 255 bytes and at most 4096 bytes in all (Linux's
  NAME_MAX and PATH_MAX): checked at the call, not later inside the user's forward.
* :func:`own_dir`: a directory the tool writes into (tag, rank, npy, step dirs) is created; when it
  already exists it is checked with ``lstat``: a symlink (or a file) there is a :class:`DumpPathError`
  naming the path, never followed.
* :func:`open_new`: new files are created with ``O_CREAT | O_EXCL | O_NOFOLLOW``.
* :func:`temporary_beside`: a temporary file with an unpredictable name in the target's directory
  (``tempfile.mkstemp``), to be renamed into place: a final name never holds a partial file.
* :func:`replace_file`: write through :func:`temporary_beside` and rename, the one way every final
  file (npy, .pt, json, config, migrated script) is written.
* One writer per directory: ``fs/locks.py``.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import stat
import tempfile
from typing import Any, Callable, Iterable, List, Tuple

from ptdbg_ascend.errors import DumpPathError, DumpWriteError, ParameterError

NAME_MAX = 255
PATH_MAX = 4096
DIR_MODE = 0o750
FILE_MODE = 0o640
LOCK_NAME = ".ptdbg.lock"
TEMP_SUFFIX = ".tmp"
# What temporary_beside (mkstemp: 8 of [a-z0-9_]) and link_file (8 hex digits) name a temporary file.
_TEMPORARY_NAME = re.compile(r"\A\..+\.[a-z0-9_]{8}\.tmp\Z", re.DOTALL)


def check_path_text(parameter: str, value: Any) -> str:
    """``value`` if it is a usable path string, else a :class:`ParameterError` naming ``parameter``."""
    if not isinstance(value, str):
        raise ParameterError(parameter, value, "must be a path string")
    if "\x00" in value:
        raise ParameterError(parameter, value, "must not contain NUL bytes")
    try:
        encoded = os.fsencode(value)
    except UnicodeError as error:
        raise ParameterError(parameter, value, f"must be encodable as a file name ({error})") from error
    if len(encoded) > PATH_MAX:
        raise ParameterError(parameter, _short(value), "is {} bytes long; a path has at most {} bytes".format(
            len(encoded), PATH_MAX))
    for part in encoded.split(b"/"):
        if len(part) > NAME_MAX:
            raise ParameterError(parameter, _short(value), "has a component of {} bytes ({!r}...); a file or directory "
                                 "name has at most {} bytes".format(len(part), part[:32].decode(errors="replace"),
                                                                  NAME_MAX))
    return value


def _short(value: str) -> str:
    return value if len(value) <= 80 else value[:64] + "..."


def own_dir(path: str) -> bool:
    """Create the directory ``path`` (its parent must exist), or check that the existing one is a real
    directory: a symlink or anything else there raises :class:`DumpPathError`; it is never followed.
    Returns whether it was created."""
    try:
        os.mkdir(path, DIR_MODE)
        return True
    except FileExistsError:
        pass
    except OSError as error:
        raise DumpWriteError(f"Cannot create the dump directory {path}: {error}") from error
    check_real_dir(path)
    return False


def check_real_dir(path: str) -> None:
    """:class:`DumpPathError` unless ``path`` is a directory itself (not a symlink to one)."""
    try:
        mode = os.lstat(path).st_mode
    except OSError as error:
        raise DumpWriteError(f"Cannot read the dump directory {path}: {error}") from error
    if stat.S_ISLNK(mode):
        raise DumpPathError("{} is a symlink; ptdbg_ascend does not write through links. Remove it, or choose "
                            "another dump path.".format(path))
    if not stat.S_ISDIR(mode):
        raise DumpPathError(f"{path} exists and is not a directory; remove it, or choose another dump path.")


def own_dirs(path: str, levels: int) -> List[str]:
    """``os.makedirs`` of ``path``'s ancestors above its last ``levels`` components (the user's dump
    directory), then :func:`own_dir` for each of those ``levels`` directories (the tool's own)."""
    owned = []
    top = path
    for _ in range(levels):
        owned.append(top)
        top = os.path.dirname(top)
    try:
        os.makedirs(top, mode=DIR_MODE, exist_ok=True)
    except OSError as error:
        raise DumpWriteError(f"Cannot create the dump directory {top}: {error}") from error
    created = []
    for directory in reversed(owned):
        if own_dir(directory):
            created.insert(0, directory)
    return created


def remove_empty_dirs(directories: List[str]) -> None:
    """``rmdir`` each of ``directories`` (innermost first) that is empty; others are left alone."""
    for directory in directories:
        try:
            os.rmdir(directory)
        except OSError:
            return


def open_new(path: str, flags: int = os.O_WRONLY) -> int:
    """A descriptor of the new file ``path`` (``O_CREAT | O_EXCL | O_NOFOLLOW``)."""
    return os.open(path, flags | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, FILE_MODE)


def temporary_beside(path: str) -> Tuple[int, str]:
    """``(descriptor, name)`` of a new temporary file with an unpredictable name in ``path``'s directory
    (``.{basename}.XXXXXXXX.tmp``: no ``.npy``/``.pt``/``.json`` ending, so it is never taken for a dump
    file), mode 0640."""
    directory, name = os.path.split(path)
    descriptor, temporary = tempfile.mkstemp(prefix="." + name + ".", suffix=TEMP_SUFFIX, dir=directory or ".")
    try:
        os.fchmod(descriptor, FILE_MODE)
    except OSError:
        pass
    return descriptor, temporary


def is_temporary_name(name: str) -> bool:
    """Whether ``name`` is one of this tool's temporary files (``.{basename}.XXXXXXXX.tmp``, see
    :func:`temporary_beside`): what a write cut short (a kill) leaves, never a user's file."""
    return _TEMPORARY_NAME.match(name) is not None


def replace_file(path: str, write: Callable[[int], None], what: str = "") -> None:
    """Create ``path`` atomically: ``write(descriptor)`` fills a :func:`temporary_beside` file, which is
    then renamed to ``path``. The final name never holds a partial file and is never written through a
    link (the rename replaces a symlink there, it does not follow it); on failure the temporary file is
    removed and a :class:`DumpWriteError` names ``path`` (``what``, e.g. "the tensor file", prefixes it).
    ``write`` must not close the descriptor."""
    temporary = None
    try:
        descriptor, temporary = temporary_beside(path)
        try:
            write(descriptor)
        finally:
            os.close(descriptor)
        os.replace(temporary, path)
    except BaseException as error:  # the temporary file never stays behind, whatever stopped the write
        if temporary is not None:
            remove_quietly(temporary)
        if isinstance(error, OSError):
            raise DumpWriteError(f"Cannot write {what + ' ' if what else ''}{path}: {error}") from error
        raise


def replace_text_file(path: str, chunks: Iterable[str], what: str = "") -> None:
    """:func:`replace_file` with the UTF-8 text of ``chunks``, encoded and written one chunk at a time (a
    large file never becomes one string, nor one bytes object, in memory)."""
    def write(descriptor: int) -> None:
        for chunk in chunks:
            write_all(descriptor, chunk.encode("utf-8"))

    replace_file(path, write, what)


def link_file(source: str, path: str, what: str = "") -> None:
    """Create ``path`` as a hard link to ``source`` (the same data recorded again: nothing is written). The
    link is made under an unpredictable temporary name beside ``path`` and renamed into place, so, as with
    :func:`replace_file`, the final name is never written through a symlink and never half made; where the
    file system has no hard links, ``path`` becomes a copy (:func:`replace_file`). Failure: a
    :class:`DumpWriteError` naming ``path`` (``what``, e.g. "the tensor file", prefixes it)."""
    directory, name = os.path.split(path)
    label = what + " " if what else ""
    for _ in range(100):
        temporary = os.path.join(directory, f".{name}.{secrets.token_hex(4)}{TEMP_SUFFIX}")
        try:
            os.link(source, temporary)  # never replaces nor follows what is at ``temporary``: EEXIST
            break
        except FileExistsError:
            continue
        except OSError:  # no hard links here (EPERM, EXDEV, ENOTSUP, EMLINK...): a copy
            def copy(descriptor: int) -> None:
                with open(source, "rb") as original, os.fdopen(os.dup(descriptor), "wb") as target:
                    shutil.copyfileobj(original, target)

            replace_file(path, copy, what)
            return
    else:
        raise DumpWriteError(f"Cannot write {label}{path}: no free temporary name beside it")
    try:
        os.replace(temporary, path)
    except OSError as error:
        remove_quietly(temporary)
        raise DumpWriteError(f"Cannot write {label}{path}: {error}") from error


def write_all(descriptor: int, data: Any) -> None:
    """``os.write`` until all of ``data`` (bytes-like) is written (one call releases the GIL)."""
    view = memoryview(data)
    while len(view):
        written = os.write(descriptor, view)
        view = view[written:]


def remove_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
