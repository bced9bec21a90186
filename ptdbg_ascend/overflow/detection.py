"""Is this API call's result an overflow? Value checks on tensors, and the NPU float status.

Two ways to know, chosen once at ``register_hook``:

* **value check** (CPU, CUDA, and NPUs whose torch_npu reports inf/nan support): a floating tensor
  overflows when it holds inf or NaN, or, for float16/bfloat16, when its max or min reaches the
  dtype's largest finite value (hardware that saturates instead of producing inf, as NPUs do in
  saturation mode). float32/float64 are not checked for saturation: models legitimately fill masks
  with ``torch.finfo(torch.float32).min``. bool/int and empty tensors never overflow; a Python float
  that is inf or NaN does.
* **float status** (NPUs without inf/nan support): the device's global overflow flag, read after the
  call and cleared when set (``torch_npu._C._check_overflow_npu`` / ``_clear_overflow_npu``).

The value check runs on the tensor's own device and yields a 0-d bool tensor, so on CUDA/NPU no host
sync is needed per call: the caller keeps the flags and reads a batch of them at once.
"""

from __future__ import annotations

from typing import Any, List, Optional

from ptdbg_ascend.statistics.flags import Flag, any_of, beyond
from ptdbg_ascend.streams import LAUNCH_STREAMS


def _limit(tensor: Any) -> float:
    """The magnitude that counts as overflow: the largest finite value for float16/bfloat16
    (saturating hardware), infinity for the other dtypes."""
    import torch

    if tensor.dtype == torch.float16 or tensor.dtype == torch.bfloat16:
        return float(torch.finfo(tensor.dtype).max)
    return float("inf")


def _transformed_flag(tensor: Any) -> Optional[Flag]:
    """The flag of the values under a torch.func transform wrapper (``tensor_kinds.py``), read with
    functorch disabled."""
    from ptdbg_ascend import tensor_kinds

    with tensor_kinds.reading_values():
        plain, _kind = tensor_kinds.plain_values(tensor)
        if plain is None or tensor_kinds.is_transform_wrapper(plain):
            return None
        return tensor_flag(plain)


def tensor_flag(tensor: Any) -> Optional[Flag]:
    """Whether ``tensor`` overflows: a Python bool for a CPU tensor, a 0-d bool tensor on the device
    otherwise (no host sync); None for tensors that cannot overflow (bool, int, empty, meta, sparse)."""
    import torch

    if tensor.device.type == "meta" or tensor.layout != torch.strided or tensor.numel() == 0:
        return None  # sparse/nested layouts: their values are checked where they are produced densely
    if tensor.is_complex():
        tensor = torch.view_as_real(tensor)
    elif not tensor.is_floating_point():
        return None
    tensor = tensor.detach()
    # The reductions are statistics/flags.py's; a vmap-batched tensor refuses item(): the whole batch it holds.
    return beyond(tensor, _limit(tensor), _transformed_flag)


def scalar_overflows(value: Any) -> bool:
    """A Python float that is inf or NaN (bool and int never overflow)."""
    return isinstance(value, float) and (value != value or value in (float("inf"), float("-inf")))


def _leaves(value: Any) -> List[Any]:
    """Tensors and Python floats in ``value`` (lists, tuples, dict values), depth first."""
    found: List[Any] = []
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, (list, tuple)):
            stack.extend(reversed(item))
        elif isinstance(item, dict):
            stack.extend(reversed(list(item.values())))
        elif hasattr(item, "_version") or isinstance(item, float):
            found.append(item)
    return found


def overflow_flag(value: Any) -> Flag:
    """Whether ``value`` (a tensor, a float, or lists/tuples/dicts of them) overflows.

    Returns a Python bool when that is known without a host sync (no tensor, an inf/NaN float, or only
    CPU tensors), else a 0-d bool tensor on the device of the first device tensor: read it with
    :func:`read_flags` when the answer is needed.
    """
    import torch

    flags: List[Any] = []
    for leaf in _leaves(value):
        if isinstance(leaf, float):
            if scalar_overflows(leaf):
                return True
            continue
        flag = tensor_flag(leaf)
        if flag is True:
            return True
        if flag is not None and flag is not False:
            flags.append(flag)
    if not flags:  # CPU tensors answered at once (tensor_flag): only device flags are left here
        return False
    target = flags[0].device
    if any(flag.device != target for flag in flags):  # a call spanning devices: gather on the first
        flags = [flag.to(target, non_blocking=True) for flag in flags]
    LAUNCH_STREAMS.note(target)  # read_flags waits for this stream (a side stream's work too)
    return any_of(flags)


def read_flags(flags: List[Flag]) -> List[bool]:
    """The values of flags from :func:`overflow_flag`, reading all device flags with one copy per
    device (one host sync per device, however many flags)."""
    import torch

    values: List[Optional[bool]] = [flag if isinstance(flag, bool) else None for flag in flags]
    by_device: dict = {}
    for index, flag in enumerate(flags):
        if not isinstance(flag, bool):
            by_device.setdefault(flag.device, []).append(index)
    for device, indices in by_device.items():
        with LAUNCH_STREAMS.reading(device):  # after the streams the flags were made on
            host = torch.stack([flags[index] for index in indices]).cpu().tolist()
        for index, value in zip(indices, host):
            values[index] = bool(value)
    return [bool(value) for value in values]


class FloatStatus:
    """The NPU's global float-status flag (torch_npu without inf/nan support).

    Args:
        torch_npu: the ``torch_npu`` module.
    """

    def __init__(self, torch_npu: Any) -> None:
        self._c = torch_npu._C

    def clear(self) -> None:
        """Reset the flag (at registration, and after each overflow is handled)."""
        self._c._clear_overflow_npu()

    def overflowed(self) -> bool:
        """Whether any kernel overflowed since the last :meth:`clear` (a host sync on the NPU)."""
        return bool(self._c._check_overflow_npu())


def npu_supports_inf_nan(torch_npu: Any) -> bool:
    """Whether this torch_npu reports inf/nan mode (then the value check is used on the NPU too)."""
    probe = getattr(getattr(torch_npu, "_C", None), "_npu_is_support_inf_nan", None)
    return bool(probe()) if probe is not None else False
