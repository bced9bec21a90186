"""The texts of a pkl line's parts, remembered: the dtype and shape texts seen (a handful of dtypes recur in
every record, and a model repeats its shapes) and the statistics texts of the last calls. The pkl writer
binds these tables as its own globals, so its per-record loop reaches them as fast as its own."""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

from ptdbg_ascend.formats import pkl
from ptdbg_ascend.formats.pkl import numbers_text

DTYPE_TEXTS: Dict[Any, str] = {}
SHAPE_TEXTS: Dict[Tuple[int, ...], str] = {}


def dtype_text(dtype: Any) -> str:
    """The pkl text of ``dtype``, remembered in :data:`DTYPE_TEXTS`."""
    text = DTYPE_TEXTS[dtype] = pkl.dtype_text(dtype)
    return text


def shape_text(shape: Tuple[int, ...]) -> str:
    """The pkl text of ``shape``, remembered in :data:`SHAPE_TEXTS` up to 65536 shapes."""
    text = pkl.shape_text(shape)
    if len(SHAPE_TEXTS) < 65536:  # a bound for models whose shapes never repeat
        SHAPE_TEXTS[shape] = text
    return text


class NumbersText:
    """:func:`formats.pkl.numbers_text`, remembered for the statistics lists of the last calls: the statistics
    cache hands out the same list object each time a tensor recurs (an output that is the next call's
    input, an in-place op's input and output), so recurring records skip the float formatting.
    Keyed by identity; the list is kept, so its id cannot be reused while it is remembered."""

    __slots__ = ("_texts",)
    LIMIT = 64

    def __init__(self) -> None:
        self._texts: Dict[int, Tuple[Any, str]] = {}

    def text(self, statistics: List[Optional[float]]) -> str:
        """The text of ``statistics``: remembered for the last :attr:`LIMIT` (64) lists."""
        entry = self._texts.get(id(statistics))
        if entry is not None and entry[0] is statistics:
            return entry[1]
        text = numbers_text(statistics)
        if len(self._texts) >= self.LIMIT:
            self._texts.clear()
        self._texts[id(statistics)] = (statistics, text)
        return text
