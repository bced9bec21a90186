"""The module view of a comparison (dump.json levels L0 and mix): which kinds of records the two dumps can
compare, and the first diverging module for the advisor.

- :func:`comparable` keeps the kinds of records both dumps hold: module records (``Module.*`` entries, levels
  L0/mix) pair only with module records, so against a legacy pkl or an L1 dump they are left out with a note
  (and an L0 dump's lone module records against such a dump leave nothing to compare: an error saying so);
- :func:`diverging_module` finds the first module call with a failing row and, inside it (construct.json's
  nesting, :mod:`~ptdbg_ascend.comparison.nesting`), the first failing API call; :func:`advice_lines` is the
  advisor's ``Diverging module: ...`` line.

Torch-free.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, List, NamedTuple, Optional, Sequence, Tuple

from ptdbg_ascend.comparison.nesting import Nesting
from ptdbg_ascend.formats.records import CallRecord
from ptdbg_ascend.errors import CompareError
from ptdbg_ascend.formats.naming import FORWARD, parse_module_call

if TYPE_CHECKING:  # rows.py imports matching.py, which imports nesting.py: only the type is needed here
    from ptdbg_ascend.comparison.rows import CompareRow

DIVERGING = "Diverging module: "
ONE_SIDED_SHOWN = 3  # one-sided calls named inside a diverging module


class Comparable(NamedTuple):
    """The calls of each dump left to compare, and the notes for the advisor saying what was left out."""

    npu: List[CallRecord]
    bench: List[CallRecord]
    notes: Tuple[str, ...]


def _kinds(calls: Sequence[CallRecord]) -> Tuple[int, int]:
    """(module calls, API calls) of one dump."""
    modules = sum(1 for call in calls if call.module is not None)
    return modules, len(calls) - modules


def comparable(npu_calls: Sequence[CallRecord], bench_calls: Sequence[CallRecord], npu_dump: str,
               bench_dump: str) -> Comparable:
    """The calls of the kinds (module, API) both dumps hold; a kind one dump lacks is left out of the other,
    with a note, since its rows could only be one-sided. Dumps holding the same kinds come back unchanged.

    Raises:
        CompareError: one dump holds module records only and the other none (an L0 dump against a legacy
            pkl or an L1 dump): nothing could pair. The message names both files and what to dump instead.
    """
    npu_modules, npu_apis = _kinds(npu_calls)
    bench_modules, bench_apis = _kinds(bench_calls)
    if not (npu_modules or npu_apis) or not (bench_modules or bench_apis):
        return Comparable(list(npu_calls), list(bench_calls), ())  # an empty dump: said by the compare itself
    sides = (("NPU", npu_dump, npu_modules, npu_apis), ("bench", bench_dump, bench_modules, bench_apis))
    if not ((npu_modules and bench_modules) or (npu_apis and bench_apis)):
        # no kind in common: one dump holds module records only, the other API records only
        (moduled, moduled_dump, _, _), (other, other_dump, _, _) = sides if npu_modules else sides[::-1]
        raise CompareError(
            "Nothing to pair: the {} dump {} holds module records only (Module.*, a PrecisionDebugger dump at level "
            "L0) and the {} dump {} holds no module records (a legacy pkl or a dump at level L1); module records "
            "pair only with module records. Dump the {} run at level L0 too, or both runs at level mix (the API "
            "records of a mix dump compare with a legacy pkl or an L1 dump as well).".format(
                moduled, moduled_dump, other, other_dump, other))
    notes: List[str] = []
    keep_modules, keep_apis = bool(npu_modules and bench_modules), bool(npu_apis and bench_apis)
    for side, dump, modules, apis in sides:
        if modules and not keep_modules:
            notes.append("Note: only the {} dump holds module records ({} module calls, level L0 or mix); the other "
                         "holds none (a legacy pkl or a dump at level L1), so they are left out and the API records "
                         "are compared. Dump both runs at level mix to compare the modules too.".format(side, modules))
        if apis and not keep_apis:
            notes.append("Note: only the {} dump holds API records ({} API calls); the other was dumped at level L0 "
                         "(modules only), so they are left out and the module records are compared. Dump both runs "
                         "at level mix to compare the APIs too.".format(side, apis))
    if not notes:
        return Comparable(list(npu_calls), list(bench_calls), ())

    def kept(calls: Sequence[CallRecord]) -> List[CallRecord]:
        return [call for call in calls if (keep_modules if call.module is not None else keep_apis)]

    return Comparable(kept(npu_calls), kept(bench_calls), tuple(notes))


class Divergence(NamedTuple):
    """The first module call with a failing row (NPU side): its row index, the failing row's side, whether
    its inputs all pass, the first failing API call inside it (None: none fails; ``api_row`` its row index),
    the calls inside it present in one run only, and whether API calls are compared at all (level mix)."""

    module: CallRecord
    row: int
    side: str
    inputs_pass: bool
    api: Optional[CallRecord]
    api_row: Optional[int]
    one_sided: Tuple[str, ...]
    has_apis: bool


def diverging_module(rows: Sequence[CompareRow]) -> Optional[Divergence]:
    """The first module call (NPU side) with a failing row, or, when the first failing row is an API call's
    (level mix: a module's output carries what its calls made, and passes when they explain it), the module
    that call ran in; and what failed inside it. None when neither is known (an L1 or legacy comparison, or
    nothing fails)."""
    npu_calls = _npu_calls(rows)
    module_row = next((index for index, row in enumerate(rows)
                       if row.failed and row.pair.npu_call is not None and row.pair.npu_call.module is not None), None)
    first = next((index for index, row in enumerate(rows) if row.failed and row.pair.npu_call is not None), None)
    if first is not None and (module_row is None or first < module_row) and rows[first].pair.npu_call.module is None:
        holder = _module_named(npu_calls, rows[first].pair.npu_call.parent)
        if holder is not None and (module_row is None or rows[module_row].pair.npu_call is not holder):
            inputs = [row for row in rows if row.pair.npu_call is holder and row.side == "input"]
            return Divergence(holder, first, "inside", bool(inputs) and all(row.passed for row in inputs),
                              rows[first].pair.npu_call, first, (), True)
    if module_row is None:
        return None
    module = rows[module_row].pair.npu_call
    within = {id(call) for call, inside in zip(npu_calls, Nesting(npu_calls).inside(npu_calls, module)) if inside}
    api, api_row = None, None
    one_sided: List[str] = []
    for index, row in enumerate(rows):
        call = row.pair.npu_call
        if call is None or call.module is not None or id(call) not in within:
            continue
        if row.failed and api is None:
            api, api_row = call, index
        elif row.one_sided and row.bench is None and len(one_sided) < ONE_SIDED_SHOWN and \
                call.name + " (NPU only)" not in one_sided:
            one_sided.append(call.name + " (NPU only)")
    inputs = [row for row in rows if row.pair.npu_call is module and row.side == "input"]
    return Divergence(module, module_row, rows[module_row].side, bool(inputs) and all(row.passed for row in inputs),
                      api, api_row, tuple(one_sided), any(call.module is None for call in npu_calls))


def advice_lines(rows: Sequence[CompareRow]) -> Tuple[str, ...]:
    """The advisor's module line, e.g. ``Diverging module: Module.layers.1.mlp.GPTNeoXMLP.forward.0 (first
    failing module: its inputs match, its output does not; first failing API inside it:
    Functional_linear_6_forward)``; nothing when no module row fails. A line that cannot be made (a dump
    shaped like no run) is left out, never breaking the advice it would join."""
    try:
        found = diverging_module(rows)
    except (AttributeError, TypeError, ValueError):  # a row without the fields of a real comparison
        return ()
    if found is None:
        return ()
    return (DIVERGING + f"{found.module.module} ({'; '.join(_parts(found))})",)


def _module_named(calls: Sequence[CallRecord], name: Optional[str]) -> Optional[CallRecord]:
    """The module call of dotted name ``name`` among ``calls`` (None: none, or no name)."""
    if name is None:
        return None
    return next((call for call in calls if call.module == name), None)


def _parts(found: Divergence) -> List[str]:
    if found.side == "inside":
        how = "the first failing row is inside it: {}".format(
            "its inputs match" if found.inputs_pass else "its inputs already differ")
    elif found.side == "input":
        how = "first failing module: its input already differs, so the difference arose before it"
    elif found.inputs_pass:
        how = "first failing module: its inputs match, its output does not"
    else:
        how = "first failing module: its output fails"
    parts = [how]
    if found.api is not None:
        parts.append(f"first failing API inside it: {found.api.name}")
    elif found.has_apis:
        parts.append("no API inside it fails" + (f"; in one run only inside it: {', '.join(found.one_sided)}"
                                                 if found.one_sided else ""))
    else:
        parsed = parse_module_call(found.module.module)
        scope = f' with "scope": ["{found.module.module}"]' if parsed and parsed.direction == FORWARD else ""
        parts.append(f'no API records are compared: dump both runs at level "mix"{scope} to see the APIs inside it')
    return parts


def _npu_calls(rows: Sequence[CompareRow]) -> List[CallRecord]:
    """The NPU calls of the rows, each once, in row order."""
    seen, calls = set(), []
    for row in rows:
        call = row.pair.npu_call
        if call is not None and id(call) not in seen:
            seen.add(id(call))
            calls.append(call)
    return calls
