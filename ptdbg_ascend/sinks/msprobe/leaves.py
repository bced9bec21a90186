"""Values -> dump.json leaves, exactly as msprobe 1.0.4 writes them (``reference/msprobe_1_0_4.md`` §6.2-6.3): the
leaf codec of the msprobe sink. The numbers in a tensor leaf are ``statistics/``'s (``msprobe_rules.py``); this
module puts them in their keys.

A tensor leaf's key order is ``type, dtype, shape, Max, Min, Mean, Norm, requires_grad`` then, when
present, ``Max_except_inf_nan, Min_except_inf_nan, md5, data_name``. Non-tensor values become
``{"type", "value"}``; containers are recursed; what cannot be represented is ``null`` (with a warning
once per type).
"""

from __future__ import annotations

import zlib
from typing import Any, Callable, Dict, List, Optional, Set

from ptdbg_ascend import numpy_view
from ptdbg_ascend import tensor_kinds
from ptdbg_ascend.tensor_kinds import transforms_active
from ptdbg_ascend.formats.dump_json import NOT_SAVED
from ptdbg_ascend.log import logger
from ptdbg_ascend.statistics.msprobe_rules import (defer_candidate, eager_statistics, extremes_except_inf_nan,
                                                   tensor_statistics_msprobe)

# save(data_name_without_suffix, tensor) -> the data_name written in the leaf, or None (not saved)
SaveTensor = Callable[[str, Any], Optional[str]]

_WARNED_TYPES = set()  # type: Set[str]  # "not supported" is logged once per type, not once per call
_MEMORY_FORMAT = "<class 'torch.memory_format'>"  # recorded as null on purpose: said once, at INFO
_DTYPE_TEXT = {}  # type: Dict[Any, str]  # str(dtype), made once per dtype (a leaf per recorded tensor)


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


def fill_statistics(leaf: Dict[str, Any], numbers: List[Any]) -> None:
    """Put a leaf's statistics into it: ``numbers`` are Max, Min, Mean, Norm, then nothing, or a pair
    (``msprobe_rules.extremes_except_inf_nan``). A non-finite Max or Min adds the ``*_except_inf_nan`` keys
    right after ``requires_grad`` (before ``md5`` and ``data_name``)."""
    leaf["Max"], leaf["Min"], leaf["Mean"], leaf["Norm"] = numbers[:4]
    extremes = extremes_except_inf_nan(numbers)
    if extremes is None:
        return
    tail = [(key, leaf.pop(key)) for key in ("md5", "data_name") if key in leaf]
    leaf["Max_except_inf_nan"], leaf["Min_except_inf_nan"] = extremes
    leaf.update(tail)


def _ordinary(tensor: Any, torch: Any) -> bool:
    """A dense strided tensor with values (``tensor_kinds.py`` for the others)."""
    return (tensor.layout == torch.strided and not tensor.is_nested and not tensor.is_quantized
            and (type(tensor) is torch.Tensor or type(tensor) is torch.nn.Parameter))


def special_tensor_leaf(tensor: Any, path: str, save: Optional[SaveTensor], md5: bool = False) -> Dict[str, Any]:
    """The leaf of a tensor of a special kind (``tensor_kinds.py``): ``dtype`` and ``requires_grad``
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
