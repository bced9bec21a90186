"""``FlightRecorder``: the statistics of the last steps, kept in memory, written only when something goes wrong.

.. code-block:: python

    from ptdbg_ascend import FlightRecorder
    with FlightRecorder("./flight", last_steps=4) as recorder:     # start() on entry
        for batch in loader:
            loss = train_one_step(batch)
            recorder.step(loss)

Every API call (and, with ``model``, every module call) of the last ``last_steps`` steps is recorded as a
PrecisionDebugger statistics dump at level L1 (mix with ``model``) would record it, into memory
(``memory_writer.MemoryStepWriter``). Nothing is written while training is healthy. A trigger (``triggers.py``) writes
the kept steps as ordinary dumps, ``{dump_path}/step{N}/rank{R}/dump.json`` + ``stack.json`` (+ ``construct.json``
with ``model``), and ``{dump_path}/trigger.json``. Triggers are checked at :meth:`FlightRecorder.step` (outputs and
loss), when an exception leaves the ``with`` block (or the process, uncaught), and on SIGTERM.

Under torch.distributed, :meth:`FlightRecorder.step` agrees on the triggers with one all_reduce of one number per
step: every rank writes its kept steps when one fires, and the lowest rank that fired writes trigger.json.
"""

from __future__ import annotations

import atexit
import os
import signal
import sys
import threading
from collections import deque
from typing import Any, List, Optional, Tuple

from ptdbg_ascend.errors import CallOrderError, ParameterError, PtdbgError
from ptdbg_ascend.flight import triggers
from ptdbg_ascend.flight.memory_writer import MemoryStepWriter
from ptdbg_ascend.inside import Inside
from ptdbg_ascend.log import logger

DEFAULT_MAX_BYTES = 256 * 1024 * 1024
ON_TRIGGER = ("stop", "continue")


class FlightRecorderTriggered(PtdbgError, RuntimeError):
    """Raised by :meth:`FlightRecorder.step` after a trigger wrote the kept steps (``on_trigger="stop"``)."""


class FlightRecorder:
    """Keep the statistics of every API call of the last steps in memory; write them when training goes wrong.

    Args:
        dump_path: where a trigger writes ``step{N}/rank{R}/`` and ``trigger.json`` (nothing is created before).
        last_steps: how many steps are kept, the current one included. Default 4.
        loss_spike: a loss given to :meth:`step` above this many times the median of the recent steps' losses
            fires (None: only a non-finite loss does). Default 10.0.
        model: a ``torch.nn.Module`` whose module calls are recorded too (level mix). Default None (level L1).
        on_trigger: "stop" (default): :meth:`step` raises :class:`FlightRecorderTriggered` after writing;
            "continue": training goes on (the recorder fires once per run).
        max_bytes: the memory bound of the kept texts (oldest step dropped first; a step alone beyond it keeps
            its first calls). Default 256 MiB.
    """

    def __init__(self, dump_path: str, last_steps: int = 4, loss_spike: Optional[float] = 10.0, model: Any = None,
                 on_trigger: str = "stop", max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        from ptdbg_ascend.config import load_config

        _check_arguments(last_steps, loss_spike, on_trigger, max_bytes)
        if model is not None:
            import torch

            if not isinstance(model, torch.nn.Module):
                raise ParameterError("model", type(model).__name__, "must be a torch.nn.Module or None")
        if isinstance(dump_path, os.PathLike):
            dump_path = os.fspath(dump_path)
        if not isinstance(dump_path, str):
            raise ParameterError("dump_path", dump_path, "must be a directory path (str or os.PathLike)")
        self.config = load_config(task="statistics", dump_path=dump_path, level="mix" if model is not None else "L1")
        self.dump_path = self.config.dump_path
        self.last_steps, self.on_trigger, self.max_bytes = last_steps, on_trigger, max_bytes
        self.model = model
        self.current_step = 0
        self.fired: Optional[Tuple[int, str]] = None  # (step, reason) of the trigger that wrote
        self._losses = triggers.LossWatch(loss_spike, window=max(last_steps, 3))
        self._kept: deque = deque(maxlen=last_steps)
        self._written_steps: List[int] = []
        self._fired_detail = ""
        self._kept_total = 0  # the bytes of the kept steps (each MemoryStepWriter's ``bytes``, summed)
        self._recorder: Optional[Any] = None
        self._module_hooks: Optional[Any] = None
        self._previous_sigterm: Any = None
        self._started = False
        self._said_truncated = False
        self._exit_hook = False

    # -- the public API ----------------------------------------------------------------------------
    def start(self) -> None:
        """Record from now on (wraps the torch APIs; installs the SIGTERM handler when called on the main
        thread). A second call does nothing."""
        if self._started:
            return
        from ptdbg_ascend.dump.prebound import rebind as rebind_prebound
        from ptdbg_ascend.dump.session import get_session
        from ptdbg_ascend.msprobe.recording import MsprobeRecorder

        session = get_session()
        level = self.config.level
        if self._recorder is None:
            self._recorder = MsprobeRecorder(self.config, record_apis=True, record_construct=level == "mix")
        session.ensure_wrapped(self.config.extra_apis)
        rebind_prebound(session, self.model)
        session.add_observer(self._recorder)
        if self.model is not None and self._module_hooks is None:
            from ptdbg_ascend.msprobe.modules import ModuleHooks

            self._module_hooks = ModuleHooks(self.model, self._recorder)
        self._begin_step()
        self._recorder.switch(True)
        self._started = True
        self._install_sigterm()
        if not self._exit_hook:
            atexit.register(self._at_exit)
            self._exit_hook = True

    def step(self, loss: Any = None) -> None:
        """End the current step: check its triggers (``loss``: the step's loss, a number or a one-element tensor;
        default None), write the kept steps when one fires, and start the next step. Raises
        :class:`FlightRecorderTriggered` after writing (``on_trigger="stop"``), ``DumpWriteError`` when the files
        cannot be written (a full disk: the path and the error)."""
        if not self._started:
            raise CallOrderError("FlightRecorder.step() before start(): call start() once before the training loop "
                                 "(or use the recorder as a context manager).")
        with Inside():  # the recorder's own torch calls (the loss read, the all_reduce) are not recorded
            fired, first, writes_file = self._check(loss)
            written = fired is not None and self._fire(fired[0], fired[1], first, writes_file)
        if written and self.on_trigger == "stop":
            self.stop()
            raise FlightRecorderTriggered("The flight recorder fired at step {} ({}): steps {} are in {}, and {} says "
                                          "why; training stops (on_trigger='continue' goes on).".format(
                                              self.current_step, self._fired_detail, self.fired_steps, self.dump_path,
                                              os.path.join(self.dump_path, triggers.TRIGGER_FILE)))
        from ptdbg_ascend.dump.session import get_session

        self.current_step += 1
        get_session().reset_counters()
        if self._module_hooks is not None:
            self._module_hooks.reset_counters()
        self._begin_step()
        self._recorder.switch(True)  # a new step's statistics are taken again (the cache's pending ones included)

    def stop(self) -> None:
        """Stop recording (the kept steps are dropped unless a trigger wrote them). Idempotent."""
        if not self._started:
            return
        from ptdbg_ascend.dump.session import get_session

        self._started = False
        self._recorder.switch(False)
        get_session().remove_observer(self._recorder)
        self._restore_sigterm()
        if self._kept:
            with Inside():  # the current step's queued tensors are launched and read, so nothing stays queued
                self._kept[-1].resolve()
        self._kept.clear()  # written by a trigger, or no longer wanted: the memory goes back
        self._kept_total = 0

    def __enter__(self) -> "FlightRecorder":
        self.start()
        return self

    def __exit__(self, kind: Any, error: Any, traceback: Any) -> bool:
        try:
            # An exception leaving the loop fires (not Ctrl-C nor sys.exit, which are not failures; not our own).
            if self._started and isinstance(error, Exception) and not isinstance(error, FlightRecorderTriggered):
                self._fire_quietly(triggers.EXCEPTION, f"{kind.__name__}: {error}"[:500])
        finally:
            self.stop()
        return False

    @property
    def kept_bytes(self) -> int:
        """The bytes the kept steps take now (the bound is ``max_bytes``; 0 after :meth:`stop`)."""
        return self._kept_total

    @property
    def fired_steps(self) -> List[int]:
        """The steps written by the trigger (empty before one)."""
        return list(self._written_steps) if self.fired is not None else []

    # -- triggers ------------------------------------------------------------------------------
    def _check(self, loss: Any) -> Tuple[Optional[Tuple[str, str]], Optional[str], bool]:
        """``((reason, detail) or None, the first non-finite output or None, whether this rank writes
        trigger.json)`` for the step that ends."""
        current = self._kept[-1]
        current.resolve()
        fired = self._losses.check(loss)
        first = triggers.first_nonfinite(current.finished())
        if first is not None:
            fired = (triggers.NONFINITE_OUTPUT, f"{first} holds an inf or NaN"
                     + (f"; {fired[1]}" if fired is not None else ""))
        fired, writes_file = _agreed(fired, first, self.current_step)
        return fired, first, writes_file

    def _fire(self, reason: str, detail: str, first: Optional[str], writes_file: bool = True) -> bool:
        """Write the kept steps and trigger.json; False when an earlier trigger already did (once per run)."""
        if self.fired is not None:
            logger.warning(f"The flight recorder fires again at step {self.current_step} ({detail}); it writes once "
                           f"per run: the steps of step {self.fired[0]} are in {self.dump_path}.")
            return False
        rank = self._rank()
        first, code_line = self._first_nonfinite(first)
        self.fired = (self.current_step, reason)
        self._written_steps = [writer.step for writer in self._kept]
        for writer in list(self._kept):
            writer.write()
        if writes_file:
            triggers.write_trigger(self.dump_path, self.current_step, rank, reason, first, code_line, detail,
                                   self._written_steps)
        if code_line is not None:
            detail += (f"; its call: {code_line}" if reason == triggers.NONFINITE_OUTPUT
                       else f"; the first inf/NaN output, {first}, is made at {code_line}")
        self._fired_detail = detail
        logger.warning("The flight recorder fired at step {} ({}): steps {} written in {}.".format(
            self.current_step, detail, self._written_steps, self.dump_path))
        return True

    def _first_nonfinite(self, first: Optional[str]) -> Tuple[Optional[str], Optional[str]]:
        """``(record, the user's code line of its call)``: ``first`` (found in the current step), else the first
        non-finite output of the kept steps, oldest first; ``(None, None)`` when there is none."""
        if first is not None:
            found = [(first, self._kept[-1])]
        else:
            found = [(record, writer) for writer in self._kept
                     for record in [triggers.first_nonfinite(writer.finished())] if record is not None][:1]
        if not found:
            return None, None
        record, writer = found[0]
        return record, triggers.user_code_line(writer.stack_lines(triggers.entry_of(record)))

    def _fire_quietly(self, reason: str, detail: str) -> None:
        """:meth:`_fire` where an error must not hide the one that is leaving (an exception, SIGTERM, the exit)."""
        try:
            with Inside():
                self._kept[-1].resolve()
                self._fire(reason, detail, None)
        except Exception as error:  # noqa: BLE001 - said, the original exit goes on
            logger.error(f"The flight recorder could not write its steps at step {self.current_step}: {error}")

    def _at_exit(self) -> None:
        kind = getattr(sys, "last_type", None)  # an uncaught exception (set before the exit handlers run)
        if self._started and kind is not None and issubclass(kind, Exception) \
                and not issubclass(kind, FlightRecorderTriggered):
            self._fire_quietly(triggers.EXCEPTION, f"{kind.__name__}: {sys.last_value}"[:500])

    def _install_sigterm(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return  # signal handlers can only be set on the main thread; said in the docs
        self._previous_sigterm = signal.signal(signal.SIGTERM, self._on_sigterm)

    def _restore_sigterm(self) -> None:
        previous, self._previous_sigterm = self._previous_sigterm, None
        if previous is not None and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, previous)

    def _on_sigterm(self, signum: int, frame: Any) -> None:
        previous = self._previous_sigterm
        self._fire_quietly(triggers.SIGTERM, f"SIGTERM at step {self.current_step}")
        self.stop()
        if callable(previous):
            previous(signum, frame)
        elif previous != signal.SIG_IGN:  # the default action: end the process as SIGTERM would have
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)

    # -- steps -----------------------------------------------------------------------------------
    def _begin_step(self) -> None:
        from ptdbg_ascend.formats.layout import step_rank_dir

        directory = step_rank_dir(self.dump_path, self.current_step, self._rank())
        if len(self._kept) == self.last_steps:  # the oldest goes out as the new one comes in (the deque's maxlen)
            self._kept_total -= self._kept[0].bytes
        self._kept.append(MemoryStepWriter(directory, self.current_step, self.config.level, self._room))
        self._recorder.begin_step(self._kept[-1])

    def _room(self, size: int) -> bool:
        """Whether ``size`` more bytes may be kept: the oldest kept steps are dropped to make room."""
        if self._kept_total + size <= self.max_bytes:  # (every member of every call passes here)
            self._kept_total += size
            return True
        kept = self._kept
        while self._kept_total + size > self.max_bytes and len(kept) > 1:
            self._kept_total -= kept.popleft().bytes
        if self._kept_total + size <= self.max_bytes:
            self._kept_total += size
            return True
        if not self._said_truncated:
            self._said_truncated = True
            logger.warning("The flight recorder keeps at most {} bytes (max_bytes): step {} alone is larger, its "
                           "later calls are not kept.".format(self.max_bytes, self.current_step))
        return False

    @staticmethod
    def _rank() -> Optional[int]:
        from ptdbg_ascend.dump.session import get_session

        return get_session().known_rank()


def _agreed(fired: Optional[Tuple[str, str]], first: Optional[str], step: int) -> Tuple[Optional[Tuple[str, str]], bool]:
    """Under torch.distributed (world > 1): whether any rank fired at ``step`` (one all_reduce of one number), and
    whether this rank writes trigger.json: the lowest rank whose first non-finite output it produced itself, else
    the lowest rank that fired (an inf that came in through a collective, ``Distributed.*``, spread from another
    rank). Else ``(fired, True)``."""
    import torch

    distributed = torch.distributed
    if not (distributed.is_available() and distributed.is_initialized()) or distributed.get_world_size() < 2:
        return fired, True
    world, rank = distributed.get_world_size(), distributed.get_rank()
    priority = 0 if fired is None else 1 if first is not None and first.startswith("Distributed.") else 2
    device = "cpu"
    if distributed.get_backend() == "nccl":
        device = f"cuda:{torch.cuda.current_device()}"
    elif distributed.get_backend() == "hccl":
        device = f"npu:{torch.npu.current_device()}"
    flag = torch.tensor([priority * world + world - 1 - rank if priority else 0], dtype=torch.int64, device=device)
    distributed.all_reduce(flag, op=distributed.ReduceOp.MAX)
    top = int(flag.item())
    if top == 0:
        return None, False
    origin = world - 1 - top % world
    if fired is None:
        return (triggers.OTHER_RANK, f"rank {origin} fired at step {step}"), False
    return fired, origin == rank


def _check_arguments(last_steps: Any, loss_spike: Any, on_trigger: Any, max_bytes: Any) -> None:
    if type(last_steps) is not int or last_steps < 1:
        raise ParameterError("last_steps", last_steps, "must be an int >= 1")
    if loss_spike is not None and (type(loss_spike) not in (int, float) or not loss_spike > 1):
        raise ParameterError("loss_spike", loss_spike, "must be a number > 1, or None (only a non-finite loss fires)")
    if on_trigger not in ON_TRIGGER:
        raise ParameterError("on_trigger", on_trigger, "must be 'stop' or 'continue'")
    if type(max_bytes) is not int or max_bytes < 1:
        raise ParameterError("max_bytes", max_bytes, "must be an int >= 1 (bytes)")
