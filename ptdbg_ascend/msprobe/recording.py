"""The msprobe-format recorder: :class:`MsprobeRecorder` is the one recorder (``dump/recorder.py``) with
the msprobe selection (``selection.MsprobeSelection``) and the msprobe sink
(``sinks/msprobe/sink.MsprobeSink``: dump.json entries, stack.json lines, construct.json links).

One :class:`MsprobeRecorder` lives as long as its PrecisionDebugger; ``begin_step`` points it at the
``step{N}/rank{R}`` writer of the current step, ``switch`` turns recording on and off. :func:`sink_options`
tells the sink what of the configuration it writes.
"""

from __future__ import annotations

from functools import partial
from typing import Optional

from ptdbg_ascend.config import DebuggerConfig
from ptdbg_ascend.dump.recorder import Recorder
from ptdbg_ascend.dump.selection import Unmatched
from ptdbg_ascend.formats.naming import BACKWARD, FORWARD
from ptdbg_ascend.log import logger
from ptdbg_ascend.msprobe.selection import MsprobeSelection, block_wanted
from ptdbg_ascend.overflow import detection
from ptdbg_ascend.overflow.policy import OverflowPolicy
from ptdbg_ascend.sinks.msprobe.json_writer import MsprobeJsonWriter
from ptdbg_ascend.sinks.msprobe.options import MsprobeSinkOptions, OverflowCheck
from ptdbg_ascend.sinks.msprobe.sink import MsprobeSink


class MsprobeRecorder(Recorder):
    """The one recorder (``dump/recorder.py``) with the msprobe selection and sink: records API calls
    (L1/mix) and is the sink of the module hooks (L0/mix).

    Args:
        config: the validated configuration.
        record_apis: whether API calls are recorded (levels L1 and mix).
        record_construct: whether construct.json is filled (levels L0 and mix).
    """

    def __init__(self, config: DebuggerConfig, record_apis: bool, record_construct: bool) -> None:
        self.config = config
        self.record_apis = record_apis
        self._on = False
        self.msprobe_sink = MsprobeSink(sink_options(config), record_construct, self._stopped)
        super().__init__(MsprobeSelection(config), self.msprobe_sink, stack_forward=True, stack_backward=False)
        self.recording = False
        self.step = 0  # the step of the current window, for its messages (PrecisionDebugger sets it)
        self._said = Unmatched()

    # -- lifecycle -------------------------------------------------------------------------------
    @property
    def on(self) -> bool:
        """Whether dumping is on (between start() and stop(), until an overflow stop)."""
        return self._on

    @on.setter
    def on(self, value: bool) -> None:
        self._on = value
        self.recording = value and self.record_apis and self.msprobe_sink.writer is not None

    @property
    def writer(self) -> Optional[MsprobeJsonWriter]:
        return self.msprobe_sink.writer

    @property
    def overflows(self) -> int:
        """Overflowing calls written so far (task overflow_check)."""
        return self.msprobe_sink.overflows

    def begin_step(self, writer: MsprobeJsonWriter) -> None:
        """Record into ``writer`` from now on (a new step directory)."""
        self.msprobe_sink.begin_step(writer)
        self.selection.reset()
        self.on = self._on

    def switch(self, on: bool) -> None:
        if on:
            self.selection.start_window()  # the names that match no call are said at the window's end
            # A new window: the files an earlier one saved may be in another step's directory, or removed
            # after a write error; a tensor recorded again is saved again, not linked to them. Likewise its
            # statistics are taken again: those pending in an earlier writer's batch may never be read back.
            with self._lock:
                self.statistics.clear()
        self.on = on

    def close(self) -> None:
        try:
            super().close()
        finally:
            self._say_unmatched()

    def close_cut(self, why: str) -> None:
        try:
            super().close_cut(why)
        finally:
            self._say_unmatched()

    def _say_unmatched(self) -> None:
        """The config's names that matched no call in the window that ends, said once for each new set of them
        (a run whose every step misses the same name is told once)."""
        unmatched = self.selection.unmatched()
        if unmatched and unmatched != self._said:
            logger.warning(unmatched_text(unmatched, self.config.task, self.step, self.config.module_range))
        self._said = unmatched

    def _stopped(self) -> None:
        self.on = False  # what the script does while it handles the overflow stop is not recorded


def sink_options(config: DebuggerConfig) -> MsprobeSinkOptions:
    """What the msprobe sink reads of ``config``: the blocks its ``data_mode`` dumps, whether tensors are
    summarised by md5, and for task ``overflow_check`` the overflow feature's policy and check."""
    blocks = frozenset((direction, side) for direction in (FORWARD, BACKWARD) for side in ("input", "output")
                       if block_wanted(config.data_mode, direction, side))
    overflow = None
    if config.task == "overflow_check":
        # the check is looked up at each call, so that it stays the overflow feature's one definition
        overflow = OverflowCheck(config.overflow_nums, partial(OverflowPolicy, config.overflow_nums),
                                 lambda values: detection.overflow_flag(values))
    return MsprobeSinkOptions(blocks, md5=config.task == "statistics" and config.summary_mode == "md5",
                              overflow=overflow)


def unmatched_text(unmatched: Unmatched, task: str, step: int, module_range: bool) -> str:
    """The warning of a window's ``unmatched`` names (the config's ``{task}.scope`` / ``{task}.list``) at
    ``step``; ``module_range``: the scope names modules."""
    hint = ("Names count each API's calls from 0 at every step (Torch.relu.0.forward is the first torch.relu of a "
            "step)." if not module_range else "Module names are those of construct.json (level L0 or mix).")
    if unmatched.start is not None:
        return "The start of {}.scope, {!r}, matched no call at step {}: nothing was dumped. {}".format(
            task, unmatched.start, step, hint)
    if unmatched.end is not None:
        return ("The end of {}.scope, {!r}, matched no call at step {}: every call from its start to the end of the "
                "window was dumped. {}".format(task, unmatched.end, step, hint))
    return ("{} of the {} {}.list item{} matched no call at step {}: {}{} (an item selects the calls whose name holds "
            "it, e.g. 'relu' or 'Functional.relu.0.forward').".format(
                len(unmatched.items), unmatched.total, task, "" if unmatched.total == 1 else "s", step,
                ", ".join(repr(item) for item in unmatched.items),
                "; nothing was dumped" if len(unmatched.items) == unmatched.total else ""))
