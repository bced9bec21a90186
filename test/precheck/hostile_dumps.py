"""Building crafted dump.json files for the attack tests: a dump.json is a list of calls, each written by
hand the way an attacker would write it (names, argument records, tensor files)."""

from __future__ import annotations

import json
import os
from typing import Any, Dict, Iterable, Optional, Tuple

import torch


def tensor_leaf(data_name: Optional[str], tensor: torch.Tensor, shape: Optional[list] = None,
                dtype: Optional[str] = None) -> Dict[str, Any]:
    """The dump.json record of a tensor; ``shape``/``dtype`` override what is recorded (a lie)."""
    leaf = {"type": "torch.Tensor", "dtype": dtype or str(tensor.dtype),
            "shape": list(tensor.shape) if shape is None else shape,
            "Max": 1.0, "Min": -1.0, "Mean": 0.0, "Norm": 1.0, "requires_grad": False}
    if data_name is not None:
        leaf["data_name"] = data_name
    return leaf


def value(kind: str, recorded: Any) -> Dict[str, Any]:
    return {"type": kind, "value": recorded}


def write_dump(root: str, calls: Iterable[Tuple[str, list, dict]], tensors: Optional[Dict[str, Any]] = None,
               task: str = "tensor", extra: Optional[Dict[str, Any]] = None, with_data_dir: bool = True) -> str:
    """``root/dump.json`` (+ ``root/dump_tensor_data/``) holding ``calls`` as ``(dotted name, input_args,
    input_kwargs)``; ``tensors``: ``{file name: tensor or bytes}`` written into dump_tensor_data. Returns
    the dump.json path."""
    os.makedirs(root, exist_ok=True)
    data_dir = os.path.join(root, "dump_tensor_data")
    if with_data_dir:
        os.makedirs(data_dir, exist_ok=True)
    for name, content in (tensors or {}).items():
        path = os.path.join(data_dir, name)
        if isinstance(content, bytes):
            with open(path, "wb") as handle:
                handle.write(content)
        else:
            torch.save(content, path)
    data = {}
    for index, (name, args, kwargs) in enumerate(calls):
        data[f"{name}.{index}.forward"] = {"input_args": args, "input_kwargs": kwargs,
                                                     "output": []}
    dump = {"task": task, "level": "L1", "dump_data_dir": data_dir, "data": data}
    dump.update(extra or {})
    text = json.dumps(dump)
    for placeholder, raw in RAW_JSON.items():  # values too deep for json to write: spliced in as text
        text = text.replace(json.dumps(placeholder), raw)
    path = os.path.join(root, "dump.json")
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text)
    return path


def nested(levels: int, leaf: Dict[str, Any]) -> str:
    """A placeholder for ``leaf`` inside ``levels`` lists, spliced into the dump.json as raw text."""
    placeholder = f"__nested_{levels}__"
    RAW_JSON[placeholder] = "[" * levels + json.dumps(leaf) + "]" * levels
    return placeholder


def raw(text: str) -> str:
    """A placeholder for the JSON text ``text`` (a number json cannot write: ``1e400``), spliced in as it is."""
    placeholder = f"__raw_{len(RAW_JSON)}__"
    RAW_JSON[placeholder] = text
    return placeholder


RAW_JSON: Dict[str, str] = {}
