"""Tensors the fast paths cannot read as they are: function-transform wrappers and other tensor kinds.

The statistics and npy fast paths read a dense strided CPU/device tensor through ``numpy()`` or torch
reductions. Some tensors a wrapped API receives cannot be read like that, and reading them must never
raise inside the user's call (or, worse, read garbage: ``numpy()`` of a ``functionalize`` wrapper
returns memory that is not the tensor's). :func:`plain_values` turns each into the plain tensor whose
values the record shows, or says there are none:

==============================  ==========  ==================================================================
tensor                          kind        values recorded (shape in the pkl / dump.json)
==============================  ==========  ==================================================================
``vmap`` batched (any nesting)  ``vmap``    the underlying batch, batch dims first (outermost vmap first), then
                                            the per-sample dims: ``[B_outer, ..., B_inner, *per-sample shape]``
``grad``/``vjp`` tracking,      ``grad``    the wrapped value (same shape)
``jvp`` dual                    (``jvp``)
``functionalize`` wrapper       ``functional``  the synced underlying value (same shape)
nested (strided or jagged)      ``nested``  every component flattened and concatenated: ``[total elements]``
sparse (COO, CSR, CSC, BSR...)  ``sparse``  ``to_dense()`` (the logical shape, zeros included)
quantized                       ``quantized``  ``dequantize()`` as float32 (the pkl dtype stays ``torch.quint8``...)
mkldnn                          ``mkldnn``  ``to_dense()``
meta, fake (FakeTensor)         ``meta``/``fake``  none: statistics ``null``, no npy / .pt file
==============================  ==========  ==================================================================

A tensor whose values cannot be taken for another reason (an unknown wrapper subclass, a dtype without
arithmetic such as ``torch.uint3``) is recorded the same way as a meta tensor: statistics ``null``, no
tensor file, and one warning per kind in the log. Transform-wrapped values are read with functorch
disabled (``torch._C._DisableFuncTorch``), so reading them neither records into the transform nor
changes what it computes.
"""

from __future__ import annotations

import contextlib
from typing import Any, List, Optional, Set, Tuple

from ptdbg_ascend.log import logger

_WARNED: Set[str] = set()


class _Functorch:
    """The torch._C._functorch helpers, looked up once (None where this torch lacks them)."""

    def __init__(self) -> None:
        import torch

        self.torch = torch
        functorch = getattr(torch._C, "_functorch", None)
        self.peek = getattr(functorch, "peek_interpreter_stack", None)
        self.is_wrapped = getattr(functorch, "is_functorch_wrapped_tensor", None)
        self.is_batched = getattr(functorch, "is_batchedtensor", None)
        self.get_unwrapped = getattr(functorch, "get_unwrapped", None)
        self.bdim = getattr(functorch, "maybe_get_bdim", None)
        self.is_functional = getattr(torch, "_is_functional_tensor", None)
        self.disable = getattr(torch._C, "_DisableFuncTorch", None)
        fake = None
        try:
            from torch._subclasses.fake_tensor import FakeTensor as fake  # type: ignore[no-redef]
        except ImportError:  # an old torch
            pass
        self.fake_type = fake


_STATE: List[_Functorch] = []


def _functorch() -> _Functorch:
    if not _STATE:
        _STATE.append(_Functorch())
    return _STATE[0]


def transforms_active() -> bool:
    """Whether a ``torch.func`` transform (vmap, grad, jvp, functionalize...) is running on this thread:
    then the tensors of a call may be transform wrappers. One C call (~60 ns): callers ask once per call."""
    peek = _functorch().peek
    return peek is not None and peek() is not None


def transform_peek() -> Any:
    """The C function behind :func:`transforms_active` (``peek() is not None`` while a transform runs on this
    thread), or None where this torch has no functorch: for a caller that asks once per tensor."""
    return _functorch().peek


def is_transform_wrapper(tensor: Any) -> bool:
    """Whether ``tensor`` is a functorch wrapper (batched, grad/jvp tracking, functionalize)."""
    is_wrapped = _functorch().is_wrapped
    return is_wrapped is not None and bool(is_wrapped(tensor))


def reading_values() -> Any:
    """Context in which the values :func:`plain_values` returns are reduced and copied: functorch
    disabled, so torch ops on them run plainly even inside a transform."""
    disable = _functorch().disable
    return disable() if disable is not None else contextlib.nullcontext()


def plain_values(tensor: Any) -> Tuple[Optional[Any], str]:
    """``(plain, kind)``: a dense strided tensor without autograd history holding the values a record of
    ``tensor`` shows (see the module docstring), or None when it has none; ``kind`` names the tensor
    kind ("plain" for an ordinary tensor). Call it, and use its result, inside :func:`reading_values`."""
    state = _functorch()
    torch = state.torch
    if state.fake_type is not None and isinstance(tensor, state.fake_type):
        return None, "fake"
    kind = "plain"
    if state.is_wrapped is not None and state.is_wrapped(tensor):
        tensor, kind = _unwrap_transforms(tensor, state)
    if tensor.is_meta:
        return None, "meta"
    if tensor.is_nested:
        components = [part.reshape(-1) for part in tensor.detach().unbind()]
        if not components:
            return torch.empty(0, dtype=tensor.dtype, device=tensor.device), "nested"
        return torch.cat(components), "nested"
    if tensor.is_quantized:
        return tensor.detach().dequantize(), "quantized"
    layout = tensor.layout
    if layout != torch.strided:
        return tensor.detach().to_dense(), "mkldnn" if layout == getattr(torch, "_mkldnn", None) else "sparse"
    return tensor.detach(), kind


def _unwrap_transforms(tensor: Any, state: _Functorch) -> Tuple[Any, str]:
    """The plain tensor under functorch wrappers: batched levels put their batch dim first (outermost
    vmap first), grad/jvp wrappers give their value, functionalize wrappers their synced value."""
    torch = state.torch
    labels = list(range(tensor.dim()))  # the dims of the current physical tensor: ints are per-sample dims
    batch: List[Any] = []
    kind = "grad"
    while state.is_wrapped(tensor):
        if state.is_batched(tensor):
            kind = "vmap"
            bdim = state.bdim(tensor)
            tensor = state.get_unwrapped(tensor)
            label = ("batch", len(batch))
            labels.insert(bdim, label)
            batch.append(label)
        elif state.is_functional is not None and state.is_functional(tensor):
            if kind != "vmap":
                kind = "functional"
            torch._sync(tensor)
            tensor = torch._from_functional_tensor(tensor)
        else:
            tensor = state.get_unwrapped(tensor)
    if batch:
        order = [labels.index(label) for label in reversed(batch)] + [
            labels.index(dim) for dim in range(len(labels) - len(batch))]
        if order != list(range(len(order))):
            tensor = tensor.permute(order)
    return tensor.detach(), kind


def shape_of(tensor: Any) -> List[int]:
    """The shape a placeholder record shows: the tensor's own where it has a concrete one, else []."""
    try:
        return [int(size) for size in tensor.shape]
    except Exception:  # noqa: BLE001 - nested tensors have no shape, fake ones may be symbolic
        return []


def warn_once(kind: str, detail: str) -> None:
    """Log, once per kind of tensor, that its records hold no values (or what they hold instead)."""
    if kind not in _WARNED:
        _WARNED.add(kind)
        logger.warning(detail)
