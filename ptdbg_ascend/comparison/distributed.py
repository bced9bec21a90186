"""``compare_distributed``: pair the ``rank{N}`` directories of two tag directories numerically and run
``compare`` on each pair, writing ``compare_result_rank{n}-rank{m}_{timestamp}.csv``.

Every file it hands to ``compare`` is resolved and must lie inside the dump directory the user gave: a
rank pair with a symlinked rank directory, dump file or data directory pointing elsewhere is skipped with
a warning naming it (the pairing of the other ranks is unchanged)."""

from __future__ import annotations

import os
import re
from typing import Any, Dict, List, Optional, Tuple

from ptdbg_ascend.comparison.inputs import check_api_mapping
from ptdbg_ascend.comparison.metrics import resolve_inside
from ptdbg_ascend.errors import CompareError, ParameterError
from ptdbg_ascend.log import logger

RANK_DIR = re.compile(r"^rank(\d*)$")  # msprobe writes a plain "rank" without torch.distributed
ALLOWED_KWARGS = ("stack_mode", "auto_analyze", "fuzzy_match", "is_print_compare_log", "xlsx", "api_mapping")


def rank_dirs(dump_dir: str, parameter: str) -> List[Tuple[int, str, str]]:
    """``(rank, name, path)`` sorted by rank number (rank2 before rank10); anything else in the dir is an error."""
    if not isinstance(dump_dir, (str, os.PathLike)):
        raise ParameterError(parameter, dump_dir, "must be a path (str) of a dump tag directory")
    dump_dir = os.fspath(dump_dir)
    if not os.path.isdir(dump_dir):
        raise CompareError("{} {} is not a directory.".format(parameter, dump_dir))
    ranks = []
    for entry in sorted(os.listdir(dump_dir)):
        match = RANK_DIR.match(entry)
        if match is None or not os.path.isdir(os.path.join(dump_dir, entry)):
            raise CompareError("dump_dir contains '{}'. Expected 'rank'. This name is not in the format of dump "
                               "output. Please check and delete irrelevant files in {} and try again."
                               .format(entry, dump_dir))
        ranks.append((int(match.group(1)) if match.group(1) else -1, entry, os.path.join(dump_dir, entry)))
    if not ranks:
        raise CompareError("No rank directory is found in {} ({}).".format(dump_dir, parameter))
    return sorted(ranks)


def rank_files(rank_dir: str) -> Tuple[str, Optional[str], Optional[str]]:
    """``(dump file, data dir or None, stack file or None)`` of one rank directory: a legacy
    ``*.pkl`` + same-named npy dir, or an msprobe ``dump.json`` (+ ``stack.json``, ``dump_tensor_data/``)."""
    entries = sorted(os.listdir(rank_dir))
    pkls = [e for e in entries if e.endswith(".pkl") and os.path.isfile(os.path.join(rank_dir, e))]
    if "dump.json" in entries and not pkls:
        data = os.path.join(rank_dir, "dump_tensor_data")
        stack = os.path.join(rank_dir, "stack.json")
        return (os.path.join(rank_dir, "dump.json"), data if os.path.isdir(data) else None,
                stack if os.path.isfile(stack) else None)
    if not pkls:
        raise CompareError("No file is found in dump dir {}. ".format(rank_dir))
    if len(pkls) > 1:
        raise CompareError("Several pkl files ({}) in dump dir {}: keep one dump per rank directory."
                           .format(", ".join(pkls), rank_dir))
    stem = pkls[0][:-4]
    dirs = [e for e in entries if os.path.isdir(os.path.join(rank_dir, e))]
    stray = [e for e in dirs if e != stem]
    if stray:
        raise CompareError("The names of pkl and directory do not match! Please check the names and remove "
                           "irrelevant files in {}: {} is not {}. ".format(rank_dir, ", ".join(stray), stem))
    return os.path.join(rank_dir, pkls[0]), (os.path.join(rank_dir, stem) if dirs else None), None


def compare_distributed(npu_dump_dir: str, bench_dump_dir: str, output_path: str, **kwargs: Any) -> List[Any]:
    """Compare rank by rank. kwargs: every compare option (``stack_mode``, ``auto_analyze``,
    ``fuzzy_match``, plus ``is_print_compare_log``, default True); ``suffix`` is refused (the rank pair is
    the suffix). Returns one CompareOutcome per compared rank pair; a pair with files outside the dump
    directories is skipped with a warning (CompareError when no pair is left)."""
    from ptdbg_ascend.comparison.api import compare

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
    if len(npu_ranks) != len(bench_ranks):
        raise CompareError("The number of ranks in the two runs are different. Unable to match the ranks. NPU: {}; "
                           "bench: {}. Please use another folder to compare or use compare() api and manually match "
                           "the ranks.".format([n for _, n, _ in npu_ranks], [n for _, n, _ in bench_ranks]))
    outcomes = []
    skipped = []
    for (_, npu_name, npu_dir), (_, bench_name, bench_dir) in zip(npu_ranks, bench_ranks):
        pair = "{}-{}".format(npu_name, bench_name)
        try:
            npu_dump, npu_data, npu_stack = confined_rank_files(npu_dir, npu_dump_dir, "npu_dump_dir")
            bench_dump, bench_data, _ = confined_rank_files(bench_dir, bench_dump_dir, "bench_dump_dir")
        except OutsideDumpDir as error:
            logger.warning("Skipped the rank pair {}: {}. Nothing of this pair was read.".format(pair, error))
            skipped.append(pair)
            continue
        param: Dict[str, Any] = {"npu_pkl_path": npu_dump, "bench_pkl_path": bench_dump,
                                 "npu_dump_data_dir": npu_data, "bench_dump_data_dir": bench_data,
                                 "stack_path": npu_stack, "is_print_compare_log": print_log}
        outcomes.append(compare(param, output_path, suffix=pair, **kwargs))
    if not outcomes:
        raise CompareError("No rank pair could be compared: every pair ({}) has files outside the dump directories "
                           "(see the warnings above).".format(", ".join(skipped)))
    return outcomes


def confined_rank_files(rank_dir: str, dump_dir: str, parameter: str) -> Tuple[str, Optional[str], Optional[str]]:
    """:func:`rank_files` of ``rank_dir``, every path resolved (symlinks followed) and checked to lie inside
    ``dump_dir`` (the directory the user gave as ``parameter``): the rank directory itself is checked before
    it is listed, so a symlinked rank directory or dump file pointing elsewhere is never read.

    :raises OutsideDumpDir: a path resolves outside ``dump_dir``; the message names it.
    :raises CompareError: the rank directory does not hold one dump (see :func:`rank_files`).
    """
    what = "{} (the dump directory given)".format(parameter)

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
