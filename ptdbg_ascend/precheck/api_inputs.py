"""Rebuilding each dumped API call from an msprobe-format dump (``dump.json`` + ``dump_tensor_data/*.pt``
+ ``stack.json``), as the pre-check re-runs it.

- :func:`open_dump` reads and checks the dump.json once (a legacy ``.pkl`` dump is refused: it lacks the
  non-tensor keyword arguments a re-run needs), pairs every ``X.n.forward`` entry with its
  ``X.n.backward`` entry into an :class:`ApiCall`, and reads the user's code lines from ``stack.json``.
- :func:`rebuild` turns the recorded arguments of one call back into Python values. Tensors are loaded
  only for the call being run (bounded memory), through the same confined, ``weights_only`` loading as
  compare (``comparison.metrics.open_inside``): never unpickled, never read outside the data directory.
- Random-data mode (msprobe's "random data" for a statistics-only dump): each tensor is generated with
  the recorded shape and dtype within the recorded [Min, Max], from a generator seeded by ``seed`` and
  the tensor's place in the dump, so the same seed gives the same inputs whatever else is run.

Anything the dump did not record (a positional dtype/device written as ``{}``, a type it could not
write, a missing ``.pt`` file) is a :class:`MissingInput`: the runner SKIPs the call with that reason; no
argument is ever guessed.
"""

from __future__ import annotations

import math
import os
import pickle
import zlib
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Tuple

from ptdbg_ascend.comparison.records import Frame, file_name_problem, user_line
from ptdbg_ascend.errors import FileFormatError, ParameterError
from ptdbg_ascend.jsonfile import load_json
from ptdbg_ascend.naming import DOTTED_RECORD_NAME

TENSOR_TYPES = ("torch.Tensor", "torch.nn.parameter.Parameter")
DATA_DIR_NAME = "dump_tensor_data"
LEGACY_HINT = ("A legacy pkl+npy dump does not record the non-tensor arguments (keyword arguments, ints, dtypes) "
               "a re-run needs. Dump the run with PrecisionDebugger(task=\"tensor\", level=\"L1\") (or "
               "task=\"statistics\" for random data), or convert the dump with `ptdbg convert SOURCE TARGET` and "
               "check that the converted dump.json holds the arguments, then pass its dump.json.")


class MissingInput(Exception):
    """An argument of the call cannot be rebuilt from the dump (the message says which and why)."""


class DeviceArg(object):
    """A recorded ``device=`` value: replaced by the device the call runs on (the dumped device, an NPU,
    may not exist here)."""

    def __init__(self, recorded: Any) -> None:
        self.recorded = recorded

    def __repr__(self) -> str:
        return "DeviceArg({!r})".format(self.recorded)


@dataclass
class ApiCall:
    """One dumped API call: ``full_name`` ``Functional.linear.0`` (msprobe's run_ut key), ``prefix``
    ``Functional``, ``api`` ``linear``, ``forward``/``backward`` the dump.json entries (backward None when
    the dump has none), ``stack`` the forward call's frames (innermost first)."""

    full_name: str
    prefix: str
    api: str
    forward: Mapping[str, Any]
    backward: Optional[Mapping[str, Any]] = None
    stack: Tuple[Frame, ...] = ()

    @property
    def api_key(self) -> str:
        """``Functional.linear``: the standard lookup key of the judge."""
        return self.prefix + "." + self.api

    @property
    def code_line(self) -> Optional[str]:
        """``file:line  code`` of the user's line that made the call (None without stack.json)."""
        return user_line(self.stack) if self.stack else None


@dataclass
class Dump:
    """An opened dump: its calls in dump order, where tensors are read from, how inputs are made."""

    path: str
    task: str
    data_dir: Optional[str]
    calls: List[ApiCall] = field(default_factory=list)
    has_tensors: bool = False


def split_name(dotted: str) -> Optional[Tuple[str, str, str, str]]:
    """``Functional.linear.0.forward`` -> ``("Functional", "linear", "0", "forward")``; an Aten name
    with an overload (``Aten.add.Tensor.0.forward``) keeps ``add.Tensor`` as the API. None when the name
    is not an API call (a ``Module.`` entry, another shape)."""
    match = DOTTED_RECORD_NAME.match(dotted)
    if match is None or match.group("side") is not None:
        return None
    return match.group("prefix"), match.group("api"), match.group("index"), match.group("direction")


def open_dump(api_info: str) -> Dump:
    """Read the dump.json ``api_info`` and pair its forward/backward entries.

    Raises:
        ParameterError: ``api_info`` is not a path string.
        FileFormatError: the file is missing, not JSON, a legacy pkl dump, not an msprobe dump.json, holds
            no API call, or names tensor files whose directory is missing.
    """
    if not isinstance(api_info, str) or not api_info:
        raise ParameterError("api_info", api_info, "must be the path of a dump.json written by "
                                                   "PrecisionDebugger (dump_path/step0/rank0/dump.json)")
    if api_info.endswith(".pkl") or _looks_like_pkl(api_info):
        raise FileFormatError("{} is a legacy pkl dump; the pre-check needs a dump.json. {}".format(api_info,
                                                                                                 LEGACY_HINT))
    dump = load_json(api_info, "dump file", " (incomplete after a crash?)")
    if not isinstance(dump, dict) or not isinstance(dump.get("data"), dict):
        raise FileFormatError("The dump file {} has no \"data\" object: not a dump.json written by PrecisionDebugger "
                              "or msprobe.".format(api_info))
    task = str(dump.get("task", ""))
    forwards: Dict[str, Tuple[str, str, Mapping[str, Any]]] = {}
    backwards: Dict[str, Mapping[str, Any]] = {}
    has_tensors = False
    for dotted, entry in dump["data"].items():
        parsed = split_name(dotted)
        if parsed is None or not isinstance(entry, dict):
            continue  # module entries (L0/mix) and anything else that is not an API call
        prefix, api, counter, direction = parsed
        full_name = "{}.{}.{}".format(prefix, api, counter)
        has_tensors = has_tensors or _names_a_file(entry)
        if direction == "forward":
            forwards[full_name] = (prefix, api, entry)
        else:
            backwards[full_name] = entry
    if not forwards:
        raise FileFormatError("The dump file {} holds no forward API call (a level L0 dump of modules only, or "
                              "an empty dump?); the pre-check needs a level L1 (or mix) dump.".format(api_info))
    data_dir = _data_dir(api_info, dump) if has_tensors else None
    stacks = _stacks(os.path.join(os.path.dirname(os.path.abspath(api_info)), "stack.json"))
    calls = [ApiCall(full_name, prefix, api, entry, backwards.get(full_name),
                     stacks.get(full_name + ".forward", ()))
             for full_name, (prefix, api, entry) in forwards.items()]
    return Dump(api_info, task, data_dir, calls, has_tensors)


def _looks_like_pkl(path: str) -> bool:
    """A legacy pkl is JSON lines starting with ``[``: detected before a JSON parse error hides why."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(64).lstrip()
    except OSError:
        return False
    return head.startswith(b"[")


def _names_a_file(value: Any) -> bool:
    if isinstance(value, dict):
        if value.get("type") in TENSOR_TYPES:
            return value.get("data_name") not in (None, "")
        return any(_names_a_file(item) for item in value.values())
    if isinstance(value, list):
        return any(_names_a_file(item) for item in value)
    return False


def _data_dir(api_info: str, dump: Mapping[str, Any]) -> str:
    """``dump_tensor_data`` beside the dump.json (a moved or copied dump), else the recorded
    ``dump_data_dir``; FileFormatError when neither exists."""
    beside = os.path.join(os.path.dirname(os.path.abspath(api_info)), DATA_DIR_NAME)
    if os.path.isdir(beside):
        return beside
    recorded = dump.get("dump_data_dir")
    if isinstance(recorded, str) and recorded and os.path.isdir(recorded):
        return os.path.abspath(recorded)
    raise FileFormatError("The dump file {} names tensor files, but their directory is missing: neither {} nor "
                          "dump_data_dir={!r} exists. Copy dump_tensor_data/ beside the dump.json (or run with "
                          "random data: --random-data).".format(api_info, beside, recorded))


def _stacks(path: str) -> Dict[str, Tuple[Frame, ...]]:
    if not os.path.isfile(path):
        return {}
    from ptdbg_ascend.comparison.readers.msprobe_json import read_stacks

    try:
        return read_stacks(path)
    except FileFormatError:
        return {}  # stack.json only adds the code line to the summary: a torn one does not stop the run


# --- rebuilding values ------------------------------------------------------------------------------------

class Source(object):
    """Where tensor values come from: the dump's files (``data_dir``), or random data (``seed`` given).

    ``random`` generation is seeded per tensor from ``seed`` and the tensor's dump-path (call name and
    argument position), so it does not depend on which other calls are run."""

    def __init__(self, data_dir: Optional[str], seed: Optional[int] = None) -> None:
        self.data_dir = data_dir
        self.seed = seed

    @property
    def random(self) -> bool:
        return self.seed is not None

    def tensor(self, leaf: Mapping[str, Any], where: str) -> Any:
        if self.random:
            return random_tensor(leaf, self.seed, where)
        return load_tensor(leaf, self.data_dir, where)


def load_tensor(leaf: Mapping[str, Any], data_dir: Optional[str], where: str) -> Any:
    """The tensor a dump.json leaf names (CPU, its dumped dtype). MissingInput when the leaf names no
    file, the file is missing, outside ``data_dir``, or holds anything but one tensor."""
    import torch

    from ptdbg_ascend.comparison.metrics import open_inside

    data_name = leaf.get("data_name")
    if data_name in (None, "") or data_dir is None:
        raise MissingInput("{}: the dump holds no data for this tensor (a statistics dump? use random data)"
                           .format(where))
    problem = file_name_problem(data_name)
    if problem:
        raise MissingInput("{}: {}".format(where, problem))
    path = os.path.join(data_dir, data_name)
    try:
        with open_inside(path, data_dir) as handle:
            tensor = torch.load(handle, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise MissingInput("{}: the tensor file {} is missing from the dump".format(where, path)) from None
    except (OSError, ValueError, RuntimeError, EOFError, pickle.UnpicklingError) as error:
        raise MissingInput("{}: the tensor file {} cannot be read safely: {}".format(where, path, error)) from None
    if not isinstance(tensor, torch.Tensor):
        raise MissingInput("{}: the file {} does not hold a tensor".format(where, path))
    return tensor


def _dtype(name: Any) -> Any:
    import torch

    value = getattr(torch, str(name).replace("torch.", "", 1), None) if isinstance(name, str) else None
    return value if isinstance(value, torch.dtype) else None


def random_tensor(leaf: Mapping[str, Any], seed: int, where: str) -> Any:
    """A tensor with the leaf's shape and dtype, uniformly within [Min, Max] (the first element is Min and
    the last Max, so the range is reached exactly); bool from Max (any) / Min (all). Seeded by ``seed``
    and ``where``. Non-finite Max/Min use ``Max_except_inf_nan``/``Min_except_inf_nan``."""
    import torch

    dtype = _dtype(leaf.get("dtype"))
    shape = leaf.get("shape")
    if dtype is None or not isinstance(shape, list) or not all(isinstance(n, int) and n >= 0 for n in shape):
        raise MissingInput("{}: cannot generate a tensor of dtype {!r} and shape {!r}".format(
            where, leaf.get("dtype"), shape))
    generator = torch.Generator().manual_seed((int(seed) * 1000003 + zlib.crc32(where.encode("utf-8"))) % (2 ** 63))
    numel = 1
    for n in shape:
        numel *= n
    if numel == 0:
        return torch.empty(shape, dtype=dtype)
    low, high = _bound(leaf, "Min"), _bound(leaf, "Max")
    if dtype == torch.bool:
        if low is None or high is None:
            raise MissingInput("{}: a bool tensor without recorded Max/Min cannot be generated".format(where))
        if low:  # all True
            return torch.ones(shape, dtype=torch.bool)
        if not high:  # none True
            return torch.zeros(shape, dtype=torch.bool)
        flat = torch.randint(0, 2, (numel,), generator=generator).bool()
        flat[0], flat[-1] = False, True
        return flat.reshape(shape)
    if low is None or high is None or not (math.isfinite(low) and math.isfinite(high)):
        raise MissingInput("{}: no finite Max/Min recorded ({!r}, {!r}); random data cannot be generated".format(
            where, leaf.get("Max"), leaf.get("Min")))
    if low > high:
        low, high = high, low
    if dtype.is_complex:
        raise MissingInput("{}: random complex tensors are not generated".format(where))
    if dtype.is_floating_point:
        flat = torch.rand((numel,), generator=generator, dtype=torch.float64) * (high - low) + low
        flat[0], flat[-1] = low, high
        return flat.to(dtype).reshape(shape)
    flat = torch.randint(int(math.ceil(low)), int(math.floor(high)) + 1, (numel,), generator=generator,
                         dtype=torch.int64)
    flat[0], flat[-1] = int(math.ceil(low)), int(math.floor(high))
    return flat.to(dtype).reshape(shape)


def _bound(leaf: Mapping[str, Any], key: str) -> Optional[float]:
    value = leaf.get(key)
    if isinstance(value, (int, float)) and not (isinstance(value, float) and not math.isfinite(value)):
        return float(value)
    value = leaf.get(key + "_except_inf_nan")
    if isinstance(value, (int, float)) and math.isfinite(float(value)):
        return float(value)
    if isinstance(leaf.get(key), (int, float)):
        return float(leaf[key])
    return None


def rebuild(value: Any, source: Source, where: str, key: Optional[str] = None) -> Any:
    """The Python value of one recorded argument (tensors as CPU tensors in the dumped dtype with
    ``requires_grad`` as recorded). ``where`` names the argument in messages and seeds random data;
    ``key`` is the keyword the value was passed under (``device`` / ``dtype`` leaves)."""
    if value is None:
        return None
    if isinstance(value, list):
        return [rebuild(item, source, "{}.{}".format(where, index)) for index, item in enumerate(value)]
    if not isinstance(value, dict):
        raise MissingInput("{}: unexpected record {!r}".format(where, value))
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
        return {name: rebuild(item, source, "{}.{}".format(where, name), key=name) for name, item in value.items()}
    recorded = value.get("value")
    if kind in ("bool", "int", "float", "str"):
        return recorded
    if kind == "slice" and isinstance(recorded, list) and len(recorded) == 3:
        return slice(*recorded)
    if kind == "ellipsis":
        return Ellipsis
    if kind == "torch.Size" and isinstance(recorded, list):
        import torch

        return torch.Size(recorded)
    if kind == "torch.dtype":
        dtype = _dtype(recorded)
        if dtype is None:
            raise MissingInput("{}: unknown dtype {!r}".format(where, recorded))
        return dtype
    if kind == "torch.device":
        return DeviceArg(recorded)
    import numpy as np

    try:
        numpy_type = np.dtype(kind).type
    except TypeError:
        numpy_type = None
    if numpy_type is not None and not isinstance(recorded, (dict, list)):
        return numpy_type(recorded)
    raise MissingInput("{}: values of type {!r} are not rebuilt".format(where, kind))


def forward_inputs(call: ApiCall, source: Source) -> Tuple[List[Any], Dict[str, Any]]:
    """``(args, kwargs)`` of the call's forward entry (MissingInput when one cannot be rebuilt)."""
    entry = call.forward
    args = entry.get("input_args", [])
    kwargs = entry.get("input_kwargs", {})
    if "input_args" not in entry and "input_kwargs" not in entry:
        raise MissingInput("{}: the dump holds no inputs of this call (data_mode without \"input\"?)".format(
            call.full_name))
    if not isinstance(args, list) or not isinstance(kwargs, dict):
        raise MissingInput("{}: input_args/input_kwargs are not a list/object".format(call.full_name))
    base = call.full_name + ".forward"
    rebuilt_args = [rebuild(item, source, "{}.input.{}".format(base, index)) for index, item in enumerate(args)]
    rebuilt_kwargs = {name: rebuild(item, source, "{}.input.{}".format(base, name), key=name)
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
    _flatten_records(values, source, where, flat)
    return flat


def _flatten_records(value: Any, source: Source, where: str, out: List[Any]) -> None:
    if isinstance(value, list):
        for index, item in enumerate(value):
            _flatten_records(item, source, "{}.{}".format(where, index), out)
        return
    if value is None or value == {}:
        out.append(None)
        return
    if isinstance(value, dict) and value.get("type") in TENSOR_TYPES:
        out.append(source.tensor(value, where))
        return
    try:
        out.append(rebuild(value, source, where))
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
