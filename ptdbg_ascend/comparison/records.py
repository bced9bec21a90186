"""Format-neutral records produced by the readers and consumed by matching, metrics and parse."""

from __future__ import annotations

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
    """A statistic as float; None for the legacy placeholders ("Nan", [], null, strings)."""
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)):
        return float(value)
    return None


def as_shape(value: object) -> Tuple[int, ...]:
    """Shape as a tuple; legacy Python scalars carry the string "[]"."""
    if isinstance(value, (list, tuple)):
        return tuple(int(v) for v in value)
    return ()
