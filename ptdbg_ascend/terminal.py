"""Text from files, made safe to print: :func:`printable` shows control characters as escapes, and
:func:`excerpt` (a ``repr``) and :func:`shorten` (a text) show at most a few hundred characters of a value.

A stack line, dtype or API name read from someone else's dump may hold terminal escape sequences
(``\\x1b[2J`` clears the screen, ``\\x1b]0;...\\x07`` sets the window title, some terminals answer
queries into the input), a carriage return or backspaces that overwrite what was printed before, or
Unicode bidi controls that reorder what the reader sees. Everything the tool prints that came from a file
goes through :func:`printable` (the package logger's formatter does too, as defence in depth).

Escaped: C0 controls (U+0000-U+001F, tab and newline included unless kept), DEL (U+007F), C1 controls
(U+0080-U+009F) as ``\\x1b``; the bidi embeddings, overrides and isolates (U+202A-U+202E,
U+2066-U+2069) and the line/paragraph separators (U+2028, U+2029) as ``\\u202e``. A backslash is not
doubled: the output is for reading, not for parsing back (a Windows path stays ``C:\\work``).
A value quoted in a message (a name, a shape, an argument) may be megabytes long, or, through YAML
aliases, a billion items held in a few hundred bytes: :func:`excerpt` is its ``repr`` cut at a limit,
built piece by piece so that only what is shown is ever formatted.

Torch-free.
"""

from __future__ import annotations

from typing import Dict, Iterator

_CONTROLS = list(range(0x00, 0x20)) + [0x7F] + list(range(0x80, 0xA0))
_UNICODE_CONTROLS = list(range(0x202A, 0x202F)) + list(range(0x2066, 0x206A)) + [0x2028, 0x2029]


def _table(keep: str) -> Dict[int, str]:
    table = {code: f"\\x{code:02x}" for code in _CONTROLS}
    table.update({code: f"\\u{code:04x}" for code in _UNICODE_CONTROLS})
    for character in keep:
        del table[ord(character)]
    return table


_STRICT = _table("")
_KEEP_NEWLINES = _table("\n")
_KEEP_TABS_AND_NEWLINES = _table("\t\n")


def printable(text: object, keep_newlines: bool = False) -> str:
    """``str(text)`` with its control characters escaped (``"\\x1b[2J"`` -> ``"\\\\x1b[2J"``,
    ``"\\r"`` -> ``"\\\\x0d"``). ``keep_newlines`` (default False: a newline is escaped too, so one item
    stays one line) keeps ``"\\n"`` for multi-line text such as log messages."""
    return str(text).translate(_KEEP_NEWLINES if keep_newlines else _STRICT)


EXCERPT_LIMIT = 255  # characters of a value a message quotes by default: a whole file name (NAME_MAX)
_DEEPEST = 32  # containers nested deeper are shown as "..." (a list holding itself included)
_BIG_INT_BITS = 1024  # beyond float64's range: described by its digit count (repr of a huge int is slow or refused)


def excerpt(value: object, limit: int = EXCERPT_LIMIT) -> str:
    """``repr(value)`` when it has at most ``limit`` characters (default 255); otherwise its first ``limit``
    characters and ``...``, with the length of a long string (``'aaaa...'... (5000 characters)``). Only
    the part shown is formatted: a list of a billion items or a 5000-digit int costs no more than a short one."""
    if isinstance(value, str) and len(value) > limit:
        return f"{value[:limit]!r}... ({len(value)} characters)"
    pieces, length = [], 0
    for piece in _pieces(value, 0, limit):
        pieces.append(piece)
        length += len(piece)
        if length > limit:
            return "".join(pieces)[:limit] + "..."
    return "".join(pieces)


def shorten(text: str, limit: int = EXCERPT_LIMIT) -> str:
    """``text`` itself (no quotes) when it has at most ``limit`` characters (default 255), else its first
    ``limit`` and ``... (5000 characters)``: a name from a file, shown in running text."""
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def _pieces(value: object, depth: int, limit: int) -> Iterator[str]:
    """The text of ``repr(value)`` in pieces, lazily (the caller stops once it has enough)."""
    kind = type(value)
    if kind in (list, tuple, set, frozenset, dict):
        if depth >= _DEEPEST:
            yield "..."
            return
        if not value:
            yield {list: "[]", tuple: "()", set: "set()", frozenset: "frozenset()", dict: "{}"}[kind]
            return
        opening, closing = {list: ("[", "]"), tuple: ("(", ")"), set: ("{", "}"), frozenset: ("frozenset({", "})"),
                            dict: ("{", "}")}[kind]
        yield opening
        for index, item in enumerate(value.items() if kind is dict else value):
            if index:
                yield ", "
            if kind is dict:
                yield from _pieces(item[0], depth + 1, limit)
                yield ": "
                item = item[1]
            yield from _pieces(item, depth + 1, limit)
        yield ("," if kind is tuple and len(value) == 1 else "") + closing
    elif isinstance(value, str):
        yield repr(value[:limit + 1])  # never more than is shown
    elif isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > _BIG_INT_BITS:
        yield f"<an integer of about {int(value.bit_length() * 0.30103) + 1} digits>"
    else:
        yield repr(value)


def printable_text(text: object) -> str:
    """Multi-line text from a file shown as it is laid out (a script's diff): escaped as :func:`printable`
    does, but its newlines and tabs stay (neither moves the cursor back over what is shown). A carriage
    return is escaped even before a newline (a CRLF line end shows as ``"\\x0d"``, as ``git diff`` shows
    ``^M``), and so is every other line separator (form feed, U+2028...): one line of the text is one line
    on the screen."""
    return str(text).translate(_KEEP_TABS_AND_NEWLINES)
