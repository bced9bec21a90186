"""The perturbations of free_benchmark (msprobe 1.0.4's ``perturbed_layers``): new inputs for a second run of a call.

:func:`perturbed_inputs` returns ``(args, kwargs)`` for the second run, or raises :class:`NotPerturbed` with the
reason (said once per API in the run's summary). The caller's tensors are never changed: every perturbed tensor
is a new one, and with ``copy_all`` (a call that writes its arguments in place) every other tensor is copied too,
so the second run cannot write into the training step's tensors.

* ``improve_precision``: every float16/bfloat16 tensor becomes float32 (nothing to raise: not perturbed);
* ``to_cpu``: every tensor moves to the CPU, float16/bfloat16 as float32 (1.0.4's ``change_dtype``);
* ``add_noise``: the first floating input gets + the dtype's noise (bf16 1e-4, fp16 1e-6, fp32 1e-8, fp64 1e-16)
  where its magnitude is above the noise's square root;
* ``bit_noise``: the first floating input's last mantissa bit flipped where its magnitude is a normal number;
* ``change_value``: the first floating input's first and last element (of its first and last row) swapped;
* ``no_change``: the same values again (a copy): a second run that differs is not deterministic.

The first floating input is the first floating tensor in argument order (lists and tuples entered, then the
keyword arguments). A tensor whose largest magnitude is below the noise is not perturbed (as 1.0.4).
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Tuple

NOISE = {"bfloat16": 1e-4, "float16": 1e-6, "float32": 1e-8, "float64": 1e-16}
_BIT_TYPES = {"bfloat16": "int16", "float16": "int16", "float32": "int32", "float64": "int64"}
_LOW = ("float16", "bfloat16")


class NotPerturbed(Exception):
    """The call has nothing this mode can perturb; the message says why."""


def dtype_name(tensor: Any) -> str:
    return str(tensor.dtype).rpartition(".")[2]


def map_tensors(value: Any, change: Callable[[Any], Any]) -> Any:
    """``value`` with every tensor replaced by ``change(tensor)`` (lists, tuples and dict values entered, in the
    order ``dump.capture.tensors_in`` walks them); the containers are new, everything else is kept."""
    import torch

    if isinstance(value, torch.Tensor):
        return change(value)
    if isinstance(value, (list, tuple)):
        items = [map_tensors(item, change) for item in value]
        return type(value)(items) if not hasattr(value, "_fields") else type(value)(*items)
    if isinstance(value, dict):
        return {key: map_tensors(item, change) for key, item in value.items()}
    return value


def perturbed_inputs(mode: str, args: Tuple[Any, ...], kwargs: Dict[str, Any],
                     copy_all: bool = False) -> Tuple[Tuple[Any, ...], Dict[str, Any]]:
    """``(args, kwargs)`` of the second run in ``mode`` (see the module docstring). ``copy_all`` (default False):
    copy every tensor the mode leaves alone, for a call that writes its arguments.

    :raises NotPerturbed: nothing to perturb (no floating input, already float32, too small...).
    """
    if mode in ("improve_precision", "to_cpu"):
        return _cast_all(mode, args, kwargs, copy_all)
    perturb = _ONE_TENSOR[mode]
    state = {"done": False, "why": "no floating-point tensor among the inputs"}

    def change(tensor: Any) -> Any:
        if not state["done"] and tensor.is_floating_point() and not tensor.is_meta:
            try:
                result = perturb(tensor)
            except NotPerturbed as reason:
                state["why"] = str(reason)
                result = None
            if result is not None:
                state["done"] = True
                return result
        return tensor.detach().clone() if copy_all or mode == "no_change" else tensor

    new_args, new_kwargs = map_tensors((tuple(args), dict(kwargs)), change)
    if not state["done"]:
        raise NotPerturbed(state["why"])
    return new_args, new_kwargs


def _cast_all(mode: str, args: Tuple[Any, ...], kwargs: Dict[str, Any], copy_all: bool
              ) -> Tuple[Tuple[Any, ...], Dict[str, Any]]:
    import torch

    changed = [False]

    def change(tensor: Any) -> Any:
        raised = tensor.is_floating_point() and dtype_name(tensor) in _LOW
        if mode == "to_cpu":  # (a copy, differentiable: fix mode's output keeps its graph)
            changed[0] = True
            return tensor.to("cpu", dtype=torch.float32 if raised else tensor.dtype, copy=True)
        if raised:
            changed[0] = True
            return tensor.to(torch.float32)  # (differentiable: fix mode's output keeps its graph)
        return tensor.detach().clone() if copy_all else tensor

    new_args, new_kwargs = map_tensors((tuple(args), dict(kwargs)), change)
    if not changed[0]:
        raise NotPerturbed("no float16 or bfloat16 input: nothing to raise to float32" if mode == "improve_precision"
                           else "no tensor among the inputs")
    return new_args, new_kwargs


def _add_noise(tensor: Any) -> Any:
    import torch

    noise = NOISE.get(dtype_name(tensor))
    if noise is None:
        raise NotPerturbed(f"add_noise has no noise for {tensor.dtype}")
    _check_magnitude(tensor, noise)
    with torch.no_grad():
        return torch.where(tensor.abs() > noise ** 0.5, tensor + noise, tensor).to(tensor.dtype)


def _bit_noise(tensor: Any) -> Any:
    import torch

    bits = _BIT_TYPES.get(dtype_name(tensor))
    if bits is None:
        raise NotPerturbed(f"bit_noise cannot flip bits of {tensor.dtype}")
    _check_magnitude(tensor, NOISE[dtype_name(tensor)])
    with torch.no_grad():
        flipped = (tensor.detach().contiguous().view(getattr(torch, bits)) ^ 1).view(tensor.dtype)
        return torch.where(tensor.abs() > torch.finfo(tensor.dtype).smallest_normal, flipped, tensor)


def _change_value(tensor: Any) -> Any:
    import torch

    if tensor.dim() == 0 or tensor.size(0) < 2:
        raise NotPerturbed("change_value needs a first dimension of at least 2")
    with torch.no_grad():
        result = tensor.detach().clone()
        head = (0,) if result.dim() == 1 else (0, 0)
        tail = (-1,) if result.dim() == 1 else (-1, -1)
        first, last = result[head].clone(), result[tail].clone()
        result[head], result[tail] = last, first
        return result


def _same(tensor: Any) -> Any:
    return tensor.detach().clone()


def _check_magnitude(tensor: Any, noise: float) -> None:
    if tensor.numel() == 0:
        raise NotPerturbed("an empty tensor")
    import torch

    with torch.no_grad():
        largest = float(tensor.detach().abs().max().float())
    if largest < noise:
        raise NotPerturbed(f"its largest magnitude {largest:.3g} is below the noise {noise:g}")


_ONE_TENSOR: Dict[str, Callable[[Any], Any]] = {"add_noise": _add_noise, "bit_noise": _bit_noise,
                                                 "change_value": _change_value, "no_change": _same}
