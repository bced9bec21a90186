"""The numbers grad_probe keeps of each gradient (:func:`gradient_summaries`): msprobe 1.0.4's ``grad_summary`` columns
and the gradient's direction (its sign bits, packed 8 to a byte).

Everything is reduced on the gradients' device and read back with one copy per device and step (the numbers of all
parameters stacked, the packed signs of all parameters concatenated), not one host sync per parameter: on an
accelerator the optimizer step waits for one copy. Only level L0's MD5 (of the float32 bytes) needs each
gradient on the host, as in 1.0.4.
"""

from __future__ import annotations

import hashlib
from typing import Any, Dict, List, NamedTuple, Optional, Sequence, Tuple

import numpy

# The bits of a packed direction byte, most significant first (numpy.packbits' order, so numpy.unpackbits reads it).
_BIT_WEIGHTS = (128, 64, 32, 16, 8, 4, 2, 1)


class GradientSummary(NamedTuple):
    """One parameter's row: ``md5`` (L0; else None), ``distribution`` (L2: the share of elements in each interval of
    the bounds, then the share equal to 0; else ()), ``maximum``, ``minimum``, ``norm`` (None for an empty
    gradient), ``shape``, and ``signs`` (L1/L2: the packed ``grad > 0`` bits, a uint8 numpy array; else None)."""

    name: str
    md5: Optional[str]
    distribution: Tuple[float, ...]
    maximum: Optional[float]
    minimum: Optional[float]
    norm: Optional[float]
    shape: Tuple[int, ...]
    signs: Optional[Any]


def interval_names(bounds: Sequence[float]) -> List[str]:
    """The L2 columns of ``bounds`` as msprobe names them: ``(-inf, b0]``, ``(b0, b1]``, ..., ``(bn, inf)``, ``=0``."""
    names = [f"(-inf, {bounds[0]}]"] if bounds else []
    names += [f"({low}, {high}]" for low, high in zip(bounds, bounds[1:])]
    if bounds:
        names.append(f"({bounds[-1]}, inf)")
    return names + ["=0"]


def gradient_summaries(named: Sequence[Tuple[str, Any]], level: str, bounds: Sequence[float]) -> List[GradientSummary]:
    """The rows of the gradients ``named`` (``(parameter name, gradient)``, in order) at ``level`` ("L0", "L1", "L2"),
    ``bounds`` the L2 intervals'. bfloat16/float16 gradients are reduced in float32."""
    import torch

    by_device: Dict[Any, List[int]] = {}
    for index, (_, gradient) in enumerate(named):
        by_device.setdefault(gradient.device, []).append(index)
    numbers: List[Optional[List[float]]] = [None] * len(named)
    counts: List[Optional[List[int]]] = [None] * len(named)
    signs: List[Optional[Any]] = [None] * len(named)
    for device, indices in by_device.items():
        with torch.no_grad():
            gradients = [named[index][1].detach() for index in indices]
            rows, tallies, packed, lengths = _reduce(gradients, level, bounds, torch)
            # the copies of this device and step (numbers, L2 counts, packed signs): no sync per parameter
            host = rows.cpu().tolist()
            host_counts = tallies.cpu().tolist() if tallies is not None else None
            packed_host = packed.cpu().numpy() if packed is not None else None
        offset = 0
        for position, index in enumerate(indices):
            if gradients[position].numel():
                numbers[index] = host[position]
                counts[index] = host_counts[position] if host_counts is not None else None
            if packed_host is not None:
                signs[index] = packed_host[offset:offset + lengths[position]]
                offset += lengths[position]
    return [_summary(name, gradient, level, numbers[index], counts[index], signs[index])
            for index, (name, gradient) in enumerate(named)]


def _reduce(gradients: List[Any], level: str, bounds: Sequence[float],
            torch: Any) -> Tuple[Any, Optional[Any], Optional[Any], List[int]]:
    """``(rows, counts, packed signs, packed lengths)`` of one device's gradients, still on it: a row is ``[max, min,
    norm]`` (NaN for an empty gradient); at L2 a count row ``[elements in each interval..., elements equal to 0]``
    (int64: exact at any size; the shares are taken on the host, as 1.0.4 divides ints)."""
    device = gradients[0].device
    edges = torch.tensor(list(bounds), dtype=torch.float32, device=device) if level == "L2" else None
    rows, tallies, packed, lengths = [], [], [], []
    for gradient in gradients:
        values = gradient.float().reshape(-1)
        if values.numel() == 0:
            rows.append(torch.full((3,), float("nan"), device=device))
            if edges is not None:
                tallies.append(torch.zeros(len(bounds) + 2, dtype=torch.int64, device=device))
        else:
            rows.append(torch.stack([values.max(), values.min(), torch.linalg.vector_norm(values)]))
            if edges is not None:
                intervals = torch.bincount(torch.bucketize(values, edges), minlength=len(bounds) + 1)
                tallies.append(torch.cat([intervals, (values == 0).sum().reshape(1)]))
        if level != "L0":
            packed.append(_pack_signs(values, torch))
            lengths.append(packed[-1].numel())
    return (torch.stack(rows), torch.stack(tallies) if tallies else None, torch.cat(packed) if packed else None,
            lengths)


def _pack_signs(values: Any, torch: Any) -> Any:
    """``values > 0`` packed 8 to a byte on the device (the last byte padded with 0 bits)."""
    bits = (values > 0).to(torch.uint8)
    padding = (-bits.numel()) % 8
    if padding:
        bits = torch.cat([bits, bits.new_zeros(padding)])
    weights = torch.tensor(_BIT_WEIGHTS, dtype=torch.uint8, device=values.device)
    return (bits.reshape(-1, 8) * weights).sum(dim=1, dtype=torch.int32).to(torch.uint8)


def _summary(name: str, gradient: Any, level: str, row: Optional[List[float]], counts: Optional[List[int]],
             signs: Optional[Any]) -> GradientSummary:
    md5 = _md5(gradient) if level == "L0" else None
    if row is None:
        return GradientSummary(name, md5, (), None, None, None, tuple(gradient.shape), signs)
    elements = gradient.numel()
    distribution = tuple(count / elements for count in counts) if counts is not None else ()
    return GradientSummary(name, md5, distribution, row[0], row[1], row[2], tuple(gradient.shape), signs)


def _md5(gradient: Any) -> str:
    """msprobe 1.0.4's "MD5" column: the MD5 of the gradient's float32 bytes (32 hex digits; its later versions
    write a CRC-32 there)."""
    array = numpy.ascontiguousarray(gradient.detach().float().cpu().numpy())
    return hashlib.md5(array.tobytes()).hexdigest()
