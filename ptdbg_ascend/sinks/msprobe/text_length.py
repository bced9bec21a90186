"""How long a dump.json member's text will be, without encoding it: an upper bound for the disk reserve
(``reserve.py``), which holds the bytes of the members not yet in dump.json.

The bound follows ``json_text``'s layout (``json.dumps(indent=1)``: one item per line, indented by its
depth) and counts every ``null`` and every float as the longest number json writes: a tensor leaf's
statistics are null until they are read back (from a device, or from the copy the writer thread saves),
then numbers. A leaf whose statistics come later may also gain msprobe's ``Max_except_inf_nan`` and
``Min_except_inf_nan`` keys (``msprobe.leaves.fill_statistics``): :data:`LATE_LEAF_EXTRA` bounds them. About
2.5x faster than encoding (the reserve measures every entry; rewrites encode each one once anyway).
"""

from __future__ import annotations

from json.encoder import encode_basestring_ascii
from typing import Any

from ptdbg_ascend.sinks.msprobe.json_text import indented_text

# ``-2.2250738585072014e-308``: no float (nor NaN, -Infinity) has a longer text.
LONGEST_NUMBER = 24
# The two keys a leaf filled later may gain: ",\n" + its indent + '"Max_except_inf_nan": ' + a number, twice
# (an indent of up to 64: deeper nesting than any call's arguments give).
LATE_LEAF_EXTRA = 2 * (2 + 64 + len('"Max_except_inf_nan": ') + LONGEST_NUMBER)
# What separates two members of an object: ",\n" (the indent is part of the member's text).
SEPARATOR = 2

_STRING = encode_basestring_ascii
_INT_REPR = int.__repr__


def member_length_bound(name: str, value: Any, depth: int, late_leaves: int = 0) -> int:
    """An upper bound of ``len(json_text.member_text(name, value, depth))``, also once the ``late_leaves``
    tensor leaves of ``value`` whose statistics come later are filled."""
    return depth + 1 + len(_STRING(name)) + 2 + length_bound(value, depth + 1) + late_leaves * LATE_LEAF_EXTRA


def length_bound(value: Any, level: int) -> int:
    """An upper bound of ``len(json_text.indented_text(value, level))`` (nulls and floats as the longest
    number). A value of a type JSON has no form for, or a dict with a key that is not a str, is encoded."""
    kind = type(value)
    if kind is dict:
        if not value:
            return 2
        # "{", then per item a newline and the indent (level + 1), "," between items, key, ": " and value;
        # then a newline, the indent (level) and "}": n * (level + 3) + level + 2 besides keys and values.
        total = len(value) * (level + 5) + level + 2
        deeper = level + 1
        for key, item in value.items():
            if type(key) is not str:
                return len(indented_text(value, level))
            total += len(_STRING(key)) + length_bound(item, deeper)
        return total
    if kind is list or kind is tuple:
        if not value:
            return 2
        total = len(value) * (level + 3) + level + 2
        deeper = level + 1
        for item in value:
            total += length_bound(item, deeper)
        return total
    if kind is float or value is None:
        return LONGEST_NUMBER
    if kind is str:
        return len(_STRING(value))
    if kind is bool:
        return 5
    if kind is int:
        return len(_INT_REPR(value))
    return len(indented_text(value, level))  # subclasses, numpy scalars...: as json_text writes them
