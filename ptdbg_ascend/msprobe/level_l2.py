"""Level L2 of PrecisionDebugger: the one API named in ``scope`` is re-run under ACL (operator-level)
dump on the NPU, by the ACL feature's observer (``ptdbg_ascend.acl``). No dump.json is written; the
operator files go where the ``acl_config`` file says.

``tensor.scope`` holds one dotted call name (``Tensor.permute.1.forward``); a backward name needs
``tensor.backward_input``: the ``.pt`` gradient file of an earlier tensor dump
(``dump_tensor_data/{name}.input.0.pt``), as msprobe 1.0.4.
"""

from __future__ import annotations

import os
from typing import Any, Optional, Tuple

from ptdbg_ascend.config import DebuggerConfig
from ptdbg_ascend.errors import DeviceUnavailableError, FileFormatError, ParameterError
from ptdbg_ascend.formats.naming import to_legacy


class AclLevelDump:
    """Checks everything at construction (torch_npu, the ACL config, the scope, the gradient file), so a
    bad L2 setup fails before training starts; ``start``/``stop`` switch the ACL observer on and off."""

    def __init__(self, config: DebuggerConfig) -> None:
        from ptdbg_ascend.device import npu_available

        if not npu_available():
            raise DeviceUnavailableError(
                "Level L2 (ACL kernel dump) needs an Ascend NPU with torch_npu, which is not importable here. "
                "Use level L1 to dump APIs on this device.")
        from ptdbg_ascend.acl.api import acl_config_argument, require_torch_npu
        from ptdbg_ascend.acl.observer import AclObserver

        key = config.task + ".scope"
        if not config.acl_config:
            raise ParameterError("acl_config", "", "must name the ACL dump config (.json) at level L2",
                                 "ptdbg_ascend.acl.write_acl_dump_config writes one.")
        legacy_name = to_legacy(config.scope[0])
        if legacy_name is None:
            raise ParameterError(key, list(config.scope), "must be a full API call name at level L2",
                                 'Example: ["Tensor.permute.1.forward"]')
        self.legacy_name = legacy_name
        self.backward_input: Optional[Tuple[str, Any]] = None
        if legacy_name.endswith("_backward"):
            self.backward_input = _load_gradient(config.backward_input)
        self.observer = AclObserver(require_torch_npu("level L2"), acl_config_argument(config.acl_config))

    def start(self, session: Any) -> None:
        session.ensure_wrapped()
        self.observer.switch_on(self.legacy_name)
        self.observer.backward_input = self.backward_input
        session.add_observer(self.observer)

    def stop(self, session: Any) -> None:
        self.observer.switch_off()
        session.remove_observer(self.observer)


def _load_gradient(paths: Tuple[str, ...]) -> Tuple[str, Any]:
    import torch

    if len(paths) != 1 or not paths[0].endswith(".pt"):
        raise ParameterError("tensor.backward_input", list(paths), "must name exactly one .pt gradient file at level L2")
    path = os.path.abspath(os.path.expanduser(paths[0]))
    if not os.path.isfile(path):
        raise FileFormatError(f"The backward input {path} does not exist.")
    try:
        gradient = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # noqa: BLE001 - torch.load raises many types for a bad file
        raise FileFormatError(f"The backward input {path} is not a readable tensor file: {error}") from error
    if not isinstance(gradient, torch.Tensor):
        raise FileFormatError(f"The backward input {path} holds a {type(gradient).__name__}, not a tensor.")
    return path, gradient
