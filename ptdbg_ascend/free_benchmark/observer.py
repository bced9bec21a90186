"""free_benchmark's observer: each selected API call run a second time on perturbed inputs, in the hook.

Forward (``fuzz_stage: "forward"``): after the call returned, the same function (``call.original``) runs on the
perturbed inputs (``perturb.py``) under ``no_grad``; for a call that writes its arguments in place, it runs
before the call, on copies of every tensor. Each floating output is compared with the original's
(``judge.py``); one beyond the standard is a row of ``free_benchmark.csv`` (``report.py``). With
``handler_type: "fix"`` the second run keeps its graph and its output (cast back to the original's dtype and
device) is what the call returns: the training continues on the more accurate values (not for in-place calls,
whose tensors the script already holds).

Backward (``fuzz_stage: "backward"``): the forward inputs are kept until the call's gradients arrive; then the
call is rebuilt on perturbed copies of them and differentiated with the same incoming gradients
(``torch.autograd.grad``), and each input's gradient is compared with the real one.

The training step's values and random state are not disturbed: the second run is the tool's own (its calls are
not recorded), it never writes a tensor of the script, and calls that draw random numbers, collectives, the
optimizer's updates, calls that only move values (views, copies, casts) and those the pre-check never re-runs
are not perturbed, with their reason in the summary.
"""

from __future__ import annotations

import contextlib
import sys
from typing import Any, Dict, List, Optional, Tuple

from ptdbg_ascend.config import DebuggerConfig
from ptdbg_ascend.dump.observers import ApiCall, CallObserver, dotted
from ptdbg_ascend.formats.naming import BACKWARD, FORWARD
from ptdbg_ascend.free_benchmark import judge
from ptdbg_ascend.free_benchmark.perturb import NotPerturbed, dtype_name, map_tensors, perturbed_inputs
from ptdbg_ascend.free_benchmark.report import CsvAppender, UnequalRow
from ptdbg_ascend.free_benchmark.summary import Summary
from ptdbg_ascend.log import logger

_OPTIMIZER_PREFIXES = ("_foreach_", "_fused_")
MAX_KEPT_CALLS = 100000  # backward stage: forward inputs kept at most for this many calls a step


class FreeBenchmarkObserver(CallObserver):
    """Perturbs the selected calls of a PrecisionDebugger window (task free_benchmark).

    Args:
        config: a validated config of task free_benchmark.
        rank: the rank written in the CSV's ``rank`` column.
    """

    def __init__(self, config: DebuggerConfig, rank: int) -> None:
        self.config = config
        self.rank = rank
        self.step = 0
        self.mode = config.pert_mode
        self.fix = config.handler_type == "fix"
        self.backward_stage = config.fuzz_stage == BACKWARD
        self.csv = CsvAppender(config.dump_path)
        self.summary = Summary()
        self._skips: Dict[Tuple[str, str], Optional[str]] = {}
        self._scope = frozenset(config.scope)
        self._kept: Dict[ApiCall, Tuple[Any, Any, str, Tuple[int, ...]]] = {}
        self._no_fix_said: set = set()
        self._last: Optional[ApiCall] = None
        from ptdbg_ascend.free_benchmark.preheat import Preheat

        self.preheat = Preheat(config) if config.if_preheat else None
        self._in_optimizer = False
        self._hooks: List[Any] = []

    # -- selection ---------------------------------------------------------------------------------------
    def _selected(self, call: ApiCall) -> bool:
        if self._in_optimizer:  # (torch.optim's step: its updates are not the model's computation)
            self.summary.skip(f"{call.prefix}.{call.api}", "an optimizer update (it writes the parameters)")
            return False
        reason = self._skips.get((call.prefix, call.api), "")
        if reason == "":
            reason = self._skips[(call.prefix, call.api)] = skip_reason(call.prefix, call.api)
        if reason is not None:
            self.summary.skip(f"{call.prefix}.{call.api}", reason)
            return False
        if self._scope:
            return dotted(call, FORWARD) in self._scope or dotted(call, BACKWARD) in self._scope
        if self.config.api_list:
            name = f"{call.prefix}.{call.api}."
            return any(item in name for item in self.config.api_list)
        return True

    def wants_forward(self, call: ApiCall) -> bool:
        if self.preheat is not None and not self.preheat.checks(call, self.step):
            return False
        selected = self._selected(call)
        self._last = call if selected else None
        return selected

    def wants_backward(self, call: ApiCall) -> bool:  # (asked right after wants_forward, before the call runs)
        return self.backward_stage and self._last is call

    # -- forward -----------------------------------------------------------------------------------------
    def before_forward(self, call: ApiCall, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> None:
        if not self.backward_stage:  # in place: run on copies now, before the call changes its arguments
            call.keep(self, self._second_run(call, args, kwargs, copy_all=True))

    def on_forward(self, call: ApiCall, args: Tuple[Any, ...], kwargs: Dict[str, Any], output: Any) -> None:
        if self.backward_stage:
            self._keep_for_backward(call, args, kwargs)
            return
        perturbed = call.kept(self) if call.inplace else self._second_run(call, args, kwargs, copy_all=False)
        if perturbed is None:
            return
        pairs = _output_pairs(output, perturbed)
        if not pairs:
            self.summary.skip(f"{call.prefix}.{call.api}", "no floating-point output to compare")
            return
        # (an in-place call's arguments are its outputs by now: no CPU reference for preheating from them)
        self._judge(call, pairs, FORWARD, code_line=None, inputs=None if call.inplace else (args, kwargs))
        if self.fix:
            self._replace(call, output, perturbed)

    def _second_run(self, call: ApiCall, args: Tuple[Any, ...], kwargs: Dict[str, Any], copy_all: bool) -> Any:
        import torch

        api = f"{call.prefix}.{call.api}"
        try:
            new_args, new_kwargs = perturbed_inputs(self.mode, args, kwargs, copy_all)
        except NotPerturbed as reason:
            self.summary.skip(api, str(reason))
            return None
        # fix keeps the graph (the replacement's gradient flows through the second run); check needs none.
        grad = contextlib.nullcontext() if self.fix and not call.inplace else torch.no_grad()
        try:
            with grad:
                return call.original(*new_args, **new_kwargs)
        except Exception as error:  # (an API refusing float32, a CPU without the kernel...): said, not raised
            self.summary.skip(api, f"the perturbed run raised {type(error).__name__}: {_short(error)}")
            return None

    def _judge(self, call: ApiCall, pairs: List[Tuple[Optional[int], Any, Any]], stage: str,
               code_line: Optional[str], inputs: Optional[Tuple[Any, Any]] = None) -> None:
        api = f"{call.prefix}.{call.api}"
        self.summary.check(api)
        errors = []
        for index, original, perturbed in pairs:
            dtype = dtype_name(original)
            allowed = judge.threshold(dtype, self.mode)
            if self.preheat is not None:
                allowed = self.preheat.threshold(api, dtype, allowed)
            error = (judge.normwise_error(original, perturbed) if stage == BACKWARD
                     else judge.max_relative_error(original, perturbed, judge.small_value(perturbed)))
            errors.append((index, original, error, allowed))
        if self.preheat is not None and self.preheat.learning(self.step):
            if inputs is not None:
                self.preheat.learn(api, inputs[0], inputs[1], call.original, errors)
            return
        single = len(pairs) == 1
        for index, original, error, allowed in errors:
            if error <= allowed:
                continue
            if code_line is None:
                code_line = user_code_line()
            self.csv.append(UnequalRow(self.rank, self.mode, stage, self.step, dotted(call, stage), error,
                                       str(original.dtype), str(original.shape), None if single else index,
                                       allowed, code_line or ""))
            self.summary.report(api)

    def _replace(self, call: ApiCall, output: Any, perturbed: Any) -> None:
        api = f"{call.prefix}.{call.api}"
        if call.inplace:
            if api not in self._no_fix_said:
                self._no_fix_said.add(api)
                logger.info(f"free_benchmark fix: {api} writes its arguments in place; its output is kept.")
            return
        import torch

        if isinstance(output, torch.Tensor):
            call.replacement = _cast_like(perturbed, output)
        elif isinstance(output, (tuple, list)) and isinstance(perturbed, (tuple, list)) and len(output) == len(perturbed):
            items = [_cast_like(new, old) if isinstance(old, torch.Tensor) and old.is_floating_point() else old
                     for old, new in zip(output, perturbed)]
            call.replacement = type(output)(*items) if hasattr(output, "_fields") else type(output)(items)

    # -- backward ----------------------------------------------------------------------------------------
    def _keep_for_backward(self, call: ApiCall, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> None:
        import torch

        if not torch.is_grad_enabled() or call.inplace or len(self._kept) >= MAX_KEPT_CALLS:
            return
        tensors: List[Any] = []
        map_tensors((args, kwargs), lambda tensor: tensors.append(tensor) or tensor)
        if any(tensor.requires_grad for tensor in tensors):
            versions = tuple(tensor._version for tensor in tensors)
            self._kept[call] = (args, kwargs, user_code_line() or "", versions)

    def on_backward(self, call: ApiCall, backward_input: Any, backward_output: Any) -> None:
        kept = self._kept.pop(call, None)
        if kept is None:
            return
        from ptdbg_ascend.free_benchmark.backward_run import perturbed_gradients

        args, kwargs, code_line, versions = kept
        api = f"{call.prefix}.{call.api}"
        tensors: List[Any] = []
        map_tensors((args, kwargs), lambda tensor: tensors.append(tensor) or tensor)
        if tuple(tensor._version for tensor in tensors) != versions:
            self.summary.skip(api, "an input was changed in place after the forward: its values are gone")
            return
        try:
            pairs = perturbed_gradients(call.original, self.mode, args, kwargs, backward_input, backward_output)
        except NotPerturbed as reason:
            self.summary.skip(api, str(reason))
            return
        except Exception as error:
            self.summary.skip(api, f"the perturbed backward raised {type(error).__name__}: {_short(error)}")
            return
        if pairs:
            self._judge(call, pairs, BACKWARD, code_line=code_line)

    # -- the window --------------------------------------------------------------------------------------
    def begin_window(self, step: int) -> None:
        """A window begins at ``step`` (start()): the optimizer's step is watched from now."""
        self.step = step
        if not self._hooks:
            self._hooks = _optimizer_hooks(self)

    def end_window(self) -> None:
        """Say the window's summary (stop()), and forget what waited for a backward that did not come."""
        self._remove_hooks()
        if self.preheat is not None and self.preheat.learning(self.step):
            logger.info("free_benchmark preheating at step {} (nothing is reported before step {}): {} call(s) sampled, "
                        "the standards of {} API/dtype pair(s) raised so far.".format(
                            self.step, self.preheat.preheat_step, sum(self.summary.checked.values()),
                            len(self.preheat.standards)))
        else:
            for line in self.summary.lines(self.step, self.mode, self.csv.path):
                (logger.info if self.summary.checked else logger.warning)(line)
        self.summary.clear()
        self._kept.clear()

    def close(self) -> None:
        self.csv.close()
        self._remove_hooks()

    def _remove_hooks(self) -> None:
        for handle in self._hooks:
            handle.remove()
        self._hooks = []
        self._in_optimizer = False


def _optimizer_hooks(observer: FreeBenchmarkObserver) -> List[Any]:
    """torch's global optimizer step hooks, marking the optimizer's step (its foreach kernels are skipped by
    name; a plain ``param.add_`` is known only this way)."""
    from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

    def enter(*_: Any) -> None:
        observer._in_optimizer = True

    def leave(*_: Any) -> None:
        observer._in_optimizer = False

    return [register_optimizer_step_pre_hook(enter), register_optimizer_step_post_hook(leave)]


def skip_reason(prefix: str, api: str) -> Optional[str]:
    """Why ``prefix.api`` is never perturbed, None when it may be (decided once per API)."""
    if prefix == "Distributed":
        return "a collective: running it twice would desynchronise the ranks"
    if api.startswith(_OPTIMIZER_PREFIXES):
        return "an optimizer update (it writes the parameters)"
    from ptdbg_ascend.comparison.api_classes import LAYOUT, api_class

    if api_class(prefix, api) == LAYOUT:
        return "it only moves, selects or casts values (nothing computed to perturb)"
    from ptdbg_ascend.precheck.api_lookup import static_skip_reason

    reason = static_skip_reason(prefix, api)
    return None if reason is None else reason.rstrip(".")


def _output_pairs(output: Any, perturbed: Any) -> List[Tuple[Optional[int], Any, Any]]:
    """``(index, original, perturbed)`` of the floating outputs of one shape in both runs."""
    import torch

    def floating(value: Any) -> bool:
        return isinstance(value, torch.Tensor) and value.is_floating_point()

    if floating(output):
        return [(None, output, perturbed)] if floating(perturbed) and perturbed.shape == output.shape else []
    if not isinstance(output, (tuple, list)) or not isinstance(perturbed, (tuple, list)):
        return []
    return [(index, old, new) for index, (old, new) in enumerate(zip(output, perturbed))
            if floating(old) and floating(new) and old.shape == new.shape]


def _cast_like(new: Any, old: Any) -> Any:
    return new.to(device=old.device, dtype=old.dtype)


def _short(error: BaseException) -> str:
    text = str(error).strip().splitlines()[0] if str(error).strip() else ""
    return text[:200]


def user_code_line() -> Optional[str]:
    """``file:line  code`` of the innermost frame outside torch and this tool (None outside any)."""
    import linecache

    from ptdbg_ascend.formats.records import is_library_file, user_line

    frames = []
    frame = sys._getframe(1)
    while frame is not None and len(frames) < 64:
        code = frame.f_code
        frames.append((code.co_filename, str(frame.f_lineno), code.co_name,
                       linecache.getline(code.co_filename, frame.f_lineno).strip() or None))
        frame = frame.f_back
    return user_line(tuple(frames)) if any(not is_library_file(f[0]) for f in frames) else None
