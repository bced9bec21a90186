"""Tensors as numpy arrays, for dtypes numpy has no type for too: the one widening rule.

numpy has no bfloat16, float8 (e4m3fn, e5m2, their fnuz variants, e8m0fnu) or complex32. Their values
are exactly representable in float32 (complex64 for complex32), so an npy file, a CRC of the bytes
and a compare all widen them to that type, and the record's dtype stays the authority on what the
tensor was. Every place that turns a tensor into numpy goes through here, so the rule is written once.

torch is imported on first use (the compare side must stay light to import).
"""

from __future__ import annotations

from typing import Any, Dict

_WIDER: Dict[Any, Any] = {}
_FLOAT8_NAMES = ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu")


def numpy_wider(dtype: Any) -> Any:
    """The torch dtype a tensor of ``dtype`` is widened to before numpy sees it (float32 for bf16 and
    every float8, complex64 for complex32), or None when numpy reads ``dtype`` as it is."""
    if not _WIDER:
        import torch

        wider = {torch.bfloat16: torch.float32, torch.complex32: torch.complex64}
        for name in _FLOAT8_NAMES:
            if hasattr(torch, name):
                wider[getattr(torch, name)] = torch.float32
        _WIDER.update(wider)
    return _WIDER.get(dtype)


def tensor_to_numpy(tensor: Any) -> Any:
    """A numpy array of ``tensor``'s values (detached, on the CPU, widened by :func:`numpy_wider`). It
    may share memory with a CPU tensor: copy it when the tensor may change afterwards."""
    data = tensor.detach()
    wider = numpy_wider(data.dtype)
    if wider is not None:
        data = data.to(wider)
    if data.device.type != "cpu":
        data = data.cpu()
    return data.resolve_conj().resolve_neg().numpy() if hasattr(data, "resolve_neg") else data.numpy()
