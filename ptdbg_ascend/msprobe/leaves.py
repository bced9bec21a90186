"""Values -> dump.json leaves, exactly as msprobe 1.0.4 writes them (``reference/msprobe_1_0_4.md`` §6.2-6.3).

A tensor leaf's key order is ``type, dtype, shape, Max, Min, Mean, Norm, requires_grad`` then, when
present, ``Max_except_inf_nan, Min_except_inf_nan, md5, data_name``. Non-tensor values become
``{"type", "value"}``; containers are recursed; what cannot be represented is ``null`` (with a warning
once per type).
"""

from __future__ import annotations

import math
import zlib
from typing import Any, Callable, Dict, List, Optional, Set

from ptdbg_ascend import numpy_view
from ptdbg_ascend.dump import tensor_kinds
from ptdbg_ascend.dump.statistics import small_float32_statistics, tensor_statistics
from ptdbg_ascend.dump.tensor_kinds import transforms_active
from ptdbg_ascend.formats.dump_json import NOT_SAVED
from ptdbg_ascend.log import logger

# save(data_name_without_suffix, tensor) -> the data_name written in the leaf, or None (not saved)
SaveTensor = Callable[[str, Any], Optional[str]]

_WARNED_TYPES = set()  # type: Set[str]  # "not supported" is logged once per type, not once per call
_MEMORY_FORMAT = "<class 'torch.memory_format'>"  # recorded as null on purpose: said once, at INFO
_DTYPE_TEXT = {}  # type: Dict[Any, str]  # str(dtype), made once per dtype (a leaf per recorded tensor)


def tensor_statistics_msprobe(tensor: Any) -> List[Optional[float]]:
    """``[Max, Min, Mean, Norm]`` with msprobe's rules: meta/empty -> nulls; bool -> any, all, null,
    null; 0-d -> the value four times; complex -> max/min/mean of |x|, Norm null; int and float64 are
    reduced in float32; other floats as they are (fp16/bf16 accumulated in float32)."""
    # The common case first (small float32 CPU tensors: the same numbers the path below computes).
    small = small_float32_statistics(tensor)
    if small is not None:
        return small
    import torch

    data = tensor.detach()
    if data.device.type == "meta" or data.numel() == 0:
        return [None, None, None, None]
    if data.dtype == torch.bool:
        return [bool(data.any().item()), bool(data.all().item()), None, None]
    if data.is_complex():
        if data.dtype == torch.complex32:
            data = data.to(torch.complex64)  # abs() of complex32 would round the magnitude to float16
        magnitude = data.abs()
        if magnitude.dim() == 0:
            value = float(magnitude.item())
            return [value, value, value, value]
        return [float(magnitude.max().item()), float(magnitude.min().item()), float(magnitude.mean().item()), None]
    if data.dim() == 0:
        value = float(data.item())
        return [value, value, value, value]
    return tensor_statistics(msprobe_reduced(data))


def _finite_extremes(tensor: Any) -> List[float]:
    """Max and min over the finite elements; over the non-NaN ones if none is finite; NaN if all are NaN."""
    import torch

    data = tensor.detach()
    if not data.is_floating_point():
        data = data.float()
    finite = data[torch.isfinite(data)]
    if finite.numel() == 0:
        finite = data[~torch.isnan(data)]
    if finite.numel() == 0:
        return [float("nan"), float("nan")]
    return [float(finite.max().item()), float(finite.min().item())]


def dtype_text(dtype: Any) -> str:
    """``str(dtype)``, made once per dtype (a leaf per recorded tensor needs it)."""
    text = _DTYPE_TEXT.get(dtype)
    if text is None:
        text = _DTYPE_TEXT[dtype] = str(dtype)
    return text


def crc32_hex(tensor: Any) -> str:
    """msprobe's "md5" summary: CRC-32 of the raw bytes (bf16 as float32), 8 lowercase hex digits."""
    array = numpy_view.tensor_to_numpy(tensor)  # bf16, float8, complex32 widened (numpy has no such types)
    return "{:08x}".format(zlib.crc32(array.tobytes()) & 0xFFFFFFFF)


# ``defer(leaf, tensor)``: the writer's hook for statistics read back in batches (sinks/msprobe/json_writer).
DeferLeaf = Callable[[Dict[str, Any], Any], bool]


def tensor_leaf(tensor: Any, data_name: Optional[str] = None, md5: bool = False,
                defer: Optional[DeferLeaf] = None, defer_cpu: bool = False,
                statistics_of: Optional[Callable[[Any], List[Optional[float]]]] = None) -> Dict[str, Any]:
    """The dump.json leaf of one tensor (statistics computed here; ``data_name`` when it was saved).
    ``defer`` (default None) may take over the statistics of a tensor that is not on the CPU (or of a
    CPU one too with ``defer_cpu``, default False), and of any tensor whose file was just queued (the
    writer may compute them from the copy it saves): it then fills Max/Min/Mean/Norm (and the
    ``*_except_inf_nan`` keys) later. ``statistics_of`` (default None: :func:`tensor_statistics_msprobe`)
    gives the statistics of a tensor not deferred (the sink's cache)."""
    leaf = blank_leaf(dtype_text(tensor.dtype), list(tensor.shape), bool(tensor.requires_grad))
    offered = defer is not None and (data_name is not None or defer_candidate(tensor, defer_cpu))
    if not (offered and defer(leaf, tensor)):
        fill_statistics(leaf, eager_statistics(tensor, statistics_of))
    if md5 and tensor.device.type != "meta":
        leaf["md5"] = crc32_hex(tensor)
    if data_name is not None:
        leaf["data_name"] = data_name
    return leaf


class TensorNotSaved(Exception):
    """Raised by a ``save`` callback of :func:`value_leaf` that could not save the tensor (no memory for its
    copy): the leaf is written without a ``data_name``, with ``reason`` under ``NOT_SAVED``."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _not_saved_leaf(tensor: Any, reason: str, md5: bool,
                    statistics_of: Optional[Callable[[Any], List[Optional[float]]]]) -> Dict[str, Any]:
    """The leaf of a tensor whose file was not saved: its statistics read now (null when they cannot be) and why."""
    try:
        leaf = tensor_leaf(tensor, None, md5, statistics_of=statistics_of)
    except Exception:  # noqa: BLE001 - out of memory again: the leaf keeps what is known without values
        leaf = blank_leaf(dtype_text(tensor.dtype), list(tensor.shape), bool(tensor.requires_grad))
    leaf[NOT_SAVED] = reason
    return leaf


def blank_leaf(dtype: str, shape: List[int], requires_grad: bool) -> Dict[str, Any]:
    """A tensor leaf with its statistics still null, keys in dump.json's order (:func:`fill_statistics` fills
    them)."""
    return {"type": "torch.Tensor", "dtype": dtype, "shape": shape, "Max": None, "Min": None, "Mean": None,
            "Norm": None, "requires_grad": requires_grad}


def eager_statistics(tensor: Any, statistics_of: Optional[Callable[[Any], List[Optional[float]]]] = None
                     ) -> List[Optional[float]]:
    """A leaf's numbers read now, for :func:`fill_statistics`: Max, Min, Mean, Norm (by ``statistics_of``,
    default :func:`tensor_statistics_msprobe`) and, when Max or Min is not finite, msprobe's
    ``Max_except_inf_nan`` and ``Min_except_inf_nan`` after them."""
    statistics = (statistics_of or tensor_statistics_msprobe)(tensor)
    if _not_finite(statistics[0]) or _not_finite(statistics[1]):
        return list(statistics[:4]) + _finite_extremes(tensor)
    return statistics


def defer_candidate(tensor: Any, on_cpu: bool = False) -> bool:
    """Whether msprobe's statistics of ``tensor`` can be read back in a batch: a tensor with values off
    the CPU (``on_cpu``, default False: on it too) taking the float or 0-d path of
    :func:`tensor_statistics_msprobe` (not bool, complex or empty)."""
    if tensor.is_cpu and not on_cpu:
        return False
    return not (tensor.is_meta or tensor.numel() == 0 or tensor.is_complex() or str(tensor.dtype) == "torch.bool")


def deferred_reductions(tensor: Any) -> List[Any]:
    """Besides the four statistics, what a deferred leaf may need once its values are known, as 0-d
    tensors on the device: a pair from which :func:`fill_statistics` reads msprobe's ``*_except_inf_nan``
    (:func:`_finite_extremes`' rule). Called with the data in the dtype :func:`tensor_statistics_msprobe`
    reduces (float32 for ints and float64; a 0-d value in its own dtype, which is its own max and min: the
    two mapped values, no reduction).

    The pair is the max with NaN and -inf as -inf and +inf as the dtype's lowest finite value, and the min
    with NaN and +inf as +inf and -inf as the highest finite value. With a finite element, those stand-ins
    never pass it: the pair is the finite max and min (max >= min). With none, the max is at most the
    lowest finite value and the min at least the highest (max < min), and a finite stand-in in the pair
    says an infinity of that sign is there: what the non-NaN extremes need (:func:`_except_inf_nan`).

    Four kernels (two ``nan_to_num`` and two reductions), launched for every deferred float tensor because
    whether they are needed is known only when the batch is read back: on an accelerator each launch costs
    the training thread microseconds (six before the fifth round of issue 20, eleven launches and six
    full-size temporaries before the first)."""
    inf = float("inf")
    largest = _finfo_max(tensor.dtype)
    finite_max = tensor.nan_to_num(nan=-inf, posinf=-largest, neginf=-inf)
    finite_min = tensor.nan_to_num(nan=inf, posinf=inf, neginf=largest)
    if tensor.dim() == 0:  # a 0-d value is its own max and min: two launches fewer
        return [finite_max, finite_min]
    return [finite_max.amax(), finite_min.amin()]


_FINFO_MAX = {}  # type: Dict[Any, float]


def _finfo_max(dtype: Any) -> float:
    """The largest finite value of a float dtype, looked up once per dtype."""
    largest = _FINFO_MAX.get(dtype)
    if largest is None:
        import torch

        largest = _FINFO_MAX[dtype] = float(torch.finfo(dtype).max)
    return largest


def _except_inf_nan(high: float, low: float) -> List[float]:
    """msprobe's ``[Max_except_inf_nan, Min_except_inf_nan]`` from the pair :func:`deferred_reductions`
    read back, or from :func:`_finite_extremes` (returned as they are: their max is never below their min)."""
    if not high < low:  # a finite element (its extremes), or the eager path's values, or NaN
        return [high, low]
    # No finite element: over the non-NaN ones, all infinite (NaN when every element is NaN). A finite
    # stand-in says an infinity of that sign is there.
    inf, nan = float("inf"), float("nan")
    positive, negative = math.isfinite(high), math.isfinite(low)
    return [inf if positive else -inf if negative else nan, -inf if negative else inf if positive else nan]


def msprobe_reduced(tensor: Any) -> Any:
    """The data :func:`tensor_statistics_msprobe` reduces for a float-path tensor: ints and float64 as
    float32 (1.0.4's rule), other floats as they are."""
    data = tensor.detach()
    if not data.is_floating_point() or str(data.dtype) == "torch.float64":
        data = data.float()
    return data


def fill_statistics(leaf: Dict[str, Any], numbers: List[Any]) -> None:
    """Put a leaf's statistics into it: ``numbers`` are Max, Min, Mean, Norm, then nothing, or a pair:
    msprobe's ``Max_except_inf_nan`` and ``Min_except_inf_nan`` themselves (:func:`eager_statistics`) or
    the pair of :func:`deferred_reductions` read back. A non-finite Max or Min adds the
    ``*_except_inf_nan`` keys right after ``requires_grad`` (before ``md5`` and ``data_name``)."""
    leaf["Max"], leaf["Min"], leaf["Mean"], leaf["Norm"] = numbers[:4]
    if len(numbers) < 6 or not (_not_finite(numbers[0]) or _not_finite(numbers[1])):
        return
    extremes = _except_inf_nan(numbers[4], numbers[5])
    tail = [(key, leaf.pop(key)) for key in ("md5", "data_name") if key in leaf]
    leaf["Max_except_inf_nan"], leaf["Min_except_inf_nan"] = extremes
    leaf.update(tail)


def _ordinary(tensor: Any, torch: Any) -> bool:
    """A dense strided tensor with values (``tensor_kinds.py`` for the others)."""
    return (tensor.layout == torch.strided and not tensor.is_nested and not tensor.is_quantized
            and (type(tensor) is torch.Tensor or type(tensor) is torch.nn.Parameter))


def special_tensor_leaf(tensor: Any, path: str, save: Optional[SaveTensor], md5: bool = False) -> Dict[str, Any]:
    """The leaf of a tensor of a special kind (``dump/tensor_kinds.py``): ``dtype`` and ``requires_grad``
    are the tensor's own; shape, statistics and the ``.pt`` file those of the values its record holds (a
    vmap batch with its batch dims first, the dense values of a sparse tensor...), and ``tensor_kind``
    names the kind. Without values (meta, fake...): null statistics and no file. Never raises."""
    kind = "plain"
    leaf = None  # type: Optional[Dict[str, Any]]
    try:
        with tensor_kinds.reading_values():
            plain, kind = tensor_kinds.plain_values(tensor)
            if plain is not None:
                data_name = save(path, plain) if save is not None else None
                leaf = tensor_leaf(plain, data_name, md5)
    except Exception as error:  # noqa: BLE001 - a dump must never stop training
        tensor_kinds.warn_once("leaf:" + kind, "A {} tensor ({}) cannot be read ({}: {}); its leaves hold null "
                               "statistics and no file.".format(kind, tensor.dtype, type(error).__name__, error))
    if leaf is None:
        leaf = {"type": "torch.Tensor", "dtype": "", "shape": tensor_kinds.shape_of(tensor),
                "Max": None, "Min": None, "Mean": None, "Norm": None, "requires_grad": False}
    leaf["dtype"] = str(tensor.dtype)
    try:
        leaf["requires_grad"] = bool(tensor.requires_grad)
    except Exception:  # noqa: BLE001
        pass
    if kind != "plain":
        leaf["tensor_kind"] = kind
    return leaf


def _not_finite(value: Any) -> bool:
    return isinstance(value, float) and (math.isinf(value) or math.isnan(value))


def value_leaf(value: Any, path: str, save: Optional[SaveTensor], md5: bool = False, key: Optional[str] = None,
               defer: Optional[DeferLeaf] = None, defer_cpu: bool = False,
               statistics_of: Optional[Callable[[Any], List[Optional[float]]]] = None) -> Any:
    """The dump.json form of ``value``; ``path`` is its file stem (``{call}.input.0``), extended with
    ``.{i}``/``.{key}`` for nested items. ``save`` writes a tensor and returns its data_name (None:
    statistics only). ``key`` is the enclosing dict key (``device``/``dtype`` values are typed by it).
    ``defer``, ``defer_cpu``, ``statistics_of``: see :func:`tensor_leaf` (default None: statistics read at
    once, by :func:`tensor_statistics_msprobe`)."""
    import numpy
    import torch

    if isinstance(value, torch.Tensor):
        if transforms_active() or not _ordinary(value, torch):
            return special_tensor_leaf(value, path, save, md5)
        try:
            data_name = save(path, value) if save is not None else None
            return tensor_leaf(value, data_name, md5, defer, defer_cpu, statistics_of)
        except TensorNotSaved as error:
            return _not_saved_leaf(value, error.reason, md5, statistics_of)
        except (RuntimeError, TypeError, ValueError, NotImplementedError):  # a dtype without arithmetic...
            return special_tensor_leaf(value, path, save, md5)
    if key == "device" and isinstance(value, (torch.device, str)):
        return {"type": "torch.device", "value": str(value)}
    if key == "dtype" and isinstance(value, torch.dtype):
        return {"type": "torch.dtype", "value": str(value)}
    if isinstance(value, (torch.dtype, torch.device)):
        return {}
    if isinstance(value, torch.memory_format):
        # null, as msprobe 1.0.4 writes it: its run_ut passes a recorded kwarg's "value" to the API as is (a
        # string there is a TypeError) and None is torch's default. Autograd's ones_like passes one on every
        # backward, so this is said once, at INFO, naming where.
        if _MEMORY_FORMAT not in _WARNED_TYPES:
            _WARNED_TYPES.add(_MEMORY_FORMAT)
            logger.info("memory_format arguments are recorded as null, as msprobe 1.0.4 does (first at {}).".format(
                path))
        return None
    if isinstance(value, bool):
        return {"type": "bool", "value": value}
    if isinstance(value, int):
        return {"type": "int", "value": value}
    if isinstance(value, float):
        return {"type": "float", "value": value}
    if isinstance(value, str):
        return {"type": "str", "value": value}
    if isinstance(value, slice):
        return {"type": "slice", "value": [value.start, value.stop, value.step]}
    if value is Ellipsis:
        return {"type": "ellipsis", "value": "..."}
    if isinstance(value, torch.Size):
        return {"type": "torch.Size", "value": list(value)}
    if isinstance(value, numpy.generic):
        return {"type": type(value).__name__, "value": value.item()}
    if value is None:
        return None
    if isinstance(value, (list, tuple)):
        return [value_leaf(item, "{}.{}".format(path, index), save, md5, defer=defer, defer_cpu=defer_cpu,
                           statistics_of=statistics_of)
                for index, item in enumerate(value)]
    if isinstance(value, dict):
        return {str(name): value_leaf(item, "{}.{}".format(path, name), save, md5, key=str(name), defer=defer,
                                      defer_cpu=defer_cpu, statistics_of=statistics_of)
                for name, item in value.items()}
    type_name = str(type(value))
    if type_name not in _WARNED_TYPES:
        _WARNED_TYPES.add(type_name)
        logger.warning("Data type {} is not supported (first seen at {}); such values are recorded as null."
                       .format(type_name, path))
    return None
