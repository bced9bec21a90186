"""PLACEHOLDER of helper "ranks"'s module (the interface in /tmp/pair_result_iface.md): what one compared rank
pair leaves behind (:class:`PairResult`), the summary CSV over the ranks and the advisor's answer across ranks.
At merge the lead keeps helper "ranks"'s version; this one fills the basic fields only. Torch-free."""

from __future__ import annotations

from typing import Any, List, Mapping, NamedTuple, Sequence

from ptdbg_ascend.errors import CompareError

SUMMARY_STEM = "compare_summary_"
# the columns of helper "ranks"'s summary (the placeholder leaves the collective ones empty)
SUMMARY_COLUMNS = ("Rank Pair", "NPU Rank", "Status", "Paired Forward", "Paired Backward", "Failing Forward",
                   "Failing Backward", "First Failure", "Suspect", "Kind", "Coverage", "Collectives",
                   "Collectives Before Failure", "Next Collective", "First Inf/NaN", "Collectives Before Inf/NaN",
                   "Compare Result", "NPU Dump", "Not Compared")


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
    """Write ``{output_path}/compare_summary_{timestamp}.csv`` (``_1``... when taken): a row per rank pair by rank,
    then a row per pair not compared with its reason in the last column; returns its path."""
    from ptdbg_ascend.csv_cells import writer
    from ptdbg_ascend.fs.reports import claim_report

    _, path, handle = claim_report(output_path, timestamp, (), SUMMARY_STEM, what="the compare summary")
    with handle:
        table = writer(handle)
        table.writerow(SUMMARY_COLUMNS)
        for result in sorted(results, key=lambda item: (item.rank, item.pair)):
            status = "passed" if result.passed else ("failed" if result.first_failure else "incomplete")
            table.writerow([result.pair, result.rank, status, result.paired_forward, result.paired_backward,
                            result.failed_forward, result.failed_backward, result.first_failure, result.suspect,
                            result.kind, result.coverage, "", "", "", "", "", result.csv_path, "", ""])
        for pair in sorted(not_compared):
            table.writerow([pair, "", "not compared"] + [""] * (len(SUMMARY_COLUMNS) - 4) + [not_compared[pair]])
    return path


def cross_rank_answer(results: Sequence[PairResult]) -> List[str]:
    """The advisor's lines across ranks (the placeholder: none)."""
    return []
