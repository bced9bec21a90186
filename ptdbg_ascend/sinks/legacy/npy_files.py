"""The npy side of the legacy format: host copies of tensors that later in-place changes cannot alter
(special kinds of tensors as ``tensor_kinds.py`` says), and npy files written whole (a repeated one is
hard-linked by ``fs.writes.link_file``)."""

from __future__ import annotations

import functools
import io
import os
from typing import Any, List, Optional, Tuple

from ptdbg_ascend.statistics.eager import EMPTY, tensor_statistics
from ptdbg_ascend.formats.pkl import record_text, shape_text
from ptdbg_ascend.fs.writes import replace_file, write_all
from ptdbg_ascend.numpy_view import numpy_wider
from ptdbg_ascend.sinks.host_copies import take_device_copy, takes_device_copy


def take_special(name: str, value: Any, dtype: str, npy_dir: Optional[str], lines: List[Any],
                 files: List[Tuple[str, Any, Optional[str]]], head: str) -> Tuple[int, List[Optional[float]]]:
    """The line and npy of a tensor of a special kind (``tensor_kinds.py``): the dtype is the tensor's
    own, the shape, statistics and npy those of the values its record holds (a vmap batch with its batch
    dims first, the dense values of a sparse tensor...); without values, null statistics and no npy. The
    line (``head``: ``formats.pkl.line_head``) goes to ``lines``, the npy to ``files`` (path, array, None).
    Never raises: returns the bytes of the copy and the statistics."""
    from ptdbg_ascend import tensor_kinds

    kind = "plain"
    array = None
    try:
        with tensor_kinds.reading_values():
            plain, kind = tensor_kinds.plain_values(value)
            if plain is None:
                shape, statistics = shape_text(tuple(tensor_kinds.shape_of(value))), list(EMPTY)
            else:
                shape, statistics = shape_text(plain.shape), tensor_statistics(plain)
                if npy_dir is not None:
                    try:
                        array = host_copy(plain)
                    except (RuntimeError, TypeError, ValueError, NotImplementedError) as error:
                        tensor_kinds.warn_once("npy:" + dtype, "{} tensors cannot be saved as npy ({}); their "
                                               "records have statistics only.".format(dtype, error))
    except Exception as error:  # noqa: BLE001 - a dump must never stop training
        shape, statistics = "[]", list(EMPTY)
        tensor_kinds.warn_once("error:" + kind, "A {} tensor ({}) cannot be read ({}: {}); its records hold null "
                               "statistics and no npy.".format(kind, dtype, type(error).__name__, error))
    note = _kind_note(kind)
    if note is not None:
        tensor_kinds.warn_once(kind, note)
    if array is not None:
        files.append((os.path.join(npy_dir, name + ".npy"), array, None))  # type: ignore[arg-type]
    lines.append(record_text(name, dtype, shape, statistics, head))
    return (array.nbytes if array is not None else 0), statistics


def _kind_note(kind: str) -> Optional[str]:
    """What the log says once about the records of a special kind of tensor (None for plain ones)."""
    if kind == "plain":
        return None
    if kind in ("meta", "fake"):
        return f"Records of {kind} tensors hold no values: null statistics, no npy."
    if kind == "vmap":
        return ("Records of vmap-batched tensors hold the whole batch, batch dims first (outermost vmap first), "
                "in their shape, statistics and npy (doc/dump_guide.md).")
    return f"Records of {kind} tensors hold their values as doc/dump_guide.md describes."


def host_copy(tensor: Any) -> Any:
    """A numpy copy of ``tensor`` that later in-place changes cannot alter (bf16 and float8 -> float32,
    complex32 -> complex64: numpy has no such types). An accelerator's tensor gives a
    :class:`~ptdbg_ascend.sinks.host_copies.DeviceCopy` instead, launched on its device: the writer thread
    turns it into the array (``host_copies.on_host``), and the training thread never waits for the device."""
    import torch

    data = tensor.detach()  # no autograd history: nothing below records a graph
    wider = numpy_wider(data.dtype)
    if takes_device_copy(data):
        return take_device_copy(data, wider)
    if wider is None and data.device.type == "cpu":
        try:
            # numpy's copy of the shared memory: one copy, C-ordered (the npy fast path), without
            # torch's per-operator dispatch of clone().
            return data.numpy().copy()
        except (RuntimeError, TypeError):  # a lazily conjugated or negated view: torch resolves it
            pass
    with torch.no_grad():
        if wider is not None:
            data = data.to(wider)  # a new tensor already
        elif data.device.type != "cpu":
            data = data.cpu()
        else:
            data = data.clone()
        if data.device.type != "cpu":
            data = data.cpu()
        return data.resolve_conj().numpy() if hasattr(data, "resolve_conj") else data.numpy()


@functools.lru_cache(maxsize=4096)
def _npy_header(descr: str, shape: Tuple[int, ...]) -> bytes:
    """The ``.npy`` header (format 1.0 or 2.0, as numpy picks) for a C-ordered array."""
    import numpy as np

    buffer = io.BytesIO()
    header = {"descr": descr, "fortran_order": False, "shape": shape}
    try:
        np.lib.format.write_array_header_1_0(buffer, header)
    except ValueError:  # header too long for format 1.0
        buffer = io.BytesIO()
        np.lib.format.write_array_header_2_0(buffer, header)
    return buffer.getvalue()


def save_npy(path: str, array: Any) -> None:
    """``np.save(path, array)``; for C-contiguous numeric arrays the header is cached and the data goes
    out in one ``os.write`` (which releases the GIL), so the writer thread barely competes with training.
    Written under an unpredictable temporary name in the same directory and renamed: ``path`` is never
    a partial file (a killed process leaves at most a ``.*.tmp``), nor written through a link."""
    import numpy as np

    array = np.asarray(array)

    def write(descriptor: int) -> None:
        if array.flags.c_contiguous and not array.dtype.hasobject:
            header = _npy_header(np.lib.format.dtype_to_descr(array.dtype), tuple(array.shape))
            write_all(descriptor, header)
            write_all(descriptor, memoryview(array.reshape(-1)).cast("B") if array.size else b"")
        else:
            with os.fdopen(os.dup(descriptor), "wb") as handle:
                np.save(handle, array, allow_pickle=False)

    replace_file(path, write)
