"""msprobe 1.0.4 ``dump.json`` reader (+ ``stack.json``, tensors as ``.pt`` in ``dump_tensor_data/``): the one
code that reads a dump.json file.

:func:`read` gives the format-neutral records compare and parse use (names mapped to the legacy grammar by
``formats.dump_json.call_values``: only tensor leaves become records, as legacy dumps filter scalars by
default; null/{} leaves consume their index; module calls too, with the enclosing module of every call from
construct.json). :func:`load_entries` gives the raw entries, for the pre-check
(which rebuilds calls from them) and ``ptdbg convert`` (which keeps scalars too).

A key that is not an API call name (a counter of 5000 digits included) is skipped with a warning naming it in
part; a statistic beyond float64's range is no value (a warning names the entry and the statistic). Two keys
naming one call (``Torch.relu.1.forward`` and ``Torch.relu.01.forward``) are said in one warning per file;
the later entry is used, as json does with a key written twice (which :mod:`ptdbg_ascend.jsonfile` says).
"""

from __future__ import annotations

import os
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Tuple

from ptdbg_ascend.formats.records import CallRecord, Frame, TensorRecord, as_shape, data_file, read_statistics
from ptdbg_ascend.errors import FileFormatError
from ptdbg_ascend.formats.dump_json import (NOT_SAVED, STATISTICS_KEYS, call_values, entries, is_tensor,
                                            parse_construct, parse_stacks)
from ptdbg_ascend.formats.layout import construct_file_beside
from ptdbg_ascend.formats.naming import module_to_legacy, number_problem, to_legacy
from ptdbg_ascend.jsonfile import load_json
from ptdbg_ascend.log import logger
from ptdbg_ascend.terminal import excerpt

CRASH_HINT = " (incomplete after a crash?)"
NOT_A_DUMP = "Dump file {} has no \"data\" object: not an msprobe dump.json."


class DumpDocument(NamedTuple):
    """A parsed dump.json: its ``task`` ("" when absent) and its entries (call name -> entry)."""

    task: Any
    entries: Dict[str, Any]


def load_entries(path: str, *, what: str = "dump file", not_json_hint: str = CRASH_HINT,
                 not_a_dump: str = NOT_A_DUMP, on_bytes: Optional[Callable[[bytes], None]] = None) -> DumpDocument:
    """The dump.json ``path`` parsed (read once; a duplicate key is a warning, :mod:`ptdbg_ascend.jsonfile`).

    Args:
        path: the dump.json.
        what: how messages name the file. Default "dump file".
        not_json_hint: appended to the not-JSON message. Default " (incomplete after a crash?)".
        not_a_dump: the FileFormatError message (``{}``: the path) when the file has no ``data`` object.
            Default ``NOT_A_DUMP``.
        on_bytes: called with the file's bytes before they are parsed (default None), e.g. to fingerprint them.

    Raises:
        FileFormatError: the file is missing, unreadable, not JSON, or has no ``data`` object.
    """
    document = load_json(path, what, not_json_hint, on_bytes=on_bytes)
    data = entries(document)
    if data is None:
        raise FileFormatError(not_a_dump.format(path))
    return DumpDocument(document.get("task", ""), data)


def read(path: str, data_dir: Optional[str] = None, stack_path: Optional[str] = None) -> List[CallRecord]:
    """Read a dump.json; tensors are ``{data_dir}/{data_name}`` (None = summary only). API entries and, at
    levels L0/mix, module entries (``Module.{path}.{Class}.{direction}.{n}``, named in the legacy grammar as
    ``Module_{path}.{Class}_{n}_{direction}``) become calls; each call's enclosing module comes from the
    construct.json beside the dump (none: every call at top level)."""
    dump = load_entries(path)
    if dump.task in ("overflow_check", "free_benchmark"):
        raise FileFormatError(f"Dump file {path} is a {dump.task} dump; compare is not required for it.")
    stacks = read_stacks(stack_path) if stack_path else {}
    parents = read_construct(construct_file_beside(path))
    calls, keys = [], []
    for dotted, entry in dump.entries.items():
        call, module = to_legacy(dotted), None
        if call is None:
            call = module_to_legacy(dotted)
            module = dotted if call is not None else None
        if call is None or not isinstance(entry, dict):
            logger.warning("Skipped entry {} of {}: not an API or module call name{}.".format(
                excerpt(dotted), path, number_problem(dotted)))
            continue
        try:
            records = _entry_records(call, entry, data_dir, path, dotted)
        except RecursionError:
            logger.warning(f"Skipped entry {excerpt(dotted)} of {path}: its arguments are nested too deeply.")
            continue
        calls.append(CallRecord(name=call, records=tuple(records), stack=stacks.get(dotted, ()), module=module,
                                parent=parents.get(dotted)))
        keys.append(dotted)
    return _one_per_call(calls, keys, path)


def _one_per_call(calls: List[CallRecord], keys: List[str], path: str) -> List[CallRecord]:
    """``calls`` (read from the dump.json keys ``keys``) with one call per name: two keys that name one call
    (``Torch.relu.1.forward`` and ``Torch.relu.01.forward``) are said in one warning, and the later entry takes
    the earlier one's place, as json does with a key written twice."""
    kept: Dict[str, Tuple[int, str]] = {}  # call name -> (its place in the result, the key it was read from)
    twice: List[Tuple[str, str, str]] = []
    result: List[CallRecord] = []
    for call, key in zip(calls, keys):
        if call.name in kept:
            place, earlier = kept[call.name]
            twice.append((earlier, key, call.name))
            result[place] = call
            kept[call.name] = (place, key)
        else:
            kept[call.name] = (len(result), key)
            result.append(call)
    if twice:
        shown = "; ".join(f"{excerpt(first)} and {excerpt(later)} are both {name}"
                          for first, later, name in twice[:5])
        logger.warning("The dump file {} names a call twice: {}{}. The later entry is used.".format(
            path, shown, f"; and {len(twice) - 5} more" if len(twice) > 5 else ""))
    return result


def read_construct(path: str) -> Dict[str, Optional[str]]:
    """construct.json (call name -> the module call it ran inside, ``formats.dump_json.parse_construct``);
    ``{}`` when there is none (an L1 dump of another tool). It only orders and groups rows, so a file that
    cannot be read, is not JSON or holds links that name no module call is a warning, never an error."""
    if not os.path.isfile(path):
        return {}
    try:
        document = load_json(path, "construct file", CRASH_HINT)
    except FileFormatError as error:
        logger.warning(f"{error} Rows are not grouped by module.")
        return {}
    links, dropped = parse_construct(document)
    if not isinstance(document, dict):
        logger.warning("Construct file {} is not a JSON object of call name -> module; rows are not grouped by "
                       "module.".format(path))
    elif dropped:
        logger.warning("Construct file {}: {} links do not name a module call (Module.{{path}}.{{Class}}."
                       "{{forward|backward}}.{{n}}) and were ignored.".format(path, dropped))
    return links


def _entry_records(call: str, entry: Dict[str, Any], data_dir: Optional[str], path: str,
                   dotted: str) -> List[TensorRecord]:
    def problem(text: str) -> None:
        logger.warning(f"Entry {excerpt(dotted)} of {path}: {text}.")

    records: List[TensorRecord] = []
    for name, side, value in call_values(call, entry, problem):
        _leaves(name, side, value, data_dir, records, path, problem)
    return records


def _leaves(name: str, side: str, value: Any, data_dir: Optional[str], out: List[TensorRecord], path: str,
            problem: Callable[[str], None]) -> None:
    if isinstance(value, list):
        for index, item in enumerate(value):
            _leaves(name + "." + str(index), side, item, data_dir, out, path, problem)
        return
    if not is_tensor(value):
        return
    try:
        shape = as_shape(value.get("shape"))
    except ValueError as error:
        logger.warning(f"Skipped tensor {name} of {path}: {error}.")
        return
    data_name = value.get("data_name")
    data_path = data_problem = None
    if data_dir and data_name not in (None, ""):
        data_path, data_problem = data_file(data_dir, data_name, "tensor's data_name holds a")
        if data_problem is not None:
            logger.warning(f"Tensor {name} of {path}: {data_problem}")
    elif data_dir and isinstance(value.get(NOT_SAVED), str):  # the writer saved no file for it, and said why
        data_problem = f"Not compared: the dump saved no tensor file for it: {value[NOT_SAVED][:400]}."
    statistics, beyond = read_statistics([value.get(key) for key in STATISTICS_KEYS], name, STATISTICS_KEYS)
    for text in beyond:
        problem(text)
    out.append(TensorRecord(
        name=name, side=side, dtype=str(value.get("dtype")), shape=shape, statistics=statistics,
        data_path=data_path, data_root=data_dir, data_problem=data_problem,
    ))


def read_stacks(path: str, *, what: str = "stack file", not_json_hint: str = CRASH_HINT,
                lenient: bool = False) -> Dict[str, Tuple[Frame, ...]]:
    """stack.json: call name -> its frames (``formats.dump_json.parse_stack_line``; other lines are skipped).
    ``what``/``not_json_hint`` as in :func:`load_entries` (defaults "stack file", CRASH_HINT). A file that is
    not a JSON object is a FileFormatError, or gives no frames with ``lenient`` (default False)."""
    stacks = load_json(path, what, not_json_hint)
    if not isinstance(stacks, dict):
        if lenient:
            return {}
        raise FileFormatError(f"Stack file {path} is not a JSON object of call name -> stack lines.")
    return parse_stacks(stacks)
