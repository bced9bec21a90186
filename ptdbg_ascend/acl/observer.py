"""The ACL observer: waits for the one call named by ``set_dump_switch("ON", mode="acl", scope=[name])``
and re-runs it under ACL dump (forward), or re-runs its forward and backward (backward scope)."""

from __future__ import annotations

from typing import Any, Dict, NamedTuple, Optional, Tuple

from ptdbg_ascend.acl.config import AclDumpConfig
from ptdbg_ascend.acl.runner import rerun_backward, rerun_forward
from ptdbg_ascend.dump.observers import ApiCall, CallObserver
from ptdbg_ascend.errors import CallOrderError
from ptdbg_ascend.formats.naming import BACKWARD, FORWARD


class AclTarget(NamedTuple):
    """The API a switch ON selected: its forward call name and whether its backward is dumped."""

    scope_name: str
    forward_name: str
    backward: bool


def acl_target(scope_name: str) -> AclTarget:
    """``Tensor_permute_1_forward`` -> forward dump of that call; ``Functional_conv2d_1_backward`` ->
    backward dump, triggered by the forward call ``Functional_conv2d_1_forward``."""
    suffix = "_" + BACKWARD
    if scope_name.endswith(suffix):
        return AclTarget(scope_name, scope_name[: -len(suffix)] + "_" + FORWARD, True)
    return AclTarget(scope_name, scope_name, False)


class AclObserver(CallObserver):
    """Re-runs the selected call under ACL dump. Inactive until a switch ON gives it a target.

    Args:
        torch_npu: the ``torch_npu`` module.
        config: the validated ``dump.json``.
    """

    def __init__(self, torch_npu: Any, config: AclDumpConfig) -> None:
        self.torch_npu = torch_npu
        self.config = config
        self.target: Optional[AclTarget] = None
        # set_backward_input: (npy path, gradient tensor) for a backward target.
        self.backward_input: Optional[Tuple[str, Any]] = None
        self.dumped: list = []  # call names dumped so far (for the log and tests)

    def switch_on(self, scope_name: str) -> None:
        self.target = acl_target(scope_name)
        self.backward_input = None

    def switch_off(self) -> None:
        self.target = None
        self.backward_input = None

    def wants_forward(self, call: ApiCall) -> bool:
        target = self.target
        # Calls nested inside the target (F.batch_norm -> torch.batch_norm) and the re-run's own calls
        # run inside a wrapped API, where the wrappers pass through: they never reach this observer.
        return target is not None and call.forward_name == target.forward_name

    def on_forward(self, call: ApiCall, args: Tuple[Any, ...], kwargs: Dict[str, Any], output: Any) -> None:
        target = self.target
        if target is None:
            return
        if not target.backward:
            rerun_forward(self.torch_npu, call, args, kwargs, self.config.config_path)
            self.dumped.append(call.forward_name)
            return
        if self.backward_input is None:
            raise CallOrderError(
                "The ACL dump of {} needs the gradient arriving at its output: call set_backward_input(["
                "'.../{}_input.0.npy']) after set_dump_switch('ON', mode='acl', scope=['{}']) and before this "
                "call runs.".format(target.scope_name, target.scope_name, target.scope_name))
        path, gradient = self.backward_input
        if rerun_backward(self.torch_npu, call, args, kwargs, gradient, path, self.config.config_path):
            self.dumped.append(call.backward_name)
