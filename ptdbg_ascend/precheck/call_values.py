"""The values of one dumped API call, rebuilt for a re-run: tensors loaded from the dump (or generated), every
other argument rebuilt as data from its recorded type (``arguments``).

- :class:`Source`: where tensors come from (the dump's ``dump_tensor_data``, or random data) and how many
  bytes one call may take (the memory budget).
- :func:`load_tensor`: one ``.pt`` file (or a legacy dump's ``.npy``, for the advisor's re-run), through the
  confined, bounded reader compare uses (``fs.confined.open_inside`` + ``fs.tensor_files.load_pt``/``load_npy``:
  inside the data directory, a regular file, never unpickled, its size known before it is allocated); the tensor
  must have the shape and dtype its record says, so a file cannot smuggle in a larger tensor than the one
  budgeted for.
- :func:`random_tensor`: msprobe's "random data" for a statistics-only dump, seeded per tensor from the seed
  and the tensor's place in the dump, so the same seed gives the same inputs whatever else is run.
- :func:`rebuild`, :func:`forward_inputs`, :func:`recorded_values`: the recorded structures as Python values,
  nested at most :data:`arguments.MAX_DEPTH` levels.

Anything the dump did not record, or recorded as something else than data of its type, is a
:class:`MissingInput`: the runner SKIPs the call with that reason; no argument is ever guessed.
"""

from __future__ import annotations

import math
import os
import zlib
from typing import Any, Dict, List, Mapping, Optional, Tuple

from ptdbg_ascend.formats.layout import NPY_SUFFIX
from ptdbg_ascend.formats.records import file_name_problem
from ptdbg_ascend.memory import default_budget, format_size
from ptdbg_ascend.precheck import arguments
from ptdbg_ascend.precheck.arguments import MAX_DEPTH, ArgumentRefused, DeviceArg, MissingInput

TENSOR_TYPES = ("torch.Tensor", "torch.nn.parameter.Parameter")

__all__ = ["Source", "load_tensor", "random_tensor", "rebuild", "forward_inputs", "recorded_values", "flatten",
           "tensor_leaves", "MissingInput", "DeviceArg", "TENSOR_TYPES"]


class Source:
    """Where tensor values come from: the dump's files (``data_dir``), or random data (``seed`` given);
    ``budget``: the bytes one call may take (default None: :func:`ptdbg_ascend.memory.default_budget`),
    which also bounds each tensor read or generated.

    ``random`` generation is seeded per tensor from ``seed`` and the tensor's dump-path (call name and
    argument position), so it does not depend on which other calls are run."""

    def __init__(self, data_dir: Optional[str], seed: Optional[int] = None, budget: Optional[int] = None) -> None:
        self.data_dir = data_dir
        self.seed = seed
        self.budget = default_budget() if budget is None else budget

    @property
    def random(self) -> bool:
        return self.seed is not None

    def tensor(self, leaf: Mapping[str, Any], where: str) -> Any:
        if self.random:
            return random_tensor(leaf, self.seed, where, self.budget)
        return load_tensor(leaf, self.data_dir, where, self.budget)


def load_tensor(leaf: Mapping[str, Any], data_dir: Optional[str], where: str, max_bytes: Optional[int] = None) -> Any:
    """The tensor a dump.json leaf names (CPU, its dumped dtype). MissingInput when the leaf names no
    file, the file is missing, outside ``data_dir``, not a regular file, larger than ``max_bytes``
    (default None: :func:`ptdbg_ascend.memory.default_budget`), holds anything but one tensor, or a tensor of
    another shape or dtype than the leaf records."""
    from ptdbg_ascend.fs.confined import open_inside
    from ptdbg_ascend.fs.tensor_files import load_npy, load_pt

    data_name = leaf.get("data_name")
    if data_name in (None, "") or data_dir is None:
        raise MissingInput(f"{where}: the dump holds no data for this tensor (a statistics dump? use random data)")
    problem = file_name_problem(data_name)
    if problem:
        raise MissingInput(f"{where}: {problem}")
    path = os.path.join(data_dir, data_name)
    recorded_dtype = arguments.dtype_named(leaf.get("dtype"))
    try:
        with open_inside(path, data_dir) as handle:
            limit = default_budget() if max_bytes is None else max_bytes
            if data_name.endswith(NPY_SUFFIX):
                tensor = _npy_tensor(load_npy(handle, path, limit), recorded_dtype)
            else:
                tensor = load_pt(handle, path, limit)
    except FileNotFoundError:
        raise MissingInput(f"{where}: the tensor file {path} is missing from the dump") from None
    except (OSError, ValueError, RuntimeError, EOFError, TypeError) as error:
        raise MissingInput(f"{where}: the tensor file {path} cannot be read safely: {error}") from None
    if recorded_dtype is not None and tensor.dtype != recorded_dtype:
        raise MissingInput(f"{where}: the file {path} holds a {tensor.dtype} tensor, the dump records {recorded_dtype}")
    shape = leaf.get("shape")
    if isinstance(shape, list) and list(tensor.shape) != shape:
        raise MissingInput("{}: the file {} holds a tensor of shape {}, the dump records {}".format(
            where, path, list(tensor.shape), arguments.shown(shape)))
    return tensor


def _npy_tensor(array: Any, recorded_dtype: Any) -> Any:
    """The tensor of a legacy dump's ``.npy`` (``np.load`` without pickles): a bfloat16 tensor is saved as
    float32 (numpy has no bfloat16) and comes back as the bfloat16 the record says, exactly."""
    import torch

    tensor = torch.from_numpy(array.copy())  # its own writable memory: the re-run may write in place
    if recorded_dtype == torch.bfloat16 and tensor.dtype == torch.float32:
        tensor = tensor.to(torch.bfloat16)
    return tensor


def recorded_size(leaf: Mapping[str, Any], where: str) -> Tuple[int, Any]:
    """``(elements, torch dtype)`` of a recorded tensor leaf; MissingInput when its dtype is not one of
    torch's or its shape is not a list of ints >= 0."""
    dtype = arguments.dtype_named(leaf.get("dtype"))
    shape = leaf.get("shape")
    if dtype is None or not isinstance(shape, list) or not all(arguments.is_int(n) and n >= 0 for n in shape):
        raise MissingInput("{}: a tensor of dtype {} and shape {} cannot be rebuilt".format(
            where, arguments.shown(leaf.get("dtype")), arguments.shown(shape)))
    numel = 1
    for n in shape:
        numel *= n
    return numel, dtype


def random_tensor(leaf: Mapping[str, Any], seed: int, where: str, max_bytes: Optional[int] = None) -> Any:
    """A tensor with the leaf's shape and dtype, uniformly within [Min, Max] (the first element is Min and
    the last Max, so the range is reached exactly); bool from Max (any) / Min (all). Seeded by ``seed``
    and ``where``. Non-finite Max/Min use ``Max_except_inf_nan``/``Min_except_inf_nan``. MissingInput when
    the tensor (with its float64 draw) would take more than ``max_bytes`` (default None:
    :func:`ptdbg_ascend.memory.default_budget`)."""
    import torch

    numel, dtype = recorded_size(leaf, where)
    shape = leaf["shape"]
    limit = default_budget() if max_bytes is None else max_bytes
    needed = numel * (8 + dtype.itemsize)  # the float64 draw and the tensor in its dtype
    if needed > limit:
        raise MissingInput("{}: a random tensor of shape {} ({}) would take {}, over the memory budget of {}".format(
            where, shape, dtype, format_size(needed), format_size(limit)))
    generator = torch.Generator().manual_seed((int(seed) * 1000003 + zlib.crc32(where.encode("utf-8"))) % (2 ** 63))
    if numel == 0:
        return torch.empty(shape, dtype=dtype)
    low, high = _bound(leaf, "Min"), _bound(leaf, "Max")
    if dtype == torch.bool:
        if low is None or high is None:
            raise MissingInput(f"{where}: a bool tensor without recorded Max/Min cannot be generated")
        if low:  # all True
            return torch.ones(shape, dtype=torch.bool)
        if not high:  # none True
            return torch.zeros(shape, dtype=torch.bool)
        flat = torch.randint(0, 2, (numel,), generator=generator).bool()
        flat[0], flat[-1] = False, True
        return flat.reshape(shape)
    if low is None or high is None or not (math.isfinite(low) and math.isfinite(high)):
        raise MissingInput("{}: no finite Max/Min recorded ({}, {}); random data cannot be generated".format(
            where, arguments.shown(leaf.get("Max")), arguments.shown(leaf.get("Min"))))
    if low > high:
        low, high = high, low
    if dtype.is_complex:
        raise MissingInput(f"{where}: random complex tensors are not generated")
    if dtype.is_floating_point:
        flat = torch.rand((numel,), generator=generator, dtype=torch.float64) * (high - low) + low
        flat[0], flat[-1] = low, high
        return flat.to(dtype).reshape(shape)
    flat = torch.randint(int(math.ceil(low)), int(math.floor(high)) + 1, (numel,), generator=generator,
                         dtype=torch.int64)
    flat[0], flat[-1] = int(math.ceil(low)), int(math.floor(high))
    return flat.to(dtype).reshape(shape)


def _bound(leaf: Mapping[str, Any], key: str) -> Optional[float]:
    """The recorded Max/Min (a bool tensor records True/False), else its finite counterpart."""
    value = leaf.get(key)
    if isinstance(value, (int, float)) and math.isfinite(float(value)):
        return float(value)
    value = leaf.get(key + "_except_inf_nan")
    if isinstance(value, (int, float)) and math.isfinite(float(value)):
        return float(value)
    if isinstance(leaf.get(key), (int, float)):
        return float(leaf[key])
    return None


def rebuild(value: Any, source: Source, where: str, api: str = "", depth: int = 0) -> Any:
    """The Python value of one recorded argument (tensors as CPU tensors in the dumped dtype with
    ``requires_grad`` as recorded; everything else through ``arguments``). ``where`` names the argument in
    messages and seeds random data; ``api`` (default "": none) is the API's bare name (einsum takes an
    equation string)."""
    if depth > MAX_DEPTH:
        raise ArgumentRefused(f"{where}: nested more than {MAX_DEPTH} levels deep; not rebuilt")
    if value is None:
        return None
    if isinstance(value, list):
        return [rebuild(item, source, f"{where}.{index}", api, depth + 1) for index, item in enumerate(value)]
    if not isinstance(value, dict):
        raise ArgumentRefused(f"{where}: unexpected record {arguments.shown(value)}")
    if not value:
        raise MissingInput("{}: the dump did not record this argument (a positional dtype/device is written as "
                           "{{}})".format(where))
    kind = value.get("type")
    if kind in TENSOR_TYPES:
        tensor = source.tensor(value, where)
        if value.get("requires_grad") is True and (tensor.is_floating_point() or tensor.is_complex()):
            tensor.requires_grad_(True)
        return tensor
    if kind is None:  # a dict argument: every value recorded by key
        return {str(name): rebuild(item, source, f"{where}.{name}", api, depth + 1)
                for name, item in value.items()}
    return arguments.value_of(kind, value.get("value"), where, api)


def forward_inputs(call: Any, source: Source) -> Tuple[List[Any], Dict[str, Any]]:
    """``(args, kwargs)`` of the call's forward entry (MissingInput when one cannot be rebuilt)."""
    entry = call.forward
    args = entry.get("input_args", [])
    kwargs = entry.get("input_kwargs", {})
    if "input_args" not in entry and "input_kwargs" not in entry:
        raise MissingInput(f"{call.full_name}: the dump holds no inputs of this call (data_mode without \"input\"?)")
    if not isinstance(args, list) or not isinstance(kwargs, dict):
        raise MissingInput(f"{call.full_name}: input_args/input_kwargs are not a list/object")
    base = call.full_name + ".forward"
    rebuilt_args = [rebuild(item, source, f"{base}.input.{index}", call.api, 1)
                    for index, item in enumerate(args)]
    rebuilt_kwargs = {str(name): rebuild(item, source, f"{base}.input.{name}", call.api, 1)
                      for name, item in kwargs.items()}
    return rebuilt_args, rebuilt_kwargs


def recorded_values(values: Any, source: Source, where: str) -> List[Any]:
    """The flat leaves of a recorded ``output`` block (or a backward block): tensors loaded, builtins as
    values, ``null`` as None; positions match :func:`flatten` of the computed result."""
    if values is None:
        return []
    if not isinstance(values, list):
        values = [values]
    flat: List[Any] = []
    _flatten_records(values, source, where, flat, 0)
    return flat


def _flatten_records(value: Any, source: Source, where: str, out: List[Any], depth: int) -> None:
    if depth > MAX_DEPTH:
        raise ArgumentRefused(f"{where}: nested more than {MAX_DEPTH} levels deep; not rebuilt")
    if isinstance(value, list):
        for index, item in enumerate(value):
            _flatten_records(item, source, f"{where}.{index}", out, depth + 1)
        return
    if value is None or value == {}:
        out.append(None)
        return
    if isinstance(value, dict) and value.get("type") in TENSOR_TYPES:
        out.append(source.tensor(value, where))
        return
    try:
        out.append(rebuild(value, source, where, depth=depth))
    except MissingInput:
        out.append(None)


def flatten(value: Any) -> List[Any]:
    """The leaves of a computed result (tuples, lists and torch return types recursed)."""
    if isinstance(value, (list, tuple)):
        flat: List[Any] = []
        for item in value:
            flat.extend(flatten(item))
        return flat
    return [value]


def tensor_leaves(value: Any) -> List[Any]:
    """Every tensor in an argument structure, positional order then keyword order (the order in which
    the dump numbers a backward entry's ``output``: one gradient per tensor input)."""
    import torch

    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [leaf for item in value for leaf in tensor_leaves(item)]
    if isinstance(value, dict):
        return [leaf for item in value.values() for leaf in tensor_leaves(item)]
    return []
