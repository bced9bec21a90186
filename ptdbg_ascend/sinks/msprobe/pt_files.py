"""The ``.pt`` files of an msprobe dump: taking a tensor's copy and writing it (the dump's writer and
``ptdbg convert``), the message of a failed write, and the files an entry names. torch is imported only when
used (``ptdbg convert`` runs without it)."""

from __future__ import annotations

import os
from typing import Any, List, Optional, Tuple

from ptdbg_ascend.errors import DumpWriteError
from ptdbg_ascend.fs.writes import replace_file
from ptdbg_ascend.sinks.host_copies import take_device_copy, takes_device_copy


def snapshot(tensor: Any) -> Tuple[Any, int]:
    """``(copy, bytes)``: a detached contiguous copy of ``tensor``, in its dtype, to be saved later (give it
    to ``host_copies.host_tensor`` on the writer thread). The saved value is the one at call time, whatever the
    training loop does next. A CPU tensor's copy is a clone; an accelerator's is a
    :class:`~ptdbg_ascend.sinks.host_copies.DeviceCopy`, launched now and moved to host memory by the writer."""
    if takes_device_copy(tensor):
        device_copy = take_device_copy(tensor)
        return device_copy, device_copy.nbytes
    import torch

    with torch.no_grad():
        copy = tensor.detach().clone(memory_format=torch.contiguous_format)
    return copy, copy.numel() * copy.element_size()


def save_pt(path: str, tensor: Any) -> None:
    """``torch.save`` of ``tensor`` to ``path``, atomically (:func:`~ptdbg_ascend.fs.writes.replace_file`:
    a partial file is removed)."""
    import torch

    def write(descriptor: int) -> None:
        with os.fdopen(os.dup(descriptor), "wb") as handle:
            torch.save(tensor, handle)

    replace_file(path, write, "the tensor file")


def tensor_error_text(path: str, error: BaseException) -> str:
    """"Cannot write the tensor file {path}: {the OS error}". torch.save may turn the OS error (disk
    full) into a RuntimeError of its own ("unexpected pos ..."): the OS error it came from is named."""
    if isinstance(error, DumpWriteError):  # fs.writes.replace_file's: "Cannot write the tensor file {path}: ..."
        return str(error)
    cause: Optional[BaseException] = error
    for _ in range(8):  # the chain torch left: __context__/__cause__
        if cause is None or (isinstance(cause, OSError) and cause.errno is not None):
            break
        cause = cause.__cause__ or cause.__context__
    if isinstance(cause, OSError) and cause.errno is not None:
        return f"Cannot write the tensor file {path}: {cause}"
    return f"Cannot write the tensor file {path}: {type(error).__name__}: {error}"


def data_names(value: Any) -> List[str]:
    """Every ``data_name`` in an entry (nested dicts and lists)."""
    names = []
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            name = item.get("data_name")
            if isinstance(name, str):
                names.append(name)
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return names
