"""An entry's dump.json text built straight from a call's values, for the common case of a statistics dump.

The usual way is two steps: ``leaves.value_leaf`` builds the entry's dicts, ``json_text`` encodes
them. On a CPU statistics dump nearly every value is a plain tensor, a number or None, and building dicts
only to walk them again cost the PrecisionDebugger a third of its time per call over the legacy dump.
:class:`EntryTexts` writes those values' text at once, through the same text functions
(``json_text.tensor_leaf_text``...), and so the same text. Anything else raises :class:`NotPlain`, and
the caller builds the dicts as before:

* a tensor that is not a dense tensor of its own class (a special kind), a CPU one whose statistics are
  not four finite floats (bool and complex tensors, empty ones, inf or NaN: their leaves have other keys),
  or one off the CPU that is bool, complex or empty, or with no ``late`` list to collect it (below);
* a value typed by its key (``device``, ``dtype``), a dict, a slice, a dtype... (``value_leaf``'s rarer
  rules).

Not used when tensors are saved, with ``summary_mode="md5"``, with the overflow check or inside a
``torch.func`` transform (the sink checks); an entry made under autocast takes the dicts too.

A tensor whose statistics are read back later (off the CPU, ``statistics/device_batch.DeviceStatisticsBatch``) is
written as :data:`PLACEHOLDER` when the caller collects :class:`LateLeaf` objects (``late``): the entry is then
an :class:`EntryTemplate`, its text with a placeholder per such leaf, finished once their numbers are read
(``entries.py``). An in-place call's inputs are taken so too, before the call; when the rest of its entry
must be dicts, :func:`late_text_value` turns their text into dicts. Why: on an accelerator the dicts of every
entry waited for their batch (up to a second, or thousands of entries) and were walked again and again by
Python's garbage collector, then encoded.
"""

from __future__ import annotations

import json
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch

from ptdbg_ascend.sinks.msprobe.json_text import (indented_text, list_of_texts, member_of_text, object_of_texts,
                                                  tensor_leaf_text)
from ptdbg_ascend.sinks.msprobe.leaves import blank_leaf, dtype_text, fill_statistics
from ptdbg_ascend.statistics.msprobe_rules import defer_candidate
from ptdbg_ascend.statistics.pending import PendingStatistics

# Nesting levels of an entry's text (json.dumps(indent=1) of dump.json): the entry's member is at depth 1,
# its object at level 2, its blocks' values at 3, and the blocks' items (the leaves) at 4.
ENTRY_DEPTH, BLOCK_LEVEL, LEAF_LEVEL = 1, 3, 4

_TENSOR, _PARAMETER, _STRIDED = torch.Tensor, torch.nn.Parameter, torch.strided
_SCALAR_TYPES = {bool: "bool", int: "int", float: "float", str: "str"}  # value_leaf's {"type": ..., "value": ...}
_KEYED = ("device", "dtype")  # value_leaf types a str under these keys as a torch.device / torch.dtype


# Stands for a late leaf's text in an entry's text: a NUL never occurs in JSON text (json escapes it in strings).
PLACEHOLDER = "\x00"
# The longest number a statistic is written with (its text length bounds a late leaf's, for the disk reserve).
_LONGEST_NUMBER = -2.2250738585072014e-308


class NotPlain(Exception):
    """A value :class:`EntryTexts` leaves to the dicts (see the module docstring)."""


class LateLeaf(object):
    """A tensor leaf at ``level`` whose statistics (``pending``: a ``statistics.pending.PendingStatistics`` of
    the writer's device batch, with msprobe's finite pair after the four numbers of a float tensor) are read
    back later."""

    __slots__ = ("level", "dtype", "shape", "requires_grad", "pending")

    def __init__(self, level: int, dtype: str, shape: Tuple[int, ...], requires_grad: bool, pending: Any) -> None:
        self.level, self.dtype, self.shape, self.requires_grad, self.pending = level, dtype, shape, requires_grad, \
            pending

    def read(self) -> bool:
        """Whether its numbers are in."""
        pending = self.pending
        return type(pending) is not PendingStatistics or pending.done()

    def text(self) -> str:
        """The leaf's text once :meth:`read`: ``leaves.tensor_leaf``'s leaf filled by
        ``fill_statistics``, as ``json_text`` writes it."""
        numbers = list(self.pending)
        text = tensor_leaf_text(self.level, self.dtype, list(self.shape), self.requires_grad, numbers[:4])
        if text is not None:
            return text
        leaf = self.leaf()
        fill_statistics(leaf, numbers)
        return indented_text(leaf, self.level)

    def leaf(self) -> Dict[str, Any]:
        """Its leaf dict, statistics still null."""
        return blank_leaf(self.dtype, list(self.shape), self.requires_grad)

    def longest(self) -> int:
        """An upper bound of its text's length (six statistics of the longest form). Remembered per level,
        dtype and shape: the disk reserve asks it for every late leaf, and a step repeats its shapes."""
        key = (self.level, self.dtype, self.shape)
        length = _LONGEST.get(key)
        if length is None:
            leaf = blank_leaf(self.dtype, list(self.shape), False)  # ("false" is longer than "true")
            leaf.update((key, _LONGEST_NUMBER) for key in ("Max", "Min", "Mean", "Norm"))
            leaf.update((key, _LONGEST_NUMBER) for key in ("Max_except_inf_nan", "Min_except_inf_nan"))
            length = len(indented_text(leaf, self.level))
            if len(_LONGEST) >= _LONGEST_MAX:  # a run with ever new shapes: start again rather than grow
                _LONGEST.clear()
            _LONGEST[key] = length
        return length


_LONGEST = {}  # type: Dict[Tuple[int, str, Tuple[int, ...]], int]
_LONGEST_MAX = 4096


class EntryTemplate(object):
    """An entry's member text with a :data:`PLACEHOLDER` for each of its ``late`` leaves, in order."""

    __slots__ = ("text", "late")

    def __init__(self, text: str, late: List[LateLeaf]) -> None:
        self.text, self.late = text, late

    def read(self) -> bool:
        """Whether every late leaf's numbers are in."""
        return all(leaf.read() for leaf in self.late)

    def render(self) -> str:
        """The finished member text (once :meth:`read`)."""
        parts = self.text.split(PLACEHOLDER)
        pieces = [parts[0]]
        for leaf, part in zip(self.late, parts[1:]):
            pieces.append(leaf.text())
            pieces.append(part)
        return "".join(pieces)

    def longest(self) -> int:
        """An upper bound of :meth:`render`'s length."""
        return len(self.text) - len(self.late) + sum(leaf.longest() for leaf in self.late)


def late_text_value(text: str, late: List[LateLeaf], waiting: List[Tuple[Dict[str, Any], Any]]) -> Any:
    """The value that JSON ``text`` with a :data:`PLACEHOLDER` per leaf of ``late`` (in order) stands for, as
    dicts: each late leaf is ``leaves.tensor_leaf``'s leaf dict, filled now when its numbers are
    in, else appended to ``waiting`` with its pending numbers (to be filled when they are read back)."""
    pieces = text.split(PLACEHOLDER)
    # An object keyed by NUL stands for late leaf i: no value the text path writes is such an object.
    value = json.loads(pieces[0] + "".join('{"\\u0000": %d}' % index + piece
                                           for index, piece in enumerate(pieces[1:])))

    def leaf_of(item: Any) -> Any:
        if type(item) is dict:
            if len(item) == 1 and PLACEHOLDER in item:
                late_leaf = late[item[PLACEHOLDER]]
                leaf = late_leaf.leaf()
                if late_leaf.read():
                    fill_statistics(leaf, list(late_leaf.pending))
                else:
                    waiting.append((leaf, late_leaf.pending))
                return leaf
            return {key: leaf_of(member) for key, member in item.items()}
        if type(item) is list:
            return [leaf_of(member) for member in item]
        return item

    return leaf_of(value)


class EntryTexts(object):
    """Texts of a sink's entries. ``statistics_of(tensor)`` gives a tensor's ``[Max, Min, Mean, Norm]`` (the
    sink's cache, as ``value_leaf`` uses it)."""

    def __init__(self, statistics_of: Callable[[Any], List[Optional[float]]], defer_cpu: bool = False) -> None:
        """``defer_cpu`` (default False): CPU tensors take the late path too (as tests emulate an accelerator:
        ``statistics.planner.DEFAULTS.defer_cpu``)."""
        self._statistics_of = statistics_of
        self._defer_cpu = defer_cpu
        # ``pending_of(tensor)``: the statistics of a tensor read back later (the current writer's batch,
        # through the sink's cache); None: such tensors raise NotPlain.
        self.pending_of = None  # type: Optional[Callable[[Any], Any]]

    def entry(self, name: str, blocks: Sequence[Tuple[str, str]]) -> str:
        """The member text of entry ``name`` with ``blocks``, ``(key, text)`` pairs from the methods below."""
        return member_of_text(name, object_of_texts(blocks, BLOCK_LEVEL - 1), ENTRY_DEPTH)

    def values_block(self, values: Sequence[Any], late: Optional[List[LateLeaf]] = None) -> str:
        """A block that is a list of values (``input_args``, ``output``, a backward ``input``). ``late``
        (default None) collects the leaves whose statistics come later (see the module docstring)."""
        return list_of_texts([self.value(value, LEAF_LEVEL, None, late) for value in values], BLOCK_LEVEL)

    def keywords_block(self, kwargs: Dict[str, Any], late: Optional[List[LateLeaf]] = None) -> str:
        """``input_kwargs``."""
        return object_of_texts([(key, self.value(value, LEAF_LEVEL, key, late)) for key, value in kwargs.items()],
                               BLOCK_LEVEL)

    def value(self, value: Any, level: int, key: Optional[str], late: Optional[List[LateLeaf]] = None) -> str:
        """The text of ``value`` nested at ``level`` (``key``: its kwarg name), as ``value_leaf`` then
        ``json_text`` would write it, or :data:`PLACEHOLDER` for a leaf appended to ``late``. Raises
        :class:`NotPlain`."""
        kind = type(value)
        if kind is _TENSOR or kind is _PARAMETER:
            if value.layout is not _STRIDED or value.is_nested or value.is_quantized:
                raise NotPlain()
            if not value.is_cpu or self._defer_cpu:
                return self._late_leaf(value, level, late)
            try:
                statistics = self._statistics_of(value)
            except (RuntimeError, TypeError, ValueError, NotImplementedError):  # value_leaf's special leaf then
                raise NotPlain() from None
            text = tensor_leaf_text(level, dtype_text(value.dtype), list(value.shape), bool(value.requires_grad),
                                    statistics)
            if text is None:
                raise NotPlain()
            return text
        if value is None:
            return "null"
        type_name = _SCALAR_TYPES.get(kind)
        if type_name is not None and not (kind is str and key in _KEYED):
            return indented_text({"type": type_name, "value": value}, level)
        if kind is list or kind is tuple:
            return list_of_texts([self.value(item, level + 1, None, late) for item in value], level)
        raise NotPlain()

    def _late_leaf(self, tensor: Any, level: int, late: Optional[List[LateLeaf]]) -> str:
        pending_of = self.pending_of
        # Bool, complex, empty and meta tensors take msprobe's other rules (the dicts: value_leaf).
        if late is None or pending_of is None or not defer_candidate(tensor, True):
            raise NotPlain()
        late.append(LateLeaf(level, dtype_text(tensor.dtype), tuple(tensor.shape), bool(tensor.requires_grad),
                             pending_of(tensor)))
        return PLACEHOLDER
