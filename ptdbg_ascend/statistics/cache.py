"""What was recorded of the tensors of the last call or two (:class:`StatisticsCache`), so a tensor recorded as
one call's output and the next call's input is reduced, copied and written once."""

from __future__ import annotations

import weakref
from typing import Any, Callable, Dict, Optional, Tuple

from ptdbg_ascend.statistics.eager import Statistics, tensor_statistics

# id(tensor) -> (weak reference, version counter, value, first name, generation)
_Table = Dict[int, Tuple[Any, int, Any, str, int]]


class StatisticsCache:
    """The statistics of the tensors of the last call or two, and the files they were saved to, so a tensor
    recorded as one call's output and the next call's input is reduced (and saved) once.

    Entries are checked against a weak reference and the tensor's version counter (in-place torch ops
    bump it) and live only ``max_age`` calls: writes that bypass the version counter (``p.data.copy_``,
    collectives, numpy views) cannot make a later step reuse stale numbers. Call :meth:`advance` once
    per recorded call.

    Args:
        max_age: how many :meth:`advance` calls an entry survives. Default 1 (the next call).
    """

    def __init__(self, max_age: int = 1) -> None:
        self._max_age = max_age
        self._generation = 0
        # [statistics, files]: the two tables share the rules above and are pruned at most once per call each.
        self._tables: list = [{}, {}]
        self._pruned_at = [-1, -1]

    def advance(self) -> None:
        """Start the next call (recorded or not): entries older than ``max_age`` calls become invalid."""
        self._generation += 1

    def lookup(self, tensor: Any, name: str, compute: Optional[Callable[[Any], Statistics]] = None,
               which: int = 0) -> Tuple[Statistics, Optional[str]]:
        """``(statistics, first_name)``: the statistics of ``tensor`` and the name under which the same
        unchanged tensor was recorded recently (None when it is new; it is then remembered as ``name``).
        ``compute`` gives the statistics of a new tensor (default :func:`tensor_statistics`). ``which``: the
        table (default 0, the statistics; :meth:`saved` passes 1). Called for every recorded tensor: the work is
        done here, not in a helper."""
        key = id(tensor)
        try:
            version = tensor._version
        except RuntimeError:  # inference-mode tensors have no version counter: never cached
            return (compute or tensor_statistics)(tensor), None
        table: _Table = self._tables[which]
        entry = table.get(key)
        if entry is not None and entry[0]() is tensor and entry[1] == version \
                and entry[4] >= self._generation - self._max_age:
            return entry[2], entry[3]
        value = (compute or tensor_statistics)(tensor)
        if len(table) > 256 and self._pruned_at[which] != self._generation:
            # At most once per call: within one call nothing expires, so pruning again would only
            # rebuild the dict for every further tensor of a call that records hundreds (torch.cat).
            self._pruned_at[which] = self._generation
            oldest = self._generation - self._max_age
            table = self._tables[which] = dict(item for item in table.items() if item[1][4] >= oldest)
        try:
            table[key] = (weakref.ref(tensor), version, value, name, self._generation)
        except TypeError:  # not weak-referenceable: no caching
            pass
        return value, None

    def saved(self, tensor: Any, name: str, make: Callable[[Any], Any]) -> Tuple[Any, Optional[str]]:
        """``(value, first_name)`` for a tensor about to be saved: ``first_name`` names the file the same
        unchanged tensor was saved to recently (None when it is new: it is then remembered as saved to
        ``name``, with ``make(tensor)`` as its value, e.g. the statistics its file's writer will read)."""
        return self.lookup(tensor, name, make, 1)

    def clear(self) -> None:
        """Forget everything (a new file, or a call that changes tensors behind the version counter)."""
        for table in self._tables:
            table.clear()
