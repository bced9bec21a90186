"""``ptdbg migrate train.py``: rewrite the legacy dump calls of a script into the PrecisionDebugger form
plus a ``config.json``, keeping every other byte of the file (libcst, a concrete syntax tree). A msprobe 1.0.4
script gets its msprobe imports rewritten and keeps its config.json (``migrate_msprobe.py``).

The rewrite, statement by statement (each legacy call must be a statement of its own):

================================================  ===============================================
legacy statement                                  becomes
================================================  ===============================================
the first legacy dump call (usually seed_all)     ``debugger = PrecisionDebugger(config_path=...)``
                                                  (it seeds at construction, where seed_all seeded)
later seed_all(...)                               unchanged (``seed_all`` exists in the new API)
set_dump_path / register_hook / set_backward_input  removed (they are in config.json)
set_dump_switch("ON") / set_overflow_check_switch("ON")   ``debugger.start()``
set_dump_switch("OFF") / set_overflow_check_switch("OFF") ``debugger.stop()``
================================================  ===============================================

The config is ``map_calls`` of the calls in source order. Anything the tool cannot rewrite (an argument
that is not a literal, a legacy call inside an expression, calls spread over several functions) is
reported as ``file:line: message`` and nothing is written.

A script nested deeper than ``nesting.MAX_NESTING`` (500) levels, or with a case pattern nested deeper than
``nesting.MAX_PATTERN_NESTING`` (12, weighted), is refused before libcst sees it: libcst's native parser
crashes (SIGSEGV) on deep nesting instead of raising, and takes time exponential in a pattern's nesting
(see ``compat/nesting.py``).
"""

from __future__ import annotations

import difflib
import json
import os
import stat
import tokenize
from typing import List, NamedTuple, Optional, Tuple

from ptdbg_ascend.compat import nesting
from ptdbg_ascend.compat.export import write_config
from ptdbg_ascend.compat.mapping import MappingResult, map_calls
from ptdbg_ascend.compat.migrate_sites import HOOK_NAMES, PACKAGE, Issue, LegacySite
from ptdbg_ascend.call_log import RECORDED_FUNCTIONS
from ptdbg_ascend.errors import DumpPathError, FileFormatError, ParameterError
from ptdbg_ascend.log import logger
from ptdbg_ascend.fs.writes import check_path_text, remove_quietly, temporary_beside, write_all

REMOVABLE_IMPORTS = set(RECORDED_FUNCTIONS) | set(HOOK_NAMES)


class Migration(NamedTuple):
    """The outcome of :func:`migrate_source`. ``ok`` is False when ``issues`` is not empty; then
    ``new_source`` is the original text."""

    path: str
    source: str
    new_source: str
    mapping: MappingResult
    issues: Tuple[Issue, ...]
    # False for a msprobe 1.0.4 script (only its imports change; its own config.json is kept)
    writes_config: bool = True

    @property
    def ok(self) -> bool:
        return not self.issues

    def diff(self) -> str:
        """The unified diff of the script (empty when nothing changes), exactly as the text is: a line is
        what ends at a ``"\\n"`` (Python's ``splitlines`` would also break at a form feed or U+2028, which
        Python's tokenizer does not). Print it with ``terminal.printable_text``: it holds the script's
        own characters."""
        return "".join(difflib.unified_diff(
            _lines(self.source), _lines(self.new_source),
            fromfile="a/" + os.path.basename(self.path), tofile="b/" + os.path.basename(self.path)))


def _lines(text: str) -> List[str]:
    """``text`` cut after each ``"\\n"`` (each piece keeps its line end; the last may have none)."""
    pieces = text.split("\n")
    lines = [piece + "\n" for piece in pieces[:-1]]
    return lines + [pieces[-1]] if pieces[-1] else lines


def _libcst():
    try:
        import libcst
    except ImportError:  # an optional dependency: only `ptdbg migrate` needs it
        raise ParameterError("libcst", "not installed", "pip install libcst (needed by ptdbg migrate)") from None
    return libcst




def migrate_source(source: str, path: str = "train.py", config_path: str = "./config.json") -> Migration:
    """Rewrite the legacy dump calls of ``source`` (the text of ``path``).

    Args:
        source: the script text.
        path: its file name, for messages. Default "train.py".
        config_path: the config path written into ``PrecisionDebugger(config_path=...)``. Default
            "./config.json" (like dump_path, relative to where the script is run).
    """
    cst = _libcst()
    import libcst.metadata as metadata

    check_nesting(source, path)
    try:
        return _migrate_tree(cst, metadata, source, path, config_path)
    except RecursionError:  # libcst's Python side, on a script just within MAX_NESTING
        raise FileFormatError("{}: nested too deeply for the parser (libcst ran out of Python recursion); nothing "
                              "was written. Split the deepest expression into several statements.".format(path)
                              ) from None


def check_nesting(source: str, path: str = "train.py") -> None:
    """Refuse ``source`` (the text of ``path``) when it nests deeper than ``nesting.MAX_NESTING``, or a
    case pattern deeper than ``nesting.MAX_PATTERN_NESTING`` (FileFormatError naming the line), before any
    parser sees it: libcst's native parser crashes on the first and hangs on the second."""
    try:
        nesting.measure(source, limit=nesting.MAX_NESTING, pattern_limit=nesting.MAX_PATTERN_NESTING)
    except nesting.PatternTooDeep as error:
        raise FileFormatError(
            "{}:{}: a case pattern nested more than {} levels deep (each bracket counts one, a mapping two); "
            "libcst's parser takes time exponential in it, so ptdbg migrate does not parse it. Nothing was "
            "written: match the inner parts in a nested match statement.".format(
                path, error.nesting.line, nesting.MAX_PATTERN_NESTING)) from None
    except nesting.TooDeep as error:
        raise FileFormatError(
            "{}:{}: nested more than {} levels deep (each bracket, call, chained operator, lambda or conditional "
            "counts one); deeper scripts crash libcst's parser, so ptdbg migrate does not parse it. Nothing was "
            "written: split that expression into several statements.".format(
                path, error.nesting.line, nesting.MAX_NESTING)) from None
    except tokenize.TokenError as error:
        message = str(error.args[0]) if error.args else ""
        line = error.args[1][0] if len(error.args) > 1 and isinstance(error.args[1], tuple) else 0
        if "EOF in multi-line" in message:
            return  # an unclosed bracket or string at the very end: every token was measured; libcst names the line
        # stopped in the middle (e.g. Python >= 3.12: "too many nested parentheses"): the rest was not measured
        raise FileFormatError(f"{path}:{line}: not valid Python ({message}); nothing was written."
                              ) from None
    except SyntaxError as error:  # an indentation error in the middle: not handed to libcst either
        raise FileFormatError(f"{path}:{error.lineno}: not valid Python ({error.msg}); nothing was written.") from None


def _migrate_tree(cst, metadata, source: str, path: str, config_path: str) -> Migration:
    try:
        module = cst.parse_module(source)
    except cst.ParserSyntaxError as error:
        raise FileFormatError("{}:{}:{}: not valid Python ({}); nothing was written.".format(
            path, error.raw_line, error.raw_column, str(error).splitlines()[0])) from None
    wrapper = metadata.MetadataWrapper(module)
    # Here, not at the top: the finder's module imports libcst, which _libcst() has found installed by now.
    from ptdbg_ascend.compat.migrate_finder import Finder

    finder = Finder(wrapper.module, path)
    wrapper.visit(finder)
    issues = list(finder.issues)
    sites = finder.sites
    scopes = {site.scope for site in sites}
    if len(scopes) > 1:
        issues.extend(Issue(path, site.line, "{}(...): the legacy calls are spread over several functions; the "
                            "debugger object needs them in one function (or all at module level)".format(site.function))
                      for site in sites if site.scope != sites[0].scope)
    mapping = map_calls([site.call for site in sites])
    from ptdbg_ascend.compat.migrate_msprobe import msprobe_imports, rewrite_msprobe_imports

    imports, msprobe_issues = msprobe_imports(cst, wrapper, path)
    issues.extend(msprobe_issues)
    if issues or not (sites or imports):
        return Migration(path, source, source, mapping, tuple(sorted(issues, key=lambda issue: issue.line)))
    if not sites:  # a msprobe 1.0.4 script: its config.json runs as it is
        return Migration(path, source, rewrite_msprobe_imports(cst, wrapper.module).code, mapping, (),
                         writes_config=False)
    variable = next(name for name in ("debugger", "ptdbg_debugger", "ptdbg_debugger_") if name not in finder.names)
    new_module = wrapper.module.visit(_rewriter(cst, sites, variable, config_path))
    if imports:
        new_module = rewrite_msprobe_imports(cst, new_module)
    if finder.local_names:
        new_module = _fix_imports(cst, new_module)
    return Migration(path, source, new_module.code, mapping, ())


def _rewriter(cst, sites: List[LegacySite], variable: str, config_path: str):
    by_statement = {id(site.statement): site for site in sites}
    first = sites[0]

    class Rewriter(cst.CSTTransformer):
        def leave_SimpleStatementLine(self, original, updated):
            site = by_statement.get(id(original))
            if site is None:
                return updated
            prefix = site.module_alias + "." if site.module_alias else ""
            if site is first:
                code = f"{variable} = {prefix}PrecisionDebugger(config_path={json.dumps(config_path)})\n"
            elif site.function == "seed_all":
                return updated
            elif site.function in ("set_dump_switch", "set_overflow_check_switch"):
                switch = site.call.arguments.get("switch")
                code = f"{variable}.{'start' if switch == 'ON' else 'stop'}()\n"
            else:
                return cst.RemoveFromParent()
            statement = cst.parse_statement(code)
            return statement.with_changes(leading_lines=updated.leading_lines,
                                          trailing_whitespace=updated.trailing_whitespace)

    return Rewriter()


def _fix_imports(cst, module):
    """In ``from ptdbg_ascend import a, b``: drop the legacy dump names no longer used, add PrecisionDebugger."""
    used = set()

    class Names(cst.CSTVisitor):
        def visit_ImportFrom(self, node) -> bool:
            return False

        def visit_Name(self, node) -> None:
            used.add(node.value)

    module.visit(Names())

    class Imports(cst.CSTTransformer):
        def leave_ImportFrom(self, original, updated):
            if updated.module is None or module.code_for_node(updated.module) != PACKAGE \
                    or isinstance(updated.names, cst.ImportStar):
                return updated
            kept = []
            for alias in updated.names:
                local = alias.asname.name.value if alias.asname else module.code_for_node(alias.name)
                if module.code_for_node(alias.name) in REMOVABLE_IMPORTS and local not in used:
                    continue
                kept.append(alias)
            if "PrecisionDebugger" in used and not any(module.code_for_node(a.name) == "PrecisionDebugger" for a in kept):
                kept.insert(0, cst.ImportAlias(name=cst.Name("PrecisionDebugger")))
            if not kept:
                return cst.RemoveFromParent()
            separator = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
            names = [alias.with_changes(comma=separator) for alias in kept[:-1]]
            names.append(kept[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT))
            return updated.with_changes(names=names)

    return module.visit(Imports())


def migrate_file(path: str, *, config_path: Optional[str] = None, output: Optional[str] = None,
                 write: bool = False) -> Migration:
    """Migrate the script at ``path``.

    Args:
        path: the legacy script.
        config_path: where config.json goes. Default None: ``config.json`` beside the script (written
            into the script as ``"./config.json"``); an explicit path is written into the script as given.
        output: where the migrated script goes. Default None: over ``path``. A symlink there (or at
            ``path``) is kept and its target rewritten; a symlink at the config path is an error.
        write: False (default) only computes the rewrite; True writes the config and the script, both
            or neither (never when there are issues).
    """
    check_path_text("script", path)
    for parameter, value in (("config_path", config_path), ("output", output)):
        if value is not None:
            check_path_text(parameter, value)
    if not os.path.isfile(path):
        raise ParameterError("script", path, "an existing Python file")
    try:
        # newline="": the text exactly as it is (CRLF line ends too), so the file written keeps every byte
        with open(path, encoding="utf-8", newline="") as handle:
            source = handle.read()
    except (OSError, UnicodeDecodeError) as error:
        raise FileFormatError(f"Cannot read {path} as UTF-8 text: {error}") from None
    config_file = config_path or os.path.join(os.path.dirname(os.path.abspath(path)), "config.json")
    migration = migrate_source(source, path, config_path or "./config.json")
    if write and migration.ok and migration.new_source != source:
        _write_both(migration, config_file if migration.writes_config else None, output or path, path)
    return migration


def _write_both(migration: Migration, config_file: Optional[str], script_file: str, mode_from: str) -> None:
    """Write the migrated script to an unpredictable temporary name beside it (``fs.writes.temporary_beside``,
    ``O_EXCL``: a link planted at a predictable name is never written through), then the config
    (``write_config``), then rename the script into place: a failure before the rename (a config that is a
    symlink included) leaves the script as it was and removes the temporary file. (Not ``replace_file``:
    the config must be written between the script's write and its rename.)

    The script is the user's own file: when ``script_file`` is a symlink, its target (``realpath``) is
    rewritten and the link kept (logged). The new file gets the mode of ``mode_from`` (the original script).
    """
    real = os.path.realpath(script_file)
    if os.path.islink(script_file):
        logger.info("{} is a symlink: the migrated script is written to its target {}; the link is kept.".format(
            script_file, real))
    try:
        mode = stat.S_IMODE(os.stat(mode_from).st_mode)
    except OSError:
        mode = None
    temporary = None
    try:
        descriptor, temporary = temporary_beside(real)
        try:
            if mode is not None:
                os.fchmod(descriptor, mode)  # an executable script stays executable
            write_all(descriptor, migration.new_source.encode("utf-8"))
        finally:
            os.close(descriptor)
        if config_file is not None:  # (None: a msprobe script, whose own config.json is kept)
            write_config(migration.mapping, config_file)
        os.replace(temporary, real)
        temporary = None
    except OSError as error:
        raise DumpPathError(f"Cannot write {script_file}: {error}") from None
    finally:
        if temporary is not None:
            remove_quietly(temporary)
