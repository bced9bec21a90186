"""How deeply a script nests, measured from its tokens before any parser sees it.

``ptdbg migrate`` parses scripts with libcst, whose native parser recurses once per level of nesting and
overflows the C stack on deep scripts: the process dies with SIGSEGV (measured with libcst 1.0.1 and an
8 MiB stack: about 1280 nested brackets, 3100 chained ``lambda``, 4200 chained conditionals, 6100
operators in one chain, 8700 ``not``/unary minus). Python's own ``ast`` is no safe yardstick either:
it refuses 200 nested brackets but raises only ``RecursionError``/``MemoryError`` for the rest, and old
interpreters (3.8) could crash on deep expressions themselves. So the depth is measured here from the
token stream (``tokenize``, an iterative scanner: no recursion, whatever the input), and a script beyond
:data:`MAX_NESTING` is refused with a clear message.

The measure is an upper bound of the depth of the syntax tree: at each token, the sum over the open
brackets of one level each plus the operators met since the last comma at that level (``a + b + c`` nests
as ``(a + b) + c``; a call or subscript after an operand, each ``.``, ``not``, ``lambda``, ``if``/``else``
of a conditional expression, ``await``, adjacent string literals, each indentation level (twice) and each
``elif`` of a chain count as one: an ``elif`` is an ``if`` nested in the ``else`` of the one before).
The limit, 500, is well under the crash: brackets, the costliest level, take about 6.5 KiB of native stack
each (500 of them about 3.3 MiB of the usual 8 MiB). It refuses no hand-written code: over the 15,800 files
of CPython's library, torch and sympy, 99% measure under 41 and only three generated tables (constants of
sympy, CPython's pydoc topics) exceed 500. Python itself refuses more than 200 nested brackets; between the
two limits libcst's Python side may run out of recursion, which ``migrate`` reports as clearly.
"""

from __future__ import annotations

import io
import re
import tokenize
from typing import List, NamedTuple, Optional

MAX_NESTING = 500
_OPEN, _CLOSE = "([{", ")]}"
_OPERATORS = frozenset(("+", "-", "*", "/", "//", "%", "**", "@", "<<", ">>", "&", "|", "^", "~", "<", ">", "<=",
                        ">=", "==", "!=", ".", ":=", "->"))
_KEYWORDS = frozenset(("not", "and", "or", "if", "else", "lambda", "await", "in", "is", "for", "yield"))
_SEPARATORS = frozenset((",", ";"))
_INDENT_WEIGHT = 2  # a block level is a statement and its body in the tree
# f-string openers and closers of Python >= 3.12 (3.14: t-strings); absent before
_STRING_OPEN = frozenset(t for t in (getattr(tokenize, "FSTRING_START", None), getattr(tokenize, "TSTRING_START", None))
                         if t is not None)
_STRING_CLOSE = frozenset(t for t in (getattr(tokenize, "FSTRING_END", None), getattr(tokenize, "TSTRING_END", None))
                          if t is not None)
_FIELD_OPERATOR = re.compile(r"[-+*/%@&|^~<>=.]|\b(?:not|and|or|if|else|lambda|await|in|is|for)\b")
_PREFIX = re.compile(r"^[A-Za-z]*")


class Nesting(NamedTuple):
    """The deepest point of a script: ``depth`` (see the module doc) at ``line``."""

    depth: int
    line: int


class TooDeep(Exception):
    """Raised by :func:`measure` with ``limit``: the script nests deeper (``nesting``) than allowed."""

    def __init__(self, nesting: Nesting) -> None:
        super().__init__(nesting)
        self.nesting = nesting


def measure(source: str, limit: Optional[int] = None) -> Nesting:
    """The deepest nesting of ``source``. With ``limit``, stops at the first point deeper than it and
    raises :class:`TooDeep`. Raises ``tokenize.TokenError``/``SyntaxError`` for text that is not Python
    (an unclosed bracket or string; on Python >= 3.12 also more than 200 nested brackets)."""
    deepest = Nesting(0, 0)
    saved: List[int] = []  # operators of the enclosing levels' current segments
    enclosing = 0  # sum over the open levels of (1 + their operators)
    operators = 0  # in the current segment of the innermost level
    chains = [0]  # per indentation level: the elif statements of the chain in progress there
    previous = None  # the last significant token (type, text)
    line_start = True  # the next significant token starts a logical line
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        kind, text = token.type, token.string
        extra = 0
        if kind == tokenize.INDENT:
            chains.append(0)
            continue
        if kind == tokenize.DEDENT:
            if len(chains) > 1:
                chains.pop()
            continue
        if kind == tokenize.NEWLINE:
            operators, saved, enclosing, line_start = 0, [], 0, True
            continue
        if kind in (tokenize.NL, tokenize.COMMENT, tokenize.ENDMARKER):
            continue
        if line_start:
            line_start = False
            if text == "elif":
                chains[-1] += 1
            elif text != "else":
                chains[-1] = 0
        if kind in _STRING_OPEN or (kind == tokenize.OP and text in _OPEN):
            if kind == tokenize.OP and _is_operand(previous):
                operators += 1  # a call or subscript nests its target
            saved.append(operators)
            enclosing += 1 + operators
            operators = 0
        elif kind in _STRING_CLOSE or (kind == tokenize.OP and text in _CLOSE):
            if saved:
                operators = saved.pop()
                enclosing -= 1 + operators
        elif kind == tokenize.OP and text in _SEPARATORS:
            operators = 0
        elif (kind == tokenize.OP and text in _OPERATORS) or (kind == tokenize.NAME and text in _KEYWORDS):
            operators += 1
        elif kind == tokenize.STRING:
            if previous is not None and previous[0] == tokenize.STRING:
                operators += 1  # "a" "b": adjacent literals nest as a concatenation
            extra = _fstring_depth(text)
        previous = (kind, text)
        depth = (len(chains) - 1) * _INDENT_WEIGHT + sum(chains) + enclosing + operators + extra
        if depth > deepest.depth:
            deepest = Nesting(depth, token.start[0])
            if limit is not None and depth > limit:
                raise TooDeep(deepest)
    return deepest


def _is_operand(token: Optional[tuple]) -> bool:
    if token is None:
        return False
    kind, text = token
    if kind == tokenize.NAME:
        return text not in _KEYWORDS and text not in ("return", "yield", "assert", "del", "import", "from",
                                                      "raise", "with", "as", "elif", "while", "case", "match")
    return (kind in (tokenize.NUMBER, tokenize.STRING) or kind in _STRING_CLOSE
            or (kind == tokenize.OP and text in _CLOSE))


def _fstring_depth(text: str) -> int:
    """The nesting inside the replacement fields of an f-string token (Python < 3.12 keeps a whole
    f-string in one token; libcst parses its fields): per field, its deepest bracket plus every operator
    in it (an upper bound). 0 for other strings."""
    prefix = _PREFIX.match(text).group(0)
    if "f" not in prefix.lower() and "t" not in prefix.lower():
        return 0
    body = text[len(prefix):]
    quote = body[:3] if body[:3] in ('"""', "'''") else body[:1]
    body = body[len(quote):len(body) - len(quote)]
    deepest, start, depth, inner_quote, index = 0, 0, 0, "", 0
    while index < len(body):
        char = body[index]
        if depth == 0:
            if body.startswith("{{", index) or body.startswith("}}", index):
                index += 2
                continue
            if char == "{":
                depth, start, bracket_max = 1, index + 1, 1
        elif inner_quote:
            if body.startswith(inner_quote, index):
                index += len(inner_quote)
                inner_quote = ""
                continue
        elif char in "'\"":
            inner_quote = char * 3 if body.startswith(char * 3, index) else char
            index += len(inner_quote)
            continue
        elif char in _OPEN:
            depth += 1
            bracket_max = max(bracket_max, depth)
        elif char in _CLOSE:
            depth -= 1
            if depth == 0:
                field = body[start:index]
                deepest = max(deepest, bracket_max + len(_FIELD_OPERATOR.findall(field)))
        index += 1
    return deepest
