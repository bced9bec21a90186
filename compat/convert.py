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

A record that holds what no dump writes is skipped with a warning naming the file, the line (or entry) and
the record, and the rest converts (``compat.convert_values``): a scalar record holding another kind of value
(``NaN`` in an int record), a shape that is not a list of sizes, an index whose padding would exceed the
conversion's bound. A statistic beyond float64's range is written as null (warning); a record whose tensor
file name (with its temporary name) is too long keeps its statistics without its tensor (warning). A record
name written twice in a pkl is one warning; the later line is used.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from typing import Any, Dict, List, Optional, Tuple

from ptdbg_ascend.compat.convert_fs import (TensorDir, check_plain_name, check_target, make_dirs, move_into_place,
                                           output_path, read_tensor, relative_parts, writable_name_problem,
                                           write_bytes)
from ptdbg_ascend.compat.convert_layout import ConvertResult, DumpFiles, locate, plan as dump_plan
from ptdbg_ascend.compat.convert_to_legacy import msprobe_to_legacy
from ptdbg_ascend.compat.convert_values import (SCALAR_TYPES, Padding, scalar_value, skip, statistics, tensor_shape,
                                               unsafe_name, without_tensor)
from ptdbg_ascend.formats.records import STATISTIC_NAMES
from ptdbg_ascend.errors import DumpPathError, FileFormatError
from ptdbg_ascend.formats import layout
from ptdbg_ascend.formats.dump_json import STATISTICS_KEYS, TENSOR_TYPE, document_head, entry_key, new_entry, stack_line
from ptdbg_ascend.formats.naming import STACK_SUFFIX, number_problem, parse_record_name, to_dotted
from ptdbg_ascend.formats.pkl import RecordLine, record_fields, stack_frames
from ptdbg_ascend.fs.writes import check_path_text
from ptdbg_ascend.log import logger
from ptdbg_ascend.readers.legacy_pkl import read_lines, warn_repeated
from ptdbg_ascend.sinks.msprobe.pt_files import save_pt
from ptdbg_ascend.terminal import excerpt

__all__ = ["ConvertResult", "DumpFiles", "convert", "locate"]


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
    plan = dump_plan(source)
    check_target(target)
    parent = os.path.dirname(os.path.abspath(target))
    if not os.path.isdir(parent):
        raise DumpPathError(f"Cannot write {target}: the directory {parent} does not exist.")
    # An unpredictable name (mode 0700) in the target's parent: nobody can plant links inside it.
    work = tempfile.mkdtemp(prefix=".ptdbg-convert-", dir=parent)
    results = []
    try:
        for files, relative in plan:
            out = make_dirs(work, *relative_parts(relative))
            if files.kind == "legacy":
                result = _legacy_to_msprobe(files, work, out, layout.tensor_dir(os.path.join(target, relative)))
            else:
                result = msprobe_to_legacy(files, work, out, name)
            results.append((files, result))
        move_into_place(work, target)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    written: List[str] = []
    dropped: Dict[str, int] = {}
    tensors = 0
    for files, result in results:
        metadata = os.path.join(target, os.path.relpath(result.metadata, work))
        written.append(metadata)
        tensors += result.tensor_files
        for what, count in result.dropped.items():
            dropped[what] = dropped.get(what, 0) + count
        logger.info(f"Converted {files.metadata} to {metadata} ({result.tensor_files} tensor files).")
    for what, count in sorted(dropped.items()):
        logger.warning("{} {} value(s) have no place in the {} format and were not converted.".format(
            count, what, "legacy" if plan[0][0].kind == "msprobe" else "msprobe"))
    return ConvertResult(written[0], tensors, dropped, tuple(written))


def _check_path_args(source: str, target: str) -> None:
    """NUL bytes, non-str and over-long paths are a :class:`ParameterError` naming the argument."""
    check_path_text("source", source)
    check_path_text("target", target)


# --- legacy -> msprobe -------------------------------------------------------------------------------

def _legacy_to_msprobe(files: DumpFiles, root: str, work: str, final_tensor_dir: str) -> ConvertResult:
    data: Dict[str, Dict[str, Any]] = {}
    stacks: Dict[str, List[str]] = {}
    tensors = TensorDir(root, work, layout.TENSOR_DIR)
    saved = 0
    steps = set()
    lines = read_lines(files.metadata)
    padding = Padding(len(lines))
    seen: Dict[str, int] = {}
    repeated: List[Tuple[str, int, int]] = []
    for number, line in lines:
        name = line[0]
        where = f"Line {number} of {files.metadata}"
        problem = unsafe_name(name, layout.NPY_SUFFIX)
        if problem is not None:
            skip(where, "the record", name, problem)
            continue
        if name in seen:
            repeated.append((name, seen[name], number))
        seen[name] = number
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
            raise FileFormatError(f"{where}: {excerpt(name)} is not a legacy dump record{number_problem(name)}.")
        leaf, problem = _legacy_value(fields, where)
        if problem is not None:
            skip(where, "the record", name, problem)
            continue
        # any JSON value (a list is unhashable): kept as the text the warning shows
        steps.add(str(fields.dump_step) if type(fields.dump_step) is int else excerpt(fields.dump_step, 40))
        call = to_dotted(record.call)
        entry = data.setdefault(call, new_entry(record.direction))
        problem = _place(entry, entry_key(record.direction, record.side), record.path or (0,), leaf, padding)
        if problem is not None:
            skip(where, "the record", name, problem)
            continue
        saved += _legacy_tensor(leaf, fields, files, tensors, to_dotted(name), where)
    if repeated:
        warn_repeated(files.metadata, repeated)
    others = sorted(steps - {"0"})
    if others:
        logger.warning("{} holds dump_step {}{}; msprobe dump.json has no such field.".format(
            files.metadata, ", ".join(others[:5]), f" and {len(others) - 5} more" if len(others) > 5 else ""))
    dump = dict(document_head("tensor" if files.data_dir else "statistics", "L1", final_tensor_dir if saved else None),
                data=data)
    metadata = output_path(work, layout.DUMP_FILE)
    _write_json(metadata, dump)
    _write_json(output_path(work, layout.STACK_FILE), stacks)
    _write_json(output_path(work, layout.CONSTRUCT_FILE), {})
    return ConvertResult(metadata, saved, {})


def _place(entry: Dict[str, Any], key: str, path: Tuple[int, ...], leaf: Any, padding: Padding) -> Optional[str]:
    """Put ``leaf`` at index path ``path`` of ``entry[key]``, padding skipped positions with null (taken from
    ``padding``); why not (too much padding, or a place that holds another record's value) without changing
    anything. A record at the place of an earlier one replaces it (the later line is used)."""
    container, needed = entry[key], 0
    for depth, index in enumerate(path):  # check the whole path before anything is changed
        if container is None or index >= len(container):
            needed += index - (0 if container is None else len(container))
            container = None
            continue
        inner = container[index]
        if depth < len(path) - 1 and inner is not None and not isinstance(inner, list):
            return f"its place {'.'.join(map(str, path[:depth + 1]))} holds a value of another record"
        if depth == len(path) - 1 and isinstance(inner, list):
            return f"its place {'.'.join(map(str, path))} holds the values of other records"
        container = inner
    problem = padding.take(needed, path[-1])
    if problem is not None:
        return problem
    container = entry[key]
    for depth, index in enumerate(path):
        while len(container) <= index:
            container.append(None)
        if depth == len(path) - 1:
            container[index] = leaf
        else:
            if container[index] is None:
                container[index] = []
            container = container[index]
    return None


def _legacy_value(fields: RecordLine, where: str) -> Tuple[Dict[str, Any], Optional[str]]:
    """The dump.json leaf of a pkl record (its tensor not read yet), or why the record cannot be one."""
    dtype = fields.dtype
    found = fields.statistics + [None] * (4 - len(fields.statistics))
    if dtype in SCALAR_TYPES:
        kind = SCALAR_TYPES[dtype]
        value, problem = scalar_value(kind, found[0])
        return {"type": kind, "value": value}, problem
    shape, problem = tensor_shape(fields.shape)
    if problem is not None:
        return {}, problem
    numbers, said = statistics(found[:4], fields.name, STATISTIC_NAMES)
    for sentence in said:
        logger.warning(f"{where}: {sentence}.")
    leaf: Dict[str, Any] = {"type": TENSOR_TYPE, "dtype": dtype, "shape": shape}
    leaf.update(zip(STATISTICS_KEYS, numbers))
    return leaf, None


def _legacy_tensor(leaf: Dict[str, Any], fields: RecordLine, files: DumpFiles, tensors: TensorDir, dotted: str,
                   where: str) -> int:
    """Read the record's npy (when the dump has them) and write it as the leaf's ``.pt``: 1 when written."""
    if leaf["type"] != TENSOR_TYPE or not files.data_dir:
        return 0
    data_name = dotted + layout.PT_SUFFIX
    problem = writable_name_problem(data_name)
    if problem is not None:
        without_tensor(where, fields.name, problem)
        return 0
    try:  # the name was checked to be a plain file name
        array = read_tensor(os.path.join(files.data_dir, fields.name + layout.NPY_SUFFIX), files.data_dir, fields.name,
                            where)
    except FileNotFoundError:
        return 0  # a record without its npy (filtered, or a summary dump): statistics only
    if array is None:
        return 0
    _npy_to_pt(array, tensors.file(data_name), fields.dtype)
    leaf["data_name"] = data_name
    return 1


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


def _write_json(path: str, value: Any) -> None:
    write_bytes(path, json.dumps(value, indent=1).encode("utf-8"))
