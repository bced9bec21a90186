"""The visitor of ``ptdbg migrate``: it walks a script's concrete syntax tree (libcst) and collects the legacy
dump calls that are statements of their own, with their arguments bound to the legacy signatures, the imports of
ptdbg_ascend, every name used, and what cannot be rewritten (:class:`~ptdbg_ascend.compat.migrate_sites.Issue`).

Imports libcst, an optional dependency: :mod:`ptdbg_ascend.compat.migrate` imports this module only once it has
checked that libcst is installed, so that importing ``migrate`` (``ptdbg --help``) never needs it.
"""

from __future__ import annotations

import ast
import inspect
from typing import Dict, List, Optional, Set, Tuple

import libcst as cst
import libcst.metadata as metadata

from ptdbg_ascend import legacy
from ptdbg_ascend.call_log import RECORDED_FUNCTIONS, LegacyCall
from ptdbg_ascend.compat.migrate_sites import HOOK_NAMES, NOT_LITERAL, PACKAGE, Issue, LegacySite


class Finder(cst.CSTVisitor):
    """Collects the legacy calls, the imports of ptdbg_ascend and every other name used."""

    METADATA_DEPENDENCIES = (metadata.PositionProvider,)

    def __init__(self, module, path: str) -> None:
        super().__init__()
        self.module, self.path = module, path
        self.star = False
        self.local_names: Dict[str, str] = {}  # local name -> legacy name (explicit imports)
        self.module_aliases: Set[str] = set()
        self.sites: List[LegacySite] = []
        self.issues: List[Issue] = []
        self.handled: Set[int] = set()
        self.names: Set[str] = set()
        self.scopes: List[int] = []

    def line_of(self, node) -> int:
        return self.get_metadata(metadata.PositionProvider, node).start.line

    def visit_ImportFrom(self, node) -> None:
        if node.module is None or self.module.code_for_node(node.module) != PACKAGE:
            return
        if isinstance(node.names, cst.ImportStar):
            self.star = True
            return
        for alias in node.names:
            name = self.module.code_for_node(alias.name)
            local = alias.asname.name.value if alias.asname else name
            self.local_names[local] = name

    def visit_Import(self, node) -> None:
        for alias in node.names:
            if self.module.code_for_node(alias.name) == PACKAGE:
                self.module_aliases.add(alias.asname.name.value if alias.asname else PACKAGE)

    def visit_FunctionDef(self, node) -> None:
        self.scopes.append(id(node))

    def leave_FunctionDef(self, node) -> None:
        self.scopes.pop()

    def visit_Name(self, node) -> None:
        self.names.add(node.value)

    def legacy_name(self, func) -> Tuple[Optional[str], Optional[str]]:
        """(legacy function, module alias used or None) of a call's ``func``; (None, None) if not legacy."""
        if isinstance(func, cst.Name):
            name = self.local_names.get(func.value) or (func.value if self.star else None)
            return (name, None) if name in RECORDED_FUNCTIONS else (None, None)
        if isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name) \
                and func.value.value in self.module_aliases and func.attr.value in RECORDED_FUNCTIONS:
            return func.attr.value, func.value.value
        return None, None

    def visit_SimpleStatementLine(self, node) -> None:
        if len(node.body) != 1 or not isinstance(node.body[0], cst.Expr) \
                or not isinstance(node.body[0].value, cst.Call):
            return
        call = node.body[0].value
        function, alias = self.legacy_name(call.func)
        if function is None:
            return
        self.handled.add(id(call))
        line = self.line_of(node)
        bound = self.bind(function, call, line)
        if bound is not None:
            scope = self.scopes[-1] if self.scopes else None
            self.sites.append(LegacySite(node, function, LegacyCall(function, bound), line, scope, alias))

    def visit_Call(self, node) -> None:
        if id(node) in self.handled:
            return
        function, _ = self.legacy_name(node.func)
        if function is not None:
            self.issues.append(Issue(self.path, self.line_of(node), "{}(...) is used inside an expression; only "
                                     "a statement of its own can be rewritten".format(function)))

    def bind(self, function: str, call, line: int) -> Optional[Dict[str, object]]:
        positional, keywords = [], {}
        for arg in call.args:
            if arg.star:
                self.issues.append(Issue(self.path, line, "{}(...) unpacks {}{}; the tool needs literal arguments"
                                         .format(function, arg.star, self.module.code_for_node(arg.value))))
                return None
            value = self.value(function, arg, len(positional))
            if value is NOT_LITERAL:
                return None
            if arg.keyword is None:
                positional.append(value)
            else:
                keywords[arg.keyword.value] = value
        try:
            bound = inspect.signature(getattr(legacy, function)).bind(*positional, **keywords)
        except TypeError as error:
            self.issues.append(Issue(self.path, line, f"{function}(...): {error}"))
            return None
        bound.apply_defaults()
        return dict(bound.arguments)

    def value(self, function: str, arg, position: int):
        """The Python value of one argument (``position``: its index if positional); NOT_LITERAL after
        recording an issue."""
        code = self.module.code_for_node(arg.value)
        keyword = arg.keyword.value if arg.keyword is not None else None
        if function == "register_hook" and (keyword == "model" or (keyword is None and position == 0)):
            return code  # the model: any expression (the wrappers are global)
        if function == "register_hook" and (keyword == "hook" or (keyword is None and position == 1)):
            node = arg.value
            last = node.value if isinstance(node, cst.Name) else node.attr.value if isinstance(node, cst.Attribute) else ""
            hook = self.local_names.get(last, last)
            if hook in HOOK_NAMES:
                return hook
            self.issues.append(Issue(self.path, self.line_of(arg), "register_hook(...): hook {} is not "
                                     "acc_cmp_dump or overflow_check".format(code)))
            return NOT_LITERAL
        try:
            return ast.literal_eval(code.strip())
        except (ValueError, SyntaxError):
            self.issues.append(Issue(self.path, self.line_of(arg), "{}(...): argument {} is not a literal, so the "
                                     "config cannot be computed from it".format(function, code)))
            return NOT_LITERAL
