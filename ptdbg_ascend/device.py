"""Where tensors live: ``torch_npu`` detection and device helpers.

Everything NPU-specific goes through here so the rest of the tool runs unchanged on CPU and CUDA.
``torch_npu`` is imported only when it is installed (importing it has side effects on torch).
"""

from __future__ import annotations

import importlib
from typing import Any, Iterable, Optional

_NPU_STATE = {}  # "module" -> torch_npu or None, filled on first use (cache, not session state)


def torch_npu_module() -> Optional[Any]:
    """The ``torch_npu`` module, or None when it is not installed. Imported at most once."""
    if "module" not in _NPU_STATE:
        try:
            _NPU_STATE["module"] = importlib.import_module("torch_npu")
        except ImportError:
            _NPU_STATE["module"] = None
    return _NPU_STATE["module"]


def npu_available() -> bool:
    """True when ``torch_npu`` is importable (the tool then also wraps its APIs and seeds the NPU)."""
    return torch_npu_module() is not None


def first_device_index(objects: Iterable[Any]) -> Optional[int]:
    """The device index of the first tensor found in ``objects`` (recursing into lists, tuples and
    dict values); None when the first tensor is on the CPU or there is no tensor."""
    import torch

    stack = list(objects)[::-1]
    while stack:
        item = stack.pop()
        if isinstance(item, torch.Tensor):
            return item.device.index if item.device.type != "cpu" else None
        if isinstance(item, (list, tuple)):
            stack.extend(reversed(item))
        elif isinstance(item, dict):
            stack.extend(reversed(list(item.values())))
    return None
