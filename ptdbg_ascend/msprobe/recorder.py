"""The msprobe-format recorder: :class:`MsprobeRecorder` is the one recorder (``dump/recorder.py``) with
the msprobe selection (``selection.MsprobeSelection``) and the msprobe sink
(``sinks/msprobe/sink.MsprobeSink``: dump.json entries, stack.json lines, construct.json links).

One :class:`MsprobeRecorder` lives as long as its PrecisionDebugger; ``begin_step`` points it at the
``step{N}/rank{R}`` writer of the current step, ``switch`` turns recording on and off.
"""

from __future__ import annotations

from typing import Optional

from ptdbg_ascend.config import DebuggerConfig
from ptdbg_ascend.dump.recorder import Recorder
from ptdbg_ascend.msprobe.selection import MsprobeSelection
from ptdbg_ascend.sinks.msprobe.json_writer import MsprobeJsonWriter
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
        self.msprobe_sink = MsprobeSink(config, record_construct, self._stopped)
        super().__init__(MsprobeSelection(config), self.msprobe_sink, stack_forward=True, stack_backward=False)
        self.recording = False

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
            # A new window: the files an earlier one saved may be in another step's directory, or removed
            # after a write error; a tensor recorded again is saved again, not linked to them. Likewise its
            # statistics are taken again: those pending in an earlier writer's batch may never be read back.
            with self._lock:
                self.statistics.clear()
        self.on = on

    def _stopped(self) -> None:
        self.on = False  # what the script does while it handles the overflow stop is not recorded
