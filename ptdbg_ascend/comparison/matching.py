"""Pair the calls of two dumps, then their tensor records.

Calls are aligned as sequences (difflib's longest-matching-blocks, an LCS-style diff) over a key made of
the name (without the call counter when ``fuzzy_match``) and the structure (side, shape and dtype family
of every record). So an API that only one run calls (e.g. a cast only on NPU) leaves one unmatched call
and every later call still pairs. Inside a block that differs, calls with the same name still pair, so
a shape change shows as ``Unmatched`` rows instead of two unrelated calls. Unmatched calls on **both**
sides become rows.
"""

from __future__ import annotations

import difflib
import re
from typing import List, NamedTuple, Optional, Sequence, Tuple

from ptdbg_ascend.comparison.records import CallRecord, TensorRecord

COUNTER = re.compile(r"_\d+_(forward|backward)$")
# Dtypes that compare as one: reduced-precision runs against fp32 (and fp16 against bf16).
FLOAT_FAMILY = frozenset(("torch.float16", "torch.bfloat16", "torch.float32"))


class RowPair(NamedTuple):
    """One CSV row: an NPU record, a bench record, or both; the calls they belong to."""

    npu: Optional[TensorRecord]
    bench: Optional[TensorRecord]
    npu_call: Optional[CallRecord]
    bench_call: Optional[CallRecord]
    first_of_call: bool


def match_name(call_name: str, fuzzy_match: bool) -> str:
    """The call name used for pairing: ``Torch_add_3_forward`` -> ``Torch_add_forward`` when fuzzy."""
    return COUNTER.sub(r"_\1", call_name) if fuzzy_match else call_name


def dtypes_compatible(npu_dtype: str, bench_dtype: str) -> bool:
    """Equal, or both in {float16, bfloat16, float32}."""
    return npu_dtype == bench_dtype or (npu_dtype in FLOAT_FAMILY and bench_dtype in FLOAT_FAMILY)


def _family(dtype: str) -> str:
    return "float" if dtype in FLOAT_FAMILY else dtype


def _key(call: CallRecord, fuzzy_match: bool) -> Tuple:
    return (match_name(call.name, fuzzy_match),
            tuple((r.name[len(call.name):], r.shape, _family(r.dtype)) for r in call.records))


def align_calls(npu_calls: Sequence[CallRecord], bench_calls: Sequence[CallRecord],
                fuzzy_match: bool = False) -> List[Tuple[Optional[CallRecord], Optional[CallRecord]]]:
    """``(npu_call, bench_call)`` in execution order; None on the side that has no counterpart."""
    npu_keys = [_key(c, fuzzy_match) for c in npu_calls]
    bench_keys = [_key(c, fuzzy_match) for c in bench_calls]
    pairs: List[Tuple[Optional[CallRecord], Optional[CallRecord]]] = []
    matcher = difflib.SequenceMatcher(None, npu_keys, bench_keys, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            pairs.extend(zip(npu_calls[i1:i2], bench_calls[j1:j2]))
        else:
            pairs.extend(_align_by_name(npu_calls[i1:i2], bench_calls[j1:j2], fuzzy_match))
    return pairs


def _align_by_name(npu_calls: Sequence[CallRecord], bench_calls: Sequence[CallRecord], fuzzy_match: bool):
    npu_names = [match_name(c.name, fuzzy_match) for c in npu_calls]
    bench_names = [match_name(c.name, fuzzy_match) for c in bench_calls]
    pairs = []
    matcher = difflib.SequenceMatcher(None, npu_names, bench_names, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            pairs.extend(zip(npu_calls[i1:i2], bench_calls[j1:j2]))
        else:
            pairs.extend((call, None) for call in npu_calls[i1:i2])
            pairs.extend((None, call) for call in bench_calls[j1:j2])
    return pairs


def pair_rows(npu_calls: Sequence[CallRecord], bench_calls: Sequence[CallRecord],
              fuzzy_match: bool = False) -> List[RowPair]:
    """Every CSV row in order. Records of a paired call pair by their suffix (``_input.0`` with
    ``_input.0``); a record present on one side only is a row of its own."""
    rows: List[RowPair] = []
    for npu_call, bench_call in align_calls(npu_calls, bench_calls, fuzzy_match):
        first = True
        if npu_call is None:
            for record in bench_call.records:
                rows.append(RowPair(None, record, None, bench_call, first))
                first = False
            continue
        bench_by_suffix = {}
        if bench_call is not None:
            bench_by_suffix = {r.name[len(bench_call.name):]: r for r in bench_call.records}
        for record in npu_call.records:
            bench = bench_by_suffix.pop(record.name[len(npu_call.name):], None)
            rows.append(RowPair(record, bench, npu_call, bench_call if bench is not None else None, first))
            first = False
        for record in bench_by_suffix.values():
            rows.append(RowPair(None, record, None, bench_call, False))
    return rows
