"""What ``ptdbg migrate`` finds in a script, as plain data (no libcst needed to import it): the places it cannot
rewrite (:class:`Issue`) and the legacy calls it will (:class:`LegacySite`), with the names both sides of the
rewrite know."""

from __future__ import annotations

from typing import NamedTuple, Optional

from ptdbg_ascend.call_log import LegacyCall

HOOK_NAMES = ("acc_cmp_dump", "overflow_check")
PACKAGE = "ptdbg_ascend"
NOT_LITERAL = object()  # an argument whose value cannot be known from the source (the issue is recorded)


class Issue(NamedTuple):
    """A place the tool could not rewrite."""

    path: str
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.message}"


class LegacySite(NamedTuple):
    """A legacy call that is a statement of its own: the statement, the function, its bound call, its line, the
    function it is in (an id; None: the module) and the module alias it is called through (None: a plain name)."""

    statement: object  # the libcst SimpleStatementLine
    function: str
    call: LegacyCall
    line: int
    scope: Optional[int]
    module_alias: Optional[str]
