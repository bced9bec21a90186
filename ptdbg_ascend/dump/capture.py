"""Turn an API call's arguments, output or gradients into legacy records.

A record is ``(name, value)`` where ``value`` is a torch tensor or a Python bool/int/float. Names follow
the legacy grammar (``naming.py``): ``{call}_input.{i}[.{j}...]``, ``{call}_output`` for a single
tensor, ``{call}_output.{i}[...]`` for a tuple/list. Tensor keyword arguments come after the
positional ones and continue their numbering.
"""

from __future__ import annotations

from typing import Any, Dict, Iterator, List, Sequence, Tuple

Record = Tuple[str, Any]

_SKIPPED_TYPES = (str, bytes, type(None), slice, type(Ellipsis), dict)


def keep_value(value: Any, filter_switch: bool) -> bool:
    """Whether a leaf is recorded. ``filter_switch=True`` (the "ON" default) drops bool/int tensors,
    0-d and empty tensors and Python scalars; False keeps every tensor and scalar."""
    import torch

    if isinstance(value, torch.Tensor):
        if value.device.type == "meta":
            return False
        if not filter_switch:
            return True
        return value.dim() > 0 and value.numel() > 0 and (value.is_floating_point() or value.is_complex())
    if isinstance(value, (bool, int, float)):
        return not filter_switch
    return False


def _leaves(value: Any, suffix: str) -> Iterator[Record]:
    """Depth-first leaves of lists/tuples (torch.Size and namedtuples included). An element that is not
    recorded (None, str, dtype, an empty list...) still consumes its index, as in the original."""
    import torch

    if isinstance(value, torch.Tensor) or isinstance(value, (bool, int, float)):
        yield suffix, value
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            for leaf in _leaves(item, "{}.{}".format(suffix, index)):
                yield leaf


def input_records(call_name: str, args: Sequence[Any], kwargs: Dict[str, Any], filter_switch: bool) -> List[Record]:
    """``{call_name}_input.{i}...`` records of positional then keyword arguments."""
    records = []  # type: List[Record]
    values = list(args) + [value for value in kwargs.values() if _has_tensor(value)]
    for index, value in enumerate(values):
        for suffix, leaf in _leaves(value, "_input.{}".format(index)):
            if keep_value(leaf, filter_switch):
                records.append((call_name + suffix, leaf))
    return records


def output_records(call_name: str, output: Any, filter_switch: bool) -> List[Record]:
    """``{call_name}_output`` for a single value, ``{call_name}_output.{i}...`` for a list/tuple."""
    return [(call_name + suffix, leaf) for suffix, leaf in _leaves(output, "_output") if keep_value(leaf, filter_switch)]


def gradient_records(call_name: str, side: str, gradients: Sequence[Any], filter_switch: bool) -> List[Record]:
    """``{call_name}_{side}.{i}`` for each gradient that is not None (None leaves an index gap)."""
    records = []  # type: List[Record]
    for index, gradient in enumerate(gradients):
        if gradient is not None and keep_value(gradient, filter_switch):
            records.append(("{}_{}.{}".format(call_name, side, index), gradient))
    return records


def collective_outputs(args: Sequence[Any], kwargs: Dict[str, Any]) -> List[Any]:
    """What a collective (``all_reduce``...) writes: its positional arguments and tensor keyword
    arguments, recorded after the call as its outputs."""
    return list(args) + [value for value in kwargs.values() if hasattr(value, "_version")]


def _has_tensor(value: Any) -> bool:
    import torch

    if isinstance(value, torch.Tensor):
        return True
    if isinstance(value, (list, tuple)):
        return any(_has_tensor(item) for item in value)
    return False


def tensors_in(value: Any) -> List[Any]:
    """Every tensor in ``value`` (lists/tuples/dict values, depth first), in argument order."""
    import torch

    found = []  # type: List[Any]
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, torch.Tensor):
            found.append(item)
        elif isinstance(item, (list, tuple)):
            stack.extend(reversed(item))
        elif isinstance(item, dict):
            stack.extend(reversed(list(item.values())))
    return found
