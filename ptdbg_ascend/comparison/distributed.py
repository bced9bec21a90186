"""``compare_distributed``: pair the ``rank{N}`` directories of two tag directories by their rank number and
compare each pair (the core ``compare`` calls), writing ``compare_result_rank{n}-rank{n}_{timestamp}.csv``.

Ranks pair by number, never by position: ``rank0, rank1`` against ``rank0, rank2`` compares rank0 with
rank0 only, and rank1 (NPU only) and rank2 (bench only) are named in a warning and in the returned
:class:`RankOutcomes`. No common rank at all is a CompareError listing each side's ranks. msprobe's plain
``rank`` directory (a run without torch.distributed: one process) pairs with a plain ``rank``, or with
``rank0`` when it is the only rank directory of its side.

Every file it compares is resolved and must lie inside the dump directory the user gave: a
rank pair with a symlinked rank directory, dump file or data directory pointing elsewhere is skipped with
a warning naming it (the pairing of the other ranks is unchanged).

The pairs are compared on ``workers`` local processes (:mod:`~ptdbg_ascend.comparison.rank_pool`), or shared over
a torchrun launch (:mod:`~ptdbg_ascend.comparison.rank_world`); each leaves a completion record
(:mod:`~ptdbg_ascend.comparison.rank_records`, the resume marker), and the one writing process writes
``compare_summary_{timestamp}.csv`` (:mod:`~ptdbg_ascend.comparison.rank_summary`) and the HTML index."""

from __future__ import annotations

import os
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

from ptdbg_ascend.comparison import html_index, rank_world
from ptdbg_ascend.comparison.inputs import check_api_mapping, check_bool, check_options, check_print_log
from ptdbg_ascend.comparison.rank_pool import PairDone, PoolJob, check_workers, cores, run_pairs, usable_workers
from ptdbg_ascend.comparison.rank_records import PLAIN_RANK, RECORD_DIR, PairTask, RankView, options_key, read_record
from ptdbg_ascend.comparison.rank_summary import PairResult, cross_rank_answer, write_summary
from ptdbg_ascend.formats.layout import DUMP_FILE, PKL_SUFFIX, RANK_DIR, dump_file, npy_dir, stack_file, tensor_dir
from ptdbg_ascend.fs.confined import resolve_inside
from ptdbg_ascend.errors import CompareError, ParameterError
from ptdbg_ascend.log import logger

DEFAULT_PEER_TIMEOUT = 120.0  # seconds of silence (no heartbeat) before rank 0 takes a torchrun process for dead
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
    """What :func:`compare_distributed` returns: the CompareOutcome of each rank pair compared by this call, in
    rank order (a list, as before), and what was not compared: ``npu_only`` / ``bench_only``, the rank
    directories present on one side only; ``skipped``, the pairs skipped because a file lies outside the
    dump directories (``"rank1-rank1"``); ``index_path``, the HTML page over the ranks (None: not written).
    ``results``: the :class:`~ptdbg_ascend.comparison.rank_summary.PairResult` of every pair compared, by this
    call or by an earlier one (resumed from its completion record) or, under torchrun, by any process, in rank
    order; ``resumed``: the pairs taken from earlier records; ``failed_pairs``: ``{pair: reason}`` of the pairs
    whose compare did not end (an error, a lost process); ``summary_path``: compare_summary_{timestamp}.csv
    (None: not written by this process)."""

    def __init__(self, outcomes: Sequence[Any], npu_only: Sequence[str] = (), bench_only: Sequence[str] = (),
                 skipped: Sequence[str] = (), index_path: Optional[str] = None) -> None:
        super().__init__(outcomes)
        self.npu_only, self.bench_only, self.skipped = tuple(npu_only), tuple(bench_only), tuple(skipped)
        self.index_path = index_path  # compare_index_{timestamp}.html over the ranks' reports (None: html=False)
        self.results: Tuple[Any, ...] = ()
        self.resumed: Tuple[str, ...] = ()
        self.failed_pairs: Dict[str, str] = {}
        self.summary_path: Optional[str] = None

    def not_compared(self) -> str:
        """One line naming the ranks that were not compared ("" when every rank was)."""
        parts = []
        if self.npu_only:
            parts.append(f"{', '.join(self.npu_only)} only in the NPU dump")
        if self.bench_only:
            parts.append(f"{', '.join(self.bench_only)} only in the bench dump")
        if self.skipped:
            parts.append(f"{', '.join(self.skipped)} skipped (files outside the dump directories)")
        parts.extend(f"{pair} ({reason})" for pair, reason in self.failed_pairs.items())
        return "not compared: " + "; ".join(parts) if parts else ""

    def reasons(self) -> Dict[str, str]:
        """``{rank directory or pair: why it was not compared}``: the summary's rows of what was not compared."""
        reasons = {name: "only in the NPU dump" for name in self.npu_only}
        reasons.update({name: "only in the bench dump" for name in self.bench_only})
        reasons.update({pair: "files outside the dump directories" for pair in self.skipped})
        reasons.update(self.failed_pairs)
        return reasons


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


def compare_distributed(npu_dump_dir: str, bench_dump_dir: str, output_path: str, workers: Optional[int] = None,
                        resume: bool = True, peer_timeout: float = DEFAULT_PEER_TIMEOUT, **kwargs: Any) -> RankOutcomes:
    """Compare rank by rank, pairing rank directories by number. kwargs: every compare option
    (``stack_mode``, ``auto_analyze``, ``fuzzy_match``, ``xlsx``, ``api_mapping``, ``html``, plus
    ``is_print_compare_log``, default True); ``suffix`` is refused (the rank pair is the suffix). With ``html``
    (default True) each rank pair's ``compare_report_*.html`` and one ``compare_index_{timestamp}.html`` over
    the pairs compared by this call (:mod:`~ptdbg_ascend.comparison.html_index`). Always one
    ``compare_summary_{timestamp}.csv`` over every pair (``rank_summary.write_summary``).

    ``workers`` (default None: the cores this process may use, at most the pairs; under torchrun 1 per
    process): the processes comparing rank pairs, each one pair at a time (memory: one pair's compare per
    worker; :mod:`~ptdbg_ascend.comparison.rank_pool`); 1 compares in this process. ``resume`` (default True):
    skip the pairs whose completion record in ``{output_path}/.ptdbg_compare/`` is of the same inputs and
    options (:mod:`~ptdbg_ascend.comparison.rank_records`). Under torchrun (RANK/WORLD_SIZE/MASTER_ADDR set,
    WORLD_SIZE > 1) the pairs are shared over its processes (:mod:`~ptdbg_ascend.comparison.rank_world`);
    ``peer_timeout`` (seconds, default 120): how long rank 0 waits for a silent process before its pairs are
    "lost: process died".

    Returns a :class:`RankOutcomes`: one CompareOutcome per rank pair compared here, the ranks present on one
    side only (also a warning); a pair with files outside the dump directories is skipped with a warning; a
    pair whose compare raises (a corrupt dump) is in ``failed_pairs`` with its error, the others go on.
    CompareError when the two sides have no rank in common (naming each side's ranks) or when no pair is left."""
    print_log = _check_kwargs(kwargs)
    workers = check_workers(workers)
    check_bool("resume", resume)
    launch = rank_world.launched(peer_timeout)
    if launch is not None:
        return _compare_on_world(launch, npu_dump_dir, bench_dump_dir, output_path, kwargs, print_log, workers,
                                 resume)
    view = scan(npu_dump_dir, bench_dump_dir)
    if not view.tasks and not view.skipped:
        raise CompareError("The two dumps have no rank in common: npu_dump_dir {} has {}; bench_dump_dir {} has {}. "
                           "Ranks pair by number; use compare() to compare two chosen ranks.".format(
                               npu_dump_dir, ", ".join(view.npu_names), bench_dump_dir, ", ".join(view.bench_names)))
    _warn_one_sided(view, npu_dump_dir, bench_dump_dir)
    stamp = time.strftime("%Y%m%d%H%M%S", time.localtime())
    job = _job(output_path, kwargs, print_log)
    resumed, todo = _split_resumed(view.tasks, job, resume)
    ends = run_pairs(todo, job, usable_workers(workers or max(1, min(cores(), len(todo))), workers))
    return finish(view, resumed, ends, job, stamp)


def _check_kwargs(kwargs: Dict[str, Any]) -> Any:
    """Refuse an unknown option; pop ``is_print_compare_log`` (returned) and read ``api_mapping`` once."""
    if "suffix" in kwargs:
        raise ParameterError("suffix", kwargs["suffix"], "Argument 'suffix' is not supported for compare_distributed")
    for key in kwargs:
        if key not in ALLOWED_KWARGS:
            raise ParameterError(key, kwargs[key], "not a compare_distributed option; allowed: "
                                 + ", ".join(ALLOWED_KWARGS + ("workers", "resume", "peer_timeout")))
    if kwargs.get("api_mapping") is not None:  # read and checked once, not per rank pair
        kwargs["api_mapping"] = check_api_mapping(kwargs["api_mapping"])
    return kwargs.pop("is_print_compare_log", True)


def _job(output_path: str, kwargs: Dict[str, Any], print_log: Any) -> PoolJob:
    options = check_options(output_path, **kwargs)
    print_log = check_print_log(print_log)
    return PoolJob(options, print_log, options_key(options, print_log))


def scan(npu_dump_dir: str, bench_dump_dir: str) -> RankView:
    """Pair the two tag directories' rank directories and check each pair's files (:func:`confined_rank_files`)."""
    npu_ranks = rank_dirs(npu_dump_dir, "npu_dump_dir")
    bench_ranks = rank_dirs(bench_dump_dir, "bench_dump_dir")
    pairs, npu_only, bench_only = pair_ranks(npu_ranks, bench_ranks)
    tasks, skipped = [], []
    for (number, npu_name, npu_dir), (_, bench_name, bench_dir) in pairs:
        pair = f"{npu_name}-{bench_name}"
        try:
            npu_dump, npu_data, npu_stack = confined_rank_files(npu_dir, npu_dump_dir, "npu_dump_dir")
            bench_dump, bench_data, _ = confined_rank_files(bench_dir, bench_dump_dir, "bench_dump_dir")
        except OutsideDumpDir as error:
            logger.warning(f"Skipped the rank pair {pair}: {error}. Nothing of this pair was read.")
            skipped.append(pair)
            continue
        tasks.append(PairTask(pair, number, npu_dir, bench_dir, npu_dump, npu_data, npu_stack, bench_dump, bench_data))
    return RankView(tasks, skipped, [name for _, name, _ in npu_ranks], [name for _, name, _ in bench_ranks],
                    npu_only, bench_only)


def _warn_one_sided(view: RankView, npu_dump_dir: str, bench_dump_dir: str) -> None:
    if view.npu_only or view.bench_only:
        sides = ([f"{', '.join(view.npu_only)} only in npu_dump_dir {npu_dump_dir}"] if view.npu_only else []) + \
                ([f"{', '.join(view.bench_only)} only in bench_dump_dir {bench_dump_dir}"] if view.bench_only else [])
        logger.warning("Ranks present on one side only are not compared: {}. Ranks pair by number, not by "
                       "position.".format("; ".join(sides)))


def _split_resumed(tasks: Sequence[PairTask], job: PoolJob, resume: bool
                   ) -> Tuple[Dict[str, PairResult], List[PairTask]]:
    """``({pair: result} of the pairs with a trusted completion record, the tasks left to compare)``."""
    resumed: Dict[str, PairResult] = {}
    if resume:
        for task in tasks:
            result = read_record(job.options.output_path, task, job.record_key)
            if result is not None:
                resumed[task.pair] = result
    if resumed:
        logger.info("Resumed {} rank pairs from their completion records in {} ({}); comparing {}.".format(
            len(resumed), os.path.join(job.options.output_path, RECORD_DIR), ", ".join(resumed),
            len(tasks) - len(resumed)))
    return resumed, [task for task in tasks if task.pair not in resumed]


def finish(view: RankView, resumed: Dict[str, PairResult], ends: Sequence[PairDone], job: PoolJob, stamp: str,
           lost: Optional[Dict[str, str]] = None) -> RankOutcomes:
    """The :class:`RankOutcomes` of the pairs of ``view`` (every pair's end: resumed or compared), with the
    summary over them written and the advisor's answer across ranks logged; the HTML index over those compared."""
    by_pair = {done.pair: done for done in ends}
    order = [task.pair for task in view.tasks]
    compared = [pair for pair in order if pair in by_pair and by_pair[pair].result is not None]
    result = RankOutcomes([by_pair[pair].outcome for pair in compared], view.npu_only, view.bench_only, view.skipped)
    result.results = tuple(resumed[pair] if pair in resumed else by_pair[pair].result
                           for pair in order if pair in resumed or pair in compared)
    result.resumed = tuple(pair for pair in order if pair in resumed)
    result.failed_pairs = {pair: _reason(by_pair[pair].error) for pair in order if pair in by_pair and
                           by_pair[pair].result is None}
    result.failed_pairs.update(lost or {})
    for pair, reason in result.failed_pairs.items():
        logger.warning(f"Rank pair {pair} was not compared: {reason}")
    if not result.results:
        raise CompareError("No rank pair could be compared: every pair ({}) has files outside the dump directories "
                           "(see the warnings above).".format(", ".join(view.skipped)) if not result.failed_pairs else
                           "No rank pair could be compared: " + result.not_compared()[len("not compared: "):])
    result.summary_path = write_summary(job.options.output_path, result.results, result.reasons(), stamp)
    logger.info(f"The summary over the ranks is {result.summary_path}")
    for line in cross_rank_answer(result.results, result.reasons()):
        logger.info(line)
    if job.options.html and compared:
        note = result.not_compared()
        if result.resumed:  # their rows are in the summary; this page covers what this run compared
            note = (note + "; " if note else "not compared by this run: ") + "{} resumed from earlier completion " \
                "records (see {})".format(", ".join(result.resumed), os.path.basename(result.summary_path))
        result.index_path = html_index.write_index(job.options.output_path, compared, list(result), note)
        logger.info(f"The HTML index of the ranks is {result.index_path}")
    return result


def _reason(error: str) -> str:
    return error if error.startswith("lost:") else "error: " + error


def _compare_on_world(launch: rank_world.Launch, npu_dump_dir: str, bench_dump_dir: str, output_path: str,
                      kwargs: Dict[str, Any], print_log: Any, workers: Optional[int], resume: bool) -> RankOutcomes:
    """The pairs shared over a torchrun launch (:mod:`~ptdbg_ascend.comparison.rank_world`); rank 0 writes the
    summary and the index and returns every pair's results, the others their own outcomes only."""
    world = rank_world.World(launch)
    try:
        stamp = world.cluster.broadcast(time.strftime("%Y%m%d%H%M%S", time.localtime()))
        job = _job(output_path, kwargs, print_log)
        view = _local_view(npu_dump_dir, bench_dump_dir)
        resumed, _ = _split_resumed(view.tasks, job, resume)
        views = world.cluster.all_gather((view, resumed))
        merged, every_resumed, apart = rank_world.merge([seen for seen, _ in views], [done for _, done in views])
        if not merged.tasks and not merged.skipped:
            raise CompareError("The two dumps have no rank in common on any machine of the launch: npu_dump_dir {} "
                               "has {}; bench_dump_dir {} has {}.".format(npu_dump_dir, ", ".join(merged.npu_names),
                                                                           bench_dump_dir, ", ".join(merged.bench_names)))
        owner = rank_world.assign([[(task.rank, task.pair) for task in seen.tasks] for seen, _ in views],
                                  set(every_resumed))
        mine = [task for task in view.tasks if owner.get(task.pair) == world.rank]
        logger.info(f"compare_distributed: process {world.rank} of {launch.world_size} compares {len(mine)} of the "
                    f"{len(merged.tasks)} rank pairs")
        world.start(stamp)
        ends = run_pairs(mine, job, usable_workers(workers or 1, workers), on_done=world.publish)
        world.end_share()
        if world.rank != 0:
            return RankOutcomes([done.outcome for done in ends if done.result is not None])
        others, lost = world.collect(owner)
        lost.update(apart)
        return finish(merged, every_resumed, ends + others, job, stamp, lost)
    finally:
        world.leave()


def _local_view(npu_dump_dir: str, bench_dump_dir: str) -> RankView:
    """:func:`scan` on this machine; nothing when one of the dump directories is not on it (another machine may
    hold its ranks)."""
    missing = [path for path in (npu_dump_dir, bench_dump_dir) if not os.path.isdir(path)]
    if missing:
        logger.warning("compare_distributed: this machine has no {}: it compares no rank pair".format(
            " and no ".join(missing)))
        return RankView([], [], [], [], [], [])
    return scan(npu_dump_dir, bench_dump_dir)


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
