"""The HTML report's module tree: where in the model each row's call ran, with its rows' verdicts summed up the
tree, so the page can colour each branch by where the divergence starts.

The nesting comes from the dump itself: construct.json's module calls (levels L0 and mix,
:class:`~ptdbg_ascend.comparison.nesting.Nesting`) or, for a dump without module records (a legacy pkl, an L1
dump.json), the user's own stack frames: each frame a node (``forward  model.py:72``), the calls made from it
its leaves. A backward call is placed where its forward call ran (its own stack ends in ``loss.backward()``).
At most :data:`MAX_TREE_NODES` nodes are kept: the path to the first failure and to the suspect first, then the
branches holding failures, then the shallowest; a node says how many children were left out. Torch-free.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from ptdbg_ascend.comparison.nesting import Nesting
from ptdbg_ascend.comparison.rows import CompareRow
from ptdbg_ascend.formats.records import CallRecord, Frame, user_frames
from ptdbg_ascend.formats.naming import BACKWARD, FORWARD, split_call_name

# The most nodes the page holds: a tree of a million rows (some 300,000 calls) would not be read, nor drawn.
MAX_TREE_NODES = 2000
MAX_LABEL = 200  # characters of a node's label (a record name from a hostile dump may be any length)
MODULE, FRAME, CALL = "module", "frame", "call"
SOURCE_CONSTRUCT, SOURCE_STACKS = "construct.json", "stacks"
BENCH_ONLY = "(calls of the bench run only)"


def _cut(text: str, limit: int = MAX_LABEL) -> str:
    return text if len(text) <= limit else text[:limit - 1] + "\u2026"


class _Builder:
    """Nodes in creation order (a parent before its children), found again by key. One list per field: ints
    and strings in lists allocate no objects the garbage collector tracks (100,000 node objects made it scan a
    million rows several times: 1 s of 3.6 at 300,000 rows, measured)."""

    def __init__(self) -> None:
        self.index: Dict[Any, int] = {}
        self.label: List[str] = []
        self.kind: List[str] = []
        self.parent: List[int] = []
        self.detail: List[str] = []
        self.depth: List[int] = []
        self.children: List[int] = []
        self.rows: List[int] = []
        self.failed: List[int] = []
        self.not_compared: List[int] = []
        self.first_fail: List[Optional[int]] = []  # the CSV line of its first failing row

    def node(self, key: Any, kind: str, parent: int, label_of: Callable[[Any], Tuple[str, str]], item: Any) -> int:
        """The node of ``key``, made under ``parent`` when new, labelled ``label_of(item)`` (label, detail)."""
        found = self.index.get(key)
        if found is None:
            label, detail = label_of(item)
            found = self.index[key] = len(self.label)
            for column, value in ((self.label, _cut(label)), (self.kind, kind), (self.parent, parent),
                                  (self.detail, _cut(detail, 2 * MAX_LABEL)),
                                  (self.depth, self.depth[parent] + 1 if parent >= 0 else 0), (self.children, 0),
                                  (self.rows, 0), (self.failed, 0), (self.not_compared, 0), (self.first_fail, None)):
                column.append(value)
            if parent >= 0:
                self.children[parent] += 1
        return found


def _named(name: str) -> Tuple[str, str]:
    return name, ""


def _row_call(row: CompareRow) -> Tuple[Optional[CallRecord], bool]:
    """The row's call and whether it is the bench's (a bench-only row)."""
    if row.pair.npu_call is not None:
        return row.pair.npu_call, False
    return row.pair.bench_call, True


def call_stack(call: CallRecord, forward_of: Dict[str, CallRecord]) -> Tuple[Frame, ...]:
    """The stack a call ran under: a backward call's own ends in ``loss.backward()``, so it takes its forward
    call's (from ``forward_of``, call name -> call) when that has one."""
    if call.name.endswith("_" + BACKWARD):  # the direction is a call name's last field
        name = split_call_name(call.name)
        forward = forward_of.get(f"{name.api}_{name.index}_{FORWARD}") if name.index >= 0 else None
        if forward is not None and forward.stack:
            return forward.stack
    return call.stack


def _frame_label(frame: Frame) -> Tuple[str, str]:
    file, line, func, code = frame
    return f"{func}  {os.path.basename(str(file))}:{line}", f"{file}:{line}  {code or ''}".rstrip()


def _place_by_stacks(builder: _Builder, calls: Sequence[Tuple[CallRecord, bool]]) -> Dict[int, int]:
    forward_of = {call.name: call for call, bench in calls if not bench}
    placed: Dict[int, int] = {}
    # A loop calls from the same lines: a stack's path of nodes is walked once.
    path_end: Dict[Tuple[bool, Tuple[Frame, ...]], int] = {}
    for call, bench in calls:
        stack = call_stack(call, forward_of)
        parent = path_end.get((bench, stack))
        if parent is None:
            parent = builder.node(("bench",), FRAME, -1, _named, BENCH_ONLY) if bench else -1
            for frame in (reversed(user_frames(stack)) if stack else ()):
                # keyed by its parent: the same line reached from another caller is another node
                parent = builder.node((parent, frame[:3]), FRAME, parent, _frame_label, frame)
            path_end[(bench, stack)] = parent
        placed[id(call)] = builder.node(id(call), CALL, parent, _named, call.name)
    return placed


def _place_by_modules(builder: _Builder, calls: Sequence[Tuple[CallRecord, bool]]) -> Dict[int, int]:
    npu_calls = [call for call, bench in calls if not bench]
    nesting = Nesting(npu_calls)
    placed: Dict[int, int] = {}

    def place(call: CallRecord) -> int:
        chain = []  # the call and its enclosing modules, innermost first (acyclic: Nesting cuts cycles)
        node: Optional[CallRecord] = call
        while node is not None and id(node) not in placed:
            chain.append(node)
            node = nesting.parent_of(node)
        parent = placed[id(node)] if node is not None else -1
        for item in reversed(chain):
            kind = MODULE if item.module is not None else CALL
            parent = placed[id(item)] = builder.node(id(item), kind, parent, _named, item.module or item.name)
        return parent

    for call, bench in calls:
        if bench:
            holder = builder.node(("bench",), FRAME, -1, _named, BENCH_ONLY)
            placed[id(call)] = builder.node(id(call), CALL, holder, _named, call.name)
        elif id(call) not in placed:
            place(call)
    return placed


def _count(builder: _Builder, rows: Sequence[CompareRow], placed: Dict[int, int]) -> None:
    """Each row counted on its call's node, then summed up the tree (children come after their parent)."""
    counted, failed, not_compared, first_fail = builder.rows, builder.failed, builder.not_compared, builder.first_fail
    for line, row in enumerate(rows, 2):
        call, _bench = _row_call(row)
        if call is None:
            continue
        node = placed[id(call)]
        counted[node] += 1
        if row.failed:
            failed[node] += 1
            first_fail[node] = line if first_fail[node] is None else min(first_fail[node], line)
        elif not row.compared:
            not_compared[node] += 1
    for node in range(len(counted) - 1, -1, -1):
        parent = builder.parent[node]
        if parent < 0:
            continue
        counted[parent] += counted[node]
        failed[parent] += failed[node]
        not_compared[parent] += not_compared[node]
        if first_fail[node] is not None:
            first_fail[parent] = first_fail[node] if first_fail[parent] is None else min(first_fail[parent],
                                                                                       first_fail[node])


def _kept(builder: _Builder, marked: Sequence[int], limit: int) -> List[int]:
    """The nodes kept, in creation order: an ancestor-closed set of at most ``limit`` (the marked nodes' paths,
    then failing nodes, then the shallowest, each group in order)."""
    must = set()
    for index in marked:
        while index >= 0 and index not in must:
            must.add(index)
            index = builder.parent[index]
    failed, depth = builder.failed, builder.depth
    # A node's ancestors rank before it (they fail when it fails, and are shallower), so any prefix is closed.
    order = sorted(range(len(failed)), key=lambda i: (i not in must, not failed[i], depth[i], i))
    return sorted(order[:limit])


def module_tree(rows: Sequence[CompareRow], first_failure: Optional[int], suspect: Optional[str],
                limit: int = MAX_TREE_NODES) -> Optional[dict]:
    """The tree as the page's data, or None when the dumps hold neither module records nor stacks.

    :param rows: the compare's rows, in CSV order.
    :param first_failure: 0-based index of the first failing row (None: none failed).
    :param suspect: the advisor's suspect call name (None: none).
    :param limit: the most nodes kept (default :data:`MAX_TREE_NODES`).
    :returns: ``{"source", "nodes": [[label, parent, kind, rows, failed, not_compared, first failing CSV line,
        detail, children left out], ...], "first_failure": node or None, "suspect": node or None, "total": n}``;
        a parent index refers to the list, -1 for a root.
    """
    calls: List[Tuple[CallRecord, bool]] = []
    seen = set()
    for row in rows:
        call, bench = _row_call(row)
        if call is not None and id(call) not in seen:
            seen.add(id(call))
            calls.append((call, bench))
    builder = _Builder()
    if any(call.module is not None for call, _ in calls):
        source, placed = SOURCE_CONSTRUCT, _place_by_modules(builder, calls)
    elif any(call.stack for call, _ in calls):
        source, placed = SOURCE_STACKS, _place_by_stacks(builder, calls)
    else:
        return None
    _count(builder, rows, placed)
    failing_node = None
    if first_failure is not None:
        call, _bench = _row_call(rows[first_failure])
        failing_node = placed.get(id(call)) if call is not None else None
    suspect_node = next((placed[id(call)] for call, bench in calls if not bench and call.name == suspect), None)
    kept = _kept(builder, [i for i in (failing_node, suspect_node) if i is not None], limit)
    new_index = {old: new for new, old in enumerate(kept)}
    kept_children: Dict[int, int] = {}
    for old in kept:
        kept_children[builder.parent[old]] = kept_children.get(builder.parent[old], 0) + 1
    data = [[builder.label[old], new_index.get(builder.parent[old], -1), builder.kind[old], builder.rows[old],
             builder.failed[old], builder.not_compared[old], builder.first_fail[old], builder.detail[old],
             builder.children[old] - kept_children.get(old, 0)] for old in kept]
    return {"source": source, "nodes": data, "total": len(builder.label),
            "first_failure": new_index.get(failing_node), "suspect": new_index.get(suspect_node)}
