"""Reading a dump.json back in tests: the tensor leaves of its entries and the tensor files they name."""

from __future__ import annotations

from typing import Any, Iterator


def data_names(value: Any) -> Iterator[str]:
    """Every ``data_name`` in an entry (nested lists and dicts)."""
    if isinstance(value, dict):
        if "data_name" in value:
            yield value["data_name"]
        for item in value.values():
            yield from data_names(item)
    elif isinstance(value, list):
        for item in value:
            yield from data_names(item)


def tensor_leaves(value: Any) -> Iterator[dict]:
    """Every tensor leaf (``"type": "torch.Tensor"``) in an entry or a whole ``data`` object, in order."""
    if isinstance(value, dict):
        if value.get("type") == "torch.Tensor":
            yield value
        else:
            for item in value.values():
                yield from tensor_leaves(item)
    elif isinstance(value, list):
        for item in value:
            yield from tensor_leaves(item)
