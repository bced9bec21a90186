"""Where each file of a dump lies: the one place that spells a dump's file and directory names.

msprobe format (``reference/msprobe_1_0_4.md`` §5)::

    {dump_path}/step{N}/rank{R}/        plain ``rank`` without torch.distributed
        dump.json  stack.json  construct.json
        dump_tensor_data/{data_name}    one ``.pt`` per saved tensor

legacy format (the seed guide)::

    {dir of fpath}/{dump_tag}_v{version}/rank{R}/
        {prefix}{stem}.pkl  {prefix}{stem}/{record name}.npy
        Overflow_info_{UTC %Y%m%d_%H%M%S}_{k}.pkl + same-named npy dir (overflow_check)

Torch-free, and nothing but ``os.path`` and ``re``: both the dump side and the readers build paths here.
"""

from __future__ import annotations

import os
import re
from typing import Optional

# -- msprobe ----------------------------------------------------------------------------------------
DUMP_FILE = "dump.json"
STACK_FILE = "stack.json"
CONSTRUCT_FILE = "construct.json"
TENSOR_DIR = "dump_tensor_data"
PT_SUFFIX = ".pt"  # a tensor file's data_name: its record's dotted name (or stem) + ".pt"
# A rank directory's name: msprobe writes a plain "rank" without torch.distributed (group 1 then empty).
RANK_DIR = re.compile(r"^rank([0-9]*)\Z")

# -- legacy -----------------------------------------------------------------------------------------
PKL_SUFFIX = ".pkl"
NPY_SUFFIX = ".npy"  # a tensor file: its record name + ".npy", in the pkl's npy directory
# In the npy directory: one JSON line ``[record name, why]`` per tensor record the writer left without its
# npy (out of memory while copying it), read by compare for the record's row. A leading dot: never a record.
NO_NPY_FILE = ".ptdbg.no_npy"
OVERFLOW_PREFIX = "Overflow_info_"


# -- compare's reports: {stem}{tail}{extension}, the tail shared by the files of one compare ---------------
COMPARE_RESULT_STEM = "compare_result_"  # .csv and .xlsx
ADVISOR_STEM = "advisor_"  # .txt: the advisor's prose (formats/finding.py names the finding file)
COMPARE_REPORT_STEM = "compare_report_"  # .html: the run as one self-contained page
COMPARE_INDEX_STEM = "compare_index_"  # .html: compare_distributed's page over the ranks' reports
HTML_SUFFIX = ".html"


def rank_dir_name(rank: Optional[int]) -> str:
    """``rank{rank}``; None (msprobe without torch.distributed) gives plain ``rank``."""
    return "rank" if rank is None else f"rank{rank}"


def step_rank_dir(dump_path: str, step: int, rank: Optional[int]) -> str:
    """``{dump_path}/step{step}/rank{rank}``; ``rank`` None (no torch.distributed) gives plain ``rank``."""
    return os.path.join(dump_path, f"step{step}", rank_dir_name(rank))


def is_dump_json(path: str) -> bool:
    """Whether a dump file is msprobe's (``*.json``); anything else is read as a legacy pkl."""
    return path.endswith(".json")


def dump_file(rank_dir: str) -> str:
    """``{rank_dir}/dump.json``."""
    return os.path.join(rank_dir, DUMP_FILE)


def stack_file(rank_dir: str) -> str:
    """``{rank_dir}/stack.json``."""
    return os.path.join(rank_dir, STACK_FILE)


def construct_file_beside(dump_json: str) -> str:
    """The ``construct.json`` beside the dump.json ``dump_json`` (each call's enclosing module, L0/mix)."""
    return os.path.join(os.path.dirname(os.path.abspath(dump_json)), CONSTRUCT_FILE)


def tensor_dir(rank_dir: str) -> str:
    """``{rank_dir}/dump_tensor_data``: where an msprobe dump keeps its ``.pt`` files."""
    return os.path.join(rank_dir, TENSOR_DIR)


def tensor_dir_beside(dump_json: str) -> str:
    """The absolute ``dump_tensor_data`` directory beside the dump.json ``dump_json``."""
    return tensor_dir(os.path.dirname(os.path.abspath(dump_json)))


def default_data_dir(dump_path: str) -> str:
    """A dump's own tensor directory (absolute): ``dump_tensor_data/`` beside a dump.json, the pkl's name
    without its extension beside a legacy pkl."""
    if is_dump_json(dump_path):
        return tensor_dir_beside(dump_path)
    return os.path.splitext(os.path.abspath(dump_path))[0]


def tag_dir(directory: str, tag: str, version: str) -> str:
    """``{directory}/{tag}_v{version}``: a legacy dump's tag directory."""
    return os.path.join(directory, f"{tag}_v{version}")


def legacy_rank_dir(directory: str, tag: str, version: str, rank: int) -> str:
    """``{directory}/{tag}_v{version}/rank{rank}``."""
    return os.path.join(tag_dir(directory, tag, version), rank_dir_name(rank))


def pkl_file(rank_dir: str, stem: str) -> str:
    """``{rank_dir}/{stem}.pkl`` (``stem`` carries the mode prefix: ``api_stack_npu_dump``)."""
    return os.path.join(rank_dir, stem + PKL_SUFFIX)


def npy_dir(pkl_path: str) -> str:
    """The npy directory of the legacy pkl ``pkl_path``: the same path without ``.pkl``."""
    return pkl_path[: -len(PKL_SUFFIX)]


def overflow_stem(stamp: str, k: int, microseconds: Optional[int] = None) -> str:
    """``Overflow_info_{stamp}_{k}``, or ``Overflow_info_{stamp}_{microseconds:06d}_{k}`` (a second file in
    the same second)."""
    if microseconds is None:
        return f"{OVERFLOW_PREFIX}{stamp}_{k}"
    return f"{OVERFLOW_PREFIX}{stamp}_{microseconds:06d}_{k}"
