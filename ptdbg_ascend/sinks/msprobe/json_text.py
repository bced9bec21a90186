"""The text of msprobe's JSON files, as ``json.dumps(document, indent=1)`` writes it, built from member
texts that are encoded once each: the writer (``msprobe_json.py``) rewrites whole files often, and an
indented document is encoded in pure Python, slowly. Keys in msprobe's order, NaN/inf as the bare tokens
``NaN``/``Infinity``/``-Infinity`` (what Python's ``json`` writes and reads)."""

from __future__ import annotations

import json
import time
from typing import Any, Dict, List, Optional, Tuple

from ptdbg_ascend.formats.dump_json import FRAMEWORK, FRAMEWORK_PYTORCH


def dump_json_text(task: str, level: str, dump_data_dir: Optional[str], data: Dict[str, Any],
                   encoded: Optional[Dict[str, str]] = None) -> str:
    """The dump.json document (keys in msprobe's order, indent 1, NaN/Infinity tokens): the same text as
    ``json.dumps(document, indent=1)``. ``encoded`` caches each entry's text between calls (an indented
    dump is encoded in pure Python, slowly: each entry is encoded once however often the file is rewritten)."""
    return document_text(task, level, dump_data_dir, object_text(data, encoded, 1))


def document_text(task: str, level: str, dump_data_dir: Optional[str], data_text: str) -> str:
    head = json.dumps({"task": task, "level": level, FRAMEWORK: FRAMEWORK_PYTORCH, "dump_data_dir": dump_data_dir},
                      indent=1)[:-2]
    return head + ',\n "data": ' + data_text + "\n}"


def member_text(name: str, value: Any, depth: int) -> str:
    """One ``"name": value`` member of an object nested at ``depth``, as ``json.dumps(indent=1)`` writes it."""
    text = json.dumps(value, indent=1, allow_nan=True).replace("\n", "\n" + " " * (depth + 1))
    return "{}{}: {}".format(" " * (depth + 1), json.dumps(name), text)


def members_object(members: List[str], depth: int) -> str:
    if not members:
        return "{}"
    return "{\n" + ",\n".join(members) + "\n" + " " * depth + "}"


def encode_missing(items: Dict[str, Any], encoded: Dict[str, str], depth: int) -> Tuple[float, int]:
    """Fill ``encoded`` with the member texts of ``items`` it lacks; returns the seconds it took and the
    length of the longest text it made."""
    started = time.perf_counter()
    longest = 0
    for name, value in items.items():
        if name not in encoded:
            text = encoded[name] = member_text(name, value, depth)
            longest = max(longest, len(text))
    return time.perf_counter() - started, longest


def object_text(items: Dict[str, Any], encoded: Optional[Dict[str, str]], depth: int) -> str:
    """``json.dumps(items, indent=1)`` nested at ``depth``, reusing ``encoded[name]`` (the member text
    of ``name``; a cache is used at one depth only)."""
    cache = encoded if encoded is not None else {}
    members = []
    for name, value in items.items():
        text = cache.get(name)
        if text is None:
            text = cache[name] = member_text(name, value, depth)
        members.append(text)
    return members_object(members, depth)
