"""Which module call each call of one dump ran inside (levels L0 and mix), and the rows in that nesting.

A dump.json writes a module's forward entry when the module returns (msprobe's forward hook), after every
API and submodule call inside it; its backward entry when its input gradients are made. So in dump order a
module's rows come after everything it contains, and "the first failing row" would be an inner call even
when the module's input already differed. :func:`interleave` puts each module call's input rows before the
calls inside it and its output rows after them, nesting included, so the rows read in execution order:
``Module_mlp..._0_forward_input.0``, the APIs and submodules of the MLP, ``Module_mlp..._0_forward_output``.

The nesting comes from each call's ``parent`` (construct.json, :class:`~ptdbg_ascend.formats.records.
CallRecord`), which a stranger's file may fill with anything: a parent that is no module call of the same
dump leaves the call at top level, a cycle is cut, and every walk is iterative and visits each call once, so
a crafted file can neither lose rows nor recurse. Torch-free.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Protocol, Sequence, TypeVar

from ptdbg_ascend.formats.records import CallRecord, TensorRecord


class PairedRow(Protocol):
    """What :func:`interleave` reads of a row (``matching.RowPair`` has it): its NPU record and NPU call, or
    None for both on a bench-only row."""

    npu: Optional[TensorRecord]
    npu_call: Optional[CallRecord]


Row = TypeVar("Row", bound=PairedRow)


class Nesting:
    """The module tree of one dump's calls: ``parent_of(call)`` is the module call (of ``calls``) it ran
    inside, None at top level. ``calls`` are one dump's calls (any order); duplicate module names keep the
    first call of that name."""

    def __init__(self, calls: Sequence[CallRecord]) -> None:
        self._modules: Dict[str, CallRecord] = {}
        for call in calls:
            if call.module is not None:
                self._modules.setdefault(call.module, call)
        self._parent: Dict[int, Optional[CallRecord]] = {}
        for call in calls:
            self._parent[id(call)] = self._modules.get(call.parent) if call.parent is not None else None
        self._cut_cycles(calls)

    def _cut_cycles(self, calls: Sequence[CallRecord]) -> None:
        """A crafted construct.json may link modules in a circle: the link that closes it is dropped."""
        done: set = set()
        for call in calls:
            path: List[int] = []
            on_path: set = set()
            node: Optional[CallRecord] = call
            while node is not None and id(node) not in done:
                if id(node) in on_path:
                    self._parent[path[-1]] = None  # the last link walked closes the circle
                    break
                path.append(id(node))
                on_path.add(id(node))
                node = self._parent.get(id(node))
            done.update(path)

    @property
    def has_modules(self) -> bool:
        """Whether the dump holds module calls (level L0 or mix)."""
        return bool(self._modules)

    def parent_of(self, call: CallRecord) -> Optional[CallRecord]:
        """The module call ``call`` ran inside; None at top level (or when its construct.json link names no
        module call of this dump)."""
        return self._parent.get(id(call))

    def inside(self, calls: Sequence[CallRecord], module: CallRecord) -> List[bool]:
        """For each of ``calls``, whether it ran inside ``module`` (at any depth; a call is not inside itself).
        Each answer found on the way up is remembered for the calls below it, so a deep tree costs each
        call one step, not one per level."""
        known: Dict[int, bool] = {id(module): True}
        answers = []
        for call in calls:
            path: List[int] = []
            node = self.parent_of(call)
            while node is not None and id(node) not in known:  # the chain is acyclic (_cut_cycles): it ends
                path.append(id(node))
                node = self.parent_of(node)
            found = node is not None and known[id(node)]
            known.update((node_id, found) for node_id in path)
            answers.append(found)
        return answers


def interleave(rows: Sequence[Row]) -> List[Row]:
    """``rows`` (one block of rows per NPU call, in the NPU's dump order, bench-only rows among them) in
    execution order: each module call's input rows, then the calls inside it in their order, then its output
    rows. A bench-only row stays right after the row it followed. Rows of dumps without module calls come
    back unchanged."""
    calls: List[CallRecord] = []
    blocks: Dict[int, List[List[Row]]] = {}  # id(call) -> its rows as runs: a row and the bench-only rows after it
    head: List[Row] = []  # bench-only rows before any NPU row
    last: Optional[List[Row]] = None
    for row in rows:
        call = row.npu_call if row.npu is not None else None
        if call is None:
            (last if last is not None else head).append(row)
            continue
        if id(call) not in blocks:
            calls.append(call)
            blocks[id(call)] = []
        last = [row]
        blocks[id(call)].append(last)
    nesting = Nesting(calls)
    if not nesting.has_modules:
        return list(rows)
    children: Dict[int, List[CallRecord]] = {}
    roots: List[CallRecord] = []
    for call in calls:  # in dump order; reordered below by where each subtree starts
        parent = nesting.parent_of(call)
        (children.setdefault(id(parent), []) if parent is not None else roots).append(call)
    start = _subtree_starts(calls, nesting)
    out: List[Row] = list(head)
    # Iterative depth-first walk: ("open", call) emits a call's input rows (all of an API's) and schedules its
    # children and then ("close", call), which emits a module's output rows.
    todo = [("open", call) for call in sorted(roots, key=lambda c: start[id(c)], reverse=True)]
    while todo:
        step, call = todo.pop()
        runs = blocks[id(call)]
        inner = children.get(id(call), [])
        if not inner:  # an API call, or a module call with nothing dumped inside it: its rows as they are
            out.extend(row for run in runs for row in run)
        elif step == "open":
            out.extend(row for run in runs if run[0].npu.side == "input" for row in run)
            todo.append(("close", call))
            todo.extend(("open", child) for child in sorted(inner, key=lambda c: start[id(c)], reverse=True))
        else:
            out.extend(row for run in runs if run[0].npu.side != "input" for row in run)
    return out


def _subtree_starts(calls: Sequence[CallRecord], nesting: Nesting) -> Dict[int, int]:
    """id(call) -> the earliest dump position in its subtree: where the call began (a module's own entry is
    written when it ends). Calls are taken in dump order and each lowers its ancestors' start until one
    already starts earlier (its ancestors then do too), so every start is lowered at most once."""
    start = {id(call): index for index, call in enumerate(calls)}
    for index, call in enumerate(calls):
        node = nesting.parent_of(call)
        while node is not None and start[id(node)] > index:
            start[id(node)] = index
            node = nesting.parent_of(node)
    return start

