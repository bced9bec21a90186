"""``ptdbg migrate`` on a msprobe 1.0.4 script: its imports of msprobe become imports of ptdbg_ascend, and nothing
else changes. The script's ``PrecisionDebugger(config_path=...)``, ``start``/``stop``/``step``, ``monitor(model)``
(grad_probe) and its ``config.json`` (every task: statistics, tensor, overflow_check, run_ut, grad_probe,
free_benchmark) run as they are, so no config is written.

================================================================  ==========================================
msprobe 1.0.4                                                     becomes
================================================================  ==========================================
``from msprobe.pytorch import PrecisionDebugger, seed_all``        ``from ptdbg_ascend import ...`` (same names)
``from msprobe.pytorch.grad_probe.grad_compare import GradComparator``  ``from ptdbg_ascend import GradComparator``
``from msprobe.pytorch import ...`` of any other name               an issue: nothing is written
================================================================  ==========================================

``import msprobe...`` (a module import) is an issue too: its attribute uses would need rewriting one by one.
"""

from __future__ import annotations

from typing import Any, List, Tuple

from ptdbg_ascend.compat.migrate_sites import PACKAGE, Issue

# msprobe 1.0.4 module -> the names it exports that ptdbg_ascend exports too
MSPROBE_NAMES = {
    "msprobe.pytorch": ("PrecisionDebugger", "seed_all"),
    "msprobe.pytorch.grad_probe.grad_compare": ("GradComparator",),
}


def msprobe_imports(cst: Any, wrapper: Any, path: str) -> Tuple[int, List[Issue]]:
    """``(imports to rewrite, issues)`` of the script in ``wrapper`` (a libcst MetadataWrapper, for the lines):
    each ``from msprobe... import`` of :data:`MSPROBE_NAMES` counts; anything else of msprobe is an issue."""
    import libcst.metadata as metadata

    positions = wrapper.resolve(metadata.PositionProvider)
    code = wrapper.module.code_for_node
    issues: List[Issue] = []
    count = [0]

    def line_of(node: Any) -> int:
        position = positions.get(node)
        return position.start.line if position is not None else 0

    class Imports(cst.CSTVisitor):
        def visit_Import(self, node: Any) -> None:
            for alias in node.names:
                name = code(alias.name)
                if name == "msprobe" or name.startswith("msprobe."):
                    issues.append(Issue(path, line_of(node), f"import {name}: import the names instead "
                                        "(from msprobe.pytorch import PrecisionDebugger) so they can be rewritten"))

        def visit_ImportFrom(self, node: Any) -> None:
            source = _msprobe_source(code, node)
            if source is None:
                return
            if isinstance(node.names, cst.ImportStar):
                issues.append(Issue(path, line_of(node), f"from {source} import *: name the imports"))
                return
            unknown = [code(alias.name) for alias in node.names
                       if code(alias.name) not in MSPROBE_NAMES.get(source, ())]
            if unknown:
                known = sorted({name for names in MSPROBE_NAMES.values() for name in names})
                issues.append(Issue(path, line_of(node), "from {} import {}: no ptdbg_ascend equivalent (it has {})"
                                    .format(source, ", ".join(unknown), ", ".join(known))))
            else:
                count[0] += 1

    wrapper.module.visit(Imports())
    return count[0], issues


def rewrite_msprobe_imports(cst: Any, module: Any) -> Any:
    """``module`` with each ``from msprobe... import`` made a ``from ptdbg_ascend import`` of the same names
    (aliases kept); call it when :func:`msprobe_imports` found no issue."""
    class Imports(cst.CSTTransformer):
        def leave_ImportFrom(self, original: Any, updated: Any) -> Any:
            if _msprobe_source(module.code_for_node, updated) is None:
                return updated
            return updated.with_changes(module=cst.Name(PACKAGE), relative=())

    return module.visit(Imports())


def _msprobe_source(code: Any, node: Any) -> Any:
    if node.module is None or node.relative:
        return None
    source = code(node.module)
    return source if source == "msprobe" or source.startswith("msprobe.") else None
