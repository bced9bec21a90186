"""Reading one tensor file of a dump (``.npy``, ``.pt``) from an open handle: nothing unpickled, and the
memory it will take known and bounded *before* it is allocated.

- ``.npy``: the header's shape and dtype give the array's bytes; an object dtype, a size over
  ``max_bytes`` or a size the file does not hold (a 100-byte file declaring 16 GiB) is refused before
  numpy allocates anything. Loaded with ``allow_pickle=False``.
- ``.pt``: only torch's zip format (what ``torch.save`` has written since torch 1.6): the sum of its
  members' uncompressed sizes must fit ``max_bytes`` (a deflated member of 18 MB can inflate to 4 GiB);
  loaded with ``weights_only=True`` (explicit, so ``TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD`` cannot turn it
  off); the tensor's logical size must fit ``max_bytes`` too (a stride-0 tensor of 2**31 elements
  takes 1.5 KB on disk and 16 GiB once copied).

Every refusal is a :class:`TensorFileRefused` (a ValueError) whose message names the file and why; a
refusal for size says how to allow more (``PTDBG_MAX_TENSOR_BYTES`` for compare, parse and convert;
``--memory-budget`` for the pre-check).
"""

from __future__ import annotations

import os
import pickle
import zipfile
from typing import IO, Any

from ptdbg_ascend.memory import format_size

MAX_MEMBERS = 4096  # a tensor file holds a handful of members; a huge central directory is not read
RAISE_HINT = (" (if this machine has the memory: --memory-budget for run-ut, PTDBG_MAX_TENSOR_BYTES=16G for compare, "
              "parse and convert)")


class TensorFileRefused(ValueError):
    """A tensor file that is not read: unsafe to load, larger than allowed, or not what it claims."""


def check_npy(handle: IO[bytes], path: str, max_bytes: int) -> None:
    """Check the ``.npy`` header at the handle's start (see the module doc); the handle is rewound."""
    import numpy as np
    from numpy.lib import format as npy_format

    try:
        version = npy_format.read_magic(handle)
        if version == (1, 0):
            shape, _, dtype = npy_format.read_array_header_1_0(handle)
        elif version == (2, 0):
            shape, _, dtype = npy_format.read_array_header_2_0(handle)
        else:
            raise TensorFileRefused(f"{path}: .npy format version {version} is not read (1.0 and 2.0 are)")
    except (ValueError, EOFError, OSError) as error:
        if isinstance(error, TensorFileRefused):
            raise
        raise TensorFileRefused(f"{path} is not a readable .npy file: {error}") from None
    if dtype.hasobject:
        raise TensorFileRefused(f"{path} holds Python objects; it is not unpickled")
    declared = int(np.prod(shape, dtype=object)) * dtype.itemsize
    held = os.fstat(handle.fileno()).st_size - handle.tell()
    if declared > max_bytes:
        raise TensorFileRefused("{} declares an array of shape {} ({}), over the {} a tensor may take here{}"
                                .format(path, tuple(shape), format_size(declared), format_size(max_bytes),
                                        RAISE_HINT))
    if declared > held:
        raise TensorFileRefused("{} declares {} of data but holds {}: truncated or crafted".format(
            path, format_size(declared), format_size(max(0, held))))
    handle.seek(0)


def load_npy(handle: IO[bytes], path: str, max_bytes: int) -> Any:
    """The array of an ``.npy`` file (checked first, :func:`check_npy`)."""
    import numpy as np

    check_npy(handle, path, max_bytes)
    return np.load(handle, allow_pickle=False)


def check_pt(handle: IO[bytes], path: str, max_bytes: int) -> None:
    """Check that a ``.pt`` file is torch's zip format and its members fit ``max_bytes`` uncompressed;
    the handle is rewound."""
    try:
        with zipfile.ZipFile(handle) as archive:
            members = archive.infolist()
            if len(members) > MAX_MEMBERS:
                raise TensorFileRefused(f"{path} has {len(members)} archive members; a tensor file has a handful")
            declared = sum(member.file_size for member in members)
    except zipfile.BadZipFile:
        raise TensorFileRefused("{} is not a zip-format .pt file (torch.save has written zip files since torch "
                                "1.6); older formats are not read: their sizes cannot be checked before "
                                "loading".format(path)) from None
    if declared > max_bytes:
        raise TensorFileRefused("{} unpacks to {}, over the {} a tensor may take here{}".format(
            path, format_size(declared), format_size(max_bytes), RAISE_HINT))
    handle.seek(0)


def load_pt(handle: IO[bytes], path: str, max_bytes: int) -> Any:
    """The tensor of a ``.pt`` file (checked first, :func:`check_pt`), on the CPU, never unpickled; its
    logical size (elements x element size, whatever its strides) must fit ``max_bytes``."""
    import torch

    check_pt(handle, path, max_bytes)
    try:
        tensor = torch.load(handle, map_location="cpu", weights_only=True)
    except TypeError as error:
        if "weights_only" in str(error):
            raise TensorFileRefused("{} is a .pt file and this torch ({}) cannot load it safely (weights_only "
                                    "needs torch >= 1.13); convert the dump with `ptdbg convert` on a newer torch"
                                    .format(path, torch.__version__)) from None
        raise
    except pickle.UnpicklingError:
        raise TensorFileRefused(f"{path} holds Python objects besides tensors; it is not unpickled") from None
    if not isinstance(tensor, torch.Tensor):
        raise TensorFileRefused(f"{path} does not hold a tensor")
    logical = tensor.numel() * tensor.element_size()
    if logical > max_bytes:
        raise TensorFileRefused("{} holds a tensor of shape {} ({} once copied), over the {} a tensor may take "
                                "here{}".format(path, tuple(tensor.shape), format_size(logical), format_size(max_bytes),
                                                RAISE_HINT))
    return tensor
