"""A gradient's direction file, ``step{N}/{param_name}.npy``: the ``grad > 0`` bits of the gradient, packed 8 to a
byte (``numpy.packbits`` order, the last byte padded with 0 bits), a 1-D uint8 ``.npy``.

``.npy``, not msprobe 1.0.4's documented ``.pt``: it is read without torch and without pickle
(``numpy.load(allow_pickle=False)``), so a file from another machine cannot run code; msprobe's later versions write
``.npy`` too. Its unpacked boolean ``.npy`` (one byte per element) is read as well. The element count is the
grad_summary row's ``shape``: a file is never trusted to say how much it holds.
"""

from __future__ import annotations

import io
import os
from typing import Any

import numpy

from ptdbg_ascend.errors import FileFormatError
from ptdbg_ascend.fs.writes import replace_file, write_all

SUFFIX = ".npy"
# Set bits of every byte value: the differing bits of two packed directions are POPCOUNT[a ^ b].sum().
POPCOUNT = numpy.array([bin(value).count("1") for value in range(256)], dtype=numpy.uint8)


def save_signs(path: str, packed: Any) -> None:
    """Write the packed bits ``packed`` (uint8) to ``path`` atomically (0640)."""
    buffer = io.BytesIO()
    numpy.lib.format.write_array(buffer, numpy.ascontiguousarray(packed, dtype=numpy.uint8), allow_pickle=False)
    replace_file(path, lambda descriptor: write_all(descriptor, buffer.getbuffer()), "the gradient direction file")


def load_signs(path: str, elements: int) -> Any:
    """The packed bits of the direction file ``path`` of a gradient of ``elements`` elements (uint8, ``ceil(elements /
    8)`` bytes). Raises :class:`FileFormatError` naming the path when the file is not a 1-D uint8 array of that length
    (nor msprobe's boolean array of ``elements`` items), or is larger than it can be."""
    expected = (elements + 7) // 8
    limit = elements + 4096  # a boolean array of `elements`, and the .npy header
    try:
        if not os.path.isfile(path) or os.path.islink(path):
            raise FileFormatError(f"The gradient direction file {path} is missing or not a regular file.")
        if os.path.getsize(path) > limit:
            raise FileFormatError(f"The gradient direction file {path} is larger than a gradient of {elements} "
                                  "elements needs.")
        array = numpy.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError) as error:
        raise FileFormatError(f"The gradient direction file {path} cannot be read as .npy: {error}") from None
    if array.dtype == numpy.bool_ and array.size == elements:
        return numpy.packbits(array.reshape(-1))
    if array.dtype != numpy.uint8 or array.ndim != 1 or array.size != expected:
        raise FileFormatError("The gradient direction file {} holds {} {} values; a gradient of {} elements has {} "
                              "packed bytes (uint8).".format(path, array.size, array.dtype, elements, expected))
    return array


def matching_signs(first: Any, second: Any, elements: int) -> int:
    """How many of the ``elements`` signs agree between two packed directions (the padding bits agree always)."""
    if elements == 0:
        return 0
    return elements - int(POPCOUNT[numpy.bitwise_xor(first, second)].sum(dtype=numpy.int64))

