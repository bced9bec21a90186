"""Load the tensor files of a record pair and compare them with
:func:`~ptdbg_ascend.comparison.metrics.compare_arrays`.

Every file is read confined to the data directory its record came from
(:func:`ptdbg_ascend.fs.confined.load_tensor`); a file that is missing, unreadable, or not what the dump
recorded (shape, kind of dtype) becomes a row message, never an exception.
"""

from __future__ import annotations

import os
from typing import Optional

import numpy as np

from ptdbg_ascend.comparison.metrics import Metrics, Status, compare_arrays, not_compared
from ptdbg_ascend.formats.records import TensorRecord
from ptdbg_ascend.comparison.tolerances import Tolerance
from ptdbg_ascend.formats.layout import NPY_SUFFIX
from ptdbg_ascend.fs.confined import load_tensor
from ptdbg_ascend.readers import no_npy


def compare_files(npu_path: Optional[str], bench_path: Optional[str],
                  tolerance: Optional[Tolerance] = None) -> Metrics:
    """Load and compare; a file that cannot be loaded is a row message naming it, never an exception."""
    arrays = []
    for path in (npu_path, bench_path):
        array = _load_or_message(path, None)
        if isinstance(array, Metrics):
            return array
        arrays.append(array)
    return compare_arrays(arrays[0], arrays[1], tolerance)


def compare_records(npu: TensorRecord, bench: TensorRecord, tolerance: Optional[Tolerance] = None) -> Metrics:
    """Load the files of two records and compare them. A record without a usable file name, a file
    outside its data directory, or a file whose shape (or kind of dtype) is not what the dump recorded,
    is a row message; nothing is compared then."""
    arrays = []
    for record in (npu, bench):
        if record.data_problem:
            return not_compared(Status.NOT_READ, record.data_problem)
        array = _load_or_message(record.data_path, record.data_root)
        if isinstance(array, Metrics):
            return array
        problem = _record_mismatch(record, array)
        if problem:
            return not_compared(Status.NOT_READ, problem)
        arrays.append(array)
    return compare_arrays(arrays[0], arrays[1], tolerance, (npu.dtype, bench.dtype))


def _load_or_message(path: Optional[str], root: Optional[str]):
    if path is None:
        return not_compared(Status.NOT_READ, f"Dump file: {path} not found.")
    try:
        return load_tensor(path, root)
    except FileNotFoundError:
        return not_compared(Status.NOT_READ, f"Dump file: {path} not found{_why_missing(path, root)}.")
    except (OSError, ValueError, RuntimeError, EOFError) as error:
        return not_compared(Status.NOT_READ, f"Dump file: {path} cannot be read ({error}).")


def _why_missing(path: str, root: Optional[str]) -> str:
    """": the dump wrote no npy for it: {why}" when the writer noted why (``readers/no_npy.py``), else ""."""
    name = os.path.basename(path)
    if not name.endswith(NPY_SUFFIX):
        return ""
    why = no_npy.reason(root, name[:-len(NPY_SUFFIX)])
    return f": the dump wrote no npy for it: {why}" if why else ""


def _dtype_kinds(dtype: str) -> Optional[str]:
    """numpy kinds a file of a ``torch.*`` dtype may hold (bf16 and float8 are saved widened); None
    when the dump's dtype says nothing checkable."""
    if not dtype.startswith("torch."):
        return None
    name = dtype[len("torch."):]
    if name == "bool":
        return "b"
    if name.startswith("complex"):
        return "c"
    if name.startswith(("float", "bfloat", "half", "double")):
        return "f"
    if name.startswith(("int", "uint", "long", "short")):
        return "iu"
    return None


def _record_mismatch(record: TensorRecord, array: np.ndarray) -> Optional[str]:
    if tuple(array.shape) != tuple(record.shape):
        return ("Not compared: the dump records shape {} for {}, but its file holds shape {} ({} elements)."
                .format(list(record.shape), record.name, list(array.shape), array.size))
    kinds = _dtype_kinds(record.dtype)
    if kinds is not None and array.dtype.kind not in kinds:
        return "Not compared: the dump records dtype {} for {}, but its file holds {}.".format(
            record.dtype, record.name, array.dtype)
    return None
