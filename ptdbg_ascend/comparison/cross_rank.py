"""The advisor's answer across ranks: which rank went bad first, found from the order of the communication calls.

A NaN (or a 2 % error) on one rank of a data-parallel job reaches every rank through the next ``all_reduce``, so
each rank's own compare names its own first failure. Each rank's :class:`~ptdbg_ascend.comparison.rank_order.Place`
says how many collectives ran with its inputs still good; the first collective whose inputs are already bad on
some ranks and good on the others is the one after the fewest such collectives, and the ranks bad before it are
where it started. Collectives are numbered 1, 2, ... in each rank's call order (comparable across ranks that run
the same collectives: data, tensor and sequence parallelism; a pipeline's send/recv differ by rank).

Lines, e.g. ``First divergence across ranks: rank 2, Functional_linear_0_forward, before
Distributed_all_reduce_0_forward (collective #1) spread it to every rank``; with ranks bad before the same
collective, ``no single origin`` and their names; ranks not compared (or compared in part, nothing failing) are
never the origin: the head then says ``among the compared ranks`` and the line names them. The same for the first
inf/NaN in an NPU row. Torch-free.
"""

from __future__ import annotations

from typing import Any, List, Mapping, NamedTuple, Optional, Sequence

from ptdbg_ascend.comparison.rank_order import is_collective
from ptdbg_ascend.formats.layout import is_dump_json
from ptdbg_ascend.formats.naming import split_record_name, to_dotted

MAX_RANKS_SHOWN = 8  # a line names at most this many ranks, then "and N more"


class _Bad(NamedTuple):
    """A rank that went bad: its number, the record and call shown, and its place among its collectives."""

    rank: int
    record: str
    call: str
    before: int
    after: str
    collectives: int
    from_outside: bool  # the bad row is an input of a call that is no collective taking it on
    in_collective: bool  # the bad row is an output of a collective whose inputs were good


def cross_rank_answer(results: Sequence[Any], not_compared: Optional[Mapping[str, str]] = None) -> List[str]:
    """Two lines over the compared rank pairs ``results`` (:class:`~ptdbg_ascend.comparison.rank_summary.PairResult`):
    where the divergence started and where the first inf/NaN was produced ([] when ``results`` is empty).
    ``not_compared`` (default None: none): pair name -> why, the pairs that were not compared; like a pair
    compared in part (too little judged, or a ``coverage`` problem) where nothing failed, they are never the origin
    and keep the answer from claiming one among the others."""
    if not results:
        return []
    # nothing failed in what was compared, but not all was: the values may have gone bad in what was not
    partial = [result.pair for result in results
               if not result.first_failure and (not result.judged or result.coverage)]
    missing = sorted(not_compared or ()) + partial
    partial_pairs = set(partial)
    failing = [_bad(result, result.first_failure, result.collectives_before_failure,
                    result.collective_after_failure) for result in results if result.first_failure]
    overflowing = [_bad(result, result.first_overflow, result.collectives_before_overflow,
                        result.collective_after_overflow) for result in results if result.first_overflow]
    good = [result.rank for result in results if not result.first_failure and result.pair not in partial_pairs]
    finite = [result.rank for result in results if not result.first_overflow]
    divergence = _line("divergence", failing, good, missing, "stayed within the accuracy",
                       f"No divergence across ranks: nothing failed in the {len(results)} compared rank pairs")
    overflow = _line("inf/NaN", overflowing, finite, sorted(not_compared or ()), "stayed finite",
                     f"No inf/NaN across ranks: no NPU row of the {len(results)} compared ranks holds one")
    return [divergence, overflow]


def _bad(result: Any, record: str, before: int, after: str) -> _Bad:
    parts = split_record_name(record)
    call, side = parts if parts else (record, "")
    return _Bad(result.rank, _shown(record, result.npu_dump), _shown(call, result.npu_dump), before,
                _shown(after, result.npu_dump), result.collectives, side == "input" and after != call,
                side == "output" and is_collective(call))


def _shown(name: str, npu_dump: str) -> str:
    """``name`` as the NPU dump writes it: dotted for a dump.json (``Distributed.all_reduce.0.forward``)."""
    if name and npu_dump and is_dump_json(npu_dump):
        return to_dotted(name) or name
    return name


def _line(what: str, bad: List[_Bad], good: List[int], missing: List[str], good_phrase: str, none_line: str) -> str:
    caveat = "; not compared in full, so it may have started there: {}".format(_names(missing)) if missing else ""
    if not bad:
        return none_line + caveat
    head = f"First {what} across ranks" + (" (among the compared ranks)" if missing else "")
    least = min(item.before for item in bad)
    first = sorted((item for item in bad if item.before == least), key=lambda item: item.rank)
    later = sorted(item.rank for item in bad if item.before > least)
    if len(first) > 1:
        where = _tie_where(first)
        every = " (every compared rank)" if not later and not good else ""
        text = "{}: no single origin: {}{} went bad {}: {}".format(
            head, _ranks([item.rank for item in first]), every, where,
            "; ".join(f"rank {item.rank} at {item.call}" for item in first[:MAX_RANKS_SHOWN]))
        text += f"; then {_ranks(later)}" if later else ""
    elif first[0].in_collective:  # the collective itself gave this rank bad values
        origin = first[0]
        text = f"{head}: rank {origin.rank}, {origin.call} (collective #{origin.before}), its inputs still good"
        text += f"; then {_ranks(later)}" if later else ""
    else:
        origin = first[0]
        text = f"{head}: rank {origin.rank}, {origin.call}{_input_note(origin)}, {_where(origin)}"
        if later and origin.after:
            text += " spread it to " + ("every rank" if not good else _ranks(later))
        elif later:
            text += f"; then {_ranks(later)}"
    if good:
        text += "; {} {}".format("every other rank" if len(first) == 1 and not later else _ranks(good), good_phrase)
    return text + caveat


def _tie_where(first: List[_Bad]) -> str:
    """Where ranks bad after the same number of collectives went bad: in a collective when that holds for every
    one of them, else before the next collective (bad inputs there hold for every one)."""
    if all(item.in_collective for item in first):
        return _where(first[0])
    plain = [item for item in first if item.after and not item.in_collective]
    return _where((plain or first)[0]._replace(in_collective=False))


def _where(item: _Bad) -> str:
    if item.in_collective:
        return f"in {item.call} (collective #{item.before}), its inputs still good"
    if item.after:
        return f"before {item.after} (collective #{item.before + 1})"
    if item.collectives == 0:
        return "with no collective in its dump"
    return f"after its last collective (#{item.before}): no collective followed it"


def _input_note(item: _Bad) -> str:
    """For a bad input row: the values came from outside the dumped calls (data, weights, an API not dumped)."""
    return f" (its input {item.record}: from data, weights or an API not dumped)" if item.from_outside else ""


def _ranks(numbers: Sequence[int]) -> str:
    shown = ", ".join(str(number) for number in list(numbers)[:MAX_RANKS_SHOWN])
    more = f" and {len(numbers) - MAX_RANKS_SHOWN} more" if len(numbers) > MAX_RANKS_SHOWN else ""
    return ("rank " if len(numbers) == 1 else "ranks ") + shown + more


def _names(names: Sequence[str]) -> str:
    shown = ", ".join(list(names)[:MAX_RANKS_SHOWN])
    return shown + (f" and {len(names) - MAX_RANKS_SHOWN} more" if len(names) > MAX_RANKS_SHOWN else "")
