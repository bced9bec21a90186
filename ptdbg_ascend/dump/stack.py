"""The user's call stack for a recorded API call, in the legacy stack-record form."""

from __future__ import annotations

import functools
import json
import linecache
import os
import sys
from typing import Any, List, Optional

import ptdbg_ascend

# Frames from the tool itself (wrappers, recorder, writers) are not the user's code.
_TOOL_DIR = os.path.dirname(os.path.abspath(ptdbg_ascend.__file__)) + os.sep

Frame = List[Optional[str]]


@functools.lru_cache(maxsize=4096)
def _is_tool_file(filename: str) -> bool:
    return os.path.abspath(filename).startswith(_TOOL_DIR)


def user_stack(skip: int = 1) -> List[Frame]:
    """``[[file, "lineno", function, code], ...]``, innermost first, without the tool's own frames.

    ``code`` is the stripped source line, or None when the source is not available (as in the original).
    Line numbers are strings, as the original wrote them.
    """
    frames = []  # type: List[Frame]
    frame = sys._getframe(skip)
    while frame is not None:
        filename = frame.f_code.co_filename
        if not _is_tool_file(filename):
            line = linecache.getline(filename, frame.f_lineno).strip()
            frames.append([filename, str(frame.f_lineno), frame.f_code.co_name, line or None])
        frame = frame.f_back
    return frames


# (code object, line) -> the frame's JSON text, or "" for the tool's own frames. The same few call sites
# recur every step, so each frame costs one dict lookup. Bounded: cleared when it grows past the limit.
_FRAME_TEXT = {}  # type: dict
_FRAME_TEXT_LIMIT = 65536


def _frame_text(code: Any, lineno: int) -> str:
    if len(_FRAME_TEXT) >= _FRAME_TEXT_LIMIT:
        _FRAME_TEXT.clear()
    filename = code.co_filename
    if _is_tool_file(filename):
        text = ""
    else:
        line = linecache.getline(filename, lineno).strip()
        text = json.dumps([filename, str(lineno), code.co_name, line or None])
    _FRAME_TEXT[(code, lineno)] = text
    return text


def user_stack_json(name: str, skip: int = 1) -> str:
    """The JSON text of the stack line ``[name, user_stack()]`` (no newline); frames are encoded once
    per (code, line) and reused, since the same few call sites recur every step."""
    parts = []  # type: List[str]
    cache = _FRAME_TEXT
    frame = sys._getframe(skip)
    while frame is not None:
        key = (frame.f_code, frame.f_lineno)
        text = cache.get(key)
        if text is None:
            text = _frame_text(key[0], key[1])
        if text:
            parts.append(text)
        frame = frame.f_back
    return '["{}", [{}]]'.format(name, ", ".join(parts))
