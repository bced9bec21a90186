"""Reading the JSON files users hand us (config.json, the ACL dump config, msprobe dump/stack files), with
one set of messages: each names the file, says whether it is missing, unreadable or not JSON, and never
surfaces a bare ``json.JSONDecodeError``.

A key that appears twice in one object is noticed (Python's json keeps the later value without a word):
in a dump it is a warning naming the key, the file and where in it (``data["Functional.relu.0.forward"]``),
in a configuration file (``duplicates=ERROR``) a FileFormatError. The check is one C ``dict(pairs)`` and a
length comparison per object; the search for where a duplicate sits runs only when there is one.

A number beyond float64's range (``1e400``, a 400-digit integer, which json would read as inf or as an int
that no file of ours holds, or refuse the whole file for at 4300 digits) is read as a
:class:`~ptdbg_ascend.formats.json_numbers.OutOfRange` value (:mod:`ptdbg_ascend.formats.json_numbers`): the
reader that meets it says where. The file is opened without blocking and must be a regular file (a FIFO
would hang the read), of at most ``max_bytes`` when the caller bounds it; bytes that are not UTF-8 are
refused with their line and column.
"""

from __future__ import annotations

import json
import os
import stat
from typing import Any, Callable, Dict, List, Optional, Tuple

from ptdbg_ascend.errors import FileFormatError, ParameterError
from ptdbg_ascend.formats.json_numbers import HOOKS
from ptdbg_ascend.terminal import excerpt, shorten

WARN = "warn"    # dumps: a warning per duplicate key, the later value is kept (as json does)
ERROR = "error"  # configuration files: FileFormatError naming the key and the file
MAX_REPORTED = 5  # duplicate keys named in one warning or error; the rest are counted


def load_json(path: str, what: str, not_json_hint: str = "", duplicates: str = WARN,
              on_bytes: Optional[Callable[[bytes], None]] = None, max_bytes: Optional[int] = None) -> Any:
    """The JSON value stored in ``path``.

    Args:
        path: the file.
        what: how messages name the file, e.g. ``"config file"``, ``"ACL dump config"``.
        not_json_hint: appended to the not-JSON message, e.g. ``" (incomplete after a crash?)"``.
            Default "".
        duplicates: what a key appearing twice in one object gives: ``WARN`` (default: a warning naming
            the key, the file and the enclosing keys; the later value is kept, as json does) or ``ERROR``
            (a FileFormatError; for configuration files).
        on_bytes: called with the file's bytes as read, before they are parsed (default None), e.g. to
            fingerprint exactly what was parsed without reading the file twice.
        max_bytes: the most bytes the file may hold (default None: no bound, for dumps, which grow with the
            run); a bigger file is refused before it is read.

    Raises:
        ParameterError: ``path`` is not a path (an int would be taken for a file descriptor), or
            ``duplicates`` is not WARN/ERROR.
        FileFormatError: the file does not exist, is not a regular file, is bigger than ``max_bytes``,
            cannot be read, is not UTF-8 or does not hold JSON; with ``duplicates=ERROR``, a key appears twice
            in one object.
    """
    if not isinstance(path, (str, os.PathLike)):
        raise ParameterError(what, path, "must be the path of a JSON file")
    if duplicates not in (WARN, ERROR):
        raise ParameterError("duplicates", duplicates, f"one of {WARN!r}, {ERROR!r}")
    if not os.path.isfile(path):
        raise FileFormatError(f"The {what} {path} does not exist (or is not a file).")
    found: List[Tuple[Dict[str, Any], List[str]]] = []
    try:
        data = read_regular(path, what, max_bytes)
        if on_bytes is not None:
            on_bytes(data)
        value = json.loads(data.decode("utf-8"), object_pairs_hook=_pairs_hook(found), **HOOKS)
    except FileFormatError:  # not a regular file, too big: said as it is (a ValueError, not "not JSON")
        raise
    except OSError as error:
        raise FileFormatError(f"Cannot read the {what} {path}: {error}") from None
    except UnicodeDecodeError as error:
        line = data.count(b"\n", 0, error.start) + 1
        column = error.start - (data.rfind(b"\n", 0, error.start) + 1) + 1
        raise FileFormatError("Cannot read the {} {}: it is not UTF-8 text (byte 0x{:02x} at line {}, column {})."
                              .format(what, path, data[error.start], line, column)) from None
    except ValueError as error:
        raise FileFormatError(f"The {what} {path} is not valid JSON{not_json_hint}: {error}") from None
    except RecursionError:
        raise FileFormatError(f"The {what} {path} is not valid JSON: it is nested too deeply.") from None
    if found:
        _report_duplicates(value, found, path, what, duplicates)
    return value


def read_regular(path: str, what: str, max_bytes: Optional[int]) -> bytes:
    """The bytes of ``path``, opened without blocking (a FIFO swapped in after an ``isfile`` check must not hang
    the reader) and checked to be a regular file of at most ``max_bytes`` (None: any size); ``what`` names the
    file in the FileFormatError otherwise. OSError when it cannot be opened or read."""
    descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    with os.fdopen(descriptor, "rb") as handle:
        info = os.fstat(descriptor)
        if not stat.S_ISREG(info.st_mode):
            raise FileFormatError(f"The {what} {path} is not a regular file; it is not read.")
        if max_bytes is not None and info.st_size > max_bytes:
            raise FileFormatError("The {} {} holds {} bytes, more than the {} bytes such a file can hold; it is not "
                                  "read.".format(what, path, info.st_size, max_bytes))
        # read one byte more than allowed: a file that grows after the check is still bounded
        data = handle.read() if max_bytes is None else handle.read(max_bytes + 1)
    if max_bytes is not None and len(data) > max_bytes:
        raise FileFormatError("The {} {} holds more than the {} bytes such a file can hold; it is not read."
                              .format(what, path, max_bytes))
    return data


def _pairs_hook(found: List[Tuple[Dict[str, Any], List[str]]]):
    """An ``object_pairs_hook`` building the dict as json would and noting each object with a repeated key
    (the object itself, so its place can be found afterwards, and the repeated keys)."""

    def hook(pairs: List[Tuple[str, Any]]) -> Dict[str, Any]:
        result = dict(pairs)
        if len(result) != len(pairs):
            seen, repeated = set(), []
            for key, _ in pairs:
                if key in seen and key not in repeated:
                    repeated.append(key)
                seen.add(key)
            found.append((result, repeated))
        return result

    return hook


def _report_duplicates(value: Any, found: List[Tuple[Dict[str, Any], List[str]]], path: str, what: str,
                       duplicates: str) -> None:
    places = _places(value, {id(obj) for obj, _ in found})
    # an object missing from the result sat inside a value that a later duplicate replaced
    # a key, and the keys of the objects around it, may be megabytes long: each shown in part
    items = [f"{excerpt(key)} {shorten(places.get(id(obj), 'in an object that a later duplicate replaced'))}"
             for obj, keys in found for key in keys]
    shown = "; ".join(items[:MAX_REPORTED]) + (f"; and {len(items) - MAX_REPORTED} more"
                                               if len(items) > MAX_REPORTED else "")
    if duplicates == ERROR:
        raise FileFormatError("The {} {} has a key that appears twice in one object: {}. Keep one of each "
                              "(JSON keeps only the last, silently).".format(what, path, shown))
    from ptdbg_ascend.log import logger

    logger.warning(f"The {what} {path} has a key that appears twice in one object: {shown}. The later value is used.")


def _places(value: Any, wanted: set) -> Dict[int, str]:
    """``id(object) -> its place`` (``at the top level``, ``in data["Functional.relu.0.forward"]["output"][0]``)
    for the objects in ``wanted``, by one walk of ``value`` (iterative: a deep file cannot overflow it)."""
    places: Dict[int, str] = {}
    stack: List[Tuple[Any, Optional[str]]] = [(value, None)]
    while stack and len(places) < len(wanted):
        item, where = stack.pop()
        if isinstance(item, dict):
            if id(item) in wanted:
                places[id(item)] = "in " + where if where else "at the top level"
            children: Any = item.items()
        elif isinstance(item, list):
            children = enumerate(item)
        else:
            continue
        stack.extend((child, _child_place(where, key)) for key, child in children if isinstance(child, (dict, list)))
    return places


def _child_place(where: Optional[str], key: Any) -> str:
    if isinstance(key, int):
        return f"{where or ''}[{key}]"
    if where is None and key.isidentifier():
        return key
    return f"{where or ''}[{json.dumps(key, ensure_ascii=False)}]"
