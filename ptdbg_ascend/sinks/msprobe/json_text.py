"""The text of msprobe's JSON files, as ``json.dumps(document, indent=1)`` writes it, built from member
texts that are encoded once each: the writer (``msprobe_json.py``) rewrites whole files often, and an
indented document is encoded in pure Python, slowly. Keys in msprobe's order, NaN/inf as the bare tokens
``NaN``/``Infinity``/``-Infinity`` (what Python's ``json`` writes and reads)."""

from __future__ import annotations

import json
import time
from json.encoder import encode_basestring_ascii
from typing import Any, Callable, Dict, List, Optional, Tuple

from ptdbg_ascend.formats.dump_json import document_head


def dump_json_text(task: str, level: str, dump_data_dir: Optional[str], data: Dict[str, Any],
                   encoded: Optional[Dict[str, str]] = None) -> str:
    """The dump.json document (keys in msprobe's order, indent 1, NaN/Infinity tokens): the same text as
    ``json.dumps(document, indent=1)``. ``encoded`` caches each entry's text between calls (an indented
    dump is encoded in pure Python, slowly: each entry is encoded once however often the file is rewritten)."""
    return document_text(task, level, dump_data_dir, object_text(data, encoded, 1))


def document_text(task: str, level: str, dump_data_dir: Optional[str], data_text: str) -> str:
    head = json.dumps(document_head(task, level, dump_data_dir), indent=1)[:-2]
    return head + ',\n "data": ' + data_text + "\n}"


def member_text(name: str, value: Any, depth: int) -> str:
    """One ``"name": value`` member of an object nested at ``depth``, as ``json.dumps(indent=1)`` writes it."""
    return "{}{}: {}".format(" " * (depth + 1), json.dumps(name), indented_text(value, depth + 1))


_STRING = encode_basestring_ascii
_FLOAT_REPR = float.__repr__
_INT_REPR = int.__repr__
_INFINITY = float("inf")


def indented_text(value: Any, level: int = 0) -> str:
    """``json.dumps(value, indent=1)`` with every line after the first indented by ``level`` more spaces
    (ensure_ascii, NaN/Infinity tokens). The same text, about 4x faster: json encodes an indented document
    in pure Python through generators, and dump.json is nearly all small dicts of numbers (the cost of
    each recorded call at stop()). A value of a type JSON has no form for (or a dict key that is not a
    str) goes through ``json.dumps`` itself, which gives its usual text or TypeError."""
    out = []  # type: List[str]
    try:
        _encode(value, level, out.append)
    except (_Unusual, RecursionError):  # RecursionError: a circular value, which json names
        text = json.dumps(value, indent=1, allow_nan=True)
        return text.replace("\n", "\n" + " " * level) if level else text
    return "".join(out)


class _Unusual(Exception):
    """A value :func:`_encode` leaves to ``json.dumps``."""


# The common tensor leaf (``msprobe/leaves.tensor_leaf`` without the optional keys), filled into a template
# per nesting level: a third of the time of the general path, and most of dump.json is such leaves.
_LEAF_KEYS = ("type", "dtype", "shape", "Max", "Min", "Mean", "Norm", "requires_grad")
_LEAF_LENGTH = len(_LEAF_KEYS)
_LEAF_TEMPLATES = {}  # type: Dict[int, str]


def _leaf_template(level: int) -> str:
    inner = "\n" + " " * (level + 1)
    members = ["{}: %s".format(_STRING(key)) for key in _LEAF_KEYS]
    return "{" + inner + ("," + inner).join(members) + "\n" + " " * level + "}"


def _scalar_text(value: Any, level: int) -> str:
    """A leaf's statistic (nested at ``level``): a float, else None, a bool, NaN/Infinity... as _encode."""
    if type(value) is float and -_INFINITY < value < _INFINITY:
        return _FLOAT_REPR(value)
    parts = []  # type: List[str]
    _encode(value, level, parts.append)
    return "".join(parts)


def _leaf_text(leaf: Dict[str, Any], level: int) -> Optional[str]:
    """The text of a tensor leaf with exactly the keys ``_LEAF_KEYS``, or None when a value is not of the
    usual types (the general path then encodes it)."""
    kind, dtype, shape, grad = leaf["type"], leaf["dtype"], leaf["shape"], leaf["requires_grad"]
    if type(kind) is not str or type(dtype) is not str or type(shape) is not list or type(grad) is not bool:
        return None
    if shape:
        for size in shape:
            if type(size) is not int:
                return None
        inner = "\n" + " " * (level + 2)
        shape_text = "[" + inner + ("," + inner).join(map(_INT_REPR, shape)) + "\n" + " " * (level + 1) + "]"
    else:
        shape_text = "[]"
    template = _LEAF_TEMPLATES.get(level)
    if template is None:
        template = _LEAF_TEMPLATES[level] = _leaf_template(level)
    deeper = level + 1
    return template % (_STRING(kind), _STRING(dtype), shape_text, _scalar_text(leaf["Max"], deeper),
                       _scalar_text(leaf["Min"], deeper), _scalar_text(leaf["Mean"], deeper),
                       _scalar_text(leaf["Norm"], deeper), "true" if grad else "false")


def _encode(value: Any, level: int, out: Callable[[str], None]) -> None:
    """Append the text of ``value`` nested at ``level`` through ``out`` (a list's append)."""
    kind = type(value)
    if kind is float:  # the most frequent: four statistics per tensor
        if value != value:
            out("NaN")
        elif value == _INFINITY:
            out("Infinity")
        elif value == -_INFINITY:
            out("-Infinity")
        else:
            out(_FLOAT_REPR(value))
    elif kind is str:
        out(_STRING(value))
    elif kind is dict:
        if not value:
            out("{}")
            return
        if len(value) == _LEAF_LENGTH and tuple(value) == _LEAF_KEYS:
            text = _leaf_text(value, level)
            if text is not None:
                out(text)
                return
        inner = "\n" + " " * (level + 1)
        separator = "{" + inner
        deeper = level + 1
        for key, item in value.items():
            if type(key) is not str:
                raise _Unusual()
            out(separator + _STRING(key) + ": ")
            _encode(item, deeper, out)
            separator = "," + inner
        out("\n" + " " * level + "}")
    elif kind is int:
        out(_INT_REPR(value))
    elif value is None:
        out("null")
    elif value is True:
        out("true")
    elif value is False:
        out("false")
    elif kind is list or kind is tuple:
        if not value:
            out("[]")
            return
        inner = "\n" + " " * (level + 1)
        separator = "[" + inner
        deeper = level + 1
        for item in value:
            out(separator)
            _encode(item, deeper, out)
            separator = "," + inner
        out("\n" + " " * level + "]")
    else:  # subclasses of str/int/float/dict/list, numpy scalars...: json.dumps decides
        raise _Unusual()


def members_object(members: List[str], depth: int) -> str:
    if not members:
        return "{}"
    return "{\n" + ",\n".join(members) + "\n" + " " * depth + "}"


def encode_missing(items: Dict[str, Any], encoded: Dict[str, str], depth: int) -> Tuple[float, int]:
    """Fill ``encoded`` with the member texts of ``items`` it lacks; returns the seconds it took and the
    length of the longest text it made."""
    started = time.perf_counter()
    longest = 0
    for name, value in items.items():
        if name not in encoded:
            text = encoded[name] = member_text(name, value, depth)
            longest = max(longest, len(text))
    return time.perf_counter() - started, longest


def object_text(items: Dict[str, Any], encoded: Optional[Dict[str, str]], depth: int) -> str:
    """``json.dumps(items, indent=1)`` nested at ``depth``, reusing ``encoded[name]`` (the member text
    of ``name``; a cache is used at one depth only)."""
    cache = encoded if encoded is not None else {}
    members = []
    for name, value in items.items():
        text = cache.get(name)
        if text is None:
            text = cache[name] = member_text(name, value, depth)
        members.append(text)
    return members_object(members, depth)
