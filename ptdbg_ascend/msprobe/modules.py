"""Module hooks for levels L0 and mix: one dump.json entry per submodule call.

Every submodule of the model (``named_modules``, the root itself skipped, as 1.0.4) gets a forward
pre-hook (module stack for construct.json, module ranges, the gradient edges of its inputs) and a
forward hook (the entry; with kwargs on torch >= 2.0). Names: ``Module.{path}.{Class}.{forward|backward}.{n}``,
with one counter per ``Module.{path}.{Class}.{direction}``, reset by ``step()``. Parameters are not
recorded (1.0.4 did not record them either).

Backward entries come from the dump engine's backward capture (``dump/backward.py``), not from
``register_full_backward_hook`` as in 1.0.4: full backward hooks wrap a module's outputs in a custom
autograd function, and the common ``out += identity`` after a module (ResNet blocks) then fails with
"Output 0 of BackwardHookFunction is a view and is being modified inplace". The capture leaves the
forward computation untouched. ``input`` = the gradients arriving at the module's output tensors,
``output`` = the gradients the module sends to its tensor inputs (args then kwargs; null where an input
needs none).
"""

from __future__ import annotations

import threading
from typing import Any, Dict, List, Optional, Tuple

from ptdbg_ascend.dump import backward as backward_capture
from ptdbg_ascend.dump.capture import tensors_in
from ptdbg_ascend.inside import Inside
from ptdbg_ascend.formats.naming import BACKWARD, FORWARD
from ptdbg_ascend.msprobe.recording import MsprobeRecorder
from ptdbg_ascend.msprobe.selection import direction_wanted

# A module's autograd graph is larger than one API's: walk up to this many nodes to find its inputs.
MODULE_MAX_NODES = 20000


class ModuleHooks:
    """The hooks installed on one model; :meth:`remove` takes them off again."""

    def __init__(self, model: Any, recorder: MsprobeRecorder) -> None:
        self.recorder = recorder
        self.counters: Dict[str, int] = {}
        self._handles: List[Any] = []
        self._lock = threading.Lock()
        for path, module in model.named_modules():
            if module is model:
                continue
            self._install(path, module)

    def reset_counters(self) -> None:
        with self._lock:
            self.counters.clear()

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []

    def _next_name(self, path: str, module: Any, direction: str) -> str:
        base = f"Module.{path}.{type(module).__name__}.{direction}"
        with self._lock:
            index = self.counters.get(base, 0)
            self.counters[base] = index + 1
        return f"{base}.{index}"

    def _install(self, path: str, module: Any) -> None:
        import torch

        recorder = self.recorder
        # The module events go straight to the msprobe sink (entries, construct.json, the module stack)
        # and to the selection (module ranges).
        sink, selection = recorder.msprobe_sink, recorder.selection
        wants_backward = direction_wanted(recorder.config.data_mode, BACKWARD)
        # What the pre-hook learnt, for the forward hook (a module may be re-entered recursively):
        # (forward name, gradient edges of the inputs or None, number of tensor inputs).
        pending: List[Tuple[str, Optional[List[Any]], int]] = []

        def pre_hook(mod: Any, args: Any, *rest: Any) -> None:
            if not recorder.on:
                return None
            name = self._next_name(path, mod, FORWARD)
            sink.note_construct(name)
            sink.module_stack.append(name)
            selection.module_start(name)
            edges = None
            inputs: List[Any] = []
            if wants_backward and torch.is_grad_enabled():
                with Inside():  # edges are taken before the forward runs (in-place ops replace grad_fn)
                    # Also when no input needs a gradient: the gradients arriving at the outputs are dumped.
                    inputs = tensors_in((args, rest[0] if rest else {}))
                    edges = backward_capture.input_edges(inputs)
            pending.append((name, edges, len(inputs)))
            return None

        def forward_hook(mod: Any, args: Any, *rest: Any) -> None:
            if not pending:
                return None  # the switch was off when this call began
            name, edges, n_inputs = pending.pop()
            if sink.module_stack and sink.module_stack[-1] == name:
                sink.module_stack.pop()
            kwargs, output = (rest[0], rest[1]) if len(rest) == 2 else ({}, rest[0])
            with Inside():  # the tool's own torch calls are not recorded as APIs
                if selection.module_end(name) and direction_wanted(recorder.config.data_mode, FORWARD):
                    sink.add_entry(name, lambda: sink.forward_entry(name, args, kwargs, output), stack=True,
                                       values=(args, kwargs, output))
                if edges is not None:
                    backward_capture.arm(lambda incoming, produced: on_backward(mod, incoming, produced),
                                         n_inputs, edges, tensors_in(output), max_nodes=MODULE_MAX_NODES)
            return None

        def on_backward(mod: Any, incoming: List[Any], produced: List[Any]) -> None:
            # Runs as tool code (the capture marks it), possibly on an autograd thread.
            if not recorder.on:
                return
            name = self._next_name(path, mod, BACKWARD)
            sink.note_construct(name)
            selection.module_start(name)
            if selection.module_end(name):
                sink.add_entry(name, lambda: sink.gradient_entry(name, incoming, produced), stack=False,
                                   values=(incoming, produced))

        self._handles.extend(_register_hooks(torch, module, pre_hook, forward_hook))


def _register_hooks(torch: Any, module: Any, pre_hook: Any, forward_hook: Any) -> List[Any]:
    """Register both hooks on ``module``, with the call's keyword arguments where this torch passes them
    (``with_kwargs``, torch >= 2.0); returns their handles."""
    if _supports_kwargs_hooks(torch):
        return [module.register_forward_pre_hook(pre_hook, with_kwargs=True),
                module.register_forward_hook(forward_hook, with_kwargs=True)]
    return [module.register_forward_pre_hook(pre_hook), module.register_forward_hook(forward_hook)]


def _supports_kwargs_hooks(torch: Any) -> bool:
    import inspect

    try:
        return "with_kwargs" in inspect.signature(torch.nn.Module.register_forward_hook).parameters
    except (TypeError, ValueError):
        return False
