"""The one start failure of ``multi_run_ut`` whose cause can be named before a worker starts: the script
that calls it at its top level without ``if __name__ == "__main__":``.

spawn and forkserver workers import the main script again (``multiprocessing`` re-runs it as
``__mp_main__``), so an unguarded call would run ``multi_run_ut`` again inside each worker, which dies
while starting (and, before that, writes CSVs of its own). The check reads the main script's source
(``ast``, nothing is executed) and looks at the line of the main script's top-level code that led to the
call: outside an ``if __name__ == "__main__":`` block, it is the cause. When the source cannot be read or
parsed, or the main module is not a file (``python -c``, a notebook), nothing is claimed.
"""

from __future__ import annotations

import ast
import os
import sys
from types import FrameType
from typing import List, Optional, Tuple

from ptdbg_ascend.errors import WorkerProcessError


def check_main_guard(start_method: str, caller: str = "multi_run_ut") -> None:
    """WorkerProcessError when ``caller`` was reached from the main script's top-level code outside an
    ``if __name__ == "__main__":`` block (``start_method`` names how workers start, for the message);
    also when this process is such a worker re-running the script (``multiprocessing`` is importing it)."""
    import multiprocessing.process

    if getattr(multiprocessing.process.current_process(), "_inheriting", False):
        raise WorkerProcessError("{} was called while a worker process imports the main script: put the call under "
                                 "if __name__ == \"__main__\":".format(caller))
    found = _top_level_call(sys._getframe(1))
    if found is None:
        return
    path, line = found
    if _guarded(path, line) is False:
        raise WorkerProcessError(
            "{0} is called by the top-level code of {1} (line {2}) without if __name__ == \"__main__\": its "
            "worker processes ({3}) import {1} again, which would run {0} once more in each worker, and they "
            "die while starting. Put the code that calls {0} under if __name__ == \"__main__\":".format(
                caller, path, line, start_method))


def _top_level_call(frame: Optional[FrameType]) -> Optional[Tuple[str, int]]:
    """(main script path, line) of the main module's ``<module>`` frame on the stack, None when there is
    none (the main module is not a file, or the call does not come from its top-level code)."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if main is None or not isinstance(path, str) or not path.endswith(".py"):
        return None
    while frame is not None:
        if frame.f_globals is vars(main) and frame.f_code.co_name == "<module>":
            return os.path.abspath(path), frame.f_lineno
        frame = frame.f_back
    return None


def _guarded(path: str, line: int) -> Optional[bool]:
    """Whether the top-level statement of ``path`` holding ``line`` lies in an ``if __name__ ==
    "__main__":`` block; None when the source cannot be read or parsed."""
    try:
        with open(path, encoding="utf-8") as handle:
            tree = ast.parse(handle.read(), filename=path)
    except (OSError, SyntaxError, ValueError, UnicodeDecodeError):
        return None
    return _in_guard(tree.body, line, False)


def _in_guard(body: List[ast.stmt], line: int, guarded: bool) -> Optional[bool]:
    for statement in body:
        end = getattr(statement, "end_lineno", None)
        if end is None or not statement.lineno <= line <= end:
            continue
        if isinstance(statement, ast.If):
            inner = guarded or _is_main_test(statement.test)
            found = _in_guard(statement.body, line, inner)
            if found is None:  # in the else branch: that runs when the test is false
                found = _in_guard(statement.orelse, line, guarded)
            return inner if found is None else found
        for field in ("body", "orelse", "finalbody", "handlers"):  # with, try, for, while blocks
            nested = getattr(statement, field, None)
            if isinstance(nested, list) and nested and isinstance(nested[0], (ast.stmt, ast.excepthandler)):
                found = _in_guard([item for item in nested if isinstance(item, ast.stmt)] +
                                  [stmt for handler in nested if isinstance(handler, ast.excepthandler)
                                   for stmt in handler.body], line, guarded)
                if found is not None:
                    return found
        return guarded
    return None


def _is_main_test(test: ast.expr) -> bool:
    """``__name__ == "__main__"`` (either order), also as one operand of an ``and``."""
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        return any(_is_main_test(value) for value in test.values)
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq)):
        return False
    sides = [test.left, test.comparators[0]]
    names = [side for side in sides if isinstance(side, ast.Name) and side.id == "__name__"]
    texts = [side for side in sides if isinstance(side, ast.Constant) and side.value == "__main__"]
    return len(names) == 1 and len(texts) == 1
