"""Overflow-check implementation of the legacy functions ``register_hook(model, overflow_check, ...)``
and ``set_overflow_check_switch``. Validates, then drives the session's :class:`OverflowObserver`."""

from __future__ import annotations

import functools
import os
from typing import Any, Callable, Optional, Tuple

from ptdbg_ascend.errors import CallOrderError, ParameterError
from ptdbg_ascend.log import logger
from ptdbg_ascend.version import __version__


def _check_overflow_nums(overflow_nums: Any) -> int:
    if overflow_nums is None:
        return 1
    if isinstance(overflow_nums, bool) or not isinstance(overflow_nums, int) or (overflow_nums < 1 and overflow_nums != -1):
        raise ParameterError("overflow_nums", overflow_nums, "must be an int >= 1 (stop at that overflow) or -1 (never stop)",
                             "Default: None, meaning 1.")
    return overflow_nums


def _find_observer(session: Any) -> Optional[Any]:
    from ptdbg_ascend.overflow.observer import OverflowObserver

    return session.find_observer(OverflowObserver)


def register_overflow_check(model: Any, overflow_nums: Optional[int] = None, dump_mode: str = "api",
                            dump_config: Optional[str] = None, rank: Optional[int] = None,
                            extra_apis: Optional[bool] = None, *,
                            default_dump_path: Callable[[str], None]) -> None:
    """See :func:`ptdbg_ascend.register_hook` with ``overflow_check``.

    Args:
        model: the model (an ``nn.Module``; the wrappers are global).
        overflow_nums: stop training (ValueError) at this overflow; -1 never stops. Default None = 1.
        dump_mode: "api" (default): overflow pkl + npy; "acl": also re-run each overflowing forward API
            under ACL dump (NPU with torch_npu only).
        dump_config: the ACL ``dump.json``; required with ``dump_mode="acl"``, refused otherwise.
        rank: the rank directory. Default None: the torch.distributed rank, else RANK/LOCAL_RANK, else the device index.
        extra_apis: True also wraps the APIs beyond the original 4.0's list; see register_hook.
        default_dump_path: ``default_dump_path(tag)`` sets the dump path from the environment for ``tag`` or
            raises a DumpPathError (the front-end's ``set_dump_path(None, tag)``); called at an overflow when no
            dump path is set. The front-end passes it in, so that this feature imports no front-end.
    """
    from ptdbg_ascend.dump.prebound import rebind as rebind_prebound
    from ptdbg_ascend.dump.session import get_session
    from ptdbg_ascend.overflow.observer import OverflowObserver

    limit = _check_arguments(model, overflow_nums, dump_mode, rank, extra_apis)
    acl_config, acl_rerun = _acl_mode(dump_mode, dump_config)
    session = get_session()
    float_status = _float_status()
    if session.legacy.directory is None and not os.environ.get("ASCEND_WORK_PATH") and acl_config is None:
        logger.warning("No dump path is set: call set_dump_path(...) before training, or the first overflow will stop "
                       "the run with a DumpPathError.")
    previous = _find_observer(session)
    if previous is not None:
        session.remove_observer(previous)
        previous.close()
    session.ensure_wrapped(extra_apis)
    rebind_prebound(session, model)  # the model's references to originals, taken before this call
    observer = OverflowObserver(session, limit, _place(session, acl_config, default_dump_path), rank=rank,
                                float_status=float_status, acl_rerun=acl_rerun)
    session.add_observer(observer)
    logger.info("Overflow check is on ({}, stop at overflow {}).".format(
        "float status" if float_status is not None else "inf/nan values", "never" if limit == -1 else limit))


def _check_arguments(model: Any, overflow_nums: Any, dump_mode: Any, rank: Any, extra_apis: Any) -> int:
    """Whether register_overflow_check's arguments are valid (a ParameterError names the first that is not);
    returns the overflow limit (``overflow_nums``, None meaning 1)."""
    import torch

    from ptdbg_ascend.dump.session import check_extra_apis

    if not isinstance(model, torch.nn.Module):
        raise ParameterError("model", type(model).__name__, "must be a torch.nn.Module")
    limit = _check_overflow_nums(overflow_nums)
    if dump_mode not in ("api", "acl"):
        hint = "Overflow check does not support model dump mode." if dump_mode == "model" else None
        raise ParameterError("dump_mode", dump_mode, "must be 'api' (default) or 'acl'", hint)
    if rank is not None and (isinstance(rank, bool) or not isinstance(rank, int) or rank < 0):
        raise ParameterError("rank", rank, "must be None or an int >= 0")
    check_extra_apis(extra_apis)
    return limit


def _acl_mode(dump_mode: str, dump_config: Optional[str]) -> Tuple[Any, Optional[Callable[..., Any]]]:
    """Whether overflowing calls are re-run under ACL dump: ``(acl_config, acl_rerun)``, both None unless
    ``dump_mode`` is "acl" (torch_npu and ``dump_config`` required); a ``dump_config`` without it is refused."""
    if dump_mode == "acl":
        from ptdbg_ascend.acl.api import acl_config_argument, require_torch_npu

        acl_npu = require_torch_npu("Overflow check with dump_mode='acl'")
        acl_config = acl_config_argument(dump_config)
        from ptdbg_ascend.acl.runner import rerun_forward

        # overflow + ACL: each overflowing forward call is re-run under ACL dump
        return acl_config, functools.partial(rerun_forward, acl_npu, config_file=acl_config.config_path)
    if dump_config is not None:
        raise ParameterError("dump_config", dump_config, "is only used with dump_mode='acl'")
    return None, None


def _float_status() -> Optional[Any]:
    """How overflows are detected: a cleared :class:`FloatStatus` where torch_npu's device cannot hold inf/nan,
    None (the values themselves) otherwise. Turns on torch_npu's overflow function where there is one."""
    from ptdbg_ascend.device import torch_npu_module
    from ptdbg_ascend.overflow.detection import FloatStatus, npu_supports_inf_nan

    torch_npu = torch_npu_module()
    if torch_npu is None:
        return None
    enable = getattr(torch_npu._C, "_enable_overflow_npu", None)
    if enable is not None:
        enable()
        logger.info("Enable overflow function success.")
    else:
        logger.warning("Api '_enable_overflow_npu' is not exist, the overflow detection function on milan platform "
                       "maybe not work! please check the version of software torch_npu.")
    if not npu_supports_inf_nan(torch_npu):
        float_status = FloatStatus(torch_npu)
        float_status.clear()  # forget what happened before the check started
        return float_status
    return None


def _place(session: Any, acl_config: Any, default_dump_path: Callable[[str], None]) -> Any:
    """Where overflow files go, decided at each overflow so a later ``set_dump_path`` is honoured: the
    dump path; without one, ``$ASCEND_WORK_PATH/dump_data`` (``default_dump_path(tag)`` sets it); in ACL
    mode without either, the ``dump_path`` of dump.json; otherwise a DumpPathError."""
    from ptdbg_ascend.overflow.observer import OverflowPlace

    def place() -> OverflowPlace:
        settings = session.legacy
        if settings.directory is None:
            if acl_config is not None and not os.environ.get("ASCEND_WORK_PATH"):
                return OverflowPlace(os.path.abspath(acl_config.dump_path), settings.tag, __version__)
            default_dump_path(settings.tag)  # the environment fallback, or a clear DumpPathError
        return OverflowPlace(settings.directory, settings.tag, __version__)

    return place


def set_overflow_check_switch(switch: str, filter_switch: str = "ON") -> None:
    """See :func:`ptdbg_ascend.set_overflow_check_switch`. Without any call the whole run is checked
    (with filter_switch "ON"). "OFF" reads the calls still pending on the device first, which may
    raise the overflow-limit ValueError."""
    from ptdbg_ascend.dump.session import get_session

    if switch not in ("ON", "OFF"):
        raise ParameterError("switch", switch, "must be 'ON' or 'OFF'")
    if filter_switch not in ("ON", "OFF"):
        raise ParameterError("filter_switch", filter_switch, "must be 'ON' or 'OFF'")
    observer = _find_observer(get_session())
    if observer is None:
        raise CallOrderError("set_overflow_check_switch needs register_hook(model, overflow_check) first.")
    if switch == "ON":
        observer.switch_on(filter_switch == "ON")
        logger.info("Overflow check switch is turned on.")
    else:
        observer.switch_off()
        logger.info("Overflow check switch is turned off.")
