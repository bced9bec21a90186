"""``PrecisionDebugger``: the msprobe 1.0.4-style front-end, on the same dump engine as the legacy calls.

.. code-block:: python

    from ptdbg_ascend import PrecisionDebugger
    debugger = PrecisionDebugger(config_path="./config.json")   # or task=, dump_path=, level=, step=, model=
    for batch in loader:
        debugger.start(); train_one_step(batch); debugger.stop(); debugger.step()

writes ``{dump_path}/step{N}/rank{R}/dump.json`` (+ ``stack.json``, ``construct.json``,
``dump_tensor_data/*.pt`` for the tensor and overflow_check tasks) in msprobe 1.0.4's format.

Differences from msprobe 1.0.4 (its quirks, ``reference/msprobe_1_0_4.md`` §12, are not copied):

* ``start()`` after the last listed step does nothing (1.0.4 raised and killed training);
* a second start()/stop() window in one step adds to the step's dump instead of wiping it;
* a ``rank`` list in a run without torch.distributed selects by the device index (0 on CPU);
* dropout is left alone (``seed_all(..., rm_dropout=True)`` opts in), as for the legacy calls;
* instances are independent objects, not a singleton.
"""

from __future__ import annotations

from typing import Any, List, Optional

from ptdbg_ascend.config import DebuggerConfig, load_config
from ptdbg_ascend.errors import ParameterError
from ptdbg_ascend.log import logger


class PrecisionDebugger:
    """Dump a training run in msprobe 1.0.4's format.

    Args:
        config_path: a msprobe 1.0.4 ``config.json``. Default None: msprobe's defaults (task
            statistics, level L1, dump_path "./dump_path").
        task: overrides the file's ``task`` ("statistics", "tensor", "overflow_check", "run_ut", "grad_probe",
            "free_benchmark").
        dump_path: overrides the file's ``dump_path``.
        level: overrides the file's ``level`` ("L0", "L1", "mix", "L2").
        model: the ``torch.nn.Module`` whose submodules are dumped; required at levels L0 and mix.
        step: overrides the file's ``step`` (a list of ints).

    Raises:
        ParameterError: an invalid config value or argument (names the key, the value, what is allowed).
        FileFormatError: the config file is missing or not JSON.
        DeviceUnavailableError: level L2 without an Ascend NPU (torch_npu).
    """

    def __init__(self, config_path: Optional[str] = None, task: Optional[str] = None,
                 dump_path: Optional[str] = None, level: Optional[str] = None, model: Any = None,
                 step: Optional[List[int]] = None) -> None:
        config = load_config(config_path, task=task, dump_path=dump_path, level=level, step=step)
        import torch

        if model is not None and not isinstance(model, torch.nn.Module):
            raise ParameterError("model", type(model).__name__, "must be a torch.nn.Module or None")
        if config.level in ("L0", "mix") and model is None:
            raise ParameterError("model", None, f"a torch.nn.Module is required at level {config.level}",
                                 "Pass PrecisionDebugger(..., model=model), or use level L1 (APIs only).")
        if config.module_range and config.level not in ("L0", "mix"):
            raise ParameterError(f"{config.task}.scope", list(config.scope),
                                 f"module names (Module....) need level L0 or mix, not {config.level}")
        self._l2: Optional[Any] = None
        if config.level == "L2":
            from ptdbg_ascend.msprobe.level_l2 import AclLevelDump

            self._l2 = AclLevelDump(config)
        if config.enable_dataloader:
            raise ParameterError("enable_dataloader", True, "must be false in ptdbg_ascend",
                                 "Call start()/stop()/step() around each step instead.")
        if config.task != "grad_probe":  # (1.0.4 seeds every task but grad_probe, which only watches gradients)
            from ptdbg_ascend.seed import seed_all

            seed_all(config.seed, config.is_deterministic)
        self.config: DebuggerConfig = config
        from ptdbg_ascend.call_log import record_debugger_config

        record_debugger_config(config.to_dict())  # (ptdbg export-config of a script already on this API)
        self._grad_monitor: Optional[Any] = None
        self._free_benchmark: Optional[Any] = None
        self.model = model
        self.current_step = 0
        self._recorder: Optional[Any] = None
        self._module_hooks: Optional[Any] = None
        self._background: Optional[Any] = None
        self._writer_step: Optional[int] = None
        self._rank_checked = False
        self._rank_selected = True
        self._told_past_last_step = False
        self._started = False

    # -- the public API ----------------------------------------------------------------------------
    def monitor(self, model: Any) -> None:
        """Task grad_probe: summarise the gradients of ``model``'s parameters before every optimizer step
        (``grad_probe/monitor.py``; start/stop/step do nothing for this task, as in 1.0.4)."""
        if self.config.task != "grad_probe":
            raise ParameterError("task", self.config.task, "must be 'grad_probe' for monitor()",
                                 "monitor(model) watches gradients; the dump tasks use start()/stop()/step().")
        if self._grad_monitor is None:
            from ptdbg_ascend.grad_probe.monitor import GradientMonitor

            self._grad_monitor = GradientMonitor(self.config)
        self._grad_monitor.monitor(model)

    def start(self) -> None:
        """Turn dumping on for the current step (no-op on an unlisted step or an unselected rank, and for task
        grad_probe, which :meth:`monitor` runs)."""
        if self.config.task == "grad_probe" or not self._step_selected() or not self._rank_is_selected():
            return
        from ptdbg_ascend.dump.prebound import rebind as rebind_prebound
        from ptdbg_ascend.dump.session import get_session

        session = get_session()
        if self.config.task == "free_benchmark":
            self._start_free_benchmark(session)
            return
        if self._l2 is not None:
            self._l2.start(session)
            self._started = True
            logger.info("Dump switch is turned on at step {} (level L2: ACL dump of {}).".format(
                self.current_step, self.config.scope[0]))
            return
        recorder = self._ensure_recorder()
        if self.config.level in ("L1", "mix"):
            session.ensure_wrapped(self.config.extra_apis)  # the config's list: the original 4.0's (+ extras)
            rebind_prebound(session, self.model)  # references to originals taken before start()
        # Registered at every level: a run that dies before stop() still gets its JSON files at exit.
        session.add_observer(recorder)
        if self.config.level in ("L0", "mix") and self._module_hooks is None:
            from ptdbg_ascend.msprobe.modules import ModuleHooks

            self._module_hooks = ModuleHooks(self.model, recorder)
        if self._writer_step != self.current_step:
            recorder.begin_step(self._new_writer())
            self._writer_step = self.current_step
            logger.info(f"Dump data will be saved in {recorder.writer.directory}.")
        # One writer per step/rank directory: a second process gets a DumpPathError here.
        try:
            recorder.writer.claim()
        except BaseException:
            session.remove_observer(recorder)  # the window never started: nothing to write at exit
            raise
        recorder.step = self.current_step
        recorder.switch(True)
        self._started = True
        logger.info(f"Dump switch is turned on at step {self.current_step}.")

    def stop(self) -> None:
        """Turn dumping off and write dump.json, stack.json and construct.json of this step. Raises
        DumpWriteError when a write failed (disk full) and no record has raised it yet: the files then
        hold every entry finished before the error (doc/safety_guide.md)."""
        if not self._started:
            return
        from ptdbg_ascend.dump.session import get_session

        self._started = False
        if self._free_benchmark is not None:
            get_session().remove_observer(self._free_benchmark)
            self._free_benchmark.end_window()
            return
        if self._l2 is not None:
            self._l2.stop(get_session())
            return
        recorder = self._recorder
        recorder.switch(False)
        get_session().remove_observer(recorder)
        recorder.close()  # writes the JSON files and releases the rank directory's lock
        logger.info("Dump switch is turned off at step {}; dump.json is in {}.".format(
            self.current_step, recorder.writer.directory))

    def step(self) -> None:
        """Advance the step counter and restart the API and module counters at 0."""
        from ptdbg_ascend.dump.session import get_session

        if self._started:
            self.stop()
        self.current_step += 1
        get_session().reset_counters()
        if self._module_hooks is not None:
            self._module_hooks.reset_counters()

    def forward_backward_dump_end(self) -> None:
        """Stop dumping and counting torch API calls for the rest of the step (the original torch
        functions are restored; the next ``start()`` wraps them again). Module hooks stay on."""
        from ptdbg_ascend.dump.session import get_session

        logger.info("Data needed ends here.")
        session = get_session()
        if self._recorder is not None:
            session.remove_observer(self._recorder)
        session.unwrap()

    # -- helpers ---------------------------------------------------------------------------------
    def _start_free_benchmark(self, session: Any) -> None:
        """Task free_benchmark: the selected calls of this window are perturbed (``free_benchmark/``)."""
        from ptdbg_ascend.dump.prebound import rebind as rebind_prebound

        if self._free_benchmark is None:
            from ptdbg_ascend.free_benchmark.observer import FreeBenchmarkObserver

            self._free_benchmark = FreeBenchmarkObserver(self.config, session.resolve_rank())
        session.ensure_wrapped(self.config.extra_apis)
        rebind_prebound(session, self.model)
        self._free_benchmark.begin_window(self.current_step)
        session.add_observer(self._free_benchmark)
        self._started = True
        logger.info("free_benchmark ({}, {}, {}) is on at step {}; findings go to {}.".format(
            self.config.pert_mode, self.config.handler_type, self.config.fuzz_stage, self.current_step,
            self._free_benchmark.csv.path))


    def _step_selected(self) -> bool:
        steps = self.config.step
        if not steps or self.current_step in steps:
            return True
        if self.current_step > max(steps) and not self._told_past_last_step:
            self._told_past_last_step = True
            logger.info("Step {} is past the last step to dump ({}); nothing more is dumped.".format(
                self.current_step, max(steps)))
        return False

    def _rank_is_selected(self) -> bool:
        if not self._rank_checked:
            from ptdbg_ascend.dump.session import get_session

            self._rank_checked = True
            rank = get_session().resolve_rank()
            self._rank_selected = not self.config.rank or rank in self.config.rank
            if not self._rank_selected:
                logger.info(f"Rank {rank} is not in rank {list(self.config.rank)}; this process dumps nothing.")
        return self._rank_selected

    def _ensure_recorder(self) -> Any:
        if self._recorder is None:
            from ptdbg_ascend.msprobe.recording import MsprobeRecorder

            level = self.config.level
            self._recorder = MsprobeRecorder(self.config, record_apis=level in ("L1", "mix"),
                                             record_construct=level in ("L0", "mix"))
        return self._recorder

    def _new_writer(self) -> Any:
        from ptdbg_ascend.sinks.background import BackgroundWriter
        from ptdbg_ascend.formats.layout import step_rank_dir
        from ptdbg_ascend.sinks.msprobe.json_writer import MsprobeJsonWriter

        if self.config.saves_tensors and self._background is None:
            self._background = BackgroundWriter(name="ptdbg-msprobe-writer")
        from ptdbg_ascend.dump.session import get_session

        # Without torch.distributed, RANK/LOCAL_RANK still give distinct rank directories (msprobe: "rank").
        rank = get_session().known_rank()
        directory = step_rank_dir(self.config.dump_path, self.current_step, rank)
        return MsprobeJsonWriter(directory, self.config.dump_task, self.config.level, self.config.saves_tensors,
                                 background=self._background)


__all__ = ["PrecisionDebugger", "DebuggerConfig"]
