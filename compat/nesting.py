"""How deeply a script nests, measured from its tokens before any parser sees it.

``ptdbg migrate`` parses scripts with libcst, whose native parser recurses once per level of nesting and
overflows the C stack on deep scripts: the process dies with SIGSEGV (measured with libcst 1.0.1 and an
8 MiB stack: about 1280 nested brackets, 3170 chained ``lambda`` with or without parameters, 4200 chained
conditionals, 6100 operators in one chain, 8700 ``not``/unary minus). Python's own ``ast`` is no safe
yardstick either: it refuses 200 nested brackets but raises only ``RecursionError``/``MemoryError`` for
the rest, and old interpreters (3.8) could crash on deep expressions themselves. So the depth is measured
here from the token stream (``tokenize``, an iterative scanner: no recursion, whatever the input), and a
script beyond :data:`MAX_NESTING` is refused with a clear message.

The measure is an upper bound of the depth of the syntax tree: at each token, the sum over the open
brackets of one level each plus the operators met since the last comma at that level (``a + b + c`` nests
as ``(a + b) + c``; a call or subscript after an operand, each ``.``, ``not``, ``lambda``, ``if``/``else``
of a conditional expression, ``for``/``in`` of a comprehension, ``await``, adjacent string literals, each
indentation level (twice) and each ``elif`` of a chain count as one: an ``elif`` is an ``if`` nested in the
``else`` of the one before). A comma ends the siblings before it, but not inside a lambda's parameters
(``lambda a, b: lambda a, b: ...`` nests on across them) nor a ``for`` target (``for a, b in``). Inside an
f-string's field (one token before Python 3.12) every token counts one, since any of them may nest the
next. The limit, 500, is well under the crash: brackets, the costliest level, take about 6.5 KiB of native
stack each (500 of them about 3.3 MiB of the usual 8 MiB). It refuses no hand-written code: over the
15,600 Python files of CPython's library and site-packages (torch and sympy among them), 99% measure
under 43 and only three generated tables (constants of sympy, CPython's pydoc topics) exceed 500. Python
itself refuses more than 200 nested brackets; between the two limits libcst's Python side may run out of
recursion, which ``migrate`` reports as clearly.

Case patterns get a bound of their own, :data:`MAX_PATTERN_NESTING`: libcst does not crash on them but
backtracks, in a time exponential in their nesting (each bracket of a pattern about doubles it, a
mapping's about quadruples it: a sequence pattern 20 deep took 9 s, a mapping pattern 11 deep 23 s).
:func:`measure_patterns` weighs a pattern's brackets (a mapping two, others one); the deepest pattern of
those 15,600 files weighs 6, and the slowest of 60 random mixtures at the limit parsed in 0.2 s.
"""

from __future__ import annotations

import io
import re
import tokenize
from typing import List, NamedTuple, Optional, Tuple

MAX_NESTING = 500
MAX_PATTERN_NESTING = 12  # weighted (a mapping counts two): libcst parses such a pattern in well under a second
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
_FIELD_TOKEN = re.compile(r"\w+|\S")  # at least one per token of a field: a bound of its depth
_PREFIX = re.compile(r"^[A-Za-z]*")
# what follows a ``case`` starting a line when it is a name (assigned, an attribute...), not a case clause
_NOT_A_PATTERN = frozenset(("=", ".", ",", ":", ";", ")", "]", "}", "+=", "-=", "*=", "/=", "//=", "%=", "**=",
                            "@=", "&=", "|=", "^=", ">>=", "<<="))
_PATTERN_WEIGHT = {"{": 2, "(": 1, "[": 1}  # measured: a mapping level multiplies libcst's time by ~4, others ~2


class Nesting(NamedTuple):
    """The deepest point of a script: ``depth`` (see the module doc) at ``line``."""

    depth: int
    line: int


class TooDeep(Exception):
    """Raised by :func:`measure` with ``limit``: the script nests deeper (``nesting``) than allowed."""

    def __init__(self, nesting: Nesting) -> None:
        super().__init__(nesting)
        self.nesting = nesting


class PatternTooDeep(TooDeep):
    """Raised by :func:`measure` with ``pattern_limit``: a case pattern nests deeper (``nesting``, weighed
    as :func:`measure_patterns` does) than allowed."""


class _Level:
    """One bracket level (or the logical line itself) while scanning. ``operators``: the nesting met in
    its current segment (since the last comma); ``lambdas``: lambda headers whose ``:`` has not come yet;
    ``target``: inside the target of a ``for`` (up to its ``in``). A comma inside a lambda's parameters or
    a ``for`` target does not end what encloses them, so it does not end the segment there."""

    __slots__ = ("operators", "lambdas", "target")

    def __init__(self) -> None:
        self.operators, self.lambdas, self.target = 0, 0, False

    def separate(self, text: str) -> None:
        """A ``,`` or ``;`` at this level: a new segment begins, unless the comma sits in a lambda's
        parameters or a ``for`` target (a ``;`` always ends the statement)."""
        if text == ";" or not (self.lambdas or self.target):
            self.operators, self.lambdas, self.target = 0, 0, False


class _Pattern:
    """The case pattern of a logical line that starts with ``case``: the brackets open in it (their
    weights), from ``case`` up to its guard (``if``) or its ``:``. ``complete``: the ``:`` came, so the
    line is a case clause; a ``case`` that turns out to be a name (assigned to, an attribute...) is dropped."""

    __slots__ = ("weights", "depth", "deepest", "guarded", "complete")

    def __init__(self) -> None:
        self.weights: List[int] = []
        self.depth = 0
        self.deepest = Nesting(0, 0)
        self.guarded = False
        self.complete = False

    def add(self, kind: int, text: str, at_line_level: bool, line: int) -> bool:
        """Take one more token of the line; False when it shows the line is not a case clause."""
        if kind == tokenize.OP and text in _PATTERN_WEIGHT and not self.guarded:
            self.weights.append(_PATTERN_WEIGHT[text])
            self.depth += self.weights[-1]
            if self.depth > self.deepest.depth:
                self.deepest = Nesting(self.depth, line)
        elif kind == tokenize.OP and text in _CLOSE and self.weights:
            self.depth -= self.weights.pop()
        elif at_line_level:
            if (kind == tokenize.OP and text == "=") or (kind == tokenize.NAME and text == "lambda"):
                return False  # ``case[...] = ...``, or an expression statement: no pattern here
            if kind == tokenize.OP and text == ":":
                self.complete = True
            elif kind == tokenize.NAME and text == "if":
                self.guarded = True  # the guard is an expression: measured as any other, not as a pattern
        return True


def measure(source: str, limit: Optional[int] = None, pattern_limit: Optional[int] = None) -> Nesting:
    """The deepest nesting of ``source``. With ``limit``, stops at the first point deeper than it and
    raises :class:`TooDeep`; with ``pattern_limit``, raises :class:`PatternTooDeep` at the first case
    clause whose pattern nests deeper (as :func:`measure_patterns` weighs it). Both default to None: no
    limit. Raises ``tokenize.TokenError``/``SyntaxError`` for text that is not Python (an unclosed
    bracket or string; on Python >= 3.12 also more than 200 nested brackets)."""
    return _scan(source, limit, pattern_limit)[0]


def measure_patterns(source: str) -> Nesting:
    """The deepest case pattern of ``source`` (``Nesting(0, 0)`` without one): per case clause, the most
    brackets open at once in its pattern, a mapping's ``{`` counting two and any other bracket one."""
    return _scan(source, None, None)[1]


def _scan(source: str, limit: Optional[int], pattern_limit: Optional[int]) -> Tuple[Nesting, Nesting]:
    """(the deepest nesting, the deepest case pattern) of ``source``, raising at the limits given."""
    scanner = _Scanner(limit, pattern_limit)
    layout, step = scanner.layout, scanner.step  # bound once: this loop runs per token
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        kind = token.type
        if kind in _LAYOUT:
            layout(kind)
        else:
            step(kind, token.string, token.start[0])
    return scanner.deepest, scanner.deepest_pattern


# The tokens that only lay the code out (indentation, line ends, comments): they nest nothing themselves.
_LAYOUT = frozenset((tokenize.INDENT, tokenize.DEDENT, tokenize.NEWLINE, tokenize.NL, tokenize.COMMENT,
                     tokenize.ENDMARKER))


class _Scanner:
    """The state of :func:`_scan` between two tokens, and what each token does to it."""

    def __init__(self, limit: Optional[int], pattern_limit: Optional[int]) -> None:
        self.limit, self.pattern_limit = limit, pattern_limit
        self.deepest, self.deepest_pattern = Nesting(0, 0), Nesting(0, 0)
        self.saved: List[_Level] = []  # the enclosing levels, each as it was when its inner bracket opened
        self.level = _Level()  # the innermost level
        self.enclosing = 0  # sum over the enclosing levels of (1 + their operators)
        self.chains = [0]  # per indentation level: the elif statements of the chain in progress there
        self.previous: Optional[tuple] = None  # the last significant token (type, text)
        self.line_start = True  # the next significant token starts a logical line
        self.pattern: Optional[_Pattern] = None  # while a line that starts with ``case`` may be a case clause

    def step(self, kind: int, text: str, line: int) -> None:
        """A token that is not only layout (:data:`_LAYOUT`)."""
        if self.line_start:
            self._start_line(kind, text)
        elif self.pattern is not None and not self.pattern.complete:
            self._follow_pattern(kind, text, line)
        extra = self._nest(kind, text)
        self.previous = (kind, text)
        depth = (len(self.chains) - 1) * _INDENT_WEIGHT + sum(self.chains) + self.enclosing + \
            self.level.operators + extra
        if depth > self.deepest.depth:
            self.deepest = Nesting(depth, line)
            if self.limit is not None and depth > self.limit:
                raise TooDeep(self.deepest)

    def layout(self, kind: int) -> None:
        """A token of :data:`_LAYOUT`: an indentation opens or closes an elif chain's level, a logical line's end
        closes everything; a comment or a blank line nests nothing."""
        if kind == tokenize.INDENT:
            self.chains.append(0)
        elif kind == tokenize.DEDENT:
            if len(self.chains) > 1:
                self.chains.pop()
        elif kind == tokenize.NEWLINE:
            self.level, self.saved, self.enclosing, self.line_start = _Level(), [], 0, True
            self.pattern, self.previous = None, None

    def _start_line(self, kind: int, text: str) -> None:
        """A logical line's first token: an ``elif`` lengthens the chain of its indentation level (anything but
        ``else`` ends it), a ``case`` may open a case clause."""
        self.line_start = False
        if text == "elif":
            self.chains[-1] += 1
        elif text != "else":
            self.chains[-1] = 0
        if kind == tokenize.NAME and text == "case":
            self.pattern = _Pattern()

    def _follow_pattern(self, kind: int, text: str, line: int) -> None:
        """A token of a line that may be a case clause: it is none after ``case`` used as a name (``case = 1``)
        or a token no pattern holds; a complete pattern deeper than any before is the deepest."""
        pattern = self.pattern
        if self.previous == (tokenize.NAME, "case") and kind == tokenize.OP and text in _NOT_A_PATTERN:
            self.pattern = None
        elif not pattern.add(kind, text, not self.saved, line):
            self.pattern = None
        elif pattern.complete and pattern.deepest.depth > self.deepest_pattern.depth:
            self.deepest_pattern = pattern.deepest
            if self.pattern_limit is not None and self.deepest_pattern.depth > self.pattern_limit:
                raise PatternTooDeep(self.deepest_pattern)

    def _nest(self, kind: int, text: str) -> int:
        """What the token opens, closes or adds to the innermost level; returns the extra depth of an f-string's
        own nesting (0 for anything else)."""
        level, previous = self.level, self.previous
        if kind in _STRING_OPEN or (kind == tokenize.OP and text in _OPEN):
            if kind in _STRING_OPEN and _is_string(previous):
                level.operators += 1  # f"a" f"b" (Python >= 3.12 tokens): a concatenation nests
            elif kind == tokenize.OP and _is_operand(previous):
                level.operators += 1  # a call or subscript nests its target
            self.saved.append(level)
            self.enclosing += 1 + level.operators
            self.level = _Level()
        elif kind in _STRING_CLOSE or (kind == tokenize.OP and text in _CLOSE):
            if self.saved:
                self.level = self.saved.pop()
                self.enclosing -= 1 + self.level.operators
        elif kind == tokenize.OP and text in _SEPARATORS:
            level.separate(text)
        elif kind == tokenize.OP and text == ":":
            if level.lambdas:
                level.lambdas -= 1  # the parameters end; the body stays nested in the lambda
        elif (kind == tokenize.OP and text in _OPERATORS) or (kind == tokenize.NAME and text in _KEYWORDS):
            level.operators += 1
            if text == "lambda":
                level.lambdas += 1
            elif text == "for":
                level.target = True
            elif text == "in":
                level.target = False
        elif kind == tokenize.STRING:
            if _is_string(previous):
                level.operators += 1  # "a" "b": adjacent literals nest as a concatenation
            return _fstring_depth(text)
        return 0


def _is_string(token: Optional[tuple]) -> bool:
    return token is not None and (token[0] == tokenize.STRING or token[0] in _STRING_CLOSE)


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
    f-string in one token; libcst parses its fields): per field, one for the field plus one per token in
    it, the largest of them. Any token of a field may nest the next (a call, a subscript, an adjacent
    literal, a lambda's parameters), so only their count bounds the depth; fields of real code hold a
    few dozen at most. 0 for other strings."""
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
                depth, start = 1, index + 1
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
        elif char in _CLOSE:
            depth -= 1
            if depth == 0:
                deepest = max(deepest, 1 + len(_FIELD_TOKEN.findall(body, start, index)))
        index += 1
    if depth > 0:  # a field left open (not valid Python): bounded all the same
        deepest = max(deepest, 1 + len(_FIELD_TOKEN.findall(body, start)))
    return deepest
