"""Turn an API call's arguments, output or gradients into legacy records.

A record is ``(name, value)`` where ``value`` is a torch tensor or a Python bool/int/float. Names follow
the legacy grammar (``formats/naming.py``): ``{call}_input.{i}[.{j}...]``, ``{call}_output`` for a single
tensor, ``{call}_output.{i}[...]`` for a tuple/list. Tensor keyword arguments come after the
positional ones and continue their numbering.
"""

from __future__ import annotations

from typing import Any, Dict, List, Sequence, Tuple

import torch

Record = Tuple[str, Any]

_Tensor = torch.Tensor
_SCALARS = (bool, int, float)
_SEQUENCES = (list, tuple)


def keep_value(value: Any, filter_switch: bool) -> bool:
    """Whether a leaf is recorded. ``filter_switch=True`` (the "ON" default) drops bool/int tensors,
    0-d and empty tensors and Python scalars; False keeps every tensor and scalar."""
    if isinstance(value, _Tensor):
        return _keep_tensor(value, filter_switch)
    if isinstance(value, _SCALARS):
        return not filter_switch
    return False


def _keep_tensor(tensor: Any, filter_switch: bool) -> bool:
    if filter_switch:
        # Cheapest test first: most filtered-out tensors are integer indices or 0-d step counters.
        if not (tensor.is_floating_point() or tensor.is_complex()) or tensor.dim() == 0 or tensor.numel() == 0:
            return False
    return not tensor.is_meta


def _collect(value: Any, name: str, filter_switch: bool, out: List[Record]) -> None:
    """Append the kept leaves of ``value`` (lists/tuples depth first, torch.Size and namedtuples
    included) as ``(name[.i...], leaf)``. An element that is not recorded (None, str, dtype, an empty
    list...) still consumes its index, as in the original."""
    if isinstance(value, _Tensor):
        if _keep_tensor(value, filter_switch):
            out.append((name, value))
    elif isinstance(value, _SCALARS):
        if not filter_switch:
            out.append((name, value))
    elif isinstance(value, _SEQUENCES):
        prefix = name + "."
        for index, item in enumerate(value):
            _collect(item, prefix + str(index), filter_switch, out)


def input_records(call_name: str, args: Sequence[Any], kwargs: Dict[str, Any], filter_switch: bool) -> List[Record]:
    """``{call_name}_input.{i}...`` records of positional then keyword arguments (tensor keyword
    arguments continue the positional numbering)."""
    records: List[Record] = []
    prefix = call_name + "_input."
    index = 0
    for index, value in enumerate(args):
        _collect(value, prefix + str(index), filter_switch, records)
    if kwargs:
        index = len(args)
        for value in kwargs.values():
            if _has_tensor(value):
                _collect(value, prefix + str(index), filter_switch, records)
                index += 1
    return records


def output_records(call_name: str, output: Any, filter_switch: bool) -> List[Record]:
    """``{call_name}_output`` for a single value, ``{call_name}_output.{i}...`` for a list/tuple."""
    records: List[Record] = []
    _collect(output, call_name + "_output", filter_switch, records)
    return records


def gradient_records(call_name: str, side: str, gradients: Sequence[Any], filter_switch: bool) -> List[Record]:
    """``{call_name}_{side}.{i}`` for each gradient that is not None (None leaves an index gap)."""
    records: List[Record] = []
    prefix = f"{call_name}_{side}."
    for index, gradient in enumerate(gradients):
        if gradient is not None and keep_value(gradient, filter_switch):
            records.append((prefix + str(index), gradient))
    return records


def collective_outputs(args: Sequence[Any], kwargs: Dict[str, Any]) -> List[Any]:
    """What a collective (``all_reduce``...) writes: its positional arguments and tensor keyword
    arguments, recorded after the call as its outputs."""
    return list(args) + [value for value in kwargs.values() if hasattr(value, "_version")]


# The positional arguments a fused optimizer step writes (its schema: params, grads, then the states), by API.
_FUSED_WRITES = {
    "_fused_adam_": (0, 2, 3, 4),  # params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps
    "_fused_adamw_": (0, 2, 3, 4),
    "_fused_sgd_": (0, 2),  # params, grads, momentum_buffer_list
    "_fused_adagrad_": (0, 2),  # params, grads, state_sums, state_steps
}


def written_arguments(api: str, args: Sequence[Any]) -> Any:
    """What an in-place ``torch._foreach_*_`` or ``torch._fused_*_`` call (they return None) wrote, recorded as
    its outputs: a foreach call's first argument (the list it updates, so ``_output.{j}`` is the new value of
    ``_input.0.{j}``), a fused step's written arguments at their own positions (``_output.{i}.{j}`` is the new
    value of ``_input.{i}.{j}``; the arguments it only reads are None, which keeps the positions). None for any
    other API, whose None output stays unrecorded as before."""
    if api.startswith("_foreach_"):
        return args[0] if args else None
    written = _FUSED_WRITES.get(api)
    if written is None:
        return None
    return [args[index] if index in written else None for index in range(min(len(args), max(written) + 1))]


def _has_tensor(value: Any) -> bool:
    if isinstance(value, _Tensor):
        return True
    if isinstance(value, _SEQUENCES):
        return any(_has_tensor(item) for item in value)
    return False


_CONTAINERS = (list, tuple, dict)


def call_tensors(args: Sequence[Any], kwargs: Dict[str, Any]) -> List[Any]:
    """``tensors_in((args, kwargs))``, the common case first (every argument a tensor or a scalar): one loop,
    no stack. Runs for every call where autograd records."""
    found: List[Any] = []
    for item in args:
        if isinstance(item, _Tensor):
            found.append(item)
        elif isinstance(item, _CONTAINERS):
            return tensors_in((args, kwargs))
    if kwargs:
        for item in kwargs.values():
            if isinstance(item, _Tensor):
                found.append(item)
            elif isinstance(item, _CONTAINERS):
                return tensors_in((args, kwargs))
    return found


def tensors_in(value: Any) -> List[Any]:
    """Every tensor in ``value`` (lists/tuples/dict values, depth first), in argument order."""
    found: List[Any] = []
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, _Tensor):
            found.append(item)
        elif isinstance(item, _SEQUENCES):
            stack.extend(reversed(item))
        elif isinstance(item, dict):
            stack.extend(reversed(list(item.values())))
    return found
