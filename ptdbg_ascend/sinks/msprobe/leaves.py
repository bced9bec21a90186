"""A tensor's dump.json leaf, exactly as msprobe 1.0.4 writes it (``reference/msprobe_1_0_4.md`` §6.2-6.3): the
typed leaf of the msprobe sink's one encoder (``encoder.py``). The numbers in it are ``statistics/``'s
(``msprobe_rules.py``); this module puts them in their keys and writes the text.

A tensor leaf's key order is ``type, dtype, shape, Max, Min, Mean, Norm, requires_grad``, then, when Max or Min
is not finite, ``Max_except_inf_nan, Min_except_inf_nan``, then its tail: ``md5``, ``data_name``,
``not_saved`` (why no file), ``tensor_kind`` (a special kind), each when present.
"""

from __future__ import annotations

import zlib
from typing import Any, Dict, List, Sequence, Tuple

from ptdbg_ascend import numpy_view
from ptdbg_ascend.sinks.msprobe.json_text import (number_text, object_of_texts, shape_text, string_text,
                                                  tensor_leaf_text, value_text)
from ptdbg_ascend.statistics.msprobe_rules import extremes_except_inf_nan
from ptdbg_ascend.statistics.pending import PendingStatistics

# A leaf's members after its statistics: (key, value) pairs, in the order of the module docstring.
Tail = Tuple[Tuple[str, Any], ...]

_DTYPE_TEXT: Dict[Any, str] = {}  # str(dtype), made once per dtype (a leaf per recorded tensor)
# The longest text of a statistic: no float (nor NaN, -Infinity) is written longer.
_LONGEST_NUMBER = -2.2250738585072014e-308
_EXCEPT_KEYS = ("Max_except_inf_nan", "Min_except_inf_nan")


def dtype_text(dtype: Any) -> str:
    """``str(dtype)``, made once per dtype."""
    text = _DTYPE_TEXT.get(dtype)
    if text is None:
        text = _DTYPE_TEXT[dtype] = str(dtype)
    return text


def crc32_hex(tensor: Any) -> str:
    """msprobe's "md5" summary: CRC-32 of the raw bytes (bf16 as float32), 8 lowercase hex digits."""
    array = numpy_view.tensor_to_numpy(tensor)  # bf16, float8, complex32 widened (numpy has no such types)
    return f"{zlib.crc32(array.tobytes()) & 0xFFFFFFFF:08x}"


def leaf_text(level: int, dtype: str, shape: Sequence[int], requires_grad: bool, numbers: Sequence[Any],
              tail: Tail = ()) -> str:
    """The text at ``level`` of a tensor leaf: ``numbers`` are Max, Min, Mean, Norm, then nothing, or the pair
    ``msprobe_rules.extremes_except_inf_nan`` reads (written as ``*_except_inf_nan`` when Max or Min is not
    finite); ``tail`` the members after them."""
    text = tensor_leaf_text(level, dtype, shape, requires_grad, numbers[:4])
    if text is not None and not tail:
        return text
    inner = level + 1
    if text is not None:  # four finite floats: the common text, its tail members before the closing brace
        members: List[Tuple[str, str]] = []
        opened = text[:-(level + 2)]
    else:
        members = [("type", '"torch.Tensor"'), ("dtype", string_text(dtype)), ("shape", shape_text(shape, inner))]
        members.extend((key, number_text(value, inner)) for key, value in zip(("Max", "Min", "Mean", "Norm"), numbers))
        members.append(("requires_grad", "true" if requires_grad else "false"))
        extremes = extremes_except_inf_nan(list(numbers))
        if extremes is not None:
            members.extend((key, number_text(value, inner)) for key, value in zip(_EXCEPT_KEYS, extremes))
        opened = None
    members.extend((key, value_text(value, inner)) for key, value in tail)
    if opened is None:
        return object_of_texts(members, level)
    indent = ",\n" + " " * inner
    return opened + "".join(indent + string_text(key) + ": " + item for key, item in members) + \
        "\n" + " " * level + "}"


class TensorLeaf:
    """A tensor leaf at ``level`` whose numbers (``pending``: a ``statistics.pending.PendingStatistics`` of the
    writer's device batch or of its thread, with msprobe's finite pair after the four numbers of a float tensor
    read back from a device) come later; ``tail`` as :func:`leaf_text`."""

    __slots__ = ("level", "dtype", "shape", "requires_grad", "pending", "tail")

    def __init__(self, level: int, dtype: str, shape: Tuple[int, ...], requires_grad: bool, pending: Any,
                 tail: Tail = ()) -> None:
        self.level, self.dtype, self.shape, self.requires_grad, self.pending, self.tail = \
            level, dtype, shape, requires_grad, pending, tail

    def read(self) -> bool:
        """Whether its numbers are in."""
        pending = self.pending
        return type(pending) is not PendingStatistics or pending.done()

    def text(self) -> str:
        """The leaf's text, once :meth:`read`."""
        return leaf_text(self.level, self.dtype, self.shape, self.requires_grad, list(self.pending), self.tail)

    def data_name(self) -> Any:
        """Its ``data_name`` (None: no file)."""
        return dict(self.tail).get("data_name")

    def longest(self) -> int:
        """An upper bound of its text's length (six statistics of the longest form). The disk reserve asks it for
        every late leaf; the part without the tail is remembered per level, dtype and shape (a step repeats
        its shapes)."""
        key = (self.level, self.dtype, self.shape)
        length = _LONGEST.get(key)
        if length is None:
            numbers = [_LONGEST_NUMBER] * 4
            text = leaf_text(self.level, self.dtype, self.shape, False, numbers)  # ("false" is longer than "true")
            pair = sum(2 + self.level + 1 + len(string_text(key)) + 2 + len(repr(_LONGEST_NUMBER))
                       for key in _EXCEPT_KEYS)
            length = len(text) + pair
            if len(_LONGEST) >= _LONGEST_MAX:  # a run with ever new shapes: start again rather than grow
                _LONGEST.clear()
            _LONGEST[key] = length
        return length + sum(2 + self.level + 1 + len(string_text(key)) + 2 + len(value_text(value, self.level + 1))
                            for key, value in self.tail)


_LONGEST: Dict[Tuple[int, str, Tuple[int, ...]], int] = {}
_LONGEST_MAX = 4096
