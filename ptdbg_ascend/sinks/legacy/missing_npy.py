"""Tensor records a legacy writer left without their npy: the copy of the tensor ran out of memory.

Such a record keeps its pkl line (dtype, shape, the statistics if they could be computed) and the dump goes on:
stopping a training run because the debugger could not copy one tensor would lose more than it saves. It is
never silent: :class:`MissingNpyFiles` warns at the first such record of a window and sums them up at its end,
and appends ``[record name, why]`` to the npy directory's ``.ptdbg.no_npy`` (``formats/layout.NO_NPY_FILE``)
before the record's line is written, so compare's row for it says why its file is missing
(``readers/no_npy.py``). A later record of the same unchanged tensor is copied again, never linked to the
file that was not written.
"""

from __future__ import annotations

import json
import os
from typing import Any, List, Optional, Set

from ptdbg_ascend.formats.layout import NO_NPY_FILE
from ptdbg_ascend.fs.writes import FILE_MODE, write_all
from ptdbg_ascend.log import logger
from ptdbg_ascend.memory import is_out_of_memory, out_of_memory_reason
from ptdbg_ascend.sinks.legacy.npy_files import host_copy


class MissingNpyFiles:
    """The records of one window whose npy was not written.

    Args:
        npy_dir: the window's npy directory (``.ptdbg.no_npy`` goes there); None: statistics only (nothing
            is copied, nothing is missing).
    """

    def __init__(self, npy_dir: Optional[str]) -> None:
        self.path = os.path.join(npy_dir, NO_NPY_FILE) if npy_dir is not None else ""
        self.names: Set[str] = set()
        self._order: List[str] = []
        self._reason: Optional[str] = None

    def __contains__(self, name: str) -> bool:
        return name in self.names

    def copy(self, name: str, tensor: Any) -> Any:
        """The npy copy of record ``name``'s ``tensor`` (``npy_files.host_copy``), or None when there is no
        memory for it: then noted (:meth:`note`). Any other error is raised."""
        try:
            return host_copy(tensor)
        except Exception as error:  # noqa: BLE001 - only a failed allocation is handled here
            if not is_out_of_memory(error):
                raise
            reason = out_of_memory_reason(error)
        self.note(name, reason)
        return None

    def note(self, name: str, reason: str) -> None:
        """Record ``name`` as having no npy, for ``reason``: its line in ``.ptdbg.no_npy`` (before the record's
        pkl line is written), and a warning at the first of the window."""
        if not self._order:
            logger.warning("No npy file for {}: {}. Its pkl line keeps its dtype, shape and statistics and the dump "
                           "goes on; the records of this window left so are counted at its end.".format(name, reason))
        self.names.add(name)
        self._order.append(name)
        self._reason = reason
        line = json.dumps([name, reason], ensure_ascii=True) + "\n"
        try:
            descriptor = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, FILE_MODE)
            try:
                write_all(descriptor, line.encode("ascii"))
            finally:
                os.close(descriptor)
        except OSError as error:  # the warnings still say it; the compare's row then says only "not found"
            logger.warning(f"Cannot note in {self.path} that {name} has no npy file: {error}")

    def say_summary(self) -> None:
        """Log :meth:`summary` (the window ends), if there is one."""
        summary = self.summary()
        if summary:
            logger.warning(summary)

    def summary(self) -> Optional[str]:
        """The window's sum-up (None when every record got its npy)."""
        if not self._order:
            return None
        count = len(self._order)
        return ("{} tensor record{} of this window {} no npy file: {} (the first: {}; the last: {}). Their pkl lines "
                "keep dtype, shape and statistics; compare says why in their rows (listed in {}).".format(
                    count, "" if count == 1 else "s", "has" if count == 1 else "have", self._reason, self._order[0],
                    self._order[-1], self.path))
