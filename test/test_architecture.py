"""The package's shape (``doc/architecture.md``, issue 18): which way imports go between packages (their
layers, ``PACKAGE_LAYERS``) and between modules, no import cycle, no oversized module. Read from the source
with ``ast`` (nothing is imported), counting imports inside functions too: a lazy import is still a dependency.

A module is named as Python names it: ``compat/`` is installed as ``ptdbg_ascend.compat``. Importing a
submodule through its package (``from ptdbg_ascend import legacy_dump``) counts as importing
``ptdbg_ascend.legacy_dump``, not the package's ``__init__``; importing any other name from a package
(``from ptdbg_ascend import seed_all``) counts as importing the package.
"""

from __future__ import annotations

import ast
import os
from typing import Dict, Iterator, List, Set, Tuple

import pytest

pytestmark = pytest.mark.torchfree

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# (directory in the repository, the package name it is installed as)
SOURCE_TREES = (("ptdbg_ascend", "ptdbg_ascend"), ("compat", "ptdbg_ascend.compat"))
MAX_LINES = 400  # a module past it holds more than one concern: split it where a concern ends
# What the engine (dump/) must never import: it sits below every feature and front-end.
ABOVE_THE_ENGINE = ("sinks", "readers", "acl", "msprobe", "overflow", "comparison", "precheck", "compat",
                    "legacy", "legacy_dump", "debugger", "flight", "grad_probe", "free_benchmark", "cli")
# The packages (a top-level module counts as one; ``ptdbg_ascend`` is the package's own __init__) in layers,
# the top first: a package imports only packages of its own layer or of a layer below, and no two packages
# import each other, not even round a longer circle.
PACKAGE_LAYERS = (
    ("entry points", ("ptdbg_ascend", "__main__", "cli")),
    ("the migration shim", ("compat",)),
    ("front-ends", ("legacy", "legacy_dump", "debugger", "flight")),
    ("features", ("comparison", "precheck", "msprobe", "overflow", "acl", "grad_probe", "free_benchmark")),
    ("readers and sinks", ("readers", "sinks")),
    ("the engine and the settings", ("dump", "config", "config_free_benchmark", "seed", "jsonfile", "call_log",
                                     "csv_cells")),
    ("the statistics service", ("statistics",)),
    ("the ground floor", ("formats", "fs")),
    ("below everything", ("errors", "log", "terminal", "memory", "numpy_view", "device", "streams", "version",
                          "checkout", "inside", "tensor_kinds", "progress")),
)
# (importing package, imported module) pairs the package rules let pass, each with why (none today).
KNOWN_PACKAGE_EXCEPTIONS: Dict[Tuple[str, str], str] = {}
# The only modules of the package that formats/ and fs/ (the ground floor) may import, besides their own:
# numpy_view (a tensor as numpy, widened exactly) and terminal (text from files made safe and short to
# print) import nothing of the package either.
GROUND_FLOOR = ("errors", "memory", "log", "numpy_view", "terminal")
# What statistics/ (the one service computing a tensor's statistics, used by dump/, the sinks and the overflow
# check) may import besides itself: the ground floor, the device and stream helpers, ``inside`` (its torch calls
# are not the script's) and ``tensor_kinds`` (the special tensor kinds).
STATISTICS_MAY_IMPORT = ("formats", "device", "streams", "inside", "tensor_kinds") + GROUND_FLOOR


def _module_files() -> Dict[str, str]:
    """``{module name: file path}`` of every module of the package (compat/ included)."""
    modules = {}
    for directory, package in SOURCE_TREES:
        top = os.path.join(ROOT, directory)
        for folder, _, files in os.walk(top):
            for file_name in files:
                if not file_name.endswith(".py"):
                    continue
                relative = os.path.relpath(os.path.join(folder, file_name), top)[:-len(".py")]
                parts = [part for part in relative.split(os.sep) if part != "__init__"]
                modules[".".join([package] + parts)] = os.path.join(folder, file_name)
    return modules


MODULES = _module_files()


def _owner(name: str) -> str:
    """The module of the package that ``name`` (a module or a name inside one) belongs to."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name


def _imports(module: str, path: str) -> Set[str]:
    """The package's modules that ``module`` imports anywhere in its file."""
    with open(path, encoding="utf-8") as handle:
        tree = ast.parse(handle.read(), path)
    package = module if path.endswith("__init__.py") else module.rpartition(".")[0]
    found: Set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(_owner(alias.name) for alias in node.names if alias.name.startswith("ptdbg_ascend"))
        elif isinstance(node, ast.ImportFrom):
            source = node.module or ""
            if node.level:  # relative: from the package of this module, up level - 1 packages
                base = package.split(".")
                source = ".".join(base[:len(base) - node.level + 1] + ([source] if source else []))
            if not source.startswith("ptdbg_ascend"):
                continue
            for alias in node.names:
                submodule = source + "." + alias.name
                found.add(submodule if submodule in MODULES else _owner(source))
    found.discard(module)
    found.discard("")
    return found


GRAPH = {module: _imports(module, path) for module, path in MODULES.items()}


def _inside(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def _short(module: str) -> str:
    return module[len("ptdbg_ascend."):] if module.startswith("ptdbg_ascend.") else module


def _package(module: str) -> str:
    """The package ``module`` belongs to: its first name below ``ptdbg_ascend`` (``ptdbg_ascend`` itself
    for the package's __init__)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def _package_graph() -> Dict[str, Set[str]]:
    """``{package: the other packages it imports}``, without the known exceptions."""
    graph: Dict[str, Set[str]] = {_package(module): set() for module in MODULES}
    for module, imports in GRAPH.items():
        for imported in imports:
            importer, target = _package(module), _package(imported)
            if importer != target and (importer, imported) not in KNOWN_PACKAGE_EXCEPTIONS:
                graph[importer].add(target)
    return graph


def _imported_by(package: str) -> Set[str]:
    """The modules that the modules of ``package`` import."""
    return {imported for module, imports in GRAPH.items() if _package(module) == package for imported in imports}


PACKAGE_GRAPH = _package_graph()
LAYER_OF = {package: index for index, (_, packages) in enumerate(PACKAGE_LAYERS) for package in packages}


def test_the_sources_are_found():
    assert "ptdbg_ascend.dump.session" in MODULES and "ptdbg_ascend.compat.mapping" in MODULES
    assert "ptdbg_ascend.dump.session" in GRAPH["ptdbg_ascend.legacy_dump"]  # imported inside a function
    assert "ptdbg_ascend.legacy_dump" in GRAPH["ptdbg_ascend.legacy"]  # from ptdbg_ascend import legacy_dump


def test_every_package_has_its_layer_and_every_layer_names_packages_that_exist():
    listed = [package for _, packages in PACKAGE_LAYERS for package in packages]
    assert len(listed) == len(set(listed)), "a package is in two layers"
    missing = sorted(set(PACKAGE_GRAPH) - set(listed))
    gone = sorted(set(listed) - set(PACKAGE_GRAPH))
    assert not missing, f"packages with no layer in PACKAGE_LAYERS (give each its place): {missing}"
    assert not gone, f"PACKAGE_LAYERS names packages that do not exist: {gone}"
    assert set(ABOVE_THE_ENGINE) <= set(listed), "ABOVE_THE_ENGINE names packages that do not exist"
    stale = sorted(key for key in KNOWN_PACKAGE_EXCEPTIONS if key[1] not in _imported_by(key[0]))
    assert not stale, f"known exceptions that no longer happen (remove them): {stale}"


def test_packages_import_only_their_layer_and_below():
    wrong = sorted("{} ({}) imports {} ({})".format(importer, PACKAGE_LAYERS[LAYER_OF[importer]][0], target,
                                                   PACKAGE_LAYERS[LAYER_OF[target]][0])
                   for importer, targets in PACKAGE_GRAPH.items() for target in targets
                   if importer in LAYER_OF and target in LAYER_OF and LAYER_OF[target] < LAYER_OF[importer])
    assert not wrong, f"imports upward between packages (PACKAGE_LAYERS): {'; '.join(wrong)}"


def test_no_two_packages_import_each_other():
    cycles = _cycles(PACKAGE_GRAPH)
    assert not cycles, "packages that import each other (round a circle): {}".format(
        "; ".join(" <-> ".join(cycle) for cycle in cycles))


def test_the_engine_imports_nothing_above_it():
    wrong = sorted(f"{_short(module)} imports {_short(imported)}"
                   for module, imports in GRAPH.items() if _inside(module, "ptdbg_ascend.dump")
                   for imported in imports
                   if any(_inside(imported, "ptdbg_ascend." + above) for above in ABOVE_THE_ENGINE))
    assert not wrong, f"dump/ (the engine) must not import {'/'.join(ABOVE_THE_ENGINE)}: {'; '.join(wrong)}"


@pytest.mark.parametrize("floor", ["formats", "fs"])
def test_the_ground_floor_imports_only_the_ground_floor(floor):
    allowed = ["ptdbg_ascend." + name for name in (floor,) + GROUND_FLOOR]
    wrong = sorted(f"{_short(module)} imports {_short(imported)}"
                   for module, imports in GRAPH.items() if _inside(module, "ptdbg_ascend." + floor)
                   for imported in imports if not any(_inside(imported, name) for name in allowed))
    assert not wrong, "{}/ may import only itself and {} of the package: {}".format(
        floor, ", ".join(GROUND_FLOOR), "; ".join(wrong))


def test_statistics_imports_only_what_sits_below_it():
    allowed = ["ptdbg_ascend." + name for name in ("statistics",) + STATISTICS_MAY_IMPORT]
    wrong = sorted(f"{_short(module)} imports {_short(imported)}"
                   for module, imports in GRAPH.items() if _inside(module, "ptdbg_ascend.statistics")
                   for imported in imports if not any(_inside(imported, name) for name in allowed))
    assert not wrong, f"statistics/ may import only itself and {', '.join(STATISTICS_MAY_IMPORT)}: {'; '.join(wrong)}"


def _cycles(graph: Dict[str, Set[str]]) -> List[List[str]]:
    """The strongly connected components of more than one node of ``graph`` (modules or packages; Tarjan's
    algorithm, iterative)."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on_stack: Set[str] = set()
    components: List[List[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work: List[Tuple[str, Iterator[str]]] = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            advanced = False
            for successor in successors:
                if successor not in index:
                    index[successor] = low[successor] = len(index)
                    stack.append(successor)
                    on_stack.add(successor)
                    work.append((successor, iter(sorted(graph[successor]))))
                    advanced = True
                    break
                if successor in on_stack:
                    low[node] = min(low[node], index[successor])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    components.append(sorted(component))
    return components


def test_no_import_cycle_between_modules():
    # May fail while issue 18 is in progress (comparison/api.py <-> distributed.py is being untangled).
    cycles = _cycles(GRAPH)
    assert not cycles, "import cycles between modules (each group imports itself round): {}".format(
        "; ".join(" <-> ".join(_short(module) for module in cycle) for cycle in cycles))


def test_no_module_over_400_lines():
    long = []
    for module, path in sorted(MODULES.items()):
        with open(path, encoding="utf-8") as handle:
            lines = sum(1 for _ in handle)
        if lines > MAX_LINES:
            long.append(f"{os.path.relpath(path, ROOT)} ({lines} lines)")
    assert not long, f"modules over {MAX_LINES} lines (split them by concern): {', '.join(long)}"


MAX_FUNCTION_LINES = 60
# Longer functions kept whole, with the reason (each split costs a Python call on a path that runs per tensor).
LONG_FUNCTIONS = {
    ("ptdbg_ascend/sinks/legacy/pkl_writer.py", "_take"): "the pkl writer's per-API hot path: a split costs a call "
                                                          "per recorded tensor",
}


def test_no_function_over_60_lines():
    long = []
    for module, path in sorted(MODULES.items()):
        with open(path, encoding="utf-8") as handle:
            tree = ast.parse(handle.read(), path)
        relative = os.path.relpath(path, ROOT).replace(os.sep, "/")
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES and (relative, node.name) not in LONG_FUNCTIONS:
                    long.append(f"{relative}:{node.lineno} {node.name} ({lines} lines)")
    assert not long, (f"functions over {MAX_FUNCTION_LINES} lines (split them where a decision ends, or name them "
                      f"in LONG_FUNCTIONS with the reason): {', '.join(long)}")
