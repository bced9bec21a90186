"""Where a rank went bad, counted in its communication calls: read from one rank pair's compare CSV
(``compare_result_*.csv``), whose rows follow the NPU's call order and carry each row's verdict and NPU
statistics, in one streaming pass that keeps only counters (memory independent of the CSV's length).

A rank's *collectives* are its ``Distributed_*`` forward calls (``dist.all_reduce``, ``broadcast``...), numbered
1, 2, ... in call order. A :class:`Place` says how many of them ran with inputs that were still good before a
row went bad (a collective whose output row is the first bad one had good inputs: it counts) and which collective
then took the bad values on (the next one; itself when the bad row is one of its inputs). Comparing those
numbers across ranks (:mod:`~ptdbg_ascend.comparison.cross_rank`) tells the rank that was bad before the others.

Torch-free; the CSV is our own, read through :mod:`ptdbg_ascend.csv_cells` and checked for its columns.
"""

from __future__ import annotations

import csv
import math
from typing import Dict, NamedTuple, Optional, Tuple

from ptdbg_ascend.csv_cells import restore_cell
from ptdbg_ascend.errors import CompareError
from ptdbg_ascend.formats.compare_columns import NPU_NAME, RESULT
from ptdbg_ascend.formats.naming import BACKWARD, FORWARD, split_call_name, split_record_name

COLLECTIVE_PREFIX = "Distributed_"  # the API prefix of the communication calls (dump/wrapped_apis.txt)
ERROR_RESULT = "error"  # the Result of a failing row (comparison/verdicts.ERROR)
NO_VALUE = "Nan"  # the report's cell for a statistic the dump does not hold (comparison/metrics.NAN): not a NaN
NPU_MAX, NPU_MIN = "NPU max", "NPU min"
# The longest cell read: a stack_mode CSV's NPU_Stack_Info of a deep stack can pass csv's default 128 KiB; a cell
# beyond this is no report of ours.
MAX_CELL = 16 << 20


class Place(NamedTuple):
    """Where a row of a rank went bad: ``record`` (its NPU record name), ``call`` (its call name),
    ``collectives_before`` (the collectives that ran with good inputs before it) and ``collective_after``
    (the call name of the next collective, which took the bad values on; "" when no collective followed)."""

    record: str
    call: str
    collectives_before: int
    collective_after: str = ""


class RankOrder(NamedTuple):
    """What one rank pair's CSV says in call order: failing rows by direction, the number of collectives,
    the first failing row's :class:`Place` and the first row whose NPU max or min is inf or NaN (None: none)."""

    failed_forward: int = 0
    failed_backward: int = 0
    collectives: int = 0
    failure: Optional[Place] = None
    overflow: Optional[Place] = None


def is_collective(call: str) -> bool:
    """Whether a legacy call name is a forward call of a ``Distributed_*`` API."""
    parts = split_call_name(call)
    return parts.api.startswith(COLLECTIVE_PREFIX) and parts.direction == FORWARD and parts.index >= 0


def read_rank_order(csv_path: str) -> RankOrder:
    """The :class:`RankOrder` of the compare CSV ``csv_path`` ("" or None: an empty one, nothing was written).
    CompareError naming the path when it cannot be read or lacks the columns ``NPU Name`` and ``Result``."""
    if not csv_path:
        return RankOrder()
    limit = csv.field_size_limit(MAX_CELL)  # process-wide: put back below
    try:
        with open(csv_path, newline="", encoding="utf-8") as handle:
            return _scan(csv.reader(handle), csv_path)
    except (OSError, UnicodeDecodeError, csv.Error) as error:
        raise CompareError(f"Cannot read the compare result {csv_path}: {error}") from None
    finally:
        csv.field_size_limit(limit)


def _scan(reader, csv_path: str) -> RankOrder:
    header = [restore_cell(cell) for cell in next(reader, [])]
    if NPU_NAME not in header or RESULT not in header:
        raise CompareError(f"{csv_path} is not a compare result: its first row has no {NPU_NAME!r} and "
                           f"{RESULT!r} columns.")
    name_at, result_at = header.index(NPU_NAME), header.index(RESULT)
    statistics_at = tuple(header.index(column) for column in (NPU_MAX, NPU_MIN) if column in header)
    failed = {FORWARD: 0, BACKWARD: 0}
    collectives, last_collective = 0, ""
    found: Dict[str, list] = {}  # "failure" / "overflow" -> [record, call, collectives before, next collective]
    for row in reader:
        name = restore_cell(row[name_at]) if name_at < len(row) else ""
        parts = split_record_name(name)
        if parts is None:  # a bench-only row ("Nan") or a name outside the grammar: not an NPU call
            continue
        call, side = parts
        if is_collective(call) and call != last_collective:
            collectives, last_collective = collectives + 1, call
            for place in found.values():
                if not place[3] and place[2] == collectives - 1:
                    place[3] = call
        bad_input_of_collective = last_collective == call and side == "input"
        kinds = []
        if result_at < len(row) and row[result_at] == ERROR_RESULT:
            failed[split_call_name(call).direction] += 1
            kinds.append("failure")
        if _not_finite(row, statistics_at):
            kinds.append("overflow")
        for kind in kinds:
            if kind not in found:
                before = collectives - 1 if bad_input_of_collective else collectives
                found[kind] = [name, call, before, call if bad_input_of_collective else ""]
    places = {kind: Place(*values) for kind, values in found.items()}
    return RankOrder(failed[FORWARD], failed[BACKWARD], collectives, places.get("failure"), places.get("overflow"))


def _not_finite(row, columns: Tuple[int, ...]) -> bool:
    """Whether the NPU max or min cell of ``row`` is inf or NaN (the placeholder ``Nan`` is no value)."""
    for index in columns:
        cell = row[index] if index < len(row) else ""
        if not cell or cell == NO_VALUE:
            continue
        try:
            value = float(cell)
        except ValueError:
            continue
        if not math.isfinite(value):
            return True
    return False
