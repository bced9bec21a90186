"""The text of msprobe's JSON files, exactly as ``json.dumps(document, indent=1)`` writes it (keys in msprobe's
order, ensure_ascii, NaN/inf as the bare tokens ``NaN``/``Infinity``/``-Infinity``), built from member texts
that are written once each: the writer rewrites whole files often, and Python's ``json`` encodes an indented
document in pure Python, slowly.

The pieces: :func:`value_text` for a JSON value of the plain types (``json.dumps`` itself for anything
else), :func:`tensor_leaf_text` for the common tensor leaf (most of dump.json), and the combinators that
join texts already written (:func:`list_of_texts`, :func:`object_of_texts`, :class:`JsonPieces`).
"""

from __future__ import annotations

import json
from json.encoder import encode_basestring_ascii
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

from ptdbg_ascend.formats.dump_json import document_head

_STRING = encode_basestring_ascii
_FLOAT_REPR = float.__repr__
_INT_REPR = int.__repr__
_INFINITY = float("inf")


def string_text(text: str) -> str:
    """A str as a JSON string literal (ensure_ascii)."""
    return _STRING(text)


def number_text(value: Any, level: int = 0) -> str:
    """A statistic's text (nested at ``level``): a float (NaN/Infinity as tokens), None, a bool, an int; any other
    value as :func:`value_text` writes it."""
    kind = type(value)
    if kind is float:
        if -_INFINITY < value < _INFINITY:
            return _FLOAT_REPR(value)
        return "NaN" if value != value else "Infinity" if value > 0 else "-Infinity"
    if value is None:
        return "null"
    if kind is bool:
        return "true" if value else "false"
    if kind is int:
        return _INT_REPR(value)
    return value_text(value, level)


def value_text(value: Any, level: int = 0) -> str:
    """``json.dumps(value, indent=1)`` with every line after the first indented by ``level`` more spaces. Dicts
    with str keys, lists, tuples and the exact types str, int, float, bool and None are written here (the same
    text, without json's generators); anything else (a subclass, a numpy scalar, a key that is not a str...)
    goes through ``json.dumps`` itself, which gives its usual text or TypeError."""
    try:
        return _plain_text(value, level)
    except (_Unusual, RecursionError):  # RecursionError: a circular value, which json names
        text = json.dumps(value, indent=1, allow_nan=True)
        return text.replace("\n", "\n" + " " * level) if level else text


class _Unusual(Exception):
    """A value :func:`_plain_text` leaves to ``json.dumps``."""


def _plain_text(value: Any, level: int) -> str:
    kind = type(value)
    if kind is str:
        return _STRING(value)
    if kind is float or kind is int or kind is bool or value is None:
        return number_text(value, level)
    if kind is dict:
        members = []
        for key, item in value.items():
            if type(key) is not str:
                raise _Unusual()
            members.append((key, _plain_text(item, level + 1)))
        return object_of_texts(members, level)
    if kind is list or kind is tuple:
        return list_of_texts([_plain_text(item, level + 1) for item in value], level)
    raise _Unusual()


def member_text(name: str, value: Any, depth: int) -> str:
    """One ``"name": value`` member of an object nested at ``depth``, as ``json.dumps(indent=1)`` writes it."""
    return member_of_text(name, value_text(value, depth + 1), depth)


def member_of_text(name: str, text: str, depth: int) -> str:
    """:func:`member_text` of a value already written (at ``depth + 1``)."""
    return " " * (depth + 1) + _STRING(name) + ": " + text


def list_of_texts(items: Sequence[str], level: int) -> str:
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
    parts = []
    for key, text in members:  # (a loop, not a generator: every entry's blocks pass here)
        parts.append(_STRING(key) + ": " + text)
    return "{" + inner + ("," + inner).join(parts) + "\n" + " " * level + "}"


# The common tensor leaf (``leaves.py``: type, dtype, shape, Max, Min, Mean, Norm, requires_grad), filled into
# a template per nesting level: most of dump.json is such leaves.
_STATISTIC_KEYS = ("Max", "Min", "Mean", "Norm")
# The text up to the statistics, per (level, dtype, shape): a training step records the same few shapes again
# and again. Bounded: a run with ever new shapes stops caching rather than growing.
_LEAF_HEADS: Dict[Tuple[int, str, Tuple[int, ...]], str] = {}
_LEAF_HEADS_MAX = 4096
_LEAF_TAILS: Dict[int, str] = {}
# Whole leaf texts by (level, dtype, shape, requires_grad, the four statistics): see tensor_leaf_text. Cleared
# when full (a step's repeats are near each other: an output read by the next call).
_LEAF_TEXTS: Dict[Tuple[Any, ...], str] = {}
_LEAF_TEXTS_MAX = 4096


def shape_text(shape: Sequence[int], level: int) -> str:
    """A shape (ints) as a JSON array at ``level``."""
    return list_of_texts(list(map(_INT_REPR, shape)), level)


def tensor_leaf_text(level: int, dtype: str, shape: Sequence[int], requires_grad: bool,
                     statistics: Sequence[Any]) -> Optional[str]:
    """The text at ``level`` of the common tensor leaf (type, dtype, shape, Max, Min, Mean, Norm, requires_grad),
    or None unless ``statistics`` are four finite floats (the leaf then has other tokens, maybe other keys:
    ``leaves.leaf_text`` writes it). ``shape``: ints."""
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
        key = (level, dtype, tuple(shape), requires_grad, high, low, mean, norm)
        text = _LEAF_TEXTS.get(key)
        if text is not None:
            return text
    text = _leaf_head(level, dtype, shape) + _leaf_tail(level) % (
        high, low, mean, norm, "true" if requires_grad else "false")
    if key is not None:
        if len(_LEAF_TEXTS) >= _LEAF_TEXTS_MAX:
            _LEAF_TEXTS.clear()
        _LEAF_TEXTS[key] = text
    return text


def _leaf_head(level: int, dtype: str, shape: Sequence[int]) -> str:
    """A leaf's text up to its shape (included), nested at ``level``."""
    key = (level, dtype, tuple(shape))
    head = _LEAF_HEADS.get(key)
    if head is None:
        inner = "\n" + " " * (level + 1)
        head = ("{" + inner + '"type": "torch.Tensor",' + inner + '"dtype": ' + _STRING(dtype) + "," + inner
                + '"shape": ' + shape_text(shape, level + 1))
        if len(_LEAF_HEADS) < _LEAF_HEADS_MAX:
            _LEAF_HEADS[key] = head
    return head


def _leaf_tail(level: int) -> str:
    """A leaf's text after its shape: the four statistics (``%r`` writes a finite float as json does) and
    requires_grad's token (``%s``)."""
    tail = _LEAF_TAILS.get(level)
    if tail is None:
        inner = ",\n" + " " * (level + 1)
        tail = _LEAF_TAILS[level] = "".join(inner + _STRING(key) + ": %r" for key in _STATISTIC_KEYS) + inner + \
            '"requires_grad": %s\n' + " " * level + "}"
    return tail


# Members joined per chunk when a JsonPieces is written: a chunk is a few hundred KB.
MEMBERS_PER_CHUNK = 256


class JsonPieces:
    """A JSON text kept as ``prefix``, its ``members`` (to be joined by ``",\n"``) and ``suffix``; ``str()``
    gives the text. The rewrites of dump.json and stack.json write it a chunk at a time (:meth:`chunks`)
    rather than join a document-sized string, copy it into the document and encode it whole (three
    document-sized copies; ``bench/bench_rewrite.py``)."""

    __slots__ = ("prefix", "members", "suffix")

    def __init__(self, prefix: str, members: List[str], suffix: str) -> None:
        self.prefix, self.members, self.suffix = prefix, members, suffix

    def __len__(self) -> int:
        members = self.members
        return len(self.prefix) + sum(map(len, members)) + 2 * max(0, len(members) - 1) + len(self.suffix)

    def __str__(self) -> str:
        return "".join(self.chunks())

    def wrapped(self, before: str, after: str) -> JsonPieces:
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


def document_pieces(task: str, level: str, dump_data_dir: Optional[str], data: JsonPieces) -> JsonPieces:
    """The dump.json document around its ``data`` object."""
    head = json.dumps(document_head(task, level, dump_data_dir), indent=1)[:-2]
    return data.wrapped(head + ',\n "data": ', "\n}")
