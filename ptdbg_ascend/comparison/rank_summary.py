"""PLACEHOLDER of helper "ranks"'s module (the interface in /tmp/pair_result_iface.md): what one compared rank
pair leaves behind (:class:`PairResult`), the summary CSV over the ranks and the advisor's answer across ranks.
At merge the lead keeps helper "ranks"'s version; this one fills the basic fields only. Torch-free."""

from __future__ import annotations

import csv
import os
from typing import Any, List, Mapping, NamedTuple, Sequence

from ptdbg_ascend.csv_cells import safe_cell
from ptdbg_ascend.errors import CompareError, DumpWriteError

SUMMARY_STEM = "compare_summary_"
COLUMNS = ("rank pair", "rank", "result", "paired forward", "paired backward", "failed forward", "failed backward",
           "first failure", "suspect", "kind", "coverage", "csv")


class PairResult(NamedTuple):
    """What one compared rank pair leaves behind; plain values only (JSON-able, picklable)."""

    pair: str
    rank: int
    csv_path: str
    passed: bool
    paired_forward: int
    paired_backward: int
    failed_forward: int
    failed_backward: int
    first_failure: str
    suspect: str
    kind: str
    coverage: str

    @classmethod
    def of(cls, pair: str, rank: int, outcome: Any, npu_dump: str) -> "PairResult":
        counts, finding = outcome.counts, outcome.finding
        return cls(pair, rank, outcome.csv_path or "", bool(outcome),
                   0 if counts is None else counts.paired_forward, 0 if counts is None else counts.paired_backward,
                   0, 0, outcome.first_failure or "", "" if finding is None else finding.call,
                   "" if finding is None else finding.kind,
                   "" if counts is None else "; ".join(counts.coverage_problems()))

    def to_json(self) -> dict:
        return self._asdict()

    @classmethod
    def from_json(cls, data: object, path: str) -> "PairResult":
        if not isinstance(data, dict) or set(data) != set(cls._fields):
            raise CompareError(f"{path} is not a rank pair's result (expected the keys {', '.join(cls._fields)})")
        kinds = {"rank": int, "passed": bool}
        values = []
        for field in cls._fields:
            value = data[field]
            kind = kinds.get(field, int if field.startswith(("paired", "failed")) else str)
            if type(value) is not kind:  # bool is not an int here, nor an int a bool
                raise CompareError(f"{path}: {field} is not a {kind.__name__}")
            values.append(value)
        return cls(*values)


def write_summary(output_path: str, results: Sequence[PairResult], not_compared: Mapping[str, str],
                  timestamp: str) -> str:
    """Write ``{output_path}/compare_summary_{timestamp}.csv``: a row per rank pair, a row per pair not compared
    with its reason; returns its path."""
    path = os.path.join(output_path, f"{SUMMARY_STEM}{timestamp}.csv")
    try:
        with open(path, "w", newline="", encoding="utf-8") as handle:
            writer = csv.writer(handle)
            writer.writerow(COLUMNS)
            for result in results:
                status = "passed" if result.passed else ("failed" if result.first_failure else "incomplete")
                writer.writerow([safe_cell(str(value)) for value in (
                    result.pair, result.rank, status, result.paired_forward, result.paired_backward,
                    result.failed_forward, result.failed_backward, result.first_failure, result.suspect, result.kind,
                    result.coverage, os.path.basename(result.csv_path))])
            for pair, reason in sorted(not_compared.items()):
                writer.writerow([safe_cell(pair), "", "not compared: " + safe_cell(reason)] + [""] * 9)
    except OSError as error:
        raise DumpWriteError(f"Cannot write the summary {path}: {error}") from None
    return path


def cross_rank_answer(results: Sequence[PairResult]) -> List[str]:
    """The advisor's lines across ranks (the placeholder: none)."""
    return []
