"""Pair the calls of two dumps, then their tensor records.

Counters shift between runs (one extra early ``x + 0`` renumbers every later ``Tensor___add__``), so calls
are never paired by their exact names. Instead the two runs are aligned as sequences, forward calls and
backward calls each in their own order:

1. **Forward calls** are aligned (difflib's longest matching blocks, an LCS-style diff) on a key made of
   the API name *without* its counter and the structure of the call (record suffixes, shapes, dtype
   family). An API that only one run calls (a cast on NPU only, a checkpoint re-computation) becomes
   unmatched rows, and every call after it still pairs. Inside a block that differs, calls of the same
   API still pair in order (a changed shape then shows as ``Unmatched`` rows). Within a run of calls
   with equal keys the earliest ones pair first, which is the equal-counter choice when nothing is
   missing before them: counters only ever break such ties.
2. **Backward calls** pair through their forward calls: ``X_7_backward`` pairs with ``Y_5_backward`` when
   ``X_7_forward`` paired with ``Y_5_forward``, so gradients that autograd computed in another order (or
   a re-computed forward under gradient checkpointing) still meet their true counterparts. Backward
   calls whose forward is not in the dump are aligned as a sequence like the forward calls. A forward
   call re-computed during backward is linked to the first-pass call it re-runs (same side): reentrant
   checkpointing runs the first pass under no_grad, so a checkpointed layer's backward is its
   re-computation's, and pairs with the backward of the first-pass call's partner (which, in a run that
   checkpoints otherwise or not at all, belongs to that run's first pass or to its re-computation).
3. Rows come in NPU execution order; a bench-only call is placed after the NPU call that paired with the
   bench call before it.

**Module calls** (dump.json levels L0 and mix: ``Module_{path}.{Class}_{n}_{direction}``) are aligned the same
way, keyed by module path and class plus structure, so an extra module call on one side leaves the rest
paired and a module's backward pairs through its forward; they only ever pair with module calls. A module's
input rows then come before the calls that ran inside it and its output rows after them
(:func:`~ptdbg_ascend.comparison.nesting.interleave`).

A user **API mapping** (``{"NPU_npu_rms_norm": "Functional_rms_norm"}``, NPU API -> bench API, names
without counter and direction) lets a fused NPU API pair with the bench API it replaces; the records of
a mapped pair pair by their order within inputs and within outputs, and what one side has alone becomes
its own row.
"""

from __future__ import annotations

import bisect
import difflib
from typing import Dict, List, Mapping, NamedTuple, Optional, Sequence, Set, Tuple

from ptdbg_ascend.comparison.nesting import interleave
from ptdbg_ascend.formats.records import CallRecord, TensorRecord
from ptdbg_ascend.formats.naming import split_call_name

MODULE = "module"  # the kind word in a module call's alignment keys
# Dtypes that compare as one: reduced-precision runs against fp32 (and fp16 against bf16).
FLOAT_FAMILY = frozenset(("torch.float16", "torch.bfloat16", "torch.float32"))
CallPair = Tuple[Optional[CallRecord], Optional[CallRecord]]


class RowPair(NamedTuple):
    """One CSV row: an NPU record, a bench record, or both; the calls they belong to. ``recomputed``: the
    row's call is a forward call re-run by gradient checkpointing while backward runs (default False): one
    side only re-runs it, so it has no partner, and what it computes was compared at its first pass."""

    npu: Optional[TensorRecord]
    bench: Optional[TensorRecord]
    npu_call: Optional[CallRecord]
    bench_call: Optional[CallRecord]
    first_of_call: bool
    recomputed: bool = False


def dtypes_compatible(npu_dtype: str, bench_dtype: str) -> bool:
    """Equal, or both in {float16, bfloat16, float32}."""
    return npu_dtype == bench_dtype or (npu_dtype in FLOAT_FAMILY and bench_dtype in FLOAT_FAMILY)


def _family(dtype: str) -> str:
    return "float" if dtype in FLOAT_FAMILY else dtype


class _Side:
    """One run's calls split by direction, with the keys the alignment uses."""

    def __init__(self, calls: Sequence[CallRecord], mapping: Mapping[str, str]) -> None:
        self.order = {id(call): position for position, call in enumerate(calls)}
        self.forward: List[CallRecord] = []
        self.backward: List[CallRecord] = []
        self.keys: Dict[int, Tuple] = {}  # (API, direction, structure)
        self.exact: Dict[int, Tuple] = {}  # (API, counter, direction, structure)
        self.api_keys: Dict[int, Tuple] = {}  # (API, direction)
        self.by_name: Dict[str, CallRecord] = {}
        runs = _recomputed_runs(calls)
        recomputed = {call_id for run in runs for call_id in run}
        for call in calls:
            parts = split_call_name(call.name)
            mapped = call.module is None and parts.api in mapping  # the user's mapping names APIs, not modules
            # A module call's key is its own kind: however a crafted dump names an API call, the two never pair.
            api = (MODULE, parts.api) if call.module is not None else mapping.get(parts.api, parts.api)
            self.by_name[call.name] = call
            structure = None if mapped else tuple(
                (r.name[len(call.name):], r.shape, _family(r.dtype)) for r in call.records)
            # A forward call run while backward runs (gradient checkpointing) only pairs with one that was too.
            phase = id(call) in recomputed
            self.keys[id(call)] = (api, parts.direction, structure, phase)
            self.exact[id(call)] = (api, parts.index, parts.direction, structure, phase)
            self.api_keys[id(call)] = (api, parts.direction, phase)
            (self.backward if parts.direction == "backward" else self.forward).append(call)
        # A re-computed forward call -> the first-pass call it re-runs (same side). Reentrant checkpointing
        # runs the first pass under no_grad, so the backward of a checkpointed layer is that of its
        # re-computation: it must pair with the backward of the first-pass call's partner.
        self.origin: Dict[int, CallRecord] = _link_recomputations(self.forward, runs, self.keys)
        self.group_backward: Dict[int, CallRecord] = {}  # id(first-pass call) -> the backward of its group
        for call in self.forward:
            own = self.by_name.get(call.name[: -len("forward")] + "backward")
            if own is not None:
                self.group_backward.setdefault(id(self.origin.get(id(call), call)), own)

    def backward_of(self, forward: CallRecord) -> Optional[CallRecord]:
        """The backward call of ``forward``'s group (the first-pass call and its re-computations): its own
        when it has one, else the one of the call it re-runs or of a re-computation of it."""
        own = self.by_name.get(forward.name[: -len("forward")] + "backward")
        if own is not None:
            return own
        return self.group_backward.get(id(self.origin.get(id(forward), forward)))

    def api_key(self, call: CallRecord) -> Tuple:
        return self.api_keys[id(call)]

    def structures_by_api(self) -> Dict[Tuple, List[Tuple]]:
        """(API, direction) -> the structures of its calls in order."""
        found: Dict[Tuple, List[Tuple]] = {}
        for call_id, key in self.keys.items():
            found.setdefault(key[:2], []).append((self.order[call_id], key[2:]))
        return {api: [structure for _, structure in sorted(items)] for api, items in found.items()}

    def distrust(self, apis: Set[Tuple]) -> None:
        """Counters of these APIs shifted (one run calls them more often, or differently): their exact keys
        become unique to this side, so they never anchor the alignment."""
        for call_id, key in self.api_keys.items():
            if key[:2] in apis:
                self.exact[call_id] = ("shifted", id(self), call_id)


def _recomputed_runs(calls: Sequence[CallRecord]) -> List[List[int]]:
    """The runs (ids in order) of forward calls re-computed by gradient checkpointing while backward runs:
    a forward run between two backward calls whose following backward pass does not start where the run's
    first backward pass started.

    Every training step's backward starts at the loss (the root of the graph), so the forward run of the
    next step (an optimizer step, then the next forward) is followed by the loss's backward again; a
    re-computed segment is followed by the backward of the segment's own last call (another API, or the
    same API with other shapes). A run with no backward after it (the last step, a killed run) is never a
    re-computation: so a killed dump and a full one flag the same calls."""
    found: List[List[int]] = []
    run: List[int] = []
    root = None  # (API, structure) of the first backward call: where a step's backward starts
    after_backward = False
    for call in calls:
        if call.name.endswith("_backward"):
            key = _backward_start_key(call)
            if root is None:
                root = key
            if run and after_backward and key != root:
                found.append(run)
            run, after_backward = [], True
        else:
            run.append(id(call))
    return found


def _link_recomputations(forward: Sequence[CallRecord], runs: Sequence[Sequence[int]],
                         keys: Dict[int, Tuple]) -> Dict[int, CallRecord]:
    """id(re-computed call) -> the first-pass call it re-runs: for each re-computed run, the latest earlier
    stretch of first-pass forward calls, none linked yet, with the same keys (API, structure) and, where
    both carry statistics, the same inputs (a re-computation re-runs the segment on the inputs it saved).
    Backward visits checkpointed segments last first, so "latest not yet linked" also tells identical
    layers apart when the dump holds no statistics. A run with no such stretch stays unlinked."""
    position = {id(call): index for index, call in enumerate(forward)}
    recomputed = {call_id for run in runs for call_id in run}
    plain_keys = [keys[id(call)][:3] for call in forward]
    linked: Dict[int, CallRecord] = {}
    taken: Set[int] = set()
    for run in runs:
        if not run or run[0] not in position:
            continue
        wanted = [keys[call_id][:3] for call_id in run]
        first = forward[position[run[0]]]
        for start in range(position[run[0]] - len(run), -1, -1):
            if plain_keys[start] != wanted[0]:  # the cheap test first: dumps hold 10^5 calls
                continue
            stretch = forward[start:start + len(run)]
            if plain_keys[start:start + len(run)] != wanted or not _same_inputs(first, stretch[0]) or \
                    any(id(call) in recomputed or id(call) in taken for call in stretch):
                continue
            for call_id, original in zip(run, stretch):
                linked[call_id] = original
                taken.add(id(original))
            break
    return linked


def _same_inputs(call: CallRecord, other: CallRecord) -> bool:
    """False only when both calls carry statistics of their inputs and those differ."""
    mine = [r.statistics for r in call.records if r.side == "input"]
    theirs = [r.statistics for r in other.records if r.side == "input"]
    if not any(any(value is not None for value in stats) for stats in mine + theirs):
        return True
    return mine == theirs


def _backward_start_key(call: CallRecord) -> Tuple:
    return split_call_name(call.name).api, tuple((r.name[len(call.name):], tuple(r.shape or ())) for r in call.records)


def _distrust_shifted_counters(npu_side: _Side, bench_side: _Side) -> None:
    """An API whose calls differ between the runs in number or structure has counters that do not line up:
    ``Functional_relu_1`` on NPU may be bench's ``Functional_relu_0``. Only APIs with the same sequence of
    calls on both sides keep their counters as anchors."""
    npu_apis, bench_apis = npu_side.structures_by_api(), bench_side.structures_by_api()
    shifted = {api for api in set(npu_apis) | set(bench_apis) if npu_apis.get(api) != bench_apis.get(api)}
    npu_side.distrust(shifted)
    bench_side.distrust(shifted)


def _align(npu: Sequence[CallRecord], bench: Sequence[CallRecord], npu_side: _Side, bench_side: _Side) -> List[CallPair]:
    """Three passes, each inside the gaps the previous one left:

    1. exact keys (API, counter, direction, structure) of the APIs whose counters did not shift (see
       :func:`_distrust_shifted_counters`): unique, so the diff has no ambiguity; they anchor the rest;
    2. keys without the counter (API, direction, structure): pairs the calls whose counters shifted;
    3. the API alone: calls of the same API whose shapes changed still pair (as ``Unmatched`` rows).

    Training repeats itself (layers, steps), so counter-free keys alone are periodic and a greedy diff
    can pair a call with the same call of another layer or step; the anchors of pass 1 prevent that."""
    pairs: List[CallPair] = []
    for npu_gap, bench_gap, equal in _diff(npu, bench, npu_side.exact, bench_side.exact):
        if equal:
            pairs.extend(zip(npu_gap, bench_gap))
            continue
        for npu_part, bench_part, same in _diff(npu_gap, bench_gap, npu_side.keys, bench_side.keys):
            if same:
                pairs.extend(zip(npu_part, bench_part))
                continue
            for npu_rest, bench_rest, same_api in _diff(npu_part, bench_part, npu_side.api_keys, bench_side.api_keys):
                if same_api:
                    pairs.extend(zip(npu_rest, bench_rest))
                else:
                    pairs.extend((call, None) for call in npu_rest)
                    pairs.extend((None, call) for call in bench_rest)
    return pairs


def _diff(npu: Sequence[CallRecord], bench: Sequence[CallRecord], npu_keys: Dict[int, Tuple],
          bench_keys: Dict[int, Tuple]):
    """``(npu block, bench block, equal)`` in order, from difflib's opcodes over the given keys."""
    if not npu or not bench:
        if npu or bench:
            yield npu, bench, False
        return
    matcher = difflib.SequenceMatcher(None, [npu_keys[id(c)] for c in npu], [bench_keys[id(c)] for c in bench],
                                      autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        yield npu[i1:i2], bench[j1:j2], tag == "equal"


def align_calls(npu_calls: Sequence[CallRecord], bench_calls: Sequence[CallRecord],
                api_mapping: Optional[Mapping[str, str]] = None) -> List[CallPair]:
    """``(npu_call, bench_call)`` in NPU execution order; None on the side that has no counterpart.
    ``api_mapping``: NPU API -> bench API (names without counter and direction), default none."""
    mapping = dict(api_mapping or {})
    npu_side, bench_side = _Side(npu_calls, mapping), _Side(bench_calls, {})
    _distrust_shifted_counters(npu_side, bench_side)
    forward = _align(npu_side.forward, bench_side.forward, npu_side, bench_side)
    partner = {}  # NPU forward call name -> bench forward call name
    for npu, bench in forward:
        if npu is not None and bench is not None:
            partner[npu.name] = bench.name
    backward: List[CallPair] = []
    npu_rest: List[CallRecord] = []
    bench_taken = set()
    for call in npu_side.backward:
        bench = None
        forward_call = npu_side.by_name.get(call.name[: -len("backward")] + "forward")
        if forward_call is not None:
            # Its forward's partner, else (a re-computation left one-sided) the partner of the call it
            # re-runs.
            origin = npu_side.origin.get(id(forward_call))
            bench_forward = partner.get(forward_call.name) or (partner.get(origin.name) if origin else None)
            bench = bench_side.backward_of(bench_side.by_name[bench_forward]) if bench_forward else None
        if bench is not None and bench.name not in bench_taken and \
                npu_side.api_key(call) == bench_side.api_key(bench):
            backward.append((call, bench))
            bench_taken.add(bench.name)
        else:
            npu_rest.append(call)
    bench_rest = [call for call in bench_side.backward if call.name not in bench_taken]
    backward.extend(_align(npu_rest, bench_rest, npu_side, bench_side))
    return _in_execution_order(forward + backward, npu_side, bench_side)


def _in_execution_order(pairs: Sequence[CallPair], npu_side: _Side, bench_side: _Side) -> List[CallPair]:
    """Sort by NPU position; a bench-only call goes right after the NPU partner of the latest paired bench
    call before it (or first, when none precedes it)."""
    bench_anchor = {}  # bench position -> NPU position of its partner
    for npu, bench in pairs:
        if npu is not None and bench is not None:
            bench_anchor[bench_side.order[id(bench)]] = npu_side.order[id(npu)]
    anchors = sorted(bench_anchor)
    keyed = []
    for npu, bench in pairs:
        if npu is not None:
            keyed.append(((npu_side.order[id(npu)], 0, 0), (npu, bench)))
            continue
        position = bench_side.order[id(bench)]
        anchor = -1
        at = bisect.bisect_left(anchors, position)
        if at > 0:
            anchor = bench_anchor[anchors[at - 1]]
        keyed.append(((anchor, 1, position), (npu, bench)))
    keyed.sort(key=lambda item: item[0])
    return [pair for _, pair in keyed]


def _record_keys(call: CallRecord, by_position: bool) -> List[Tuple]:
    """How the records of a call pair with the other side's: by suffix (``_input.0`` with ``_input.0``),
    or, for two different APIs paired by the user's mapping, by their order within inputs and within
    outputs (a fused API's ``output.0`` with the bench API's lone ``output``)."""
    if not by_position:
        return [(record.name[len(call.name):],) for record in call.records]
    counts: Dict[str, int] = {}
    keys = []
    for record in call.records:
        keys.append((record.side, counts.get(record.side, 0)))
        counts[record.side] = counts.get(record.side, 0) + 1
    return keys


def pair_rows(npu_calls: Sequence[CallRecord], bench_calls: Sequence[CallRecord],
              api_mapping: Optional[Mapping[str, str]] = None) -> List[RowPair]:
    """Every CSV row in order. Records of a paired call pair by their suffix (see :func:`_record_keys`);
    a record present on one side only is a row of its own."""
    rows: List[RowPair] = []
    recomputed = {call_id for calls in (npu_calls, bench_calls) for run in _recomputed_runs(calls) for call_id in run}
    for npu_call, bench_call in align_calls(npu_calls, bench_calls, api_mapping):
        first = True
        if npu_call is None:
            for record in bench_call.records:
                rows.append(RowPair(None, record, None, bench_call, first, id(bench_call) in recomputed))
                first = False
            continue
        by_position = bench_call is not None and \
            split_call_name(npu_call.name).api != split_call_name(bench_call.name).api
        bench_by_key = {}
        if bench_call is not None:
            bench_by_key = dict(zip(_record_keys(bench_call, by_position), bench_call.records))
        for key, record in zip(_record_keys(npu_call, by_position), npu_call.records):
            bench = bench_by_key.pop(key, None)
            rows.append(RowPair(record, bench, npu_call, bench_call if bench is not None else None, first,
                                id(npu_call) in recomputed))
            first = False
        for record in bench_by_key.values():
            rows.append(RowPair(None, record, None, bench_call, False))
    return interleave(rows)
