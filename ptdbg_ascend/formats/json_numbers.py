"""Numbers in JSON text from other people's files, kept within float64's range.

Python's json turns every integer literal into an int and every other number literal into a float, without
a word when the number is beyond float64's range: ``1e400`` becomes ``inf`` (so a corrupt statistic reads as
an overflow), a 400-digit integer an int that no statistic can be, and a 5000-digit one raises ``ValueError:
Exceeds the limit (4300 digits)``, which fails the whole document for one value. No file this tool reads
holds such a number (the dumps write ``Infinity`` for an infinite statistic), so :data:`HOOKS` (json's
``parse_int``/``parse_float``) parse each such literal as an :class:`OutOfRange` instead: the document
still parses, every reader sees a value that is no int and no float (a statistic of it is no value, a shape
with it is refused, a configuration value of it is the wrong type), and says where it was.

Integers up to float64's largest finite value (about 1.8e308) stay ints, exactly; ``NaN``/``Infinity``/
``-Infinity`` (json's constants) stay floats. An integer literal of more than :data:`MAX_DIGITS` digits is
not converted at all (converting is quadratic in its length). Torch-free.
"""

from __future__ import annotations

import math
from typing import Any, Dict, Union

MAX_DIGITS = 309  # float64's largest finite value has 309 digits: more is always beyond its range
_SHOWN = 24  # a literal up to this long is quoted in messages; a longer one is described by its length


class OutOfRange:
    """A JSON number literal beyond float64's range (``1e400``, a 400-digit integer). Not an int or a float,
    so no reader takes it for a number; ``str()`` describes it (``"1e400"``, ``"a 401-digit integer"``)
    without ever holding more than a few characters of it."""

    __slots__ = ("description",)

    def __init__(self, literal: str) -> None:
        digits = len(literal.lstrip("-"))
        if literal.lstrip("-").isdigit() and digits > _SHOWN:
            self.description = f"a {digits}-digit integer"
        elif len(literal) > _SHOWN:
            self.description = f"a {len(literal)}-character number"
        else:
            self.description = literal

    def __str__(self) -> str:
        return self.description

    def __repr__(self) -> str:
        return f"<{self.description}, beyond float64's range>"


def parse_int(literal: str) -> Union[int, OutOfRange]:
    """json's ``parse_int``: the int, or :class:`OutOfRange` when it lies beyond float64's range."""
    digits = len(literal) - (literal[0] == "-")
    if digits > MAX_DIGITS:
        return OutOfRange(literal)
    value = int(literal)
    if digits == MAX_DIGITS:
        try:
            float(value)
        except OverflowError:
            return OutOfRange(literal)
    return value


def parse_float(literal: str) -> Union[float, OutOfRange]:
    """json's ``parse_float`` (literals with a fraction or an exponent; not ``NaN``/``Infinity``): the float,
    or :class:`OutOfRange` when the literal is beyond float64's range (``1e400`` would be inf)."""
    value = float(literal)
    if math.isinf(value):
        return OutOfRange(literal)
    return value


# keyword arguments of json.loads
HOOKS: Dict[str, Any] = {"parse_int": parse_int, "parse_float": parse_float}
