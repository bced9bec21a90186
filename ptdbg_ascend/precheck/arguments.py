"""The non-tensor arguments of a dumped call, rebuilt as data, never as instructions.

A dump.json records each argument as ``{"type": T, "value": V}``, and the dump may come from anyone. A value
is rebuilt only from its recorded type, and only when it has that type:

- ``bool`` / ``int`` / ``float`` and numpy scalars (``int64``, ``float32``...: a fixed table of numpy's
  number types, never ``numpy.dtype(T)`` of a free string) must hold a number of that kind;
- ``slice`` three ints or nulls, ``torch.Size`` a list of ints >= 0, ``ellipsis``;
- ``torch.dtype`` one of torch's dtypes, looked up in a fixed table (never ``getattr(torch, name)``,
  which reaches every function of torch and imports its lazy submodules);
- a string only where APIs take one of a fixed set of words (:data:`WORDS`: ``reduction``, ``approximate``,
  ``padding_mode``, ``rounding_mode``, interpolation modes, dtype/layout/memory-format names...), a device
  name (``"cuda:0"``), which stands for the device the call runs on, or einsum's equation, checked against
  its grammar. Paths and every other free string are refused.

Anything else is :class:`ArgumentRefused` (a :class:`MissingInput`): the runner SKIPs the call with the
reason, and nothing of it runs.
"""

from __future__ import annotations

import functools
import re
from typing import Any, Dict, Optional

MAX_DEPTH = 32  # nesting of one argument (lists in lists...); deeper is refused, never recursed into
MAX_WORD = 64  # characters of an accepted word; einsum equations may be longer
MAX_EQUATION = 256

# The words torch APIs take as string arguments, by the parameter that takes them (documentation; the check
# accepts a word of any group for any parameter: what matters is that no free text passes).
WORD_GROUPS: Dict[str, str] = {
    "reduction": "none mean sum batchmean elementwise_mean",
    "approximate": "none tanh",
    "padding_mode / pad mode": "zeros border reflection reflect replicate circular constant",
    "interpolate / upsample / grid_sample mode": "nearest nearest-exact linear bilinear bicubic trilinear area",
    "embedding_bag mode": "sum mean max",
    "rounding_mode": "trunc floor",
    "rnn nonlinearity": "tanh relu",
    "searchsorted side": "left right",
    "quantile interpolation": "linear lower higher midpoint nearest",
    "fft norm": "backward forward ortho",
    "norm p": "fro nuc",
    "cdist compute_mode": "use_mm_for_euclid_dist_if_necessary use_mm_for_euclid_dist donot_use_mm_for_euclid_dist",
    "scatter / scatter_reduce / index_reduce reduce": "add multiply sum prod mean amax amin",
    "meshgrid indexing": "ij xy",
    "linalg UPLO / driver": "L U gels gelsy gelsd gelss",
    "layout": "strided sparse_coo sparse_csr sparse_csc sparse_bsr sparse_bsc _mkldnn",
    "memory_format": "contiguous_format channels_last channels_last_3d preserve_format",
    "torch_npu layouts and modes": "BSH SBH BNSD BSND TND half interleave",
}
_DTYPE_WORDS = ("float16 float32 float64 bfloat16 half float double complex32 complex64 complex128 cfloat cdouble "
                "uint8 uint16 uint32 uint64 int8 int16 int32 int64 short int long bool")
WORDS = frozenset(" ".join(list(WORD_GROUPS.values()) + [_DTYPE_WORDS]).split()) | \
    frozenset("torch." + name for name in _DTYPE_WORDS.split())
_DEVICE_NAME = re.compile(r"^(cpu|cuda|npu|xpu|mps|mtia|hpu|meta)(:\d{1,4})?$")
_EINSUM_EQUATION = re.compile(r"^[A-Za-z.,\->\s]{1,%d}$" % MAX_EQUATION)
_EINSUM_APIS = frozenset(("einsum",))
# numpy scalar types a dump may record (msprobe writes type(value).__name__ of numpy scalars)
_NUMPY_INTEGERS = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "intc", "intp")
_NUMPY_FLOATS = ("float16", "float32", "float64", "half", "single", "double", "longdouble")
_NUMPY_BOOLS = ("bool_", "bool")


class MissingInput(Exception):
    """An argument of the call cannot be rebuilt from the dump (the message says which and why)."""


class ArgumentRefused(MissingInput):
    """A recorded argument that is not data of its recorded type (a free string, a mistyped value)."""


class DeviceArg:
    """A recorded device (``torch.device`` or a device name): replaced by the device the call runs on
    (the dumped device, an NPU, may not exist here)."""

    def __init__(self, recorded: Any) -> None:
        self.recorded = recorded

    def __repr__(self) -> str:
        return f"DeviceArg({self.recorded!r})"


def shown(value: Any) -> str:
    """``repr(value)`` cut to 80 characters: how messages quote what a file holds."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def word(value: Any, where: str, api: str) -> Any:
    """A recorded ``str`` argument: the word itself, a :class:`DeviceArg` for a device name, or
    ArgumentRefused for any other text (a path, a module name, a formula...)."""
    if not isinstance(value, str):
        raise ArgumentRefused(f"{where}: recorded as str but holds {shown(value)}")
    if value in WORDS:
        return value
    if _DEVICE_NAME.match(value):
        return DeviceArg(value)
    if api in _EINSUM_APIS and _EINSUM_EQUATION.match(value):
        return value
    raise ArgumentRefused("{}: the string {} is not an argument the pre-check accepts (only fixed words such as "
                          "reduction=\"mean\", device and dtype names, einsum equations; never paths or other "
                          "free text)".format(where, shown(value[:MAX_WORD] if len(value) > MAX_WORD else value)))


def is_int(value: Any) -> bool:
    """An int that is not a bool."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
    """An int or a float that is not a bool."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def scalar(kind: str, value: Any, where: str) -> Any:
    """A recorded ``bool`` / ``int`` / ``float`` / numpy scalar as its Python (or numpy) value;
    ArgumentRefused when the value is not a number of that kind."""
    if kind == "bool":
        if isinstance(value, bool):
            return value
    elif kind == "int":
        if is_int(value):
            return value
    elif kind == "float":
        if is_number(value):
            return float(value)
    else:
        numpy_type = numpy_scalar_type(kind)
        if numpy_type is None:
            raise ArgumentRefused(f"{where}: values of type {shown(kind)} are not rebuilt")
        if kind in _NUMPY_BOOLS and isinstance(value, bool):
            return numpy_type(value)
        if kind in _NUMPY_INTEGERS and is_int(value):
            return numpy_type(value)
        if kind not in _NUMPY_BOOLS + _NUMPY_INTEGERS and is_number(value):
            return numpy_type(value)
    raise ArgumentRefused(f"{where}: recorded as {kind} but holds {shown(value)}")


def numpy_scalar_type(kind: str) -> Optional[Any]:
    """numpy's scalar type named ``kind`` among its bool, integer and float types; None otherwise."""
    if kind not in _NUMPY_INTEGERS + _NUMPY_FLOATS + _NUMPY_BOOLS:
        return None
    import numpy as np

    return np.bool_ if kind in _NUMPY_BOOLS else getattr(np, kind, None)


def slice_of(value: Any, where: str) -> slice:
    """A recorded slice: ``[start, stop, step]``, each an int or null."""
    if isinstance(value, list) and len(value) == 3 and all(item is None or is_int(item) for item in value):
        return slice(*value)
    raise ArgumentRefused(f"{where}: recorded as slice but holds {shown(value)}")


def size_of(value: Any, where: str) -> Any:
    """A recorded ``torch.Size``: a list of ints >= 0."""
    if isinstance(value, list) and all(is_int(item) and item >= 0 for item in value):
        import torch

        return torch.Size(value)
    raise ArgumentRefused(f"{where}: recorded as torch.Size but holds {shown(value)}")


@functools.lru_cache(None)
def _dtypes() -> Dict[str, Any]:
    import torch

    table = {}
    for name, value in vars(torch).items():
        if isinstance(value, torch.dtype):
            table[name] = value
            table["torch." + name] = value
    return table


def dtype_named(name: Any) -> Optional[Any]:
    """The torch dtype named ``name`` (``"torch.float32"`` or ``"float32"``), None when torch has none."""
    return _dtypes().get(name) if isinstance(name, str) else None


def value_of(kind: Any, recorded: Any, where: str, api: str) -> Any:
    """The value of a recorded non-tensor leaf ``{"type": kind, "value": recorded}`` (see the module doc);
    ArgumentRefused for anything that is not data of its recorded type."""
    if not isinstance(kind, str):
        raise ArgumentRefused(f"{where}: the recorded type {shown(kind)} is not a type name")
    if kind == "str":
        return word(recorded, where, api)
    if kind == "slice":
        return slice_of(recorded, where)
    if kind == "ellipsis":
        return Ellipsis
    if kind == "torch.Size":
        return size_of(recorded, where)
    if kind == "torch.dtype":
        dtype = dtype_named(recorded)
        if dtype is None:
            raise ArgumentRefused(f"{where}: unknown dtype {shown(recorded)}")
        return dtype
    if kind == "torch.device":
        if not isinstance(recorded, str):
            raise ArgumentRefused(f"{where}: recorded as torch.device but holds {shown(recorded)}")
        return DeviceArg(recorded)
    return scalar(kind, recorded, where)
