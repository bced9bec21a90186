"""Validate ``compare`` arguments into two immutable values: :class:`CompareInputs`, the files (from the legacy
pkl keys and msprobe's ``npu_path``/``npu_json_path`` keys alike), and :class:`CompareOptions`."""

from __future__ import annotations

import importlib.util
import os
import re
from typing import Any, Dict, Mapping, NamedTuple, Optional, Union

from ptdbg_ascend.errors import DumpWriteError, FileFormatError, ParameterError
from ptdbg_ascend.formats.layout import is_dump_json, stack_file, tensor_dir_beside
from ptdbg_ascend.formats.naming import is_api_name
from ptdbg_ascend.terminal import excerpt, shorten

# key -> (side, role); first listed key of a role wins when several aliases are given.
KEYS = {
    "npu_pkl_path": ("npu", "dump"), "bench_pkl_path": ("bench", "dump"),
    "npu_path": ("npu", "dump"), "bench_path": ("bench", "dump"),
    "npu_json_path": ("npu", "dump"), "bench_json_path": ("bench", "dump"),
    "npu_dump_data_dir": ("npu", "data"), "bench_dump_data_dir": ("bench", "data"),
    "stack_path": ("npu", "stack"), "stack_json_path": ("npu", "stack"),
}
OPTIONS = ("is_print_compare_log",)
# msprobe's keys for the dump files (compare.json's): the tensors are found beside the dump, for a legacy pkl as
# for a dump.json, since a compare.json has no key for them. The legacy keys keep the legacy rule: leaving out
# the data directories asks for a statistics-only comparison.
MSPROBE_DUMP_KEYS = ("npu_path", "bench_path", "npu_json_path", "bench_json_path")
SUFFIX = re.compile(r"^[A-Za-z0-9_.-]*$")
# An api_mapping file holds a few API names; a file bigger than this is not one (and is not read).
MAX_MAPPING_BYTES = 1 << 20


class CompareInputs(NamedTuple):
    npu_dump: str
    bench_dump: str
    npu_data_dir: Optional[str]  # None on either side: summary (statistics) comparison
    bench_data_dir: Optional[str]
    stack_path: Optional[str]
    print_log: bool

    @property
    def full_mode(self) -> bool:
        return self.npu_data_dir is not None and self.bench_data_dir is not None


class CompareOptions(NamedTuple):
    """The checked options of one comparison (see :func:`check_options`)."""

    output_path: str  # a writable directory, or one that can be created: the reports go there
    stack_mode: bool  # the NPU_Stack_Info column
    auto_analyze: bool  # the advisor's advisor_*.txt
    suffix: str  # in the report names ("" leaves the part out)
    fuzzy_match: bool  # rows whose call names differ say so in Err_message
    xlsx: bool  # the .xlsx beside the CSV
    api_mapping: Dict[str, str]  # NPU API -> bench API; empty: no mapping
    html: bool = True  # the compare_report_*.html beside the CSV
    rerun: bool = True  # the advisor's suspect re-run from the NPU's own inputs (comparison/rerun.py)


def check_bool(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ParameterError(name, value, "must be True or False")
    return value


def check_output_path(output_path: Any) -> str:
    """``output_path`` as given, once it is a writable directory or can be made one: an absent directory
    is created (parents too) by :func:`make_output_dir` when the reports are written, not here, so a
    compare refused for its inputs leaves nothing behind. A file there, or a symlink to anything but a
    directory, is refused; so is an absent path below a file or a read-only directory."""
    if not isinstance(output_path, (str, os.PathLike)):
        raise ParameterError("output_path", output_path, "must be a path (str) of a directory (created if absent)")
    path = os.fspath(output_path)
    if os.path.isdir(path):
        if not os.access(path, os.W_OK):
            raise ParameterError("output_path", path, "must be a writable directory")
        return path
    if os.path.lexists(path):
        raise ParameterError("output_path", path, "must be a directory (created if absent)",
                             f"It is a symlink to {'nothing' if not os.path.exists(path) else 'a file'}."
                             if os.path.islink(path) else "It is a file.")
    ancestor = os.path.dirname(os.path.abspath(path))
    while not os.path.lexists(ancestor):
        ancestor = os.path.dirname(ancestor)
    if not os.path.isdir(ancestor):
        raise ParameterError("output_path", path, "cannot be created", f"{ancestor} is not a directory.")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise ParameterError("output_path", path, "cannot be created", f"{ancestor} is not writable.")
    return path


def make_output_dir(path: str) -> None:
    """Create the checked output directory ``path`` and its parents (mode 0750 before the umask) when
    absent, as ``run-ut`` does with its ``-o``."""
    if os.path.isdir(path):
        return
    try:
        os.makedirs(path, mode=0o750, exist_ok=True)
    except OSError as error:
        raise DumpWriteError(f"Cannot create the output directory {path}: {error}") from None
    from ptdbg_ascend.log import logger

    logger.info(f"Created the output directory {path}")


def check_options(output_path: Any, *, stack_mode: Any = False, auto_analyze: Any = True, suffix: Any = "",
                  fuzzy_match: Any = False, xlsx: Any = True,
                  api_mapping: Optional[Union[Mapping[str, str], str]] = None, html: Any = True,
                  rerun: Any = True) -> CompareOptions:
    """``compare``'s options checked, in this order: the six flags, ``suffix`` (letters, digits, ``_``,
    ``.``, ``-``), openpyxl when ``xlsx``, ``output_path`` (:func:`check_output_path`), ``api_mapping``
    (:func:`check_api_mapping`, default None: no mapping). Defaults are ``compare``'s."""
    for name, value in (("stack_mode", stack_mode), ("auto_analyze", auto_analyze), ("fuzzy_match", fuzzy_match),
                        ("xlsx", xlsx), ("html", html), ("rerun", rerun)):
        check_bool(name, value)
    if not isinstance(suffix, str) or not SUFFIX.match(suffix):
        raise ParameterError("suffix", suffix, "must be a str of letters, digits, '_', '.' or '-'")
    if xlsx and importlib.util.find_spec("openpyxl") is None:  # said now, not after the CSV is written
        raise ParameterError("xlsx", xlsx, "writing the .xlsx needs openpyxl, which is not installed",
                             "Install it (pip install openpyxl), or pass xlsx=False (ptdbg compare --no-xlsx) for "
                             "the CSV alone.")
    output_path = check_output_path(output_path)
    return CompareOptions(output_path, stack_mode, auto_analyze, suffix, fuzzy_match, xlsx,
                          check_api_mapping(api_mapping), html, rerun)


def check_print_log(value: Any) -> bool:
    """``is_print_compare_log`` (an ``input_param`` key, and a ``compare_distributed`` option)."""
    return check_bool("input_param['is_print_compare_log']", value)


def check_dump_file(side: str, dump: str) -> str:
    """``dump`` (of side ``"npu"`` or ``"bench"``), which must be a file. A missing dump.json beside the
    marks of a killed run says so (``readers.check_dump_json_exists``)."""
    if not os.path.isfile(dump):
        from ptdbg_ascend.readers import check_dump_json_exists

        check_dump_json_exists(dump, f"{side.upper() if side == 'npu' else 'Bench'} dump file")
        raise FileFormatError("{} dump file {} does not exist or is not a file. Please check the pkl path is "
                              "valid.".format(side.upper() if side == "npu" else "Bench", dump))
    return dump


def parse_input_param(input_param: Any) -> CompareInputs:
    """Check ``input_param`` (dict) and the files it names."""
    if not isinstance(input_param, dict):
        raise ParameterError("input_param", input_param, "must be a dict with npu_pkl_path, bench_pkl_path, "
                             "npu_dump_data_dir, bench_dump_data_dir and is_print_compare_log")
    found: Dict[tuple, str] = {}
    msprobe_keys = set()  # the sides named by msprobe's keys: their tensor folder beside the dump is found
    for key, value in input_param.items():
        if key in OPTIONS:
            continue
        if key not in KEYS:
            raise ParameterError(f"input_param[{key!r}]", value, "unknown key; allowed keys are "
                                 + ", ".join(list(KEYS) + list(OPTIONS)))
        if value is None:
            continue
        if not isinstance(value, (str, os.PathLike)):
            raise ParameterError(f"input_param[{key!r}]", value, "must be a path (str)")
        found.setdefault(KEYS[key], os.fspath(value))
        if key in MSPROBE_DUMP_KEYS:
            msprobe_keys.add(KEYS[key][0])
    print_log = check_print_log(input_param.get("is_print_compare_log", True))
    dumps = {}
    for side in ("npu", "bench"):
        dump = found.get((side, "dump"))
        if dump is None:
            raise ParameterError("input_param", input_param,
                                 "needs {0}_pkl_path (or {0}_json_path / {0}_path)".format(side))
        dumps[side] = check_dump_file(side, dump)
    data_dirs = {}
    for side in ("npu", "bench"):
        data_dir = found.get((side, "data"))
        if data_dir is None and (is_dump_json(dumps[side]) or side in msprobe_keys):
            default = tensor_dir_beside(dumps[side]) if is_dump_json(dumps[side]) else _npy_dir_beside(dumps[side])
            data_dir = default if default is not None and os.path.isdir(default) else None
        elif data_dir is not None and not os.path.isdir(data_dir):
            raise FileFormatError("{}_dump_data_dir {} is not a directory. Leave the key out for a statistics-only "
                                  "comparison.".format(side, data_dir))
        data_dirs[side] = data_dir
    stack = found.get(("npu", "stack"))
    if stack is None and is_dump_json(dumps["npu"]):  # msprobe writes stack.json beside dump.json
        beside = stack_file(os.path.dirname(os.path.abspath(dumps["npu"])))
        stack = beside if os.path.isfile(beside) else None
    elif stack is not None and not os.path.isfile(stack):
        raise FileFormatError(f"Stack file {stack} does not exist.")
    return CompareInputs(dumps["npu"], dumps["bench"], data_dirs["npu"], data_dirs["bench"], stack, print_log)


def _npy_dir_beside(pkl: str) -> Optional[str]:
    """The npy folder a legacy pkl's writer puts beside it: ``{stem}/`` for ``{stem}.pkl``; None for a file
    of another name."""
    return pkl[: -len(".pkl")] if pkl.endswith(".pkl") else None


def check_api_mapping(api_mapping: Any) -> Dict[str, str]:
    """``api_mapping``: None, a dict of NPU API -> bench API (``"NPU_npu_rms_norm": "Functional_rms_norm"``,
    names without counter and direction), or the path of a JSON or YAML file holding such a dict (YAML
    needs PyYAML). Returns the dict (empty for None).

    The file is a stranger's: at most MAX_MAPPING_BYTES (1 MiB) is read, a YAML alias is refused (a few bytes
    of aliases expand into billions of values), and messages quote a value in part (``terminal.excerpt``)."""
    if api_mapping is None:
        return {}
    source = "api_mapping"
    if isinstance(api_mapping, (str, os.PathLike)):
        path = os.fspath(api_mapping)
        source = f"api_mapping file {path}"
        api_mapping = _load_mapping_file(path)
    if not isinstance(api_mapping, dict):
        raise ParameterError("api_mapping", api_mapping, "must be a dict of NPU API name -> bench API name, or "
                             "the path of a JSON/YAML file holding one ({})".format(source))
    checked = {}
    for npu_api, bench_api in api_mapping.items():
        for value in (npu_api, bench_api):
            if not isinstance(value, str) or not is_api_name(value):
                raise ParameterError(f"api_mapping[{excerpt(npu_api)}]", bench_api,
                                     "names must look like 'Functional_rms_norm' (prefix and API, without the call "
                                     "counter and direction; in {})".format(source))
        checked[npu_api] = bench_api
    return checked


def _load_mapping_file(path: str) -> Any:
    if not os.path.isfile(path):
        raise FileFormatError(f"api_mapping file {path} does not exist.")
    from ptdbg_ascend.jsonfile import ERROR, load_json, read_regular

    if path.endswith((".yaml", ".yml")):
        try:
            import yaml
        except ImportError:
            raise FileFormatError("api_mapping file {} is YAML, which needs PyYAML (pip install pyyaml); or "
                                  "write it as JSON.".format(path)) from None
        try:
            text = read_regular(path, "api_mapping file", MAX_MAPPING_BYTES).decode("utf-8")
            return yaml.load(text, Loader=_unique_key_loader(yaml, path))  # a SafeLoader
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as error:
            raise FileFormatError(f"api_mapping file {path} cannot be read: {error}") from None
    return load_json(path, "api_mapping file", duplicates=ERROR, max_bytes=MAX_MAPPING_BYTES)


def _unique_key_loader(yaml: Any, path: str) -> Any:
    """A ``yaml.SafeLoader`` that raises FileFormatError naming ``path``, the key and its line when a key
    appears twice in one mapping (PyYAML keeps the later value silently, as json does), or at the first alias
    (``*a``): a mapping of names needs none, and aliases let a few bytes stand for billions of values (each
    alias is one shared object while loading, but anything that walks the result, a message's ``repr``
    included, expands it)."""

    class UniqueKeyLoader(yaml.SafeLoader):
        def compose_node(self, parent: Any, index: Any) -> Any:
            if self.check_event(yaml.events.AliasEvent):
                event = self.peek_event()
                raise FileFormatError("The api_mapping file {} uses a YAML alias (*{}, line {}): a mapping of API "
                                      "names has no use for one, and aliases can make a few bytes expand into "
                                      "billions of values; write each name out.".format(
                                          path, shorten(event.anchor, 40), event.start_mark.line + 1))
            return super().compose_node(parent, index)

        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            seen = set()
            for key_node, _value in node.value:
                key = self.construct_object(key_node, deep=deep)
                try:
                    repeated = key in seen
                except TypeError:  # an unhashable key: PyYAML's own error follows
                    continue
                if repeated:
                    raise FileFormatError("The api_mapping file {} has the key {!r} twice in one mapping (line {}): "
                                          "keep one.".format(path, key, key_node.start_mark.line + 1))
                seen.add(key)
            return super().construct_mapping(node, deep=deep)

    return UniqueKeyLoader
