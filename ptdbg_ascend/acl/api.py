"""ACL implementation of the legacy functions.

* ``register_hook(model, acc_cmp_dump, dump_mode="acl", dump_config=...)`` -> :func:`register_acl_dump`
  (called by the dump engine);
* ``set_dump_switch("ON"/"OFF", mode="acl", scope=[name])`` -> :func:`configure_acl_switch`
  (called by the dump engine);
* ``set_backward_input([npy])`` -> :func:`set_backward_input`.

ACL dumps need ``torch_npu``: without it ``register_hook`` fails at once, never halfway through training.
"""

from __future__ import annotations

import os
from typing import Any, List, Optional, Sequence

from ptdbg_ascend.acl.config import AclDumpConfig, load_acl_config, write_acl_dump_config
from ptdbg_ascend.errors import CallOrderError, DeviceUnavailableError, FileFormatError, ParameterError
from ptdbg_ascend.log import logger

__all__ = ["register_acl_dump", "configure_acl_switch", "set_backward_input", "write_acl_dump_config",
           "require_torch_npu", "acl_config_argument"]


def require_torch_npu(what: str) -> Any:
    """The ``torch_npu`` module, or DeviceUnavailableError saying what to use instead."""
    from ptdbg_ascend.device import torch_npu_module

    torch_npu = torch_npu_module()
    if torch_npu is None:
        raise DeviceUnavailableError(
            "{} needs an Ascend NPU with torch_npu installed (import torch_npu failed). On CPU or GPU use "
            "dump_mode='api' (the default): register_hook(model, acc_cmp_dump) with set_dump_switch('ON', "
            "mode='list', scope=[...]) dumps the API's inputs and outputs as npy, and register_hook(model, "
            "overflow_check) finds overflowing APIs.".format(what))
    return torch_npu


def acl_config_argument(dump_config: Any) -> AclDumpConfig:
    """Validate ``register_hook(dump_config=)`` for ``dump_mode='acl'``."""
    if dump_config is None:
        raise ParameterError("dump_config", None, "is required with dump_mode='acl'",
                             "Example: register_hook(model, acc_cmp_dump, dump_mode='acl', dump_config='./dump.json'); "
                             "ptdbg_ascend.acl.write_acl_dump_config writes a correct dump.json.")
    return load_acl_config(dump_config)


def _observer(session: Any) -> Optional[Any]:
    from ptdbg_ascend.acl.observer import AclObserver

    return session.find_observer(AclObserver)


def register_acl_dump(session: Any, dump_config: Any, rank: Optional[int] = None) -> None:
    """``register_hook(model, acc_cmp_dump, dump_mode="acl", dump_config=...)``: check torch_npu and the
    config now; the dump itself waits for ``set_dump_switch("ON", mode="acl", scope=[name])``.
    ``rank`` is accepted for symmetry: ACL files go where ``dump.json`` says."""
    from ptdbg_ascend.acl.observer import AclObserver

    torch_npu = require_torch_npu("dump_mode='acl'")
    config = acl_config_argument(dump_config)
    previous = _observer(session)
    if previous is not None:
        session.remove_observer(previous)
    session.add_observer(AclObserver(torch_npu, config))
    logger.info("ACL dump is registered with dump config {} (operator files go to {}).".format(
        config.config_path, config.dump_path))


def configure_acl_switch(session: Any, switch: str, scope: Sequence[str], filter_switch: str = "ON") -> None:
    """``set_dump_switch(switch, mode="acl", scope=[name])``. ``scope`` holds exactly one call name with
    its direction (the dump engine checked the count and the name grammar). ``filter_switch`` has no
    effect on ACL files (the NPU dumps every operand of the operator)."""
    observer = _observer(session)
    if observer is None:
        raise CallOrderError("set_dump_switch(mode='acl') needs register_hook(model, acc_cmp_dump, dump_mode='acl', "
                             "dump_config='./dump.json') first.")
    if switch == "OFF":
        observer.switch_off()
        logger.info("Dump switch is turned off. ")
        return
    if len(scope) != 1:
        raise ParameterError("scope", list(scope), "mode 'acl' takes exactly one API name")
    name = scope[0]
    if not (name.endswith("_forward") or name.endswith("_backward")):
        raise ParameterError("scope", list(scope), "mode 'acl' needs the direction in the name",
                             "e.g. '{0}_forward' or '{0}_backward'".format(name))
    if name.startswith("Distributed_"):
        raise ParameterError("scope", list(scope), "collectives cannot be re-run under ACL dump",
                             "Re-running one on a single rank would wait forever for the others.")
    observer.switch_on(name)
    logger.info("Dump switch is turned on. Dump data will be saved according to dump config {}. ".format(
        observer.config.config_path))


def set_backward_input(backward_input: Any) -> None:
    """``set_backward_input([npy])``: the gradient arriving at the output of the backward API named in
    the acl scope (``{name}_backward_input.0.npy`` from an earlier dump). Call it after
    ``set_dump_switch("ON", mode="acl", scope=["..._backward"])``; the file is read now."""
    import numpy as np

    from ptdbg_ascend.dump.session import get_session

    if isinstance(backward_input, (str, os.PathLike)) or not isinstance(backward_input, (list, tuple)):
        raise ParameterError("backward_input", backward_input, "must be a list of .npy paths",
                             "Example: set_backward_input(['./dump/Functional_conv2d_1_backward_input.0.npy'])")
    observer = _observer(get_session())
    if observer is None or observer.target is None or not observer.target.backward:
        raise CallOrderError("set_backward_input must come after register_hook(model, acc_cmp_dump, dump_mode='acl', "
                             "dump_config=...) and set_dump_switch('ON', mode='acl', scope=['..._backward']).")
    paths: List[Any] = list(backward_input)
    if len(paths) != 1:
        raise ParameterError("backward_input", backward_input,
                             "needs exactly one .npy file, one per name in the acl scope "
                             f"{[observer.target.scope_name]}")
    path = os.fspath(paths[0]) if isinstance(paths[0], os.PathLike) else paths[0]
    if not isinstance(path, str) or not path.endswith(".npy"):
        raise ParameterError("backward_input", backward_input, "items must be paths of .npy files")
    path = os.path.abspath(os.path.expanduser(path))
    if not os.path.isfile(path):
        raise FileFormatError(f"The backward input {path} does not exist.")
    try:
        array = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as error:
        raise FileFormatError(f"The backward input {path} is not a readable .npy file: {error}") from error
    import torch

    observer.backward_input = (path, torch.from_numpy(np.ascontiguousarray(array)))
    logger.info(f"Backward input of {observer.target.scope_name} is {path}.")
