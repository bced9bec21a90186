"""The ``.pt`` files of an msprobe dump: taking a tensor's copy and writing it (the dump's writer and
``ptdbg convert``), the statistics the writer thread reads from that copy, the message of a failed write, and
the files an entry names. torch is imported only when used."""

from __future__ import annotations

import os
from typing import Any, List, Optional, Tuple

from ptdbg_ascend.dump.interception import Inside
from ptdbg_ascend.dump.statistics import WRITER_STATISTICS_MIN_ELEMENTS
from ptdbg_ascend.errors import DumpWriteError
from ptdbg_ascend.fs.writes import replace_file
from ptdbg_ascend.log import logger
from ptdbg_ascend.msprobe.leaves import eager_statistics


def snapshot(tensor: Any) -> Tuple[Any, int]:
    """``(copy, bytes)``: a detached contiguous copy of ``tensor`` on its device, in its dtype, to be saved
    later. clone(): the saved value is the one at call time, whatever the training loop does next."""
    import torch

    with torch.no_grad():
        copy = tensor.detach().clone(memory_format=torch.contiguous_format)
    return copy, copy.numel() * copy.element_size()


class CopyStatistics(list):
    """The statistics of a saved CPU tensor, read by the writer thread from the copy it saves
    (:meth:`compute`), so the training thread takes the copy and nothing more, as the legacy writer does
    for npy files. Pending until then (``values`` is not None): ``entries.py`` waits for it as for
    statistics still on a device, and then fills the leaf with the list (:func:`eager_statistics`' numbers,
    the same the training thread would have read: only a contiguous tensor is handed over, whose copy
    has its layout, so every reduction runs in the same order)."""

    __slots__ = ("values",)

    def __init__(self) -> None:
        super().__init__([None, None, None, None])
        self.values = True

    @staticmethod
    def wanted(tensor: Any) -> bool:
        """Whether the statistics of ``tensor`` (about to be saved) are read from its copy: a contiguous CPU
        tensor of a real or integer dtype (not bool) with a dimension and at least
        ``WRITER_STATISTICS_MIN_ELEMENTS`` elements (smaller ones cost less at the call than on the writer
        thread)."""
        return (tensor.is_cpu and tensor.dim() > 0 and tensor.numel() >= WRITER_STATISTICS_MIN_ELEMENTS
                and not tensor.is_complex() and tensor.dtype is not _bool_dtype() and tensor.is_contiguous())

    @classmethod
    def of(cls, tensor: Any) -> "Optional[CopyStatistics]":
        """New pending statistics for the copy of ``tensor``, or None where they are read from ``tensor``
        itself (:meth:`wanted`)."""
        return cls() if cls.wanted(tensor) else None

    def compute(self, copy: Any) -> None:
        """Read the statistics of ``copy`` (on the writer thread); never raises (a failure gives nulls)."""
        try:
            with Inside():  # the tool's own torch calls are not API calls of the script
                numbers = eager_statistics(copy)
        except Exception as error:  # noqa: BLE001 - a dump must never stop training
            numbers = [None, None, None, None]
            if not _WARNED:
                _WARNED.append(error)
                logger.warning("Statistics of a {} tensor cannot be computed ({}: {}); its leaf holds null "
                               "statistics.".format(copy.dtype, type(error).__name__, error))
        self[:] = numbers
        self.values = None  # last: entries.py reads the numbers once this is None


_WARNED = []  # type: List[BaseException]


def _bool_dtype() -> Any:
    import torch

    return torch.bool


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
        return "Cannot write the tensor file {}: {}".format(path, cause)
    return "Cannot write the tensor file {}: {}: {}".format(path, type(error).__name__, error)


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
