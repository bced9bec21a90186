"""msprobe 1.0.4's ``compare.json`` (``msprobe -f pytorch compare -i compare.json -o OUT``), read for
``ptdbg compare -i``: ``{"npu_path": ..., "bench_path": ..., "stack_path": ..., "is_print_compare_log": true}``.

The file may come from someone else: its values are only data (paths and one flag), checked for type and
kind; nothing in it is imported, executed or chooses another code path than these two: two dump files
(``compare``) or two step directories of rank folders (``compare_distributed``, msprobe's multi-rank form).
Relative paths are taken from the current directory, as msprobe does. A path may be a symlink (dumps are
often linked in from shared storage): what it points to is read, and must be a regular file or a directory;
a FIFO, a socket or a device is refused before anything opens it (a FIFO would block the compare), and a link
to nothing is named with where it points.
"""

from __future__ import annotations

import os
import stat
from typing import Any, Dict, NamedTuple, Optional

from ptdbg_ascend.errors import FileFormatError
from ptdbg_ascend.terminal import excerpt

WHAT = "compare.json"
MAX_BYTES = 1 << 20  # a compare.json is a few lines; a bigger file is not one
PATH_KEYS = ("npu_path", "bench_path", "stack_path")
REQUIRED = ("npu_path", "bench_path")
FLAG_KEYS = ("is_print_compare_log",)


class CompareJson(NamedTuple):
    """What a compare.json asks for: two dump files, or two step directories (``distributed``)."""

    npu_path: str
    bench_path: str
    stack_path: Optional[str]  # None: the stack.json beside the NPU dump.json when there is one
    print_log: bool  # is_print_compare_log, default True
    distributed: bool  # both paths are directories: compare every rank pair

    def input_param(self) -> Dict[str, Any]:
        """``compare``'s ``input_param`` for two dump files."""
        return {"npu_path": self.npu_path, "bench_path": self.bench_path, "stack_path": self.stack_path,
                "is_print_compare_log": self.print_log}


def read_compare_json(path: str) -> CompareJson:
    """The checked content of the compare.json ``path``: ``npu_path`` and ``bench_path`` (required, both
    dump files or both directories), ``stack_path`` (default absent/null), ``is_print_compare_log``
    (default true). Any other key is refused.

    Raises:
        FileFormatError: the file is missing, too big, not JSON, not an object, has an unknown key, a
            missing key, a value of the wrong type, or names a path that does not exist; the message names
            the file and the key.
    """
    from ptdbg_ascend.jsonfile import ERROR, load_json

    document = load_json(path, WHAT, duplicates=ERROR, max_bytes=MAX_BYTES)  # a few paths: a bigger file is not one
    if not isinstance(document, dict):
        raise FileFormatError("The {} {} must hold a JSON object such as {{\"npu_path\": \"npu/dump.json\", "
                              "\"bench_path\": \"bench/dump.json\", \"stack_path\": \"npu/stack.json\", "
                              "\"is_print_compare_log\": true}}; it holds a {}.".format(WHAT, path,
                                                                                     type(document).__name__))
    allowed = PATH_KEYS + FLAG_KEYS
    for key in document:
        if key not in allowed:
            raise FileFormatError("The {} {} has the unknown key {}; allowed keys: {}.".format(
                WHAT, path, excerpt(key), ", ".join(allowed)))
    for key in REQUIRED:
        if key not in document:
            raise FileFormatError("The {} {} needs the key {!r} (the {} dump.json, or its step directory)."
                                  .format(WHAT, path, key, "NPU" if key == "npu_path" else "bench"))
    values: Dict[str, Optional[str]] = {}
    for key in PATH_KEYS:
        value = document.get(key)
        if value is None and key not in REQUIRED:
            values[key] = None
            continue
        if not isinstance(value, str) or not value:
            raise FileFormatError("The {} {}: {!r} must be a non-empty path string; it is {}.".format(
                WHAT, path, key, excerpt(value)))
        _check_kind(path, key, value)
        values[key] = value
    print_log = document.get("is_print_compare_log", True)
    if not isinstance(print_log, bool):
        raise FileFormatError("The {} {}: 'is_print_compare_log' must be true or false; it is {}.".format(
            WHAT, path, excerpt(print_log)))
    npu, bench = values["npu_path"], values["bench_path"]
    assert npu is not None and bench is not None
    if os.path.isdir(npu) != os.path.isdir(bench):
        raise FileFormatError("The {} {}: the npu_path and bench_path need to be of the same type (two dump files, "
                              "or two step directories); npu_path {} is {}, bench_path {} is {}.".format(
                                  WHAT, path, npu, _kind(npu), bench, _kind(bench)))
    distributed = os.path.isdir(npu)
    stack = values["stack_path"]
    if distributed and stack is not None:  # msprobe 1.0.4 requires the key even here, and ignores it
        from ptdbg_ascend.log import logger

        logger.warning("The {} {}: stack_path {} is not used with step directories; each rank's stack.json is "
                       "read from its rank folder.".format(WHAT, path, stack))
        stack = None
    return CompareJson(npu, bench, stack, print_log, distributed)


_SPECIAL = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
            (stat.S_ISBLK, "a block device"))


def _check_kind(path: str, key: str, value: str) -> None:
    """``value`` (the ``key`` of the compare.json ``path``) must exist and be, once links are followed, a regular
    file or a directory: FileFormatError naming the file, the key and what it is otherwise."""
    try:
        mode = os.stat(value).st_mode  # follows links: what the compare would open
    except OSError:
        link = f" (a symlink to {os.readlink(value)})" if os.path.islink(value) else ""
        raise FileFormatError(f"The {WHAT} {path}: {key!r} names {value}, which does not exist{link}.") from None
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return
    what = next((name for test, name in _SPECIAL if test(mode)), "not a regular file")
    link = f" (a symlink to {os.readlink(value)})" if os.path.islink(value) else ""
    raise FileFormatError("The {} {}: {!r} names {}{}, which is {}, not a regular file or a directory; it is not "
                          "read.".format(WHAT, path, key, value, link, what))


def _kind(path: str) -> str:
    return "a directory" if os.path.isdir(path) else "a file"
