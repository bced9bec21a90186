"""Reentrant activation checkpointing (``use_reentrant=True``, Megatron-style) pairs as well as non-reentrant.

Reentrant checkpointing runs a block's first pass under no_grad and re-runs it inside backward, where the
re-computed calls take new counters and carry the block's backward. Comparing such a run with one that
checkpoints differently (not at all, or non-reentrant) once paired those backward calls with the bench's
backward calls of the *next step* (same names, other data): 64 failing rows and an "input already differs"
finding on two runs of the same math. Each side here is a GPT-like stack of two blocks trained two SGD steps
on CPU (``checkpoint_run.py``, one process per dump).
"""

from __future__ import annotations

import csv
import glob
import os
import subprocess
import sys

import pytest
from scenario_support import parse_user_line

pytestmark = pytest.mark.slow

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "checkpoint_run.py")
REPO = os.path.dirname(os.path.dirname(HERE))


def plant_line() -> int:
    with open(SCRIPT, encoding="utf-8") as handle:
        lines = [n for n, text in enumerate(handle, 1) if text.rstrip().endswith("# plant site")]
    assert len(lines) == 1, lines
    return lines[0]


@pytest.fixture(scope="module")
def dump(tmp_path_factory):
    """``dump(side, mode, front, plant=False)`` -> the run's directory (each dumped once per module)."""
    root = tmp_path_factory.mktemp("checkpoint_runs")
    done = {}

    def run(side: str, mode: str, front: str, plant: bool = False) -> str:
        key = (side, mode, front, plant)
        if key not in done:
            out = str(root / "_".join([side, mode, front] + (["plant"] if plant else [])))
            env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
            command = [sys.executable, SCRIPT, out, side, mode, front] + (["plant"] if plant else [])
            result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=180)
            assert result.returncode == 0, result.stdout + result.stderr
            done[key] = out
        return done[key]

    return run


def compare_runs(npu_dir: str, bench_dir: str, front: str, out: str):
    from ptdbg_ascend import compare

    if front == "legacy":
        npu = glob.glob(os.path.join(npu_dir, "**", "npu_dump.pkl"), recursive=True) + \
            glob.glob(os.path.join(npu_dir, "**", "*_npu_dump.pkl"), recursive=True)
        bench = glob.glob(os.path.join(bench_dir, "**", "*bench_dump.pkl"), recursive=True)
        assert len(npu) == 1 and len(bench) == 1, (npu, bench)
        param = {"npu_pkl_path": npu[0], "bench_pkl_path": bench[0], "npu_dump_data_dir": npu[0][:-4],
                 "bench_dump_data_dir": bench[0][:-4], "is_print_compare_log": False}
    else:
        npu = glob.glob(os.path.join(npu_dir, "npu", "**", "dump.json"), recursive=True)
        bench = glob.glob(os.path.join(bench_dir, "bench", "**", "dump.json"), recursive=True)
        assert len(npu) == 1 and len(bench) == 1, (npu, bench)
        param = {"npu_json_path": npu[0], "bench_json_path": bench[0],
                 "stack_json_path": os.path.join(os.path.dirname(npu[0]), "stack.json"), "is_print_compare_log": False}
    os.makedirs(out)
    return compare(param, out, stack_mode=True)


def csv_rows(outcome):
    with open(outcome.csv_path, encoding="utf-8", newline="") as handle:
        return list(csv.DictReader(handle))


def failing_rows(outcome):
    return [row["NPU Name"] for row in csv_rows(outcome) if row.get("Result") == "error"]


def check_no_failure(outcome):
    assert failing_rows(outcome) == []
    assert outcome.first_failure is None and outcome.finding is None, (outcome.first_failure, outcome.finding)
    assert bool(outcome) is True
    assert outcome.counts.failed == 0 and outcome.counts.compared > 700, outcome.counts


@pytest.mark.parametrize("npu_mode, bench_mode, front", [
    ("reentrant", "reentrant", "legacy"),  # two equal runs
    ("reentrant", "plain", "legacy"),
    ("plain", "reentrant", "legacy"),
    ("reentrant", "nonreentrant", "legacy"),
    ("nonreentrant", "plain", "legacy"),  # kept working
    ("reentrant", "plain", "debugger"),
])
def test_same_math_under_any_checkpointing_is_no_failure(dump, tmp_path, npu_mode, bench_mode, front):
    outcome = compare_runs(dump("npu", npu_mode, front), dump("bench", bench_mode, front), front,
                           str(tmp_path / "compare"))
    check_no_failure(outcome)
    one_sided = [row for row in csv_rows(outcome) if "Nan" in (row["NPU Name"], row["Bench Name"])]
    if npu_mode == bench_mode:  # equal runs: every record pairs
        assert one_sided == []
    else:  # only re-computed forward calls stay one-sided: no backward and no first-pass call
        assert one_sided and all("_forward_" in row["NPU Name"] + row["Bench Name"] for row in one_sided)


@pytest.mark.parametrize("bench_mode", ["plain", "reentrant"])
def test_planted_linear_in_a_reentrant_block_is_the_cause_at_its_line(dump, tmp_path, bench_mode):
    outcome = compare_runs(dump("npu", "reentrant", "legacy", plant=True), dump("bench", bench_mode, "legacy"),
                           "legacy", str(tmp_path / "compare"))
    finding = outcome.finding
    assert finding is not None, outcome.first_failure
    # Linear calls of the first pass: block 0's qkv, proj, fc1, fc2 are 0-3, block 1's qkv, proj are 4-5.
    assert finding.call == "Functional_linear_6_forward", finding
    assert finding.kind == "cause", finding
    path, line, code = parse_user_line(finding.user_line)
    assert os.path.basename(path) == "checkpoint_run.py" and line == plant_line(), finding.user_line
    assert "h = self.fc1(self.ln2(x))" in code
    assert not outcome
