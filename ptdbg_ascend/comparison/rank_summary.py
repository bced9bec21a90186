"""One summary over the ranks of a distributed compare: what each compared rank pair leaves behind
(:class:`PairResult`, plain values, written as JSON by the worker that compared it and read back by the process
that sums up), the CSV ``compare_summary_{timestamp}.csv`` with a row per rank pair (:func:`write_summary`) and
the advisor's answer across ranks (:func:`cross_rank_answer`, :mod:`~ptdbg_ascend.comparison.cross_rank`).

A PairResult's JSON is ``{"format": "ptdbg_ascend.pair_result", "version": 1, ...}`` and its fields under their
names; :meth:`PairResult.from_json` checks the format, the version and every field's type and length before
anything is used (a result file is read back from a shared directory: another process, or anyone, wrote it).

Torch-free.
"""

from __future__ import annotations

import re
from typing import Any, Dict, List, Mapping, NamedTuple, Sequence, Tuple

from ptdbg_ascend.comparison.cross_rank import cross_rank_answer
from ptdbg_ascend.comparison.outcome import CompareOutcome
from ptdbg_ascend.comparison.rank_order import read_rank_order
from ptdbg_ascend.errors import CompareError, ParameterError
from ptdbg_ascend.terminal import excerpt

__all__ = ["PairResult", "write_summary", "cross_rank_answer", "SUMMARY_STEM", "SUMMARY_COLUMNS"]

FORMAT = "ptdbg_ascend.pair_result"
VERSION = 1
MAX_NAME = 4096  # a record, call or file name (PATH_MAX); dump names are far shorter
MAX_TEXT = 16384  # the coverage sentences of one pair
MAX_COUNT = 2 ** 63 - 1  # a row count or a collective number: no run has more
_TIMESTAMP = re.compile(r"[0-9A-Za-z_.-]{1,64}\Z")  # a file name's part: no separator
_PAIR = re.compile(r"rank\d{0,18}-rank\d{0,18}\Z")  # "rank3-rank3", a plain "rank-rank" (distributed.rank_dirs)


class PairResult(NamedTuple):
    """What one compared rank pair leaves behind; plain values only (JSON-able, picklable).

    ``pair``: "rank3-rank3" (the suffix of that pair's compare_result CSV); ``rank``: the NPU rank number (-1 for
    a plain "rank" directory); ``csv_path``: that pair's compare_result CSV ("" when none was written);
    ``passed``: ``bool(outcome)``; paired and failing rows by direction; ``first_failure``: the first failing row
    in call order ("" when none); ``suspect``/``kind``: the advisor's (""); ``coverage``: what of the pair was not
    compared ("" when complete). The rest (defaults: nothing known) place the rank's failure among its
    collectives (:mod:`~ptdbg_ascend.comparison.rank_order`): ``npu_dump`` (the NPU dump file: its format names the
    calls in the answer), ``judged`` (enough of the pair was compared to tell a good rank from a bad one),
    ``collectives`` (its ``Distributed_*`` calls), ``collectives_before_failure``/``collective_after_failure``
    and ``first_overflow`` (the first row whose NPU max or min is inf/NaN) with
    ``collectives_before_overflow``/``collective_after_overflow``."""

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
    npu_dump: str = ""
    judged: bool = True
    collectives: int = 0
    collectives_before_failure: int = 0
    collective_after_failure: str = ""
    first_overflow: str = ""
    collectives_before_overflow: int = 0
    collective_after_overflow: str = ""

    @classmethod
    def of(cls, pair: str, rank: int, outcome: CompareOutcome, npu_dump: str) -> "PairResult":
        """The result of the rank pair ``pair`` (NPU rank ``rank``, NPU dump file ``npu_dump``) that
        ``compare_dumps`` returned as ``outcome``; reads the pair's CSV once, streaming (CompareError naming it
        when it cannot be read). A name longer than :meth:`from_json` reads back is cut (``...`` at its end), so the
        result always reads back. ParameterError for a ``pair`` not of the form ``rank{N}-rank{M}`` or a ``rank``
        that is no int >= -1."""
        if not isinstance(pair, str) or not _PAIR.match(pair):
            raise ParameterError("pair", pair, "the rank pair's name, rank{N}-rank{M} (e.g. rank3-rank3)")
        if type(rank) is not int or rank < -1:
            raise ParameterError("rank", rank, "the NPU rank number, an int >= -1 (-1: a plain rank directory)")
        order = read_rank_order(outcome.csv_path or "")
        counts, finding = outcome.counts, outcome.finding
        failure, overflow = order.failure, order.overflow
        return cls(
            pair=pair, rank=rank, csv_path=outcome.csv_path or "", passed=bool(outcome),
            paired_forward=counts.paired_forward if counts else 0,
            paired_backward=counts.paired_backward if counts else 0,
            failed_forward=order.failed_forward, failed_backward=order.failed_backward,
            first_failure=outcome.first_failure or "",
            suspect=finding.call if finding else "", kind=finding.kind if finding else "",
            coverage="; ".join(counts.coverage_problems()) if counts else "",
            npu_dump=npu_dump, judged=counts.enough_compared if counts else outcome.first_failure is not None,
            collectives=order.collectives,
            collectives_before_failure=failure.collectives_before if failure else 0,
            collective_after_failure=failure.collective_after if failure else "",
            first_overflow=overflow.record if overflow else "",
            collectives_before_overflow=overflow.collectives_before if overflow else 0,
            collective_after_overflow=overflow.collective_after if overflow else "")._clipped()

    def _clipped(self) -> "PairResult":
        """This result with every text cut to the length :meth:`from_json` accepts."""
        return self._replace(**{name: getattr(self, name)[:limit - 3] + "..." for name, (kind, limit) in _FIELDS.items()
                                if kind is str and len(getattr(self, name)) > limit})

    def to_json(self) -> Dict[str, Any]:
        """The JSON object of this result (``format``, ``version`` and every field)."""
        record: Dict[str, Any] = {"format": FORMAT, "version": VERSION}
        record.update(self._asdict())
        return record

    @classmethod
    def from_json(cls, data: object, path: str) -> "PairResult":
        """The PairResult a parsed JSON value holds; ``path`` names its file in the messages. CompareError when
        ``data`` is not an object of format ``FORMAT`` version ``VERSION``, or a field is missing, of the wrong
        type (a JSON true is no int), a count negative or beyond 2**63-1, a text longer than its limit, or
        ``pair`` not of the form ``rank{N}-rank{M}``. Keys it does not know are ignored."""
        def refuse(problem: str) -> CompareError:
            return CompareError(f"{path} is not a rank pair result of format {FORMAT!r} version {VERSION}: "
                                f"{problem}. Delete it to compare that pair again.")

        if not isinstance(data, dict):
            raise refuse(f"it holds a JSON {type(data).__name__}, not an object")
        if data.get("format") != FORMAT or type(data.get("version")) is not int or data["version"] != VERSION:
            raise refuse("it says format {} version {}".format(excerpt(data.get("format")),
                                                              excerpt(data.get("version"))))
        fields = {name: _field(data, name, kind, limit, refuse) for name, (kind, limit) in _FIELDS.items()}
        if not _PAIR.match(fields["pair"]):
            raise refuse(f"the pair {excerpt(fields['pair'])} is not of the form rank{{N}}-rank{{M}}")
        return cls(**fields)


# field -> (type, limit: the most characters of a str, the least value of an int)
_FIELDS: Dict[str, Tuple[type, int]] = {
    "pair": (str, 64), "rank": (int, -1), "csv_path": (str, MAX_NAME), "passed": (bool, 0),
    "paired_forward": (int, 0), "paired_backward": (int, 0), "failed_forward": (int, 0), "failed_backward": (int, 0),
    "first_failure": (str, MAX_NAME), "suspect": (str, MAX_NAME), "kind": (str, 64), "coverage": (str, MAX_TEXT),
    "npu_dump": (str, MAX_NAME), "judged": (bool, 0), "collectives": (int, 0), "collectives_before_failure": (int, 0),
    "collective_after_failure": (str, MAX_NAME), "first_overflow": (str, MAX_NAME),
    "collectives_before_overflow": (int, 0), "collective_after_overflow": (str, MAX_NAME),
}


_KIND_WORDS = {str: "a string", int: "an integer", bool: "true or false"}


def _field(data: Dict[str, Any], name: str, kind: type, limit: int, refuse) -> Any:
    if name not in data:
        raise refuse(f"the field {name!r} is missing")
    value = data[name]
    if type(value) is not kind:  # exact: a JSON true is no int, 1.0 no int, 0 no bool
        raise refuse(f"the field {name!r} is {excerpt(value, 80)}, not {_KIND_WORDS[kind]}")
    if kind is str and len(value) > limit:
        raise refuse(f"the field {name!r} has {len(value)} characters (at most {limit})")
    if kind is int and not limit <= value <= MAX_COUNT:
        raise refuse(f"the field {name!r} is {excerpt(value, 80)}, not from {limit} to 2**63-1")
    return value


# --- the summary CSV ----------------------------------------------------------------------------------
SUMMARY_STEM = "compare_summary_"
SUMMARY_COLUMNS = ("Rank Pair", "NPU Rank", "Status", "Paired Forward", "Paired Backward", "Failing Forward",
                   "Failing Backward", "First Failure", "Suspect", "Kind", "Coverage", "Collectives",
                   "Collectives Before Failure", "Next Collective", "First Inf/NaN", "Collectives Before Inf/NaN",
                   "Compare Result", "NPU Dump", "Not Compared")
PASSED, FAILED, INCOMPLETE, NOT_COMPARED = "passed", "failed", "incomplete", "not compared"


def status(result: PairResult) -> str:
    """``"passed"``, ``"failed"`` (a row failed) or ``"incomplete"`` (nothing failed, part not compared)."""
    if result.passed:
        return PASSED
    return FAILED if result.first_failure else INCOMPLETE


def summary_rows(results: Sequence[PairResult], not_compared: Mapping[str, str]) -> List[List[object]]:
    """The summary's rows after its header: the compared pairs by rank (then pair name), then a row per pair
    not compared with its reason, by pair name."""
    rows: List[List[object]] = []
    for result in sorted(results, key=lambda item: (item.rank, item.pair)):
        rows.append([result.pair, result.rank, status(result), result.paired_forward, result.paired_backward,
                     result.failed_forward, result.failed_backward, result.first_failure, result.suspect,
                     result.kind, result.coverage, result.collectives,
                     result.collectives_before_failure if result.first_failure else "",
                     result.collective_after_failure, result.first_overflow,
                     result.collectives_before_overflow if result.first_overflow else "", result.csv_path,
                     result.npu_dump, ""])
    for pair in sorted(not_compared):
        rows.append([pair, _rank_of(pair), NOT_COMPARED] + [""] * (len(SUMMARY_COLUMNS) - 4)
                    + [not_compared[pair]])
    return rows


def _rank_of(pair: str) -> object:
    """The NPU rank number of ``rank{N}-...`` ("" when the name does not say)."""
    match = re.match(r"rank(\d{1,18})\b", pair)
    return int(match.group(1)) if match else ""


def write_summary(output_path: str, results: Sequence[PairResult], not_compared: Mapping[str, str],
                  timestamp: str) -> str:
    """Write ``{output_path}/compare_summary_{timestamp}.csv`` (``_1``, ``_2``... when taken): the header
    :data:`SUMMARY_COLUMNS`, a row per compared rank pair of ``results`` and one per pair of ``not_compared``
    (pair name -> why: "only in the NPU dump", "lost: worker/process died"...), every cell through
    :mod:`ptdbg_ascend.csv_cells` (no cell becomes a formula). Returns its path; DumpWriteError when it cannot be
    written; ParameterError when ``timestamp`` is not 1 to 64 letters, digits, ``_ . -``."""
    if not isinstance(timestamp, str) or not _TIMESTAMP.match(timestamp):
        raise ParameterError("timestamp", timestamp, "1 to 64 letters, digits, '_', '.' or '-' (a part of a file name)")
    from ptdbg_ascend.csv_cells import writer
    from ptdbg_ascend.fs.reports import claim_report

    _, path, handle = claim_report(output_path, timestamp, (), SUMMARY_STEM, what="the compare summary")
    with handle:
        table = writer(handle)
        table.writerow(SUMMARY_COLUMNS)
        table.writerows(summary_rows(results, not_compared))
    return path
