"""``export_config("config.json")``: write the msprobe 1.0.4 config equivalent to the legacy calls the
running script made, and say what could not be mapped exactly.

``run_and_export(script, args, config_path)`` is ``ptdbg export-config``: it runs a script the way
``python script.py args`` would, then writes its config even when the script fails (a crash after the
legacy calls still tells us what the run asked for). A script Python cannot compile (not Python, or nested
too deeply for its compiler) is refused before it runs, and nothing is written.
"""

from __future__ import annotations

import json
import os
import runpy
import sys
from typing import List, NamedTuple, Optional, Sequence, Tuple

from ptdbg_ascend.compat.mapping import Caveat, MappingResult, map_calls
from ptdbg_ascend.call_log import LegacyCall, clear_calls, debugger_configs, recorded_calls
from ptdbg_ascend.errors import DumpPathError, DumpWriteError, FileFormatError, ParameterError
from ptdbg_ascend.log import logger
from ptdbg_ascend.fs.writes import check_path_text, replace_file, write_all


def write_config(result: MappingResult, config_path: str) -> None:
    """Write ``result.config`` as JSON (indent 4) to ``config_path``, atomically: a temporary file with an
    unpredictable name beside it (``O_EXCL``) is renamed into place, so a failure never leaves half a
    config and a link planted at a predictable temporary name is never written through.

    An existing symlink at ``config_path`` is a :class:`DumpPathError` (the tool does not write through
    links, and replacing the link would surprise whoever made it): remove it or give its target.
    """
    if not isinstance(config_path, str) or not config_path:
        raise ParameterError("config_path", config_path, "a non-empty file path such as './config.json'")
    check_path_text("config_path", config_path)
    directory = os.path.dirname(os.path.abspath(config_path))
    if not os.path.isdir(directory):
        raise DumpPathError(f"Cannot write {config_path}: the directory {directory} does not exist.")
    if os.path.islink(config_path):
        raise DumpPathError("Cannot write {}: it is a symlink (to {}); ptdbg_ascend does not write through links. "
                            "Remove the link, or pass the file it points to.".format(
                                config_path, os.readlink(config_path)))
    text = json.dumps(result.config, indent=4) + "\n"
    try:
        replace_file(config_path, lambda descriptor: write_all(descriptor, text.encode("utf-8")), "the config")
    except DumpWriteError as error:
        raise DumpPathError(str(error)) from None


def export_config(config_path: str = "./config.json", calls: Optional[Sequence[LegacyCall]] = None) -> Tuple[Caveat, ...]:
    """Write the msprobe 1.0.4 ``config.json`` describing the dump the legacy calls set up.

    Args:
        config_path: the file to write. Default ``"./config.json"``.
        calls: the legacy calls to translate. Default None: the calls this process has made so far
            (recorded by ``ptdbg_ascend.legacy``).

    Returns:
        The caveats: what the config cannot express exactly, and why. Each is also logged as a warning.
    """
    result = map_calls(recorded_calls() if calls is None else list(calls))
    write_config(result, config_path)
    logger.info("Exported the msprobe 1.0.4 config to {} (task {}, level {}).".format(
        config_path, result.config["task"], result.config["level"]))
    for caveat in result.caveats:
        logger.warning(f"Not mapped exactly: {caveat}")
    return result.caveats


class ScriptRun(NamedTuple):
    """What ``run_and_export`` did: the caveats, and the script's failure (None when it finished)."""

    caveats: Tuple[Caveat, ...]
    error: Optional[BaseException]


def run_and_export(script: str, script_args: List[str], config_path: str) -> ScriptRun:
    """Run ``script`` as ``__main__`` with ``script_args``, then export the config of its legacy calls (a script
    already on the new API, which made none: the config of its PrecisionDebugger, any task).

    The script's exception (or a non-zero ``sys.exit``) is returned, not raised, after the config is
    written. The script's directory is put first on ``sys.path``, as ``python script.py`` does.
    """
    if not os.path.isfile(script):
        raise ParameterError("script", script, "an existing Python file")
    _check_compiles(script)
    clear_calls()
    saved_argv, saved_path = list(sys.argv), list(sys.path)
    sys.argv = [script] + list(script_args)
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    error: Optional[BaseException] = None
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as exit_:
        if exit_.code not in (None, 0):
            error = exit_
    except (Exception, KeyboardInterrupt) as exception:  # the config is still worth writing
        error = exception
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path
    if error is not None:
        logger.warning("The script {} failed ({}: {}); exporting the legacy calls it made before that.".format(
            script, type(error).__name__, error))
    calls = recorded_calls()
    configs = debugger_configs()
    if not calls and configs:  # already on the new API (any task: grad_probe, free_benchmark...): its config
        return ScriptRun(_export_debugger_config(script, configs, config_path), error)
    if not calls:
        logger.warning(f"The script {script} made no legacy ptdbg_ascend call; the config holds the defaults.")
    return ScriptRun(export_config(config_path, calls), error)


def _export_debugger_config(script: str, configs: Sequence[dict], config_path: str) -> Tuple[Caveat, ...]:
    """Write the config of the script's (first) PrecisionDebugger; a caveat when it built several that differ."""
    caveats: Tuple[Caveat, ...] = ()
    if any(config != configs[0] for config in configs[1:]):
        caveats = (Caveat("PrecisionDebugger(...)", f"the script built {len(configs)} debuggers with different "
                          "configs; the first one's is exported"),)
    write_config(MappingResult(configs[0], caveats), config_path)
    logger.info("Exported the config of the PrecisionDebugger built by {} to {} (task {}).".format(
        script, config_path, configs[0]["task"]))
    for caveat in caveats:
        logger.warning(f"Not mapped exactly: {caveat}")
    return caveats


def _check_compiles(script: str) -> None:
    """FileFormatError naming ``script`` when Python cannot compile it: then nothing runs and no config
    is written (a config of defaults would pretend the script asked for them). Python raises, never
    crashes, on deep nesting (SyntaxError "too many nested parentheses", RecursionError, MemoryError)."""
    try:
        with open(script, "rb") as handle:
            source = handle.read()
    except OSError as error:
        raise FileFormatError(f"Cannot read the script {script}: {error}") from None
    try:
        compile(source, script, "exec", dont_inherit=True)
    except SyntaxError as error:
        raise FileFormatError("{}:{}: not valid Python ({}); the script was not run and nothing was written.".format(
            script, error.lineno, error.msg)) from None
    except (RecursionError, MemoryError) as error:
        raise FileFormatError("{}: nested too deeply for Python's compiler ({}); the script was not run and nothing "
                              "was written.".format(script, type(error).__name__)) from None
    except ValueError as error:  # e.g. a null byte
        raise FileFormatError("{}: not Python source ({}); the script was not run and nothing was written.".format(
            script, error)) from None
