"""What ``ptdbg convert`` accepts of a record's values, and how much it may write for them.

A pkl or dump.json comes from someone else: a scalar record may hold another kind of value (``NaN`` in an
int record, a string in a float one), a shape may be ``["x"]``, a statistic ``1e400``, an index ``10**12``, a
name may be too long for its tensor file. Each is one record's problem: the converter skips that record (or
its tensor, or that statistic) with a warning naming it, and converts the rest. Nothing here reads or writes
a file. The warnings that say what was skipped are here too (:func:`skip`, :func:`without_tensor`). Torch-free.
"""

from __future__ import annotations

import math
from typing import Any, List, Optional, Sequence, Tuple

from ptdbg_ascend.formats.records import as_shape, file_name_problem
from ptdbg_ascend.formats.json_numbers import OutOfRange
from ptdbg_ascend.log import logger
from ptdbg_ascend.terminal import excerpt, shorten

# Nulls padded into dump.json lists for arguments the pkl does not hold (filtered values): at most this many in
# all, plus PADDING_PER_LINE for each line of the pkl, so what is written stays proportional to what is read
# (an index of 10**12 asked for 10**12 nulls).
PADDING = 1000000
PADDING_PER_LINE = 64
KIND_LIMIT = 80  # characters of a value kind (a dump.json "type") kept for the count of dropped values
_INT64 = 2 ** 63


SCALAR_TYPES = {"<class 'int'>": "int", "<class 'float'>": "float", "<class 'bool'>": "bool"}  # pkl dtype -> kind
LEGACY_SCALAR_DTYPES = {value: key for key, value in SCALAR_TYPES.items()}


def unsafe_name(name: Any, suffix: str = "") -> Optional[str]:
    """Why the name from an input file cannot become a file name (None when it can)."""
    if not isinstance(name, str):
        return f"the name {excerpt(name)} is not a string"
    return file_name_problem(name + suffix)


def skip(where: str, what: str, name: Any, problem: str) -> None:
    """The warning of a record (or entry) not converted: ``{where}: skipped {what} {name}: {problem}; ...``."""
    logger.warning(f"{where}: skipped {what} {excerpt(name)}: {problem}; nothing was converted for it.")


def without_tensor(where: str, record: str, problem: str) -> None:
    """The warning of a record converted without its tensor file."""
    logger.warning(f"{where}: record {shorten(record)} keeps its statistics but not its tensor: {problem}.")


def shown(value: Any) -> str:
    """A value from the file as a message shows it: bounded, and a number beyond float64 by its description."""
    return str(value) if isinstance(value, OutOfRange) else excerpt(value)


def scalar_value(kind: str, value: Any) -> Tuple[Any, Optional[str]]:
    """``(value as a scalar of kind "int"/"float"/"bool" holds it, None)``, or ``(None, why not)``.

    Accepted as the dumps write them: an int record holds an int or an integral finite float (the legacy
    statistics are floats: ``3.0``) within int64; a bool record a bool, or 0/1; a float record any int or
    float (NaN and infinities included). ``None`` (no value) stays None. Anything else (NaN in an int record,
    ``"1.5"`` in a float one, ``0.5`` in a bool one, a number beyond float64) is refused."""
    if value is None:
        return None, None
    kind_of = type(value)
    if kind == "float" and kind_of in (int, float):
        return float(value), None
    if kind == "int" and (kind_of is int or (kind_of is float and math.isfinite(value) and value.is_integer())) \
            and -_INT64 <= value < _INT64:
        return int(value), None
    if kind == "bool" and (kind_of is bool or (kind_of in (int, float) and value in (0, 1))):
        return bool(value), None
    return None, f"recorded as {kind} but holds {shown(value)}"


def tensor_shape(value: Any) -> Tuple[Optional[List[int]], Optional[str]]:
    """``(shape, None)`` of a tensor record (a missing one is ``[]``), or ``(None, why not)``: a shape must be
    a list of integers from 0 to 2**63 - 1 (``formats.records.as_shape``)."""
    if value is None:
        return [], None
    if not isinstance(value, list):
        return None, f"shape {shown(value)} is not a list of non-negative integers (below 2**63)"
    try:
        return list(as_shape(value)), None
    except ValueError as error:
        return None, str(error)


def statistics(values: Sequence[Any], record: str, names: Sequence[str]) -> Tuple[List[Any], List[str]]:
    """The statistics to write for ``record`` (``values`` in ``names``' order, as found: legacy placeholders
    such as ``"Nan"`` and ``[]`` pass unchanged) with each number beyond float64's range written as null, and
    one sentence for each such number."""
    kept, said = [], []
    for name, value in zip(names, values):
        if isinstance(value, OutOfRange):
            said.append(f"the {name} of {record} is {value}, beyond float64's range: converted as null")
            value = None
        kept.append(value)
    return kept, said


def kind_label(kind: Any) -> str:
    """A value kind (a dump.json leaf's ``type``) as counted among the dropped values: at most KIND_LIMIT
    characters of it (escaped when printed)."""
    return shorten(kind if isinstance(kind, str) else excerpt(kind), KIND_LIMIT)


class Padding:
    """The nulls one conversion may still pad into lists: PADDING plus PADDING_PER_LINE per pkl line."""

    def __init__(self, lines: int) -> None:
        self.allowed = PADDING + PADDING_PER_LINE * lines
        self.left = self.allowed

    def take(self, needed: int, index: int) -> Optional[str]:
        """Take ``needed`` nulls for an index ``index``; why not when there is not room for them."""
        if needed > self.left:
            return ("its index {} would pad its list with {} nulls, more than the {} this conversion may pad "
                    "({} and {} per line of the file)".format(index, needed, self.allowed, PADDING, PADDING_PER_LINE))
        self.left -= needed
        return None
