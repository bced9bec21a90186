"""Text from files, made safe to print: :func:`printable` shows control characters as escapes.

A stack line, dtype or API name read from someone else's dump may hold terminal escape sequences
(``\\x1b[2J`` clears the screen, ``\\x1b]0;...\\x07`` sets the window title, some terminals answer
queries into the input), a carriage return or backspaces that overwrite what was printed before, or
Unicode bidi controls that reorder what the reader sees. Everything the tool prints that came from a file
goes through :func:`printable` (the package logger's formatter does too, as defence in depth).

Escaped: C0 controls (U+0000-U+001F, tab and newline included unless kept), DEL (U+007F), C1 controls
(U+0080-U+009F) as ``\\x1b``; the bidi embeddings, overrides and isolates (U+202A-U+202E,
U+2066-U+2069) and the line/paragraph separators (U+2028, U+2029) as ``\\u202e``. A backslash is not
doubled: the output is for reading, not for parsing back (a Windows path stays ``C:\\work``).
Torch-free.
"""

from __future__ import annotations

from typing import Dict

_CONTROLS = list(range(0x00, 0x20)) + [0x7F] + list(range(0x80, 0xA0))
_UNICODE_CONTROLS = list(range(0x202A, 0x202F)) + list(range(0x2066, 0x206A)) + [0x2028, 0x2029]


def _table(keep: str) -> Dict[int, str]:
    table = {code: "\\x{:02x}".format(code) for code in _CONTROLS}
    table.update({code: "\\u{:04x}".format(code) for code in _UNICODE_CONTROLS})
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


def printable_text(text: object) -> str:
    """Multi-line text from a file shown as it is laid out (a script's diff): escaped as :func:`printable`
    does, but its newlines and tabs stay (neither moves the cursor back over what is shown). A carriage
    return is escaped even before a newline (a CRLF line end shows as ``"\\x0d"``, as ``git diff`` shows
    ``^M``), and so is every other line separator (form feed, U+2028...): one line of the text is one line
    on the screen."""
    return str(text).translate(_KEEP_TABS_AND_NEWLINES)
