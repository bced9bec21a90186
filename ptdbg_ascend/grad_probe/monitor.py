"""grad_probe's dump side (:class:`GradientMonitor`, ``PrecisionDebugger.monitor(model)`` with ``"task": "grad_probe"``):
before every optimizer step, the gradient of each monitored parameter summarised in
``{dump_path}/rank{R}/grad_summary_{step}.csv`` and, at levels L1 and L2, its direction in
``{dump_path}/rank{R}/step{step}/{param_name}.npy`` (``directions.py``).

As in msprobe 1.0.4: the step counts optimizer calls from 0 (through torch's global optimizer pre-step hook: a step
skipped for an inf loss is not counted; unlike 1.0.4, only the calls of an optimizer that holds a monitored
parameter, so another model's optimizer, or a second monitor's, does not shift the count), the config's ``step`` and ``rank`` lists
select (empty: all), ``param_list`` names parameters exactly (empty: all), a parameter without a gradient is left
out. The columns are 1.0.4's (``param_name``, ``MD5`` at L0, the ``bounds`` intervals and ``=0`` at L2, ``max``,
``min``, ``norm``, ``shape``), so its GradComparator reads the CSV. Unlike 1.0.4: ``rank{R}`` is the
torch.distributed rank, else the environment's, else the device index (0 on the CPU), never the pid; the
directions are packed 8 to a byte (a 1 B-parameter model: 125 MB a step, 1 GB as 1.0.4's booleans).
"""

from __future__ import annotations

import io
import os
import weakref
from typing import Any, Dict, List, Optional

from ptdbg_ascend import csv_cells
from ptdbg_ascend.config import DebuggerConfig
from ptdbg_ascend.fs.writes import own_dir, own_dirs, replace_text_file
from ptdbg_ascend.grad_probe.directions import SUFFIX, save_signs
from ptdbg_ascend.grad_probe.gradients import GradientSummary, gradient_summaries, interval_names
from ptdbg_ascend.inside import Inside
from ptdbg_ascend.log import logger

SUMMARY_STEM = "grad_summary_"


def summary_file_name(step: int) -> str:
    return f"{SUMMARY_STEM}{step}.csv"


class GradientMonitor:
    """Writes a grad_summary CSV (and the directions) of the monitored parameters before each optimizer step.

    Args:
        config: a validated config of task grad_probe (its ``dump_path``, ``rank``, ``step``, ``grad_level``,
            ``param_list``, ``bounds``).

    Attributes:
        step: the optimizer steps counted so far, minus one (-1 before the first).
    """

    def __init__(self, config: DebuggerConfig) -> None:
        self.config = config
        self.step = -1
        self._names: Dict[int, str] = {}
        self._parameters: List[Any] = []
        self._handle: Optional[Any] = None
        self._said = False
        self._skipped: set = set()
        self._strided: Any = None
        self._made: set = set()  # the rank directories made (each step's own directory is new)
        self._optimizers: Dict[int, Any] = {}  # id -> (weak reference, whether it updates a monitored parameter)

    def monitor(self, model: Any) -> None:
        """Watch the parameters of ``model`` (a ``torch.nn.Module``) from its next optimizer step on."""
        import torch

        from ptdbg_ascend.errors import ParameterError

        if not isinstance(model, torch.nn.Module):
            raise ParameterError("model", type(model).__name__, "must be a torch.nn.Module")
        wanted = set(self.config.param_list)
        named = [(name, parameter) for name, parameter in model.named_parameters() if not wanted or name in wanted]
        missing = sorted(wanted - {name for name, _ in named})
        if missing:
            logger.warning("grad_probe.param_list names {} parameter{} the model does not have: {}.".format(
                len(missing), "" if len(missing) == 1 else "s", ", ".join(missing[:10])))
        self._strided = torch.strided  # (the one layout summarised; kept so each step imports nothing)
        self._parameters = [parameter for _, parameter in named]
        self._names = {id(parameter): name for name, parameter in named}
        if self._handle is None:
            from torch.optim.optimizer import register_optimizer_step_pre_hook

            self._handle = register_optimizer_step_pre_hook(self._before_step)
        logger.info(f"grad_probe monitors {len(named)} parameters at level {self.config.grad_level}.")

    def remove(self) -> None:
        """Stop watching (the hook is removed). Idempotent."""
        if self._handle is not None:
            self._handle.remove()
            self._handle = None

    # -- each optimizer step -------------------------------------------------------------------------
    def _before_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if not self._updates_ours(optimizer):
            return
        self.step += 1
        config = self.config
        if config.step and self.step not in config.step:
            return
        rank = _rank()
        if config.rank and rank not in config.rank:
            return
        named = [(self._names[id(parameter)], parameter.grad) for parameter in self._parameters
                 if parameter.grad is not None and self._summarised(self._names[id(parameter)], parameter.grad)]
        with Inside():  # the monitor's torch calls are never recorded by a dump running alongside
            rows = gradient_summaries(named, config.grad_level, config.bounds)
        self._write(rank, rows)

    def _summarised(self, name: str, gradient: Any) -> bool:
        """Whether ``gradient`` has a summary: a sparse or complex one has none (1.0.4's later versions skip complex
        ones too; it failed on both), said once per parameter."""
        if gradient.layout == self._strided and not gradient.is_complex():
            return True
        if name not in self._skipped:
            self._skipped.add(name)
            logger.warning("grad_probe leaves out {}: its gradient is {} ({}, {}); max, min, norm and signs need a "
                           "dense real tensor.".format(name, "complex" if gradient.is_complex() else "sparse",
                                                       gradient.dtype, gradient.layout))
        return False

    def _updates_ours(self, optimizer: Any) -> bool:
        """Whether ``optimizer`` holds a monitored parameter (torch's hook sees every optimizer of the process: one of
        another model, or a second monitor's, neither counts nor writes here). Decided once per optimizer."""
        key = id(optimizer)
        known = self._optimizers.get(key)
        if known is None or known[0]() is not optimizer:
            ours = {id(parameter) for parameter in self._parameters}
            holds = any(id(parameter) in ours for group in optimizer.param_groups for parameter in group["params"])
            known = self._optimizers[key] = (weakref.ref(optimizer), holds)
        return known[1]

    def _write(self, rank: int, rows: List[GradientSummary]) -> None:
        config = self.config
        rank_dir = os.path.join(config.dump_path, f"rank{rank}")
        if rank_dir not in self._made:  # once, not at every optimizer step
            own_dirs(rank_dir, 1)
            self._made.add(rank_dir)
        if config.grad_level != "L0":
            step_dir = os.path.join(rank_dir, f"step{self.step}")
            own_dir(step_dir)
            for row in rows:
                save_signs(os.path.join(step_dir, row.name + SUFFIX), row.signs)
        path = os.path.join(rank_dir, summary_file_name(self.step))
        replace_text_file(path, [summary_text(rows, config.grad_level, config.bounds)], "the grad_probe summary")
        if not self._said:  # once: a line per optimizer step would flood a week-long run's log
            self._said = True
            logger.info(f"grad_probe writes a grad_summary CSV per optimizer step in {rank_dir} (first: {path}).")


def summary_text(rows: List[GradientSummary], level: str, bounds: Any) -> str:
    """The grad_summary CSV of ``rows``: msprobe 1.0.4's header and cells (a shape as ``[16, 8]``, an empty gradient's
    numbers empty)."""
    header = ["param_name"] + (["MD5"] if level == "L0" else []) + (interval_names(bounds) if level == "L2" else []) \
        + ["max", "min", "norm", "shape"]
    buffer = io.StringIO()
    writer = csv_cells.writer(buffer, lineterminator="\n")
    writer.writerow(header)
    for row in rows:
        cells: List[Any] = [row.name] + ([row.md5] if level == "L0" else [])
        if level == "L2":
            cells += list(row.distribution) or [""] * (len(bounds) + 2)
        cells += ["" if value is None else value for value in (row.maximum, row.minimum, row.norm)]
        writer.writerow(cells + [str(list(row.shape))])
    return buffer.getvalue()


def _rank() -> int:
    from ptdbg_ascend.dump.session import get_session

    return get_session().resolve_rank()
