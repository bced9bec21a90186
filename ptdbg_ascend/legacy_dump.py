"""Dump-side implementation of the legacy functions ``set_dump_path``, ``register_hook(model,
acc_cmp_dump, ...)`` and ``set_dump_switch``. Validates, then drives the session."""

from __future__ import annotations

import os
from typing import Any, Optional, Sequence, Union

from ptdbg_ascend.dump.selection import make_switch_config
from ptdbg_ascend.formats import layout
from ptdbg_ascend.errors import CallOrderError, DumpPathError, ParameterError
from ptdbg_ascend.log import logger
from ptdbg_ascend.fs.writes import check_path_text
from ptdbg_ascend.version import __version__

_TAG_CHARACTERS = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")


def set_dump_path(fpath: Optional[str] = None, dump_tag: str = "ptdbg_dump") -> None:
    """See :func:`ptdbg_ascend.set_dump_path`. Checks the path now; creates directories at the first
    record (so a run that dumps nothing leaves nothing behind)."""
    from ptdbg_ascend.dump.session import get_session

    if fpath is None:
        work_path = os.environ.get("ASCEND_WORK_PATH")
        if not work_path:
            raise DumpPathError(
                "No dump path: call set_dump_path('./dump_path/npu_dump.pkl'), or set_dump_path(a directory), "
                "or set the environment variable ASCEND_WORK_PATH (dumps then go to $ASCEND_WORK_PATH/dump_data)."
            )
        fpath = os.path.join(work_path, "dump_data")
    if isinstance(fpath, os.PathLike):
        fpath = os.fspath(fpath)
    if not isinstance(fpath, str) or not fpath:
        raise ParameterError("fpath", fpath, "must be a path such as './dump_path/npu_dump.pkl' or a directory")
    check_path_text("fpath", fpath)
    if not isinstance(dump_tag, str) or not dump_tag or not set(dump_tag) <= _TAG_CHARACTERS or dump_tag in (".", ".."):
        raise ParameterError("dump_tag", dump_tag, "must be a non-empty name of letters, digits, '_', '.' and '-'")
    path = check_path_text("fpath", os.path.abspath(os.path.expanduser(fpath)))
    if fpath.endswith(layout.PKL_SUFFIX):
        directory, stem = os.path.dirname(path), os.path.basename(path)[: -len(layout.PKL_SUFFIX)]
        if not stem:
            raise ParameterError("fpath", fpath, "the .pkl file needs a name, e.g. './dump_path/npu_dump.pkl'")
        if os.path.isdir(path):
            raise DumpPathError(f"The dump file {path} is a directory. Use another name.")
    else:
        directory, stem = path, "dump"
    _check_directory(directory, fpath)
    settings = get_session().legacy
    settings.directory, settings.stem, settings.tag = directory, stem, dump_tag
    logger.info(f"Dump path is set to {layout.tag_dir(directory, dump_tag, __version__)} (tag {dump_tag}).")


def _check_directory(directory: str, fpath: str) -> None:
    if os.path.islink(directory):
        raise DumpPathError(f"The dump directory {directory} (from fpath={fpath!r}) is a symlink; give the real path.")
    if os.path.exists(directory) and not os.path.isdir(directory):
        raise DumpPathError(f"The dump directory {directory} (from fpath={fpath!r}) is a file, not a directory.")
    existing = directory
    while not os.path.exists(existing):
        parent = os.path.dirname(existing)
        if parent == existing:
            break
        existing = parent
    if not os.path.isdir(existing):
        raise DumpPathError(f"Cannot create the dump directory {directory}: {existing} is a file.")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise DumpPathError(f"The dump directory {directory} is not writable (no write permission on {existing}).")


def register_dump(model: Any, overflow_nums: Optional[int] = None, dump_mode: str = "api",
                  dump_config: Optional[str] = None, rank: Optional[int] = None,
                  extra_apis: Optional[bool] = None) -> None:
    """See :func:`ptdbg_ascend.register_hook` with ``acc_cmp_dump``: installs the wrappers."""
    import torch

    from ptdbg_ascend.dump.prebound import rebind as rebind_prebound
    from ptdbg_ascend.dump.session import get_session

    if not isinstance(model, torch.nn.Module):
        raise ParameterError("model", type(model).__name__, "must be a torch.nn.Module")
    if overflow_nums is not None:
        raise ParameterError("overflow_nums", overflow_nums, "is only used with register_hook(model, overflow_check, ...)")
    if dump_mode not in ("api", "acl"):
        hint = "Module-level dump (dump_mode='model') is not supported." if dump_mode == "model" else None
        raise ParameterError("dump_mode", dump_mode, "must be 'api' (default) or 'acl'", hint)
    if rank is not None and (isinstance(rank, bool) or not isinstance(rank, int) or rank < 0):
        raise ParameterError("rank", rank, "must be None or an int >= 0")
    if dump_mode == "api" and dump_config is not None:
        raise ParameterError("dump_config", dump_config, "is only used with dump_mode='acl'")
    session = get_session()
    session.ensure_wrapped(extra_apis)  # checks extra_apis first
    rebind_prebound(session, model)  # the model's references to originals, taken before this call
    session.legacy.rank = rank
    session.legacy.registered = True
    if dump_mode == "acl":
        from ptdbg_ascend.acl.api import register_acl_dump

        register_acl_dump(session, dump_config=dump_config, rank=rank)
    logger.info("Please disable dataloader shuffle before running the program.")


def set_dump_switch(switch: str, mode: str = "all", scope: Optional[Sequence[str]] = None,
                    api_list: Optional[Sequence[str]] = None, filter_switch: str = "ON",
                    dump_mode: Union[str, Sequence[str], None] = None, summary_only: bool = False) -> None:
    """See :func:`ptdbg_ascend.set_dump_switch`."""
    from ptdbg_ascend.sinks.legacy.sink import DumpLocation, LegacyRecorder
    from ptdbg_ascend.dump.session import get_session

    if switch not in ("ON", "OFF"):
        raise ParameterError("switch", switch, "must be 'ON' or 'OFF'")
    config = make_switch_config(mode, scope, api_list, filter_switch, dump_mode, summary_only)
    session = get_session()
    settings = session.legacy
    if config.mode == "acl":
        from ptdbg_ascend.acl.api import configure_acl_switch

        configure_acl_switch(session, switch, list(config.scope), filter_switch)
        return
    if switch == "OFF":
        recorder = settings.recorder
        if recorder is None:
            logger.warning("Dump switch is already off.")
            return
        session.remove_observer(recorder)
        settings.recorder = None
        recorder.close()
        if recorder.config.mode == "list":
            logger.info(f"The number of matched dump is {recorder.matched}")
        logger.info("Dump switch is turned off. ")
        return
    if not settings.registered:
        raise CallOrderError("set_dump_switch('ON') needs the wrappers: call register_hook(model, acc_cmp_dump) first.")
    if settings.directory is None:
        set_dump_path(None, settings.tag)  # the environment fallback, or a clear error
    if settings.recorder is not None:  # ON again without OFF: the new window replaces the old one
        session.remove_observer(settings.recorder)
        settings.recorder.close()
    location = DumpLocation(settings.directory, settings.tag, settings.stem, __version__)
    recorder = LegacyRecorder(session, config, location, settings.rank)
    # One writer per rank directory: when the rank is known now (register_hook(rank=), torch.distributed,
    # RANK/LOCAL_RANK) the lock is taken here and a second process fails at this call; otherwise (the
    # rank comes from the first recorded tensor's device) at the window's first record.
    known = session.known_rank(settings.rank)
    if known is not None:
        recorder.claim(known)
    settings.recorder = recorder
    session.add_observer(recorder)
    logger.info(f"Dump switch is turned on. Dump data will be saved to {location.tag_dir}. ")
