"""Format-neutral records produced by the readers and consumed by matching, metrics and parse."""

from __future__ import annotations

import math
import os
import re
from typing import Iterable, NamedTuple, Optional, Tuple

# (file, line, function, code), innermost frame first, as the dump wrote it.
Frame = Tuple[str, str, str, Optional[str]]
# max, min, mean, l2norm; None where the dump holds no number ("Nan", [], null).
Statistics = Tuple[Optional[float], Optional[float], Optional[float], Optional[float]]


class TensorRecord(NamedTuple):
    """One dumped tensor (or scalar) of one call, e.g. ``Functional_relu_0_forward_output``."""

    name: str
    side: str  # "input" or "output"
    dtype: str
    shape: Tuple[int, ...]
    statistics: Statistics
    data_path: Optional[str]  # where its .npy/.pt lives; None in a summary-only dump
    # The directory the user gave: ``data_path`` is read only if its real path lies inside it.
    data_root: Optional[str] = None
    # Why the record has no file to read although a data directory was given (its name is not a plain
    # file name...): the row says so and nothing is opened.
    data_problem: Optional[str] = None


class CallRecord(NamedTuple):
    """One API call: its legacy call name, its tensor records in dump order and its stack."""

    name: str
    records: Tuple[TensorRecord, ...]
    stack: Tuple[Frame, ...]


def _frames_text(frames: Iterable[Frame]) -> str:
    lines = []
    for file, line, func, code in frames:
        lines.append('File "{}", line {}, in {}'.format(file, line, func))
        if code:
            lines.append("    " + str(code))
    return "\n".join(lines)


def format_stack(frames: Tuple[Frame, ...]) -> str:
    """The stack as text, outermost frame first (the way Python prints a traceback)."""
    return _frames_text(reversed(frames))


# Frames of torch itself (and of this tool, msprobe, torch_npu) are not the user's code: any file under a
# package directory of that name, or Python's frozen bootstrap modules.
_LIBRARY_FRAME = re.compile(r"(^|[/\\])(torch|torch_npu|ptdbg_ascend|msprobe|functorch)[/\\]|^<frozen ")


def user_frames(frames: Tuple[Frame, ...]) -> Tuple[Frame, ...]:
    """The frames outside torch and this tool, innermost first (all frames if none is outside)."""
    kept = tuple(frame for frame in frames if not _LIBRARY_FRAME.search(frame[0]))
    return kept or frames


def user_stack_text(frames: Tuple[Frame, ...]) -> str:
    """The report's stack cell: the user's frames, innermost (the line that called the API) first."""
    return _frames_text(user_frames(frames))


def user_line(frames: Tuple[Frame, ...]) -> Optional[str]:
    """``file:line  code`` of the innermost user frame (None without a stack)."""
    kept = user_frames(frames)
    if not kept:
        return None
    file, line, _func, code = kept[0]
    return "{}:{}  {}".format(file, line, code or "").rstrip()


def as_number(value: object) -> Optional[float]:
    """A statistic as float; None for the legacy placeholders ("Nan", [], null, strings). An integer
    beyond float64's range (a 400-digit number) is +-inf, as JSON's ``1e400`` is."""
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, int):
        try:
            return float(value)
        except OverflowError:
            return math.inf if value > 0 else -math.inf
    if isinstance(value, float):
        return value
    return None


def as_shape(value: object) -> Tuple[int, ...]:
    """Shape as a tuple; legacy Python scalars carry the string "[]" (and a missing shape is ``()``).

    :raises ValueError: a list whose items are not non-negative integers (``["x"]``, ``[1.5]``, ``[-1]``).
    """
    if isinstance(value, (list, tuple)):
        if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value):
            raise ValueError("shape {!r} is not a list of non-negative integers".format(_short(value)))
        return tuple(value)
    return ()


def _short(value: object, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


# A tensor file name taken from a dump (a pkl record name + ".npy", a dump.json data_name): one plain
# name inside the data directory, never a path.
_FILE_NAME = re.compile(r"\A[A-Za-z0-9_][A-Za-z0-9_.+\-]*\Z")


def file_name_problem(name: object) -> Optional[str]:
    """Why ``name`` (from a dump file) cannot be a tensor file name inside the data directory; None when
    it can: a str of letters, digits, ``_ . + -``, not starting with a dot, without ``..``."""
    if not isinstance(name, str):
        return "file name {} is not a string".format(_short(name))
    if not _FILE_NAME.match(name) or ".." in name or len(name) > 255:
        return "file name {} is not a plain file name inside the data directory".format(_short(name))
    return None


def data_file(data_dir: str, file_name: object, field: str) -> Tuple[Optional[str], Optional[str]]:
    """``(path, None)`` of a record's tensor file inside ``data_dir``, or ``(None, problem)`` when
    ``file_name`` (from a dump file; ``field`` names where it came from, e.g. "record's", "tensor's
    data_name holds a") cannot be one (:func:`file_name_problem`): the row message, nothing is read."""
    problem = file_name_problem(file_name)
    if problem is None:
        return os.path.join(data_dir, file_name), None
    return None, "Not compared: the {} {}; nothing was read.".format(field, problem)
