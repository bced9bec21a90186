"""The memory one pre-checked call will take, known before it is loaded or run.

A 300-byte dump.json can declare an input of 2**31 elements; re-running it takes the input as loaded, its
float64 copy (the benchmark) and its copy in the dumped dtype (the device run), then both runs' outputs
and, with backward, the gradients. The runner checks the call against the budget twice:

1. :func:`input_bytes`, from the shapes and dtypes the dump records, before any tensor is read or
   generated (the reader then refuses a file whose tensor is not the one recorded);
2. :func:`output_bytes`, from the outputs of a dry run on torch's ``meta`` device (shapes and dtypes
   without memory), before the real runs. Where the meta device cannot run the API (its output size
   depends on the data: ``nonzero``, ``unique``, ``bincount``...), the output is bounded from the real
   inputs for the APIs whose bound is known (:data:`DATA_BOUNDS`), and otherwise taken as no larger
   than the inputs, provided no integer argument is larger than every input (integers are how a small
   call asks for a large output).

Not counted: memory an API uses inside itself (workspaces, autograd's saved tensors).
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional

from ptdbg_ascend.memory import format_size
from ptdbg_ascend.precheck import arguments
from ptdbg_ascend.precheck.arguments import MissingInput
from ptdbg_ascend.precheck.call_values import TENSOR_TYPES, recorded_size

FREE_INT = 2 ** 16  # integer arguments up to this size never count as asking for a large output


class OverBudget(MissingInput):
    """The call would take more memory than its budget (the message says how much and how to raise it)."""


def bench_itemsize(dtype: Any) -> int:
    """Bytes per element of the float64 benchmark's copy of a tensor of ``dtype``."""
    if dtype.is_complex:
        return 16
    if dtype.is_floating_point:
        return 8
    return dtype.itemsize


def _recorded_leaves(block: Any) -> Iterator[Mapping[str, Any]]:
    """The tensor leaves of a recorded block (walked without recursion; entries are depth-checked)."""
    stack = [block]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            if item.get("type") in TENSOR_TYPES:
                yield item
            else:
                stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def input_bytes(call: Any) -> int:
    """Bytes of the call's tensors before it runs: each recorded input (and output gradient, when the call
    has a backward) as loaded, as the float64 benchmark copy and as the dumped-dtype copy."""
    blocks = [(call.forward.get("input_args"), "input_args"), (call.forward.get("input_kwargs"), "input_kwargs")]
    if call.backward:
        blocks.append((call.backward.get("input"), "backward input"))
    total = 0
    for block, name in blocks:
        for leaf in _recorded_leaves(block):
            numel, dtype = recorded_size(leaf, f"{call.full_name} {name}")
            total += numel * (2 * dtype.itemsize + bench_itemsize(dtype))
    return total


def output_bytes(outputs: List[Any], backward: bool, input_tensors: List[Any]) -> int:
    """Bytes of both runs' outputs (the dumped-dtype run and the float64 benchmark) from the dry run's
    ``outputs``, plus, with ``backward``, the gradients of both runs w.r.t. ``input_tensors``."""
    import torch

    total = sum(t.numel() * (t.element_size() + bench_itemsize(t.dtype)) for t in outputs
                if isinstance(t, torch.Tensor))
    if backward:
        total += sum(t.numel() * (t.element_size() + bench_itemsize(t.dtype)) for t in input_tensors)
    return total


def _bincount(args: List[Any], kwargs: Dict[str, Any]) -> Optional[int]:
    import torch

    values = args[0] if args else kwargs.get("input")
    minlength = kwargs.get("minlength", args[2] if len(args) > 2 else 0)
    if not isinstance(values, torch.Tensor) or not arguments.is_int(minlength):
        return None
    largest = int(values.max()) + 1 if values.numel() else 0
    return max(largest, minlength) * 2 * 8  # int64 or float64 counts, both runs


def _repeat_interleave(args: List[Any], kwargs: Dict[str, Any]) -> Optional[int]:
    import torch

    values = args[0] if args else kwargs.get("input")
    repeats = args[1] if len(args) > 1 else kwargs.get("repeats")
    if not isinstance(values, torch.Tensor):
        return None
    if isinstance(repeats, torch.Tensor):
        count = int(repeats.sum()) if repeats.numel() else 0
        row = values.numel() // max(1, repeats.numel()) if repeats.numel() > 1 else values.numel()
    elif arguments.is_int(repeats):
        count, row = repeats, values.numel()
    else:
        return None
    return count * row * (values.element_size() + bench_itemsize(values.dtype))


# APIs whose output size depends on the data and may exceed their inputs': bytes from the real inputs.
DATA_BOUNDS: Dict[str, Callable[[List[Any], Dict[str, Any]], Optional[int]]] = {
    "bincount": _bincount,
    "repeat_interleave": _repeat_interleave,
}


def _ints(value: Any) -> Iterator[int]:
    stack = [value]
    while stack:
        item = stack.pop()
        if arguments.is_int(item):
            yield item
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
        elif isinstance(item, dict):
            stack.extend(item.values())


def unknown_output_bytes(call: Any, args: List[Any], kwargs: Dict[str, Any], input_tensors: List[Any]) -> int:
    """The output bytes of a call the meta device cannot run (see the module doc); OverBudget (with the
    reason) when an integer argument could ask for an output of any size."""
    bound = DATA_BOUNDS.get(call.api)
    if bound is not None:
        value = bound(args, kwargs)
        if value is not None:
            return value
    largest = max([t.numel() for t in input_tensors] + [FREE_INT])
    too_large = [n for n in _ints([args, kwargs]) if abs(n) > largest]
    if too_large:
        raise OverBudget("Its output size cannot be computed before running it (the meta device cannot run it) and "
                         "it takes an integer argument ({}) larger than any of its inputs; not run."
                         .format(too_large[0]))
    return sum(t.numel() * (t.element_size() + bench_itemsize(t.dtype)) for t in input_tensors)


def check(call: Any, needed: int, budget: int, what: str) -> None:
    """OverBudget when ``needed`` bytes exceed ``budget``; ``what`` says what was counted."""
    if needed > budget:
        raise OverBudget("Needs about {} ({}), over the memory budget of {} per call; not run. Raise it with "
                         "memory_budget= / --memory-budget if this machine has the memory.".format(
                             format_size(needed), what, format_size(budget)))
