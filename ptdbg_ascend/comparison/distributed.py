"""``compare_distributed``: pair the ``rank{N}`` directories of two tag directories by their rank number and
compare each pair (the core ``compare`` calls), writing ``compare_result_rank{n}-rank{n}_{timestamp}.csv``.

Ranks pair by number, never by position: ``rank0, rank1`` against ``rank0, rank2`` compares rank0 with
rank0 only, and rank1 (NPU only) and rank2 (bench only) are named in a warning and in the returned
:class:`RankOutcomes`. No common rank at all is a CompareError listing each side's ranks. msprobe's plain
``rank`` directory (a run without torch.distributed: one process) pairs with a plain ``rank``, or with
``rank0`` when it is the only rank directory of its side.

Every file it compares is resolved and must lie inside the dump directory the user gave: a
rank pair with a symlinked rank directory, dump file or data directory pointing elsewhere is skipped with
a warning naming it (the pairing of the other ranks is unchanged)."""

from __future__ import annotations

import os
from typing import Any, Dict, List, Optional, Sequence, Tuple

from ptdbg_ascend.comparison import html_index
from ptdbg_ascend.comparison.inputs import (CompareInputs, CompareOptions, check_api_mapping, check_dump_file,
                                             check_options, check_print_log)
from ptdbg_ascend.comparison.run import compare_dumps
from ptdbg_ascend.formats.layout import DUMP_FILE, PKL_SUFFIX, RANK_DIR, dump_file, npy_dir, stack_file, tensor_dir
from ptdbg_ascend.fs.confined import resolve_inside
from ptdbg_ascend.errors import CompareError, ParameterError
from ptdbg_ascend.log import logger

PLAIN_RANK = -1  # the number rank_dirs gives a plain "rank"
ALLOWED_KWARGS = ("stack_mode", "auto_analyze", "fuzzy_match", "is_print_compare_log", "xlsx", "api_mapping", "html",
                  "rerun")


def rank_dirs(dump_dir: str, parameter: str) -> List[Tuple[int, str, str]]:
    """``(rank, name, path)`` sorted by rank number (rank2 before rank10; a plain ``rank`` is -1); anything
    else in the dir is an error, and so are two directories of one number (``rank1`` and ``rank01``)."""
    if not isinstance(dump_dir, (str, os.PathLike)):
        raise ParameterError(parameter, dump_dir, "must be a path (str) of a dump tag directory")
    dump_dir = os.fspath(dump_dir)
    if not os.path.isdir(dump_dir):
        raise CompareError(f"{parameter} {dump_dir} is not a directory.")
    ranks = []
    for entry in sorted(os.listdir(dump_dir)):
        match = RANK_DIR.match(entry)
        if match is None or not os.path.isdir(os.path.join(dump_dir, entry)):
            raise CompareError("dump_dir contains '{}'. Expected 'rank'. This name is not in the format of dump "
                               "output. Please check and delete irrelevant files in {} and try again."
                               .format(entry, dump_dir))
        ranks.append((int(match.group(1)) if match.group(1) else PLAIN_RANK, entry, os.path.join(dump_dir, entry)))
    if not ranks:
        raise CompareError(f"No rank directory is found in {dump_dir} ({parameter}).")
    ranks.sort()
    for (number, first, _), (next_number, second, _) in zip(ranks, ranks[1:]):
        if number == next_number:
            raise CompareError("{} {} holds two directories of one rank: {} and {}. Keep one dump per rank."
                               .format(parameter, dump_dir, first, second))
    return ranks


def pair_ranks(npu_ranks: Sequence[Tuple[int, str, str]], bench_ranks: Sequence[Tuple[int, str, str]]
               ) -> Tuple[List[Tuple[Tuple[int, str, str], Tuple[int, str, str]]], List[str], List[str]]:
    """``(pairs, NPU-only names, bench-only names)``: the rank directories of both sides paired by rank
    number, in rank order. A plain ``rank`` alone on its side counts as rank 0 (a one-process run)."""
    def by_number(ranks: Sequence[Tuple[int, str, str]]) -> Dict[int, Tuple[int, str, str]]:
        if len(ranks) == 1 and ranks[0][0] == PLAIN_RANK:
            return {0: ranks[0]}
        return {rank[0]: rank for rank in ranks}

    npu, bench = by_number(npu_ranks), by_number(bench_ranks)
    pairs = [(npu[number], bench[number]) for number in sorted(npu) if number in bench]
    return (pairs, [npu[n][1] for n in sorted(npu) if n not in bench],
            [bench[n][1] for n in sorted(bench) if n not in npu])


class RankOutcomes(list):
    """What :func:`compare_distributed` returns: the CompareOutcome of each compared rank pair, in rank
    order (a list, as before), and what was not compared: ``npu_only`` / ``bench_only``, the rank
    directories present on one side only; ``skipped``, the pairs skipped because a file lies outside the
    dump directories (``"rank1-rank1"``); ``index_path``, the HTML page over the ranks (None: not written)."""

    def __init__(self, outcomes: Sequence[Any], npu_only: Sequence[str] = (), bench_only: Sequence[str] = (),
                 skipped: Sequence[str] = (), index_path: Optional[str] = None) -> None:
        super().__init__(outcomes)
        self.npu_only, self.bench_only, self.skipped = tuple(npu_only), tuple(bench_only), tuple(skipped)
        self.index_path = index_path  # compare_index_{timestamp}.html over the ranks' reports (None: html=False)

    def not_compared(self) -> str:
        """One line naming the ranks that were not compared ("" when every rank was)."""
        parts = []
        if self.npu_only:
            parts.append(f"{', '.join(self.npu_only)} only in the NPU dump")
        if self.bench_only:
            parts.append(f"{', '.join(self.bench_only)} only in the bench dump")
        if self.skipped:
            parts.append(f"{', '.join(self.skipped)} skipped (files outside the dump directories)")
        return "not compared: " + "; ".join(parts) if parts else ""


def rank_files(rank_dir: str) -> Tuple[str, Optional[str], Optional[str]]:
    """``(dump file, data dir or None, stack file or None)`` of one rank directory: a legacy
    ``*.pkl`` + same-named npy dir, or an msprobe ``dump.json`` (+ ``stack.json``, ``dump_tensor_data/``)."""
    entries = sorted(os.listdir(rank_dir))
    pkls = [e for e in entries if e.endswith(PKL_SUFFIX) and os.path.isfile(os.path.join(rank_dir, e))]
    if DUMP_FILE in entries and not pkls:
        data = tensor_dir(rank_dir)
        stack = stack_file(rank_dir)
        return (dump_file(rank_dir), data if os.path.isdir(data) else None,
                stack if os.path.isfile(stack) else None)
    if not pkls:
        from ptdbg_ascend.readers.dump_state import missing_dump_note

        note = missing_dump_note(dump_file(rank_dir))
        raise CompareError("No file is found in dump dir {}. {}".format(
            rank_dir, f"There is no {DUMP_FILE}: {note}" if note else ""))
    if len(pkls) > 1:
        raise CompareError("Several pkl files ({}) in dump dir {}: keep one dump per rank directory."
                           .format(", ".join(pkls), rank_dir))
    stem = npy_dir(pkls[0])
    dirs = [e for e in entries if os.path.isdir(os.path.join(rank_dir, e))]
    stray = [e for e in dirs if e != stem]
    if stray:
        raise CompareError("The names of pkl and directory do not match! Please check the names and remove "
                           "irrelevant files in {}: {} is not {}. ".format(rank_dir, ", ".join(stray), stem))
    return os.path.join(rank_dir, pkls[0]), (os.path.join(rank_dir, stem) if dirs else None), None


def compare_distributed(npu_dump_dir: str, bench_dump_dir: str, output_path: str, **kwargs: Any) -> RankOutcomes:
    """Compare rank by rank, pairing rank directories by number. kwargs: every compare option
    (``stack_mode``, ``auto_analyze``, ``fuzzy_match``, ``xlsx``, ``api_mapping``, ``html``, plus
    ``is_print_compare_log``, default True); ``suffix`` is refused (the rank pair is the suffix). With ``html``
    (default True) each rank pair's ``compare_report_*.html`` and one ``compare_index_{timestamp}.html`` over
    them (:mod:`~ptdbg_ascend.comparison.html_index`: which rank fails first, a row per rank). Returns a
    :class:`RankOutcomes`: one CompareOutcome per compared rank pair, and the ranks present on one side only
    (also a warning); a pair with files outside the dump directories is skipped with a warning. CompareError
    when the two sides have no rank in common (naming each side's ranks) or when no pair is left."""
    if "suffix" in kwargs:
        raise ParameterError("suffix", kwargs["suffix"], "Argument 'suffix' is not supported for compare_distributed")
    for key in kwargs:
        if key not in ALLOWED_KWARGS:
            raise ParameterError(key, kwargs[key], "not a compare_distributed option; allowed: "
                                 + ", ".join(ALLOWED_KWARGS))
    print_log = kwargs.pop("is_print_compare_log", True)
    if kwargs.get("api_mapping") is not None:  # read and checked once, not per rank pair
        kwargs["api_mapping"] = check_api_mapping(kwargs["api_mapping"])
    npu_ranks = rank_dirs(npu_dump_dir, "npu_dump_dir")
    bench_ranks = rank_dirs(bench_dump_dir, "bench_dump_dir")
    pairs, npu_only, bench_only = pair_ranks(npu_ranks, bench_ranks)
    if not pairs:
        raise CompareError("The two dumps have no rank in common: npu_dump_dir {} has {}; bench_dump_dir {} has {}. "
                           "Ranks pair by number; use compare() to compare two chosen ranks.".format(
                               npu_dump_dir, ", ".join(n for _, n, _ in npu_ranks), bench_dump_dir,
                               ", ".join(n for _, n, _ in bench_ranks)))
    if npu_only or bench_only:
        sides = ([f"{', '.join(npu_only)} only in npu_dump_dir {npu_dump_dir}"] if npu_only else []) + \
                ([f"{', '.join(bench_only)} only in bench_dump_dir {bench_dump_dir}"] if bench_only else [])
        logger.warning("Ranks present on one side only are not compared: {}. Ranks pair by number, not by "
                       "position.".format("; ".join(sides)))
    outcomes = []
    skipped: List[str] = []
    compared: List[str] = []  # the rank pair of each outcome
    options: Optional[CompareOptions] = None
    for (_, npu_name, npu_dir), (_, bench_name, bench_dir) in pairs:
        pair = f"{npu_name}-{bench_name}"
        try:
            npu_dump, npu_data, npu_stack = confined_rank_files(npu_dir, npu_dump_dir, "npu_dump_dir")
            bench_dump, bench_data, _ = confined_rank_files(bench_dir, bench_dump_dir, "bench_dump_dir")
        except OutsideDumpDir as error:
            logger.warning(f"Skipped the rank pair {pair}: {error}. Nothing of this pair was read.")
            skipped.append(pair)
            continue
        if options is None:  # checked once, at the first pair compared: where compare() checked them before
            options = check_options(output_path, **kwargs)
            print_log = check_print_log(print_log)
        inputs = CompareInputs(check_dump_file("npu", npu_dump), check_dump_file("bench", bench_dump), npu_data,
                               bench_data, npu_stack, print_log)
        outcomes.append(compare_dumps(inputs, options._replace(suffix=pair)))
        compared.append(pair)
    if not outcomes:
        raise CompareError("No rank pair could be compared: every pair ({}) has files outside the dump directories "
                           "(see the warnings above).".format(", ".join(skipped)))
    result = RankOutcomes(outcomes, npu_only, bench_only, skipped)
    if options.html:
        result.index_path = html_index.write_index(options.output_path, compared, outcomes, result.not_compared())
        logger.info(f"The HTML index of the ranks is {result.index_path}")
    return result


def confined_rank_files(rank_dir: str, dump_dir: str, parameter: str) -> Tuple[str, Optional[str], Optional[str]]:
    """:func:`rank_files` of ``rank_dir``, every path resolved (symlinks followed) and checked to lie inside
    ``dump_dir`` (the directory the user gave as ``parameter``): the rank directory itself is checked before
    it is listed, so a symlinked rank directory or dump file pointing elsewhere is never read.

    :raises OutsideDumpDir: a path resolves outside ``dump_dir``; the message names it.
    :raises CompareError: the rank directory does not hold one dump (see :func:`rank_files`).
    """
    what = f"{parameter} (the dump directory given)"

    def inside(path: str) -> str:
        try:
            return resolve_inside(path, dump_dir, what)
        except ValueError as error:
            raise OutsideDumpDir(str(error)) from None

    dump, data, stack = rank_files(inside(rank_dir))
    return inside(dump), (None if data is None else inside(data)), (None if stack is None else inside(stack))


class OutsideDumpDir(Exception):
    """A file of a rank resolves outside the dump directory given: compare_distributed skips that rank
    pair with a warning (never raised to the caller)."""
