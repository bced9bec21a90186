"""The user's call stack for a recorded API call, in the legacy stack-record form."""

from __future__ import annotations

import functools
import linecache
import os
import sys
from typing import Any, Callable, Dict, List, Optional, Tuple

from ptdbg_ascend.formats.dump_json import stack_line_literal
from ptdbg_ascend.formats.pkl import STACK_LINE, frame_text


# Frames from the tool itself (wrappers, recorder, writers) are not the user's code.
_TOOL_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep  # the package directory


@functools.lru_cache(maxsize=4096)
def _is_tool_file(filename: str) -> bool:
    return os.path.abspath(filename).startswith(_TOOL_DIR)


# (id of the code object, bytecode offset) -> (the code object, the frame's text in one format, or "" for a
# frame that is not shown: the tool's own, or msprobe's frames without source). The same few call sites recur
# every step, so each frame costs one dict lookup: the key uses f_lasti, a plain field, because f_lineno is
# computed from the line table on every access, and the code's id, because hashing a code object hashes its
# constants every time (0.6 us for nn.Module._call_impl, several frames per call); the entry keeps the code
# alive, so its id is its own while cached. One cache per format; each is cleared past the limit.
FrameRender = Callable[[str, int, str, Optional[str]], str]
_FRAME_TEXT_LIMIT = 65536
_LEGACY_FRAMES: Dict[Tuple[int, int], Tuple[Any, str]] = {}
_MSPROBE_FRAMES: Dict[Tuple[int, int], Tuple[Any, str]] = {}


def _frame_texts(first: Any, cache: Dict[Tuple[int, int], Tuple[Any, str]], render: FrameRender) -> List[str]:
    """The rendered user frames from ``first`` outwards (innermost first), through ``cache``."""
    parts: List[str] = []
    frame = first
    while frame is not None:
        code = frame.f_code
        key = (id(code), frame.f_lasti)
        entry = cache.get(key)
        if entry is None:
            if len(cache) >= _FRAME_TEXT_LIMIT:
                cache.clear()
            filename = code.co_filename
            if _is_tool_file(filename):
                text = ""
            else:
                lineno = frame.f_lineno
                source = linecache.getline(filename, lineno).strip() or None
                text = render(filename, lineno, code.co_name, source)
            cache[key] = (code, text)
        else:
            text = entry[1]
        if text:
            parts.append(text)
        frame = frame.f_back
    return parts


def _msprobe_frame(filename: str, lineno: int, function: str, code: Optional[str]) -> str:
    return stack_line_literal(filename, lineno, function, code) if code else ""


def user_stack_json(name: str, skip: int = 1) -> str:
    """The text of the legacy stack line of ``name`` with the user's frames (no newline; ``formats/pkl.py``)."""
    return STACK_LINE % (name, ", ".join(_frame_texts(sys._getframe(skip), _LEGACY_FRAMES, frame_text)))


def user_stack_literals(skip: int = 1) -> List[str]:
    """The user's frames, innermost first, as msprobe's stack.json lines (``formats.dump_json.stack_line``)
    already written as JSON string literals (escaped once per code location, not once per call); frames
    without source are left out."""
    return _frame_texts(sys._getframe(skip), _MSPROBE_FRAMES, _msprobe_frame)
