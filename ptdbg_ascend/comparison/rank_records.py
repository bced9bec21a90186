"""The completion record of a compared rank pair: ``{output_path}/.ptdbg_compare/{pair}.json``, written atomically
(``fs.writes.replace_file``) after that pair's reports, so a re-run of ``compare_distributed`` into the same
output directory skips the pairs already compared and compares the rest (resume).

A record is trusted only for the same inputs: it holds the two rank directories' resolved paths, the size and
mtime (ns) of both dump files and the compare options; a record from other inputs, other options, of another
format, or whose CSV is gone (or lies outside the output directory) is ignored and the pair compared again. A
record is someone's file: read at most :data:`MAX_RECORD_BYTES`, every field checked
(:meth:`~ptdbg_ascend.comparison.rank_summary.PairResult.from_json`). Torch-free.
"""

from __future__ import annotations

import json
import os
from typing import Any, Dict, List, NamedTuple, Optional

from ptdbg_ascend.comparison.inputs import CompareOptions
from ptdbg_ascend.comparison.rank_summary import PairResult
from ptdbg_ascend.errors import PtdbgError
from ptdbg_ascend.fs.writes import own_dir, replace_file
from ptdbg_ascend.jsonfile import load_json
from ptdbg_ascend.log import logger

PLAIN_RANK = -1  # the number of a plain "rank" directory (msprobe, a run without torch.distributed)
RECORD_DIR = ".ptdbg_compare"
RECORD_FORMAT = "ptdbg_compare_record"
RECORD_VERSION = 1
MAX_RECORD_BYTES = 1 << 20  # a PairResult is a few hundred bytes


class PairTask(NamedTuple):
    """One rank pair to compare: its name (``"rank3-rank3"``), the NPU rank number and its checked files (plain
    strings: sent to worker processes)."""

    pair: str
    rank: int
    npu_dir: str
    bench_dir: str
    npu_dump: str
    npu_data: Optional[str]
    npu_stack: Optional[str]
    bench_dump: str
    bench_data: Optional[str]


class RankView(NamedTuple):
    """The rank pairs one process sees: their files (``tasks``, in rank order), the pairs skipped (files outside
    the dump directories), the rank directories of each side and those on one side only."""

    tasks: List[PairTask]
    skipped: List[str]
    npu_names: List[str]
    bench_names: List[str]
    npu_only: List[str]
    bench_only: List[str]


def options_key(options: CompareOptions, print_log: bool) -> str:
    """The options that change a pair's reports, as one comparable text (the output directory and the suffix
    are not among them: the record lives in the one, the pair is the other)."""
    return json.dumps([options.stack_mode, options.auto_analyze, options.fuzzy_match, options.xlsx, options.html,
                       options.rerun, sorted(options.api_mapping.items()), print_log])


def guard(task: PairTask, key: str) -> Dict[str, Any]:
    """What must be unchanged for a record of ``task`` to be trusted (see the module doc)."""
    files = []
    for path in (task.npu_dump, task.bench_dump):
        status = os.stat(path)
        files.append([path, status.st_size, status.st_mtime_ns])
    return {"npu_dir": os.path.realpath(task.npu_dir), "bench_dir": os.path.realpath(task.bench_dir),
            "files": files, "options": key}


def record_path(output_path: str, pair: str) -> str:
    return os.path.join(output_path, RECORD_DIR, pair + ".json")


def write_record(output_path: str, task: PairTask, key: str, result: PairResult) -> str:
    """Write ``task``'s completion record (after its reports); returns its path. DumpWriteError naming it."""
    own_dir(os.path.join(output_path, RECORD_DIR))
    path = record_path(output_path, task.pair)
    body = json.dumps({"format": RECORD_FORMAT, "version": RECORD_VERSION, "guard": guard(task, key),
                       "result": result.to_json()}, indent=1).encode("utf-8")
    def write(descriptor: int) -> None:
        view = memoryview(body)
        while view:  # os.write may write less than asked
            view = view[os.write(descriptor, view):]

    replace_file(path, write, "the completion record")
    return path


def read_record(output_path: str, task: PairTask, key: str) -> Optional[PairResult]:
    """The :class:`PairResult` of ``task``'s record when it is there and trusted (see the module doc), else None
    (the pair is compared again; a record that is not trusted is named in the log)."""
    path = record_path(output_path, task.pair)
    if not os.path.lexists(path):
        return None
    try:
        data = load_json(path, "completion record", max_bytes=MAX_RECORD_BYTES)
        if not isinstance(data, dict) or data.get("format") != RECORD_FORMAT or data.get("version") != RECORD_VERSION:
            raise ValueError(f"not a {RECORD_FORMAT} version {RECORD_VERSION}")
        if data.get("guard") != guard(task, key):
            logger.info(f"Comparing {task.pair} again: its completion record {path} is of other inputs or options.")
            return None
        result = PairResult.from_json(data.get("result"), path)
    except (PtdbgError, ValueError, OSError) as error:
        logger.warning(f"Comparing {task.pair} again: its completion record {path} cannot be used ({error}).")
        return None
    csv_path = result.csv_path
    if not (os.path.isfile(csv_path) and os.path.dirname(os.path.realpath(csv_path)) == os.path.realpath(output_path)):
        logger.info(f"Comparing {task.pair} again: the CSV its completion record names is not in {output_path}.")
        return None
    return result
