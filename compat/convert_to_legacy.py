"""``ptdbg convert`` msprobe -> legacy: a dump.json (+ stack.json, ``dump_tensor_data/*.pt``) becomes a pkl and
its npy directory.

Values the pkl cannot hold (str, slice, torch.Size, dtype, device, L0/mix module entries) are dropped, each
kind counted (its name cut to ``convert_values.KIND_LIMIT`` characters); bool/int/float scalars become
``<class 'int'>``/``'float'``/``'bool'`` records as the legacy engine writes them, once
``convert_values.scalar_value`` accepts their value; a tensor leaf's shape must be a list of sizes; the ``.pt``
of a bf16 tensor becomes a float32 ``.npy`` (the pkl dtype stays ``torch.bfloat16``).
"""

from __future__ import annotations

import os
from typing import Any, Dict, List, Optional, Tuple

from ptdbg_ascend.compat.convert_fs import (TensorDir, output_path, read_tensor, save_npy, writable_name_problem,
                                           write_bytes)
from ptdbg_ascend.compat.convert_layout import ConvertResult, DumpFiles
from ptdbg_ascend.compat.convert_values import (LEGACY_SCALAR_DTYPES, kind_label, scalar_value, skip, statistics,
                                               tensor_shape, unsafe_name, without_tensor)
from ptdbg_ascend.errors import FileFormatError
from ptdbg_ascend.formats import layout
from ptdbg_ascend.formats import pkl as pkl_format
from ptdbg_ascend.formats.dump_json import STATISTICS_KEYS, TENSOR_TYPE, call_values
from ptdbg_ascend.formats.naming import STACK_SUFFIX, number_problem, to_legacy
from ptdbg_ascend.formats.pkl import SCALAR_SHAPE, record_line
from ptdbg_ascend.log import logger
from ptdbg_ascend.readers.msprobe_json import load_entries, read_stacks
from ptdbg_ascend.terminal import excerpt


def msprobe_to_legacy(files: DumpFiles, root: str, work: str, name: str) -> ConvertResult:
    """Convert the msprobe dump ``files`` into ``{work}/{name}.pkl`` + ``{work}/{name}/*.npy`` (``root``: the
    conversion's output directory, which every path must stay inside)."""
    dump = load_entries(files.metadata, what="msprobe dump file", not_json_hint="")
    stacks = read_stacks(files.stack, what="msprobe dump file", not_json_hint="", lenient=True) if files.stack else {}
    npy_dir = TensorDir(root, work, name)
    lines: List[str] = []
    dropped: Dict[str, int] = {}
    saved = 0
    for dotted, entry in dump.entries.items():
        problem = unsafe_name(dotted)
        if problem is not None:
            skip(files.metadata, "the entry", dotted, problem)
            continue
        call = to_legacy(dotted)
        if call is None and str(dotted).startswith("Module."):
            dropped["Module entry (L0/mix)"] = dropped.get("Module entry (L0/mix)", 0) + 1
            continue  # the legacy format has no module records
        if call is None or not isinstance(entry, dict):
            raise FileFormatError("Entry {} of {} is not an API call{}.".format(excerpt(dotted), files.metadata,
                                                                                number_problem(dotted)))
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
    if kind in LEGACY_SCALAR_DTYPES and leaf.get("value") is not None:
        value, problem = scalar_value(kind, leaf["value"])
        if problem is not None:
            skip(files.metadata, "the record", name, problem)
            return None, 0
        number = float(value)
        problem = writable_name_problem(name + layout.NPY_SUFFIX)
        if problem is None:
            save_npy(npy_dir.file(name + layout.NPY_SUFFIX), value)
        else:
            without_tensor(files.metadata, name, problem)
        # the shape of a Python scalar is the string "[]", as the original writes it
        return record_line(name, LEGACY_SCALAR_DTYPES[kind], SCALAR_SHAPE, [number, number, number, abs(number)]), 0
    if kind != TENSOR_TYPE:
        if leaf:  # null / {} are absent values in both formats (the pkl just has no line)
            label = kind_label(kind)
            dropped[label] = dropped.get(label, 0) + 1
        return None, 0
    shape, problem = tensor_shape(leaf.get("shape"))
    if problem is not None:
        skip(files.metadata, "the record", name, problem)
        return None, 0
    numbers, said = statistics([leaf.get(key) for key in STATISTICS_KEYS], name, STATISTICS_KEYS)
    for sentence in said:
        logger.warning(f"{files.metadata}: {sentence}.")
    line = record_line(name, str(leaf.get("dtype")), shape, numbers)
    data_name = leaf.get("data_name")
    tensor_dir = files.data_dir
    if not (data_name and tensor_dir):
        return line, 0
    problem = unsafe_name(data_name)
    if problem is not None:
        logger.warning("{}: record {} keeps its statistics but not its tensor: its data_name {}; nothing was read."
                       .format(files.metadata, name, problem))
        return line, 0
    problem = writable_name_problem(name + layout.NPY_SUFFIX)
    if problem is not None:
        without_tensor(files.metadata, name, problem)
        return line, 0
    pt = os.path.join(tensor_dir, data_name)
    try:
        array = read_tensor(pt, tensor_dir, name, files.metadata)
    except FileNotFoundError:
        raise FileFormatError(f"Tensor file {pt} named by {name} does not exist.") from None
    if array is None:
        return line, 0
    save_npy(npy_dir.file(name + layout.NPY_SUFFIX), array)
    return line, 1
