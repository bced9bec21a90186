"""An entry's dump.json text built straight from a call's values, for the common case of a statistics dump.

The usual way is two steps: ``msprobe/leaves.value_leaf`` builds the entry's dicts, ``json_text`` encodes
them. On a CPU statistics dump nearly every value is a plain tensor, a number or None, and building dicts
only to walk them again cost the PrecisionDebugger a third of its time per call over the legacy dump
(issue 20). :class:`EntryTexts` writes those values' text at once, through the same text functions
(``json_text.tensor_leaf_text``...), and so the same text. Anything else raises :class:`NotPlain`, and
the caller builds the dicts as before:

* a tensor that is not a dense CPU tensor of its own class (deferred to its device, a special kind), or
  whose statistics are not four finite floats (bool and complex tensors, empty ones, inf or NaN: their
  leaves have other keys);
* a value typed by its key (``device``, ``dtype``), a dict, a slice, a dtype... (``value_leaf``'s rarer
  rules).

Not used when tensors are saved, with ``summary_mode="md5"``, with the overflow check or inside a
``torch.func`` transform (the sink checks); an entry made under autocast takes the dicts too.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch

from ptdbg_ascend.msprobe.leaves import dtype_text
from ptdbg_ascend.sinks.msprobe.json_text import (indented_text, list_of_texts, member_of_text, object_of_texts,
                                                  tensor_leaf_text)

# Nesting levels of an entry's text (json.dumps(indent=1) of dump.json): the entry's member is at depth 1,
# its object at level 2, its blocks' values at 3, and the blocks' items (the leaves) at 4.
ENTRY_DEPTH, BLOCK_LEVEL, LEAF_LEVEL = 1, 3, 4

_TENSOR, _PARAMETER, _STRIDED = torch.Tensor, torch.nn.Parameter, torch.strided
_SCALAR_TYPES = {bool: "bool", int: "int", float: "float", str: "str"}  # value_leaf's {"type": ..., "value": ...}
_KEYED = ("device", "dtype")  # value_leaf types a str under these keys as a torch.device / torch.dtype


class NotPlain(Exception):
    """A value :class:`EntryTexts` leaves to the dicts (see the module docstring)."""


class EntryTexts(object):
    """Texts of a sink's entries. ``statistics_of(tensor)`` gives a tensor's ``[Max, Min, Mean, Norm]`` (the
    sink's cache, as ``value_leaf`` uses it)."""

    def __init__(self, statistics_of: Callable[[Any], List[Optional[float]]]) -> None:
        self._statistics_of = statistics_of

    def entry(self, name: str, blocks: Sequence[Tuple[str, str]]) -> str:
        """The member text of entry ``name`` with ``blocks``, ``(key, text)`` pairs from the methods below."""
        return member_of_text(name, object_of_texts(blocks, BLOCK_LEVEL - 1), ENTRY_DEPTH)

    def values_block(self, values: Sequence[Any]) -> str:
        """A block that is a list of values (``input_args``, ``output``, a backward ``input``)."""
        return list_of_texts([self.value(value, LEAF_LEVEL, None) for value in values], BLOCK_LEVEL)

    def keywords_block(self, kwargs: Dict[str, Any]) -> str:
        """``input_kwargs``."""
        return object_of_texts([(key, self.value(value, LEAF_LEVEL, key)) for key, value in kwargs.items()],
                               BLOCK_LEVEL)

    def value(self, value: Any, level: int, key: Optional[str]) -> str:
        """The text of ``value`` nested at ``level`` (``key``: its kwarg name), as ``value_leaf`` then
        ``json_text`` would write it. Raises :class:`NotPlain`."""
        kind = type(value)
        if kind is _TENSOR or kind is _PARAMETER:
            if not value.is_cpu or value.layout is not _STRIDED or value.is_nested or value.is_quantized:
                raise NotPlain()
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
            return list_of_texts([self.value(item, level + 1, None) for item in value], level)
        raise NotPlain()
