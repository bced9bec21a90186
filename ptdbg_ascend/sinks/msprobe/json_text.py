"""The text of msprobe's JSON files, as ``json.dumps(document, indent=1)`` writes it, built from member
texts that are encoded once each: the writer (``msprobe_json.py``) rewrites whole files often, and an
indented document is encoded in pure Python, slowly. Keys in msprobe's order, NaN/inf as the bare tokens
``NaN``/``Infinity``/``-Infinity`` (what Python's ``json`` writes and reads)."""

from __future__ import annotations

import json
import time
from json.encoder import encode_basestring_ascii
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

from ptdbg_ascend.formats.dump_json import document_head


def dump_json_text(task: str, level: str, dump_data_dir: Optional[str], data: Dict[str, Any],
                   encoded: Optional[Dict[str, str]] = None) -> str:
    """The dump.json document (keys in msprobe's order, indent 1, NaN/Infinity tokens): the same text as
    ``json.dumps(document, indent=1)``. ``encoded`` caches each entry's text between calls (an indented
    dump is encoded in pure Python, slowly: each entry is encoded once however often the file is rewritten)."""
    return str(document_pieces(task, level, dump_data_dir, object_pieces(data, encoded, 1)))


def document_pieces(task: str, level: str, dump_data_dir: Optional[str], data: JsonPieces) -> JsonPieces:
    """The dump.json document around its ``data`` object."""
    head = json.dumps(document_head(task, level, dump_data_dir), indent=1)[:-2]
    return data.wrapped(head + ',\n "data": ', "\n}")


def member_text(name: str, value: Any, depth: int) -> str:
    """One ``"name": value`` member of an object nested at ``depth``, as ``json.dumps(indent=1)`` writes it."""
    if type(name) is not str:
        name = json.dumps(name)  # json's text for any key (a str subclass...)
    else:
        name = _STRING(name)
    return " " * (depth + 1) + name + ": " + indented_text(value, depth + 1)


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
# The text up to the statistics, per (level, type, dtype, shape): a training step records the same few
# shapes again and again. Bounded: a run with ever new shapes stops caching rather than growing.
_LEAF_HEADS = {}  # type: Dict[Tuple[int, str, str, Tuple[int, ...]], str]
_LEAF_HEADS_MAX = 4096
_LEAF_TAILS = {}  # type: Dict[Tuple[int, str], str]
# Whole leaf texts by (level, type, dtype, shape, requires_grad, the four statistics): see _leaf_text.
# Cleared when full (a step's repeats are near each other: an output read by the next call).
_LEAF_TEXTS = {}  # type: Dict[Tuple[Any, ...], str]
_LEAF_TEXTS_MAX = 4096


def _leaf_head(level: int, kind: str, dtype: str, shape: List[int]) -> str:
    """A leaf's text up to its shape (included), nested at ``level``."""
    inner = "\n" + " " * (level + 1)
    if shape:
        deeper = "\n" + " " * (level + 2)
        shape_text = "[" + deeper + ("," + deeper).join(map(_INT_REPR, shape)) + inner + "]"
    else:
        shape_text = "[]"
    return ("{" + inner + '"type": ' + _STRING(kind) + "," + inner + '"dtype": ' + _STRING(dtype) + "," + inner
            + '"shape": ' + shape_text)


def _leaf_tail(level: int, conversion: str) -> str:
    """A leaf's text after its shape: the four statistics (``conversion`` of each: ``%r`` writes a finite
    float as json does, ``%s`` a text already encoded) and requires_grad's token (``%s``)."""
    inner = ",\n" + " " * (level + 1)
    return "".join(inner + _STRING(key) + ": " + conversion for key in _LEAF_KEYS[3:7]) + inner + \
        '"requires_grad": %s\n' + " " * level + "}"


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
    for size in shape:  # (16.0 == 16 with the same hash: a key below must not mistake one for the other)
        if type(size) is not int:
            return None
    statistics = (leaf["Max"], leaf["Min"], leaf["Mean"], leaf["Norm"])
    text = tensor_leaf_text(level, dtype, shape, grad, statistics, kind)
    if text is not None:
        return text
    numbers = tuple(_scalar_text(value, level + 1) for value in statistics)
    return _leaf_head_text(level, kind, dtype, shape) + _leaf_tail_text(level, "%s") % (
        numbers + ("true" if grad else "false",))


def tensor_leaf_text(level: int, dtype: str, shape: List[int], requires_grad: bool, statistics: Sequence[Any],
                     kind: str = "torch.Tensor") -> Optional[str]:
    """The text at ``level`` of the usual tensor leaf (``msprobe/leaves.tensor_leaf``: type, dtype, shape,
    Max, Min, Mean, Norm, requires_grad), or None unless ``statistics`` are four finite floats (the leaf
    then has other keys or tokens: the general path writes it). ``shape``: ints."""
    high, low, mean, norm = statistics
    if not (type(high) is float and type(low) is float and type(mean) is float and type(norm) is float
            and -_INFINITY < high < _INFINITY and -_INFINITY < low < _INFINITY
            and -_INFINITY < mean < _INFINITY and -_INFINITY < norm < _INFINITY):  # (NaN fails every test)
        return None
    # Most leaves recur in a step (an output is the next call's input, a parameter is read forward and
    # updated by the optimizer): their text is looked up by value. Not with a zero: -0.0 == 0.0 with the
    # same hash, but not the same text.
    key = None
    if high and low and mean and norm:
        key = (level, kind, dtype, tuple(shape), requires_grad, high, low, mean, norm)
        text = _LEAF_TEXTS.get(key)
        if text is not None:
            return text
    text = _leaf_head_text(level, kind, dtype, shape) + _leaf_tail_text(level, "%r") % (
        high, low, mean, norm, "true" if requires_grad else "false")
    if key is not None:
        if len(_LEAF_TEXTS) >= _LEAF_TEXTS_MAX:
            _LEAF_TEXTS.clear()
        _LEAF_TEXTS[key] = text
    return text


def list_of_texts(items: List[str], level: int) -> str:
    """A JSON array at ``level`` of items already written (each at ``level + 1``)."""
    if not items:
        return "[]"
    inner = "\n" + " " * (level + 1)
    return "[" + inner + ("," + inner).join(items) + "\n" + " " * level + "]"


def object_of_texts(members: Sequence[Tuple[str, str]], level: int) -> str:
    """A JSON object at ``level`` of ``(key, value text)`` members (values written at ``level + 1``)."""
    if not members:
        return "{}"
    inner = "\n" + " " * (level + 1)
    return "{" + inner + ("," + inner).join(_STRING(key) + ": " + text for key, text in members) + \
        "\n" + " " * level + "}"


def member_of_text(name: str, text: str, depth: int) -> str:
    """:func:`member_text` of a value already written (at ``depth + 1``)."""
    return " " * (depth + 1) + _STRING(name) + ": " + text


def _leaf_head_text(level: int, kind: str, dtype: str, shape: List[int]) -> str:
    key = (level, kind, dtype, tuple(shape))
    head = _LEAF_HEADS.get(key)
    if head is None:
        head = _leaf_head(level, kind, dtype, shape)
        if len(_LEAF_HEADS) < _LEAF_HEADS_MAX:
            _LEAF_HEADS[key] = head
    return head


def _leaf_tail_text(level: int, conversion: str) -> str:
    tail = _LEAF_TAILS.get((level, conversion))
    if tail is None:
        tail = _LEAF_TAILS[(level, conversion)] = _leaf_tail(level, conversion)
    return tail


def _encode(value: Any, level: int, out: Callable[[str], None]) -> None:
    """Append the text of ``value`` nested at ``level`` through ``out`` (a list's append). Containers are
    tested first and a tensor leaf in a container is written without another call: a dump.json entry is
    a dict of lists of leaves (the leaves' own numbers are written by :func:`_leaf_text`)."""
    kind = type(value)
    if kind is dict:
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
    elif kind is list or kind is tuple:
        if not value:
            out("[]")
            return
        inner = "\n" + " " * (level + 1)
        separator = "[" + inner
        deeper = level + 1
        for item in value:
            out(separator)
            separator = "," + inner
            if type(item) is dict and len(item) == _LEAF_LENGTH and tuple(item) == _LEAF_KEYS:
                text = _leaf_text(item, deeper)
                if text is not None:
                    out(text)
                    continue
            _encode(item, deeper, out)
        out("\n" + " " * level + "]")
    elif kind is float:
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
    elif kind is int:
        out(_INT_REPR(value))
    elif value is None:
        out("null")
    elif value is True:
        out("true")
    elif value is False:
        out("false")
    else:  # subclasses of str/int/float/dict/list, numpy scalars...: json.dumps decides
        raise _Unusual()


# Members joined per chunk when a JsonPieces is written: a chunk is a few hundred KB.
MEMBERS_PER_CHUNK = 256


class JsonPieces(object):
    """A JSON text kept as ``prefix``, its ``members`` (to be joined by ``",\n"``) and ``suffix``; ``str()``
    gives the text. The rewrites of dump.json and stack.json write it a chunk at a time (:meth:`chunks`)
    rather than join a document-sized string, copy it into the document and encode it whole (three
    document-sized copies): ``bench/bench_rewrite.py``'s 40,000-call window stops in 69 ms instead of 165 ms."""

    __slots__ = ("prefix", "members", "suffix")

    def __init__(self, prefix: str, members: List[str], suffix: str) -> None:
        self.prefix, self.members, self.suffix = prefix, members, suffix

    def __len__(self) -> int:
        members = self.members
        return len(self.prefix) + sum(map(len, members)) + 2 * max(0, len(members) - 1) + len(self.suffix)

    def __str__(self) -> str:
        return "".join(self.chunks())

    def wrapped(self, before: str, after: str) -> "JsonPieces":
        """This text with ``before`` ahead of it and ``after`` behind it."""
        return JsonPieces(before + self.prefix, self.members, self.suffix + after)

    def chunks(self) -> Iterator[str]:
        """The text in consecutive pieces of at most :data:`MEMBERS_PER_CHUNK` members each."""
        members = self.members
        step = MEMBERS_PER_CHUNK
        yield self.prefix
        for start in range(0, len(members), step):
            chunk = ",\n".join(members[start:start + step])
            yield chunk if start + step >= len(members) else chunk + ",\n"
        yield self.suffix


def members_pieces(members: List[str], depth: int) -> JsonPieces:
    """The JSON object at ``depth`` with the member texts ``members``, as :class:`JsonPieces`."""
    if not members:
        return JsonPieces("{}", [], "")
    return JsonPieces("{\n", members, "\n" + " " * depth + "}")


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


def object_pieces(items: Dict[str, Any], encoded: Optional[Dict[str, str]], depth: int) -> JsonPieces:
    """``json.dumps(items, indent=1)`` nested at ``depth`` (``str()`` of the result), reusing
    ``encoded[name]`` (the member text of ``name``; a cache is used at one depth only)."""
    cache = encoded if encoded is not None else {}
    members = []
    for name, value in items.items():
        text = cache.get(name)
        if text is None:
            text = cache[name] = member_text(name, value, depth)
        members.append(text)
    return members_pieces(members, depth)
