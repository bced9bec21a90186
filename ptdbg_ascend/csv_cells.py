"""CSV cells that a spreadsheet never runs: every CSV the tool writes goes through :func:`safe_cell`, and
every reader of our own CSVs through :func:`restore_cell`.

A spreadsheet takes a cell that starts with ``=``, ``+``, ``-``, ``@``, a tab or a carriage return for a
formula (``=HYPERLINK(...)``, ``=cmd|' /C calc'!A0``). Record names, dtype strings, stack lines, API names
and messages come from dumps and CSVs other people made, so such a cell is written with a ``'`` in front
(OWASP's advice for CSV injection): Excel and LibreOffice then show it as text.

Numbers are left alone: a cell that is a plain number (``-0.000123000000``, ``+1e-05``, ``-inf``, ``nan``)
is written as it is, so the metric columns stay numbers. The test is strict (ASCII digits only, no ``_``,
one optional sign, one optional exponent): ``-1_000``, ``-1+2``, ``+A1``, ``-٣`` are not numbers.

The prefix is reversible: a text that itself starts with ``'`` and then one of those characters (or a
second ``'``) gets one too, so :func:`restore_cell` strips exactly the ``'`` that :func:`safe_cell` added
and ``restore_cell(safe_cell(text)) == text`` for every text. Torch-free, and the csv module only.
"""

from __future__ import annotations

import csv
import re
from typing import IO, Any, Dict, Iterable, List, Mapping, Optional, Sequence

QUOTE = "'"
# First characters that make a spreadsheet read a cell as a formula (OWASP: = + - @ tab CR).
FORMULA_STARTS = frozenset("=+-@\t\r")
_NEEDS_QUOTE = FORMULA_STARTS | {QUOTE}  # "'=x" is quoted too, so the prefix stays reversible
_NUMBER = re.compile(r"[+-]?(?:(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|inf|infinity|nan)",
                     re.IGNORECASE)


def is_number_text(text: str) -> bool:
    """Whether ``text`` is a plain number as our reports write them: ``-0.5``, ``+1e-05``, ``.5``,
    ``-inf``, ``NaN`` (ASCII digits, one sign, one exponent; nothing else)."""
    return _NUMBER.fullmatch(text) is not None


def safe_cell(value: Any) -> Any:
    """``value`` as a CSV cell that cannot run: a str starting with ``=``, ``+``, ``-``, ``@``, tab or CR
    that is not a plain number gets a ``'`` in front, as does a str that starts with ``'`` followed by one
    of these or by ``'`` (so :func:`restore_cell` gives it back exactly). Anything else (numbers, None,
    other strs such as ``'x``) is returned unchanged."""
    if not isinstance(value, str) or not value or value[0] not in _NEEDS_QUOTE:
        return value
    if value[0] == QUOTE:  # already text to a spreadsheet; quoted only where restore_cell would strip
        return QUOTE + value if value[1:2] and value[1] in _NEEDS_QUOTE else value
    return value if is_number_text(value) else QUOTE + value


def restore_cell(cell: str) -> str:
    """The text a cell of one of our CSVs stands for: the one ``'`` :func:`safe_cell` added is removed
    (``'=HYPERLINK(...)`` -> ``=HYPERLINK(...)``, ``''x`` -> ``'x``); any other cell is returned as read."""
    if len(cell) > 1 and cell[0] == QUOTE and cell[1] in _NEEDS_QUOTE:
        return cell[1:]
    return cell


def restore_row(row: Sequence[str]) -> List[str]:
    """:func:`restore_cell` of every cell of a ``csv.reader`` row."""
    return [restore_cell(cell) for cell in row]


def restore_dict(row: Mapping[Optional[str], Any]) -> Dict[Optional[str], Any]:
    """:func:`restore_cell` of every str value of a ``csv.DictReader`` row (keys, the titles, are ours
    and never quoted; the overflow list under the ``None`` key is restored too)."""
    restored: Dict[Optional[str], Any] = {}
    for key, value in row.items():
        if isinstance(value, str):
            restored[key] = restore_cell(value)
        elif isinstance(value, list):
            restored[key] = [restore_cell(cell) if isinstance(cell, str) else cell for cell in value]
        else:
            restored[key] = value
    return restored


class SafeWriter:
    """A ``csv.writer`` whose every cell goes through :func:`safe_cell`."""

    def __init__(self, handle: IO[str], **fmtparams: Any) -> None:
        self._writer = csv.writer(handle, **fmtparams)

    def writerow(self, row: Iterable[Any]) -> Any:
        return self._writer.writerow([safe_cell(value) for value in row])

    def writerows(self, rows: Iterable[Iterable[Any]]) -> None:
        for row in rows:
            self.writerow(row)


def writer(handle: IO[str], **fmtparams: Any) -> SafeWriter:
    """The writer every CSV of the tool is written with (``fmtparams`` as for ``csv.writer``; default the
    excel dialect)."""
    return SafeWriter(handle, **fmtparams)
