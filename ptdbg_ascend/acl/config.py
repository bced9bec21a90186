"""The ACL ``dump.json``: validation and a helper that writes a correct one.

The file is handed unchanged to ``torch_npu.npu.set_dump``, which reads it itself, so we only check
that it has the shape the guide documents::

    {"dump": {"dump_list": [], "dump_path": "./dump/output", "dump_mode": "all", "dump_op_switch": "on"}}

Every error names the file and the key (as a path such as ``dump.dump_mode``), the value found and
what is allowed. Pure functions over files; importing this module does not import torch.
"""

from __future__ import annotations

import json
import os
from typing import Any, Dict, List, NamedTuple, Optional

from ptdbg_ascend.errors import FileFormatError, ParameterError
from ptdbg_ascend.jsonfile import ERROR, load_json

DUMP_MODES = ("output", "input", "all")
OP_SWITCHES = ("on", "off")
REQUIRED_KEYS = ("dump_list", "dump_path", "dump_mode", "dump_op_switch")


class AclDumpConfig(NamedTuple):
    """A validated ``dump.json``. ``config_path`` is absolute (what ``set_dump`` receives)."""

    config_path: str
    dump_path: str
    dump_mode: str
    dump_op_switch: str
    dump_list: List[Any]


def _bad(config_path: str, key: str, value: Any, allowed: str) -> FileFormatError:
    return FileFormatError(
        "Invalid ACL dump config {}: {} is {!r}; {}. A correct file: "
        '{{"dump": {{"dump_list": [], "dump_path": "./dump/output", "dump_mode": "all", "dump_op_switch": "on"}}}} '
        "(ptdbg_ascend.acl.write_acl_dump_config writes one).".format(config_path, key, value, allowed)
    )


def load_acl_config(dump_config: Any) -> AclDumpConfig:
    """Read and validate ``dump_config`` (the path of a ``dump.json``).

    Raises:
        ParameterError: ``dump_config`` is not a path ending in ``.json``.
        FileFormatError: the file is missing, unreadable, not JSON, or a key is missing or wrong.
    """
    if isinstance(dump_config, os.PathLike):
        dump_config = os.fspath(dump_config)
    if not isinstance(dump_config, str) or not dump_config.endswith(".json"):
        raise ParameterError("dump_config", dump_config, "must be the path of the ACL dump config, a .json file",
                             "Example: dump_config='./dump.json'")
    path = os.path.abspath(os.path.expanduser(dump_config))
    return _validate(path, load_json(path, "ACL dump config", duplicates=ERROR))


def _validate(path: str, content: Any) -> AclDumpConfig:
    if not isinstance(content, dict) or "dump" not in content:
        raise _bad(path, "the top level", content if not isinstance(content, dict) else sorted(content),
                   "it must be an object with the key 'dump'")
    dump = content["dump"]
    if not isinstance(dump, dict):
        raise _bad(path, "dump", dump, "it must be an object")
    missing = [key for key in REQUIRED_KEYS if key not in dump]
    if missing:
        raise _bad(path, "dump", sorted(dump), f"the keys {missing} are missing")
    unknown = sorted(set(dump) - set(REQUIRED_KEYS))
    if unknown:
        raise _bad(path, "dump", sorted(dump), f"unknown keys {unknown} (allowed: {list(REQUIRED_KEYS)})")
    if not isinstance(dump["dump_list"], list):
        raise _bad(path, "dump.dump_list", dump["dump_list"], "it must be a list (usually [])")
    if not isinstance(dump["dump_path"], str) or not dump["dump_path"]:
        raise _bad(path, "dump.dump_path", dump["dump_path"], "it must be a non-empty directory path")
    if dump["dump_mode"] not in DUMP_MODES:
        raise _bad(path, "dump.dump_mode", dump["dump_mode"], f"allowed: {list(DUMP_MODES)}")
    if dump["dump_op_switch"] not in OP_SWITCHES:
        raise _bad(path, "dump.dump_op_switch", dump["dump_op_switch"], f"allowed: {list(OP_SWITCHES)}")
    return AclDumpConfig(path, dump["dump_path"], dump["dump_mode"], dump["dump_op_switch"], list(dump["dump_list"]))


def write_acl_dump_config(config_path: str, dump_path: str, dump_mode: str = "all",
                          dump_op_switch: str = "on", dump_list: Optional[List[Any]] = None) -> AclDumpConfig:
    """Write a correct ``dump.json`` and return it validated.

    Args:
        config_path: the file to write, ending in ``.json`` (its directory must exist).
        dump_path: where the NPU writes the operator files (``{dump_path}/{time}/{device}/...``).
        dump_mode: "output", "input" or "all". Default "all".
        dump_op_switch: "on" or "off"; "on" is needed for single-API dumps. Default "on".
        dump_list: the model list of the ACL dump; leave it empty for API dumps. Default None (``[]``).
    """
    if not isinstance(config_path, str) or not config_path.endswith(".json"):
        raise ParameterError("config_path", config_path, "must be a path ending in .json")
    if not isinstance(dump_path, str) or not dump_path:
        raise ParameterError("dump_path", dump_path, "must be a non-empty directory path")
    if dump_mode not in DUMP_MODES:
        raise ParameterError("dump_mode", dump_mode, f"must be one of {list(DUMP_MODES)}")
    if dump_op_switch not in OP_SWITCHES:
        raise ParameterError("dump_op_switch", dump_op_switch, f"must be one of {list(OP_SWITCHES)}")
    if dump_list is not None and not isinstance(dump_list, list):
        raise ParameterError("dump_list", dump_list, "must be None or a list")
    content: Dict[str, Any] = {"dump": {"dump_list": list(dump_list or []), "dump_path": dump_path,
                                        "dump_mode": dump_mode, "dump_op_switch": dump_op_switch}}
    with open(config_path, "w", encoding="utf-8") as handle:
        json.dump(content, handle, indent=4)
        handle.write("\n")
    return load_acl_config(config_path)
