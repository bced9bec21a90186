"""``DebuggerConfig``: the msprobe 1.0.4 ``config.json`` schema, loaded and validated.

One immutable record holds everything a :class:`~ptdbg_ascend.debugger.PrecisionDebugger` needs. It is
built from a ``config.json`` file (:func:`load_config`) or a dict (:func:`config_from_dict`); the
constructor arguments ``task``, ``dump_path``, ``level`` and ``step`` override the file, as in msprobe.

Validation happens here, once, and every error is a :class:`~ptdbg_ascend.errors.ParameterError` that
names the key (``tensor.scope``, ``step``...), the value and what is allowed. Unknown keys are not
errors (newer msprobe versions add keys) but each one is logged as a warning with its name.

Differences from msprobe 1.0.4, on purpose (its quirks, ``reference/msprobe_1_0_4.md`` §12):

* ``seed: 0`` stays 0 (1.0.4 silently turned it into 1234);
* ``data_mode`` items are checked (1.0.4 accepted anything and dumped nothing for a typo);
* ``free_benchmark``'s section is checked whole (``config_free_benchmark.py``: combinations 1.0.4 refused only at
  run time, and ``if_preheat`` absent is false); ``grad_probe``'s ``bounds`` must be finite numbers in strictly ascending order (1.0.4
  accepted equal bounds, which make an empty interval);
* ``task: "run_ut"`` (the API pre-check's section: ``white_list``, ``black_list``, ``error_data_path``)
  is read by ``ptdbg run-ut -config``; a PrecisionDebugger built with it dumps what the pre-check needs
  (the ``tensor`` task at level L1). The online pre-check (``is_online: true``) is refused.

Extension fields (not in the 1.0.4 schema; written by ``to_dict`` only when not at their default, so an
exported config stays a plain 1.0.4 one otherwise):

* ``extra_apis`` (top level, boolean, default false): also wrap the APIs beyond the original
  ptdbg_ascend 4.0's list (``dump/wrapped_apis_extra.txt``), as ``register_hook(..., extra_apis=True)``.

This module never imports torch (compat and the compare side use it).
"""

from __future__ import annotations

import math
import os
from typing import Any, Dict, List, Mapping, NamedTuple, Optional, Tuple

from ptdbg_ascend import config_free_benchmark as free_benchmark
from ptdbg_ascend.errors import FileFormatError, ParameterError
from ptdbg_ascend.jsonfile import ERROR, load_json
from ptdbg_ascend.log import logger

TASKS = ("statistics", "tensor", "overflow_check", "run_ut", "grad_probe", "free_benchmark")
GRAD_LEVELS = ("L0", "L1", "L2")
DEFAULT_BOUNDS = (-1, 0, 1)
LEVELS = ("L0", "L1", "L2", "mix")
DATA_MODES = ("all", "forward", "backward", "input", "output")
SUMMARY_MODES = ("statistics", "md5")
FILE_FORMATS = ("npy", "bin")
CHECK_MODES = ("all", "aicore", "atomic")

DEFAULT_DUMP_PATH = "./dump_path"
DEFAULT_SEED = 1234
MAX_SEED = 2 ** 32 - 1

# Keys this tool adds to the 1.0.4 schema (see the module docstring).
EXTENSION_KEYS = ("extra_apis",)
TOP_LEVEL_KEYS = ("task", "dump_path", "rank", "step", "level", "seed", "is_deterministic",
                  "enable_dataloader", "acl_config") + TASKS + EXTENSION_KEYS
COMMON_SECTION_KEYS = ("scope", "list", "data_mode")
SECTION_KEYS = {
    "statistics": COMMON_SECTION_KEYS + ("summary_mode",),
    "tensor": COMMON_SECTION_KEYS + ("backward_input", "file_format", "online_run_ut", "nfs_path", "host",
                                     "port", "tls_path"),
    "overflow_check": COMMON_SECTION_KEYS + ("overflow_nums", "check_mode"),
    "run_ut": COMMON_SECTION_KEYS + ("white_list", "black_list", "error_data_path", "is_online", "nfs_path", "host",
                                     "port", "rank_list", "tls_path"),
    "grad_probe": ("grad_level", "param_list", "bounds"),
    "free_benchmark": free_benchmark.SECTION_KEYS,
}
DEFAULT_ERROR_DATA_PATH = "./"


class DebuggerConfig(NamedTuple):
    """A validated msprobe 1.0.4 configuration (immutable). Defaults are those of msprobe 1.0.4.

    Attributes:
        task: "statistics" (default), "tensor", "overflow_check" or "run_ut" (dumps as "tensor"; the
            section configures ``ptdbg run-ut``).
        dump_path: the dump root. Default "./dump_path".
        rank: the ranks to dump; () = all (default).
        step: the steps to dump, sorted; () = all (default).
        level: "L0" (modules), "L1" (APIs, default), "mix" (both) or "L2" (ACL, NPU only).
        seed: applied with ``seed_all`` when the debugger is built. Default 1234.
        is_deterministic: ``torch.use_deterministic_algorithms``. Default False.
        enable_dataloader: step the dump with the DataLoader's batches. Default False.
        acl_config: the ACL dump config file (L2 only). Default "".
        scope: () or two exact names (a range, inclusive); one name ``[x]`` becomes ``(x, x)``.
        api_list: the task section's ``list``: case-sensitive substrings. Default ().
        data_mode: subset of {all, forward, backward, input, output}; OR semantics as in 1.0.4.
            Default ("all",).
        summary_mode: "statistics" (default) or "md5" (statistics task).
        backward_input: gradient ``.pt`` files for an L2 backward dump (tensor task). Default ().
        file_format: "npy" (default) or "bin"; kept for the schema, PyTorch dumps are always ``.pt``.
        overflow_nums: stop at the N-th overflow; -1 never stops. Default 1.
        check_mode: "all" (default), "aicore" or "atomic" (kept for the schema).
        extra_apis: extension: also wrap the APIs beyond the original 4.0's list. Default False.
        white_list: run_ut: only these APIs are checked (names of the wrap list, e.g. "conv2d"). Default ().
        black_list: run_ut: these APIs are not checked. Default ().
        error_data_path: run_ut: where ``-save_error_data`` writes (must exist). Default "./".
        grad_level: grad_probe: "L0", "L1" (default) or "L2" (``grad_probe/``).
        param_list: grad_probe: the parameter names monitored (exact names); () = all (default).
        bounds: grad_probe: the interval bounds of the L2 distribution, ascending. Default (-1, 0, 1).
        fuzz_device ... max_sample: free_benchmark (``config_free_benchmark.py``; its ``scope`` is exact call names).
            Defaults "npu", "improve_precision", "check", "L1", "forward", False, 15, 20.
    """

    task: str = "statistics"
    dump_path: str = DEFAULT_DUMP_PATH
    rank: Tuple[int, ...] = ()
    step: Tuple[int, ...] = ()
    level: str = "L1"
    seed: int = DEFAULT_SEED
    is_deterministic: bool = False
    enable_dataloader: bool = False
    acl_config: str = ""
    scope: Tuple[str, ...] = ()
    api_list: Tuple[str, ...] = ()
    data_mode: Tuple[str, ...] = ("all",)
    summary_mode: str = "statistics"
    backward_input: Tuple[str, ...] = ()
    file_format: str = "npy"
    overflow_nums: int = 1
    check_mode: str = "all"
    extra_apis: bool = False
    white_list: Tuple[str, ...] = ()
    black_list: Tuple[str, ...] = ()
    error_data_path: str = DEFAULT_ERROR_DATA_PATH
    grad_level: str = "L1"
    param_list: Tuple[str, ...] = ()
    bounds: Tuple[float, ...] = DEFAULT_BOUNDS
    fuzz_device: str = "npu"
    pert_mode: str = "improve_precision"
    handler_type: str = "check"
    fuzz_level: str = "L1"
    fuzz_stage: str = "forward"
    if_preheat: bool = False
    preheat_step: int = 15
    max_sample: int = 20

    @property
    def saves_tensors(self) -> bool:
        """Whether ``.pt`` files are written (tensor, run_ut and overflow_check tasks)."""
        return self.task in ("tensor", "overflow_check", "run_ut")

    @property
    def dump_task(self) -> str:
        """The task a dump runs as: "run_ut" dumps as "tensor" (what the pre-check re-runs from)."""
        return "tensor" if self.task == "run_ut" else self.task

    @property
    def module_range(self) -> bool:
        """Whether ``scope`` names two modules (a module range) rather than two API calls."""
        return bool(self.scope) and self.scope[0].startswith("Module")

    def to_dict(self) -> Dict[str, Any]:
        """The ``config.json`` form (top-level keys, then the task's section)."""
        section = {"scope": list(self.scope), "list": list(self.api_list), "data_mode": list(self.data_mode)}
        if self.task == "statistics":
            section["summary_mode"] = self.summary_mode
        elif self.task == "tensor":
            section["backward_input"] = list(self.backward_input)
            section["file_format"] = self.file_format
        elif self.task == "run_ut":
            section["white_list"] = list(self.white_list)
            section["black_list"] = list(self.black_list)
            section["error_data_path"] = self.error_data_path
        elif self.task == "grad_probe":  # (its section holds only its own keys, as in 1.0.4)
            section = {"grad_level": self.grad_level, "param_list": list(self.param_list), "bounds": list(self.bounds)}
        elif self.task == "free_benchmark":
            section = free_benchmark.section_dict(self)
        else:
            section["overflow_nums"] = self.overflow_nums
            section["check_mode"] = self.check_mode
        result: Dict[str, Any] = {
            "task": self.task, "dump_path": self.dump_path, "rank": list(self.rank), "step": list(self.step),
            "level": self.level, "seed": self.seed, "is_deterministic": self.is_deterministic,
            "enable_dataloader": self.enable_dataloader, "acl_config": self.acl_config, self.task: section,
        }
        if self.extra_apis:  # an extension field: only when set
            result["extra_apis"] = True
        return result


def load_config(config_path: Optional[str] = None, task: Optional[str] = None, dump_path: Optional[str] = None,
                level: Optional[str] = None, step: Optional[List[int]] = None) -> DebuggerConfig:
    """Read and validate a ``config.json``; the keyword arguments (when not None) override the file.

    Args:
        config_path: the JSON file. Default None: no file, msprobe's defaults (task statistics, level L1,
            dump_path "./dump_path").
        task, dump_path, level, step: override the file's values (msprobe's constructor arguments).

    Raises:
        FileFormatError: the file is missing, unreadable, not JSON or not a JSON object (names the path).
        ParameterError: a value is invalid (names the key, the value and what is allowed).
    """
    raw: Dict[str, Any] = {}
    if config_path is not None:
        raw = read_config_file(config_path)
    return config_from_dict(raw, task=task, dump_path=dump_path, level=level, step=step, source=config_path)


def read_config_file(config_path: str) -> Dict[str, Any]:
    """The JSON object in ``config_path``; FileFormatError naming the path otherwise."""
    if not isinstance(config_path, str) or not config_path:
        raise ParameterError("config_path", config_path, "must be the path of a config.json file")
    raw = load_json(config_path, "config file", duplicates=ERROR)  # a repeated key is an error, not a guess
    if not isinstance(raw, dict):
        raise FileFormatError(f"The config file {config_path} must hold a JSON object, not {type(raw).__name__}.")
    return raw


def config_from_dict(raw: Mapping[str, Any], task: Optional[str] = None, dump_path: Optional[str] = None,
                     level: Optional[str] = None, step: Optional[List[int]] = None,
                     source: Optional[str] = None) -> DebuggerConfig:
    """Validate a config dict (the content of a ``config.json``); see :func:`load_config`.

    ``source`` (a file name) is only used in warnings.
    """
    where = f" in {source}" if source else ""
    for key in raw:
        if key not in TOP_LEVEL_KEYS:
            logger.warning(f"Unknown key {key!r}{where} is ignored; known keys: {', '.join(TOP_LEVEL_KEYS)}.")
    chosen_task = _task("task", task) if task is not None else _task("task", raw.get("task", "statistics"))
    section = raw.get(chosen_task, {})
    if not isinstance(section, dict):
        raise ParameterError(chosen_task, section, f"must be a JSON object (the {chosen_task} task's section)")
    for key in section:
        if key not in SECTION_KEYS[chosen_task]:
            logger.warning("Unknown key {!r} in the {!r} section{} is ignored; known keys: {}.".format(
                key, chosen_task, where, ", ".join(SECTION_KEYS[chosen_task])))

    chosen_level = _choice("level", level if level is not None else raw.get("level", "L1"), LEVELS)
    values = dict(
        task=chosen_task,
        dump_path=_dump_path(dump_path if dump_path is not None else raw.get("dump_path", DEFAULT_DUMP_PATH)),
        rank=_int_list("rank", raw.get("rank", [])),
        step=tuple(sorted(set(_int_list("step", step if step is not None else raw.get("step", []))))),
        level=chosen_level,
        seed=_seed(raw.get("seed", DEFAULT_SEED)),
        is_deterministic=_boolean("is_deterministic", raw.get("is_deterministic", False)),
        enable_dataloader=_boolean("enable_dataloader", raw.get("enable_dataloader", False)),
        acl_config=_string("acl_config", raw.get("acl_config", "")),
        extra_apis=_boolean("extra_apis", raw.get("extra_apis", False)),
    )
    prefix = chosen_task + "."
    if chosen_task != "free_benchmark":  # (its scope is a set of exact names, not a range: its own section checks it)
        values["scope"] = _scope(prefix + "scope", _str_list(prefix + "scope", section.get("scope", [])))
    values["api_list"] = _str_list(prefix + "list", section.get("list", []))
    data_mode = _str_list(prefix + "data_mode", section.get("data_mode", ["all"]))
    for item in data_mode:
        if item not in DATA_MODES:
            raise ParameterError(prefix + "data_mode", list(data_mode), f"every item must be one of {list(DATA_MODES)}")
    values["data_mode"] = data_mode or ("all",)
    if chosen_task == "free_benchmark":
        values.update(free_benchmark.free_benchmark_section(section, chosen_level, _choice, _str_list))
    else:
        values.update(_task_section(chosen_task, prefix, section))
    config = DebuggerConfig(**values)
    _check_l2(config, prefix)
    return config


def _task_section(task: str, prefix: str, section: Mapping[str, Any]) -> Dict[str, Any]:
    """The values of the task's own section keys (``prefix``: ``"{task}."``, for the messages)."""
    if task == "statistics":
        return {"summary_mode": _choice(prefix + "summary_mode", section.get("summary_mode", "statistics"),
                                        SUMMARY_MODES)}
    if task == "tensor":
        return {"backward_input": _str_list(prefix + "backward_input", section.get("backward_input", [])),
                "file_format": _choice(prefix + "file_format", section.get("file_format", "npy"), FILE_FORMATS)}
    if task == "run_ut":
        return _run_ut_section(prefix, section)
    if task == "grad_probe":
        return {"grad_level": _choice(prefix + "grad_level", section.get("grad_level", "L1"), GRAD_LEVELS),
                "param_list": _str_list(prefix + "param_list", section.get("param_list", [])),
                "bounds": _bounds(prefix + "bounds", section.get("bounds", list(DEFAULT_BOUNDS)))}
    nums = _integer(prefix + "overflow_nums", section.get("overflow_nums", 1))
    if nums < -1 or nums == 0:
        raise ParameterError(prefix + "overflow_nums", nums, "must be a positive int, or -1 for no limit")
    return {"overflow_nums": nums,
            "check_mode": _choice(prefix + "check_mode", section.get("check_mode", "all"), CHECK_MODES)}


def _run_ut_section(prefix: str, section: Mapping[str, Any]) -> Dict[str, Any]:
    """The run_ut section's values. The list names are checked against the wrap list by the pre-check
    (which knows it); ``error_data_path`` must exist, as in 1.0.4."""
    if section.get("is_online", False) is not False:
        raise ParameterError(prefix + "is_online", section.get("is_online"), "must be false",
                             "The online pre-check (API data streamed to a second machine) is not implemented by "
                             "ptdbg_ascend; dump with task \"run_ut\" and run `ptdbg run-ut` on the dump.")
    error_data_path = _string(prefix + "error_data_path", section.get("error_data_path", DEFAULT_ERROR_DATA_PATH))
    if not os.path.isdir(error_data_path):
        raise ParameterError(prefix + "error_data_path", error_data_path, "must be an existing directory")
    return dict(white_list=_str_list(prefix + "white_list", section.get("white_list", [])),
                black_list=_str_list(prefix + "black_list", section.get("black_list", [])),
                error_data_path=error_data_path)


# -- value checks (each names the key) -----------------------------------------------------------
def _task(key: str, value: Any) -> str:
    return _choice(key, value, TASKS)


def _choice(key: str, value: Any, allowed: Tuple[str, ...]) -> str:
    if not isinstance(value, str) or value not in allowed:
        raise ParameterError(key, value, f"must be one of {list(allowed)}")
    return value


def _string(key: str, value: Any) -> str:
    if not isinstance(value, str):
        raise ParameterError(key, value, "must be a string")
    return value


def _boolean(key: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ParameterError(key, value, "must be a boolean (true or false)")
    return value


def _integer(key: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ParameterError(key, value, "must be an integer")
    return value


def _seed(value: Any) -> int:
    seed = _integer("seed", value)
    if not 0 <= seed <= MAX_SEED:
        raise ParameterError("seed", seed, f"must be an integer in [0, {MAX_SEED}]")
    return seed


def _dump_path(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ParameterError("dump_path", value, "must be a non-empty string (a directory path)")
    from ptdbg_ascend.fs.writes import check_path_text

    check_path_text("dump_path", value)
    check_path_text("dump_path", os.path.abspath(os.path.expanduser(value)))  # the length as written to
    return value


def _int_list(key: str, value: Any) -> Tuple[int, ...]:
    if not isinstance(value, (list, tuple)):
        raise ParameterError(key, value, "must be a list of integers >= 0", f"Example: {key}: [0, 1]")
    for item in value:
        if isinstance(item, bool) or not isinstance(item, int) or item < 0:
            raise ParameterError(key, value, "every item must be an integer >= 0 (ranges such as '3-5' are "
                                 "not part of the 1.0.4 schema)")
    return tuple(value)


def _str_list(key: str, value: Any) -> Tuple[str, ...]:
    if not isinstance(value, (list, tuple)):
        raise ParameterError(key, value, "must be a list of strings")
    for item in value:
        if not isinstance(item, str) or not item:
            raise ParameterError(key, value, "every item must be a non-empty string")
    return tuple(value)


def _bounds(key: str, value: Any) -> Tuple[float, ...]:
    """grad_probe's bounds: finite numbers, strictly ascending (1.0.4: "The input list should be ascending")."""
    if not isinstance(value, (list, tuple)) or not all(
            type(item) in (int, float) and math.isfinite(item) for item in value):
        raise ParameterError(key, value, "must be a list of finite numbers", "Example: [-1, 0, 1]")
    if any(later <= earlier for earlier, later in zip(value, value[1:])):
        raise ParameterError(key, list(value), "must be strictly ascending (each bound above the one before)")
    return tuple(value)


def _scope(key: str, names: Tuple[str, ...]) -> Tuple[str, ...]:
    if len(names) > 2:
        raise ParameterError(key, list(names), "must hold 0, 1 or 2 names (a start and an end, inclusive)",
                             f"Got {len(names)} names.")
    if len(names) == 1:
        names = (names[0], names[0])
    if names and names[0].startswith("Module") != names[1].startswith("Module"):
        raise ParameterError(key, list(names), "must name two modules (Module....) or two API calls, not one of each")
    return names


def _check_l2(config: DebuggerConfig, prefix: str) -> None:
    if config.level != "L2":
        if config.acl_config:
            logger.warning(f"acl_config is only used at level L2; ignored at level {config.level}.")
        return
    if len(set(config.scope)) != 1:
        raise ParameterError(prefix + "scope", list(config.scope), "at level L2 must hold exactly one API name",
                             'Example: "scope": ["Tensor.__mul__.0.forward"]')
    if "backward" in config.scope[0] and not config.backward_input:
        raise ParameterError(prefix + "backward_input", list(config.backward_input),
                             "must name the gradient .pt files when the L2 scope is a backward call")
    if config.acl_config and not os.path.isfile(config.acl_config):
        raise ParameterError("acl_config", config.acl_config, "must name an existing .json file")
