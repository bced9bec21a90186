"""``ptdbg convert``: a legacy pkl+npy dump <-> an msprobe 1.0.4 dump.json+stack.json+``dump_tensor_data/*.pt``
dump, losslessly for what both formats hold.

One rank directory, or every ``rank*`` directory of a tag/step directory. What only one format holds:

* legacy -> msprobe: ``dump_step`` (overflow dumps use 101) has no field (a warning names it when it is not
  0); tensor kwargs cannot be told from positional inputs in a pkl, so they stay in ``input_args``
  (the row names compare reads are the same: kwargs are numbered after the positional inputs);
  ``requires_grad`` is unknown and left out.
* msprobe -> legacy: values the pkl cannot hold (str, slice, torch.Size, dtype, device, L0/mix module
  entries) are dropped, each kind counted in the log (``None`` is simply absent in both formats);
  bool/int/float scalars become ``<class 'int'>``/``'float'``/``'bool'`` records as the legacy engine
  writes them; the ``.pt`` of a bf16 tensor becomes a float32 ``.npy`` (the pkl dtype
  stays ``torch.bfloat16``), and a float32 ``.npy`` of a bf16 tensor goes back to a bf16 ``.pt``.

Nothing is written halfway: the output is built in a temporary directory with an unpredictable name
(``tempfile.mkdtemp``) beside the target and renamed into place at the end. Nothing is written outside
the target, nothing is read outside the input's data directory (``compat.convert_fs``): a record whose
name is not a plain file name is skipped with a warning naming it, a tensor file that resolves outside
the dump is not read (warning; the record keeps its statistics). torch is imported only to read or
write ``.pt`` files.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import tempfile
from typing import Any, Dict, List, NamedTuple, Optional, Tuple

from ptdbg_ascend.readers.legacy_pkl import read_lines
from ptdbg_ascend.comparison.records import file_name_problem
from ptdbg_ascend.compat.convert_fs import (TensorDir, check_plain_name, check_target, make_dirs,
                                           move_into_place, output_path, read_tensor, relative_parts, save_npy,
                                           write_bytes)
from ptdbg_ascend.errors import DumpPathError, FileFormatError, ParameterError
from ptdbg_ascend.log import logger
from ptdbg_ascend.formats.dump_json import (STATISTICS_KEYS, TENSOR_TYPE, call_values, document_head, entry_key,
                                            new_entry, stack_line)
from ptdbg_ascend.formats import layout
from ptdbg_ascend.formats.naming import STACK_SUFFIX, parse_record_name, to_dotted, to_legacy
from ptdbg_ascend.formats import pkl as pkl_format
from ptdbg_ascend.formats.pkl import SCALAR_SHAPE, RecordLine, record_fields, record_line, stack_frames
from ptdbg_ascend.readers.msprobe_json import load_entries, read_stacks
from ptdbg_ascend.sinks.msprobe.pt_files import save_pt
from ptdbg_ascend.fs.writes import check_path_text

SCALAR_TYPES = {"<class 'int'>": "int", "<class 'float'>": "float", "<class 'bool'>": "bool"}
LEGACY_SCALAR_DTYPES = {value: key for key, value in SCALAR_TYPES.items()}


class DumpFiles(NamedTuple):
    """Where one rank's dump lives. ``kind`` is "legacy" (pkl + npy dir) or "msprobe" (dump.json,
    stack.json, dump_tensor_data); a missing optional part is None."""

    kind: str
    metadata: str
    data_dir: Optional[str]
    stack: Optional[str]


def locate(path: str) -> DumpFiles:
    """Find the dump in ``path``: a ``.pkl`` file, a ``dump.json`` file, or a rank directory holding one."""
    if os.path.isdir(path):
        if os.path.isfile(layout.dump_file(path)):
            return locate(layout.dump_file(path))
        pkls = sorted(glob.glob(os.path.join(path, "*" + layout.PKL_SUFFIX)))
        if len(pkls) != 1:
            raise ParameterError("source", path, "a rank directory with dump.json or exactly one .pkl (found {} .pkl)"
                                 .format(len(pkls)), "Pass the .pkl file itself.")
        return locate(pkls[0])
    if not os.path.isfile(path):
        raise FileFormatError("Dump {} does not exist.".format(path))
    directory = os.path.dirname(path)
    if path.endswith(layout.PKL_SUFFIX):
        data_dir = layout.npy_dir(path)
        return DumpFiles("legacy", path, data_dir if os.path.isdir(data_dir) else None, None)
    if layout.is_dump_json(path):
        data_dir = layout.tensor_dir(directory)
        stack = layout.stack_file(directory)
        return DumpFiles("msprobe", path, data_dir if os.path.isdir(data_dir) else None,
                         stack if os.path.isfile(stack) else None)
    raise ParameterError("source", path, "a .pkl file, a dump.json file or a rank directory")


class ConvertResult(NamedTuple):
    """What was written: the metadata file (the first rank's in a tree), the number of tensor files, the
    dropped values by kind, and every metadata file written."""

    metadata: str
    tensor_files: int
    dropped: Dict[str, int]
    written: Tuple[str, ...] = ()


def _plan(source: str) -> List[Tuple[DumpFiles, str]]:
    """``(dump, directory relative to the target)`` for one rank, or for every ``rank*`` directory of a
    legacy tag directory (-> ``step0/rank{R}``) or an msprobe step directory (-> ``rank{R}``)."""
    if os.path.isdir(source) and not os.path.isfile(layout.dump_file(source)) \
            and not glob.glob(os.path.join(source, "*" + layout.PKL_SUFFIX)):
        ranks = sorted((entry for entry in os.listdir(source)
                        if layout.RANK_DIR.match(entry) and os.path.isdir(os.path.join(source, entry))),
                       key=lambda entry: int(layout.RANK_DIR.match(entry).group(1) or 0))
        if ranks:
            plan = []
            for rank in ranks:
                files = locate(os.path.join(source, rank))
                relative = os.path.join("step0", rank) if files.kind == "legacy" else (rank if rank != "rank" else "rank0")
                plan.append((files, relative))
            if len({files.kind for files, _ in plan}) != 1:
                raise ParameterError("source", source, "rank directories of one format (found both pkl and dump.json)")
            return plan
    return [(locate(source), "")]


def convert(source: str, target: str, *, name: str = "dump") -> ConvertResult:
    """Convert the dump at ``source`` into the other format in the new directory ``target``.

    Args:
        source: a legacy ``.pkl`` (its npy dir is the same name without ``.pkl``), an msprobe
            ``dump.json`` (stack.json and dump_tensor_data/ beside it), a rank directory holding either,
            or a directory of ``rank*`` directories (a legacy ``ptdbg_dump_v1.0`` tag directory becomes
            ``target/step0/rank{R}/``; an msprobe ``step{N}`` directory becomes ``target/rank{R}/``, plain
            ``rank`` becoming ``rank0``).
        target: a directory that does not exist yet (or is empty); a symlink there is refused.
        name: msprobe -> legacy only: the pkl stem, giving ``{name}.pkl`` + ``{name}/``. Default "dump".
            One plain directory name (no separator, not ``.``/``..``), checked in both directions.

    Every file is written inside ``target`` (resolved); tensor files are read only inside the input's
    data directory (resolved). A record whose name cannot be a file name is skipped with a warning.
    """
    _check_path_args(source, target)
    check_plain_name("name", name)
    plan = _plan(source)
    check_target(target)
    parent = os.path.dirname(os.path.abspath(target))
    if not os.path.isdir(parent):
        raise DumpPathError("Cannot write {}: the directory {} does not exist.".format(target, parent))
    # An unpredictable name (mode 0700) in the target's parent: nobody can plant links inside it.
    work = tempfile.mkdtemp(prefix=".ptdbg-convert-", dir=parent)
    results = []
    try:
        for files, relative in plan:
            out = make_dirs(work, *relative_parts(relative))
            if files.kind == "legacy":
                result = _legacy_to_msprobe(files, work, out, layout.tensor_dir(os.path.join(target, relative)))
            else:
                result = _msprobe_to_legacy(files, work, out, name)
            results.append((files, result))
        move_into_place(work, target)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    written, dropped, tensors = [], {}, 0  # type: List[str], Dict[str, int], int
    for files, result in results:
        metadata = os.path.join(target, os.path.relpath(result.metadata, work))
        written.append(metadata)
        tensors += result.tensor_files
        for what, count in result.dropped.items():
            dropped[what] = dropped.get(what, 0) + count
        logger.info("Converted {} to {} ({} tensor files).".format(files.metadata, metadata, result.tensor_files))
    for what, count in sorted(dropped.items()):
        logger.warning("{} {} value(s) have no place in the {} format and were not converted.".format(
            count, what, "legacy" if plan[0][0].kind == "msprobe" else "msprobe"))
    return ConvertResult(written[0], tensors, dropped, tuple(written))


def _check_path_args(source: str, target: str) -> None:
    """NUL bytes, non-str and over-long paths are a :class:`ParameterError` naming the argument."""
    check_path_text("source", source)
    check_path_text("target", target)


def _unsafe_name(name: Any, suffix: str = "") -> Optional[str]:
    """Why the name from an input file cannot become a file name (None when it can)."""
    if not isinstance(name, str):
        return "the name {!r} is not a string".format(name)
    return file_name_problem(name + suffix)


def _skip(where: str, what: str, name: Any, problem: str) -> None:
    logger.warning("{}: skipped {} {!r}: {}; nothing was converted for it.".format(where, what, name, problem))


# --- legacy -> msprobe -------------------------------------------------------------------------------

def _legacy_to_msprobe(files: DumpFiles, root: str, work: str, final_tensor_dir: str) -> ConvertResult:
    data: Dict[str, Dict[str, Any]] = {}
    stacks: Dict[str, List[str]] = {}
    tensors = TensorDir(root, work, layout.TENSOR_DIR)
    saved = 0
    steps = set()
    for number, line in read_lines(files.metadata):
        name = line[0]
        problem = _unsafe_name(name, layout.NPY_SUFFIX)
        if problem is not None:
            _skip("Line {} of {}".format(number, files.metadata), "the record", name, problem)
            continue
        if name.endswith(STACK_SUFFIX):
            call = to_dotted(name[:-len(STACK_SUFFIX)])
            if call is not None:
                stacks[call] = [_stack_line(frame) for frame in stack_frames(line)]
                # A call whose values were all filtered out still has its stack: keep it as an empty entry.
                data.setdefault(call, new_entry("forward" if call.endswith(".forward") else "backward"))
            continue
        record = parse_record_name(name)
        fields = record_fields(line)
        if record is None or fields is None:
            raise FileFormatError("Line {} of {}: {!r} is not a legacy dump record.".format(number, files.metadata, name))
        steps.add(fields.dump_step)
        call = to_dotted(record.call)
        entry = data.setdefault(call, new_entry(record.direction))
        leaf, saved_one = _legacy_leaf(fields, files, tensors, to_dotted(name),
                                       "Line {} of {}".format(number, files.metadata))
        saved += saved_one
        _place(entry, entry_key(record.direction, record.side), record.path or (0,), leaf)
    if steps - {0}:
        logger.warning("{} holds dump_step {}; msprobe dump.json has no such field.".format(
            files.metadata, sorted(steps - {0})))
    dump = dict(document_head("tensor" if files.data_dir else "statistics", "L1", final_tensor_dir if saved else None),
                data=data)
    metadata = output_path(work, layout.DUMP_FILE)
    _write_json(metadata, dump)
    _write_json(output_path(work, layout.STACK_FILE), stacks)
    _write_json(output_path(work, layout.CONSTRUCT_FILE), {})
    return ConvertResult(metadata, saved, {})


def _place(entry: Dict[str, Any], key: str, path: Tuple[int, ...], leaf: Any) -> None:
    """Put ``leaf`` at index path ``path`` of ``entry[key]``, padding skipped positions with null."""
    container = entry[key]
    for depth, index in enumerate(path):
        while len(container) <= index:
            container.append(None)
        if depth == len(path) - 1:
            container[index] = leaf
        else:
            if not isinstance(container[index], list):
                container[index] = []
            container = container[index]


def _legacy_leaf(fields: RecordLine, files: DumpFiles, tensors: TensorDir, dotted: str,
                 where: str) -> Tuple[Dict[str, Any], int]:
    dtype, shape = fields.dtype, fields.shape if isinstance(fields.shape, list) else []  # a scalar's shape is "[]"
    statistics = fields.statistics + [None] * (4 - len(fields.statistics))
    if dtype in SCALAR_TYPES:
        kind = SCALAR_TYPES[dtype]
        value = statistics[0]
        value = None if value is None else {"int": int, "bool": bool, "float": float}[kind](value)
        return {"type": kind, "value": value}, 0
    leaf: Dict[str, Any] = {"type": TENSOR_TYPE, "dtype": dtype, "shape": shape}
    leaf.update(zip(STATISTICS_KEYS, statistics[:4]))
    if not files.data_dir:
        return leaf, 0
    try:  # the name was checked to be a plain file name
        array = read_tensor(os.path.join(files.data_dir, fields.name + layout.NPY_SUFFIX), files.data_dir, fields.name,
                            where)
    except FileNotFoundError:
        return leaf, 0  # a record without its npy (filtered, or a summary dump): statistics only
    if array is None:
        return leaf, 0
    data_name = dotted + layout.PT_SUFFIX
    _npy_to_pt(array, tensors.file(data_name), dtype)
    leaf["data_name"] = data_name
    return leaf, 1


def _stack_line(frame: Any) -> str:
    parts = list(frame) + [None] * (4 - len(frame))
    return stack_line(parts[0], parts[1], parts[2], parts[3])


def _npy_to_pt(array: Any, pt: str, dtype: str) -> None:
    import numpy as np
    import torch

    tensor = torch.from_numpy(np.array(array, order="C"))  # (ascontiguousarray turns 0-d into 1-d)
    target_dtype = getattr(torch, dtype[len("torch."):], None) if dtype.startswith("torch.") else None
    if isinstance(target_dtype, torch.dtype) and tensor.dtype != target_dtype:
        tensor = tensor.to(target_dtype)  # the pkl dtype is authoritative (bf16 npy files hold float32)
    save_pt(pt, tensor)


# --- msprobe -> legacy -------------------------------------------------------------------------------

def _msprobe_to_legacy(files: DumpFiles, root: str, work: str, name: str) -> ConvertResult:
    dump = load_entries(files.metadata, what="msprobe dump file", not_json_hint="")
    stacks = read_stacks(files.stack, what="msprobe dump file", not_json_hint="", lenient=True) if files.stack else {}
    npy_dir = TensorDir(root, work, name)
    lines: List[str] = []
    dropped: Dict[str, int] = {}
    saved = 0
    for dotted, entry in dump.entries.items():
        problem = _unsafe_name(dotted)
        if problem is not None:
            _skip(files.metadata, "the entry", dotted, problem)
            continue
        call = to_legacy(dotted)
        if call is None and str(dotted).startswith("Module."):
            dropped["Module entry (L0/mix)"] = dropped.get("Module entry (L0/mix)", 0) + 1
            continue  # the legacy format has no module records
        if call is None or not isinstance(entry, dict):
            raise FileFormatError("Entry {!r} of {} is not an API call.".format(dotted, files.metadata))
        for record_name, leaf in _entry_leaves(call, entry):
            line, saved_one = _json_leaf(record_name, leaf, files, npy_dir, dropped)
            if line is not None:
                lines.append(line)
                saved += saved_one
        if dotted in stacks:
            frames = [[file, line, function, code or ""] for file, line, function, code in stacks[dotted]]
            lines.append(pkl_format.stack_line(call + STACK_SUFFIX, frames))
    metadata = output_path(work, name + layout.PKL_SUFFIX)
    write_bytes(metadata, "".join(line + "\n" for line in lines).encode("utf-8"))
    return ConvertResult(metadata, saved, dropped)


def _entry_leaves(call: str, entry: Dict[str, Any]) -> List[Tuple[str, Any]]:
    """``(legacy record name, leaf)`` in the legacy engine's order: inputs (kwargs after positionals), outputs."""
    leaves: List[Tuple[str, Any]] = []
    for name, _, value in call_values(call, entry):
        _flatten(name, value, leaves)
    return leaves


def _flatten(name: str, value: Any, out: List[Tuple[str, Any]]) -> None:
    if isinstance(value, list):
        for index, item in enumerate(value):
            _flatten(name + "." + str(index), item, out)
    elif isinstance(value, dict) and "type" not in value and value:
        for index, item in enumerate(value.values()):  # a dict argument: its values in order
            _flatten(name + "." + str(index), item, out)
    else:
        out.append((name, value))


def _json_leaf(name: str, leaf: Any, files: DumpFiles, npy_dir: TensorDir,
               dropped: Dict[str, int]) -> Tuple[Optional[str], int]:
    kind = leaf.get("type") if isinstance(leaf, dict) else None
    if kind in LEGACY_SCALAR_DTYPES and isinstance(leaf.get("value"), (int, float, bool)):
        value = float(leaf["value"])
        save_npy(npy_dir.file(name + layout.NPY_SUFFIX), leaf["value"])
        # the shape of a Python scalar is the string "[]", as the original writes it
        return record_line(name, LEGACY_SCALAR_DTYPES[kind], SCALAR_SHAPE, [value, value, value, abs(value)]), 0
    if kind != TENSOR_TYPE:
        if leaf:  # null / {} are absent values in both formats (the pkl just has no line)
            dropped[str(kind)] = dropped.get(str(kind), 0) + 1
        return None, 0
    statistics = [leaf.get(key) for key in STATISTICS_KEYS]
    line = record_line(name, str(leaf.get("dtype")), list(leaf.get("shape") or []), statistics)
    data_name = leaf.get("data_name")
    tensor_dir = files.data_dir
    if not (data_name and tensor_dir):
        return line, 0
    problem = _unsafe_name(data_name)
    if problem is not None:
        logger.warning("{}: record {} keeps its statistics but not its tensor: its data_name {}; nothing was read."
                       .format(files.metadata, name, problem))
        return line, 0
    pt = os.path.join(tensor_dir, data_name)
    try:
        array = read_tensor(pt, tensor_dir, name, files.metadata)
    except FileNotFoundError:
        raise FileFormatError("Tensor file {} named by {} does not exist.".format(pt, name)) from None
    if array is None:
        return line, 0
    save_npy(npy_dir.file(name + layout.NPY_SUFFIX), array)
    return line, 1


def _write_json(path: str, value: Any) -> None:
    write_bytes(path, json.dumps(value, indent=1).encode("utf-8"))
