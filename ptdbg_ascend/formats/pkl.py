"""The legacy ``.pkl`` line codec, torch-free: UTF-8 text, one JSON array per line (never pickled).

Lines::

    [name, dump_step, [], dtype, shape, [max, min, mean, norm]]    tensor / scalar record
    [name + "_stack_info", [[file, "lineno", function, code], ...]]   stack record, innermost frame first

``dump_step`` is 0 in a dump and 101 in an overflow dump; a Python scalar's dtype is ``str(type(value))``
(``"<class 'float'>"``) and its shape the string ``"[]"`` (a 0-d tensor's is the list ``[]``), as the
original writes them. Numbers are what ``json.dumps`` writes (``NaN``, ``Infinity``, ``null``); one beyond
float64's range (``1e400``, a 400-digit integer: never written by a dump) reads as
:class:`~ptdbg_ascend.formats.json_numbers.OutOfRange`, so the reader can say which line holds it.

Two ways to write a line, the same text: the dump's hot path fills :data:`RECORD_LINE` and
:data:`STACK_LINE` with the texts of :func:`numbers_text`, :func:`dtype_text`, :func:`shape_text` and
:func:`frame_text` (which it caches) and so never escapes a name (an API name needs no JSON escape);
:func:`record_line` and :func:`stack_line` encode any value with ``json.dumps`` (names read from other
files, the converter).
"""

from __future__ import annotations

import json
from typing import Any, List, NamedTuple, Optional, Sequence, Tuple

from ptdbg_ascend.formats.json_numbers import HOOKS

DUMP_STEP = 0
OVERFLOW_DUMP_STEP = 101  # the legacy marker of overflow records (compare skips their statistics)
_OVERFLOW_ABOVE = 100  # legacy: compare skips the statistics of records with a dump_step above this

# ``RECORD_LINE % (name, line_head(dump_step), dtype text, shape text, numbers text)``: a whole line, newline
# included. The dump's hot loop spells it out (a %-format of a constant compiles to an f-string; through a
# name it costs 50 ns more per record); test/formats/test_pkl.py pins the two to the same text.
RECORD_LINE = '["%s%s%s", %s, %s]\n'
# ``STACK_LINE % (name, ", ".join(frame texts))``: no newline.
STACK_LINE = '["%s", [%s]]'
# A Python scalar's shape, and its text in a line.
SCALAR_SHAPE = "[]"
SCALAR_SHAPE_TEXT = json.dumps(SCALAR_SHAPE)


# --- writing -----------------------------------------------------------------------------------------

def record_line(name: str, dtype: str, shape: Any, statistics: Sequence[Any], dump_step: int = DUMP_STEP) -> str:
    """The text of a record line (no newline) for any JSON values, as ``json.dumps`` writes it: the same
    text as :data:`RECORD_LINE` gives for a plain name. ``dump_step`` defaults to 0 (a dump)."""
    return json.dumps([name, dump_step, [], dtype, shape, statistics])


def line_head(dump_step: int) -> str:
    """The text between a record line's name and its dtype: ``", {dump_step}, [], "``."""
    return f'", {dump_step}, [], "'


def record_text(name: str, dtype: str, shape_text: str, statistics: List[Optional[float]], head: str) -> str:
    """:data:`RECORD_LINE` for a statistics list not formatted yet (one filled after the record was taken);
    ``head`` is :func:`line_head` of the dump step."""
    return RECORD_LINE % (name, head, dtype, shape_text, numbers_text(statistics))


def stack_line(name: str, frames: Sequence[Sequence[Optional[str]]]) -> str:
    """The text of a stack line (no newline) for any names and frames, as ``json.dumps`` writes it: the
    same text as :data:`STACK_LINE` gives for a plain name and :func:`frame_text` frames."""
    return json.dumps([name, frames])


def frame_text(filename: str, lineno: int, function: str, code: Optional[str]) -> str:
    """One frame of a stack line: ``["file", "lineno", "function", "code"]`` (the line number as a string,
    the code null when the source is not found)."""
    return json.dumps([filename, str(lineno), function, code])


def _number(value: Optional[float]) -> str:
    if value is None:
        return "null"
    if value != value:
        return "NaN"
    if value in (float("inf"), float("-inf")):
        return "Infinity" if value > 0 else "-Infinity"
    return repr(float(value))


def numbers_text(statistics: List[Optional[float]]) -> str:
    """The JSON text of a statistics list: what ``json.dumps`` writes, at the cost of one ``repr``."""
    numbers = repr(statistics)
    # repr() is JSON for Python floats, except None, nan and inf, each spelled with an "n"; anything
    # that is not a float (a numpy scalar from a caller) shows a "(" and takes the slow path too.
    if "n" in numbers or "(" in numbers:
        numbers = f"[{', '.join((_number(value) for value in statistics))}]"
    return numbers


def dtype_text(dtype: Any) -> str:
    """A tensor dtype's text in a line: ``str(dtype)`` ("torch.float32")."""
    return str(dtype)


def shape_text(shape: Tuple[int, ...]) -> str:
    """A shape's text in a line: its JSON list ("[16, 3, 32, 32]"; "[]" for a 0-d tensor)."""
    return "[" + ", ".join(str(int(size)) for size in shape) + "]"


# --- reading -----------------------------------------------------------------------------------------

class RecordLine(NamedTuple):
    """The fields of a record line as written: ``shape`` as found (a list, or a scalar's ``"[]"``),
    ``statistics`` the list found (empty when the line has none)."""

    name: str
    dump_step: Any
    dtype: str
    shape: Any
    statistics: List[Any]


def parse_line(text: str) -> Optional[list]:
    """The JSON array of one line; None when the line is not one whose first field is a name (corrupt,
    truncated by a killed run, nested too deep to parse). Numbers beyond float64's range are
    :class:`~ptdbg_ascend.formats.json_numbers.OutOfRange` values."""
    try:
        value = json.loads(text, **HOOKS)
    except (ValueError, RecursionError):  # RecursionError: a line nested thousands of levels deep
        return None
    if not isinstance(value, list) or not value or not isinstance(value[0], str):
        return None
    return value


def record_fields(line: list) -> Optional[RecordLine]:
    """The fields of a parsed record line; None when it has fewer than the 5 a record needs."""
    if len(line) < 5:
        return None
    statistics = list(line[5]) if len(line) > 5 and isinstance(line[5], list) else []
    return RecordLine(line[0], line[1], str(line[3]), line[4], statistics)


def stack_frames(line: list) -> Tuple[Tuple[str, str, str, Optional[str]], ...]:
    """The frames of a parsed stack line, innermost first, as ``(file, line, function, code)`` texts (the
    records' ``Frame``; the code None when absent); frames that are not lists of at least 3 fields are left out."""
    value = line[1] if len(line) > 1 else []
    frames = []
    if isinstance(value, list):
        for frame in value:
            if isinstance(frame, list) and len(frame) >= 3:
                code = frame[3] if len(frame) > 3 else None
                frames.append((str(frame[0]), str(frame[1]), str(frame[2]), None if code is None else str(code)))
    return tuple(frames)


def is_overflow_step(dump_step: Any) -> bool:
    """Whether a line's ``dump_step`` marks an overflow record (above 100; the dump writes 101), whose
    statistics compare skips as the original did."""
    return isinstance(dump_step, int) and dump_step > _OVERFLOW_ABOVE
