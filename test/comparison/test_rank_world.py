"""compare_distributed under real torchrun: 2 "nodes" x 2 processes on localhost (gloo, the launch's c10d store).
One process is SIGKILLed while it compares the one slow rank pair: only that pair is lost, rank 0 ends with it
named, and the re-run compares it alone (the other pairs resumed from their completion records)."""

from __future__ import annotations

import csv
import os
import re
import signal
import socket
import subprocess
import sys
import time

import pytest

pytest.importorskip("torch")

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SLOW_CALLS = 10000  # rank3's calls: 20,000 statistics rows, several seconds to compare (the others: 3 calls)


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def launch(tmp_path, npu, bench, out, run):
    """Both "nodes" of one torchrun launch (node 1 holds processes 2 and 3), logging to files."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([REPO] + ([os.environ["PYTHONPATH"]]
                                                               if os.environ.get("PYTHONPATH") else [])),
               OMP_NUM_THREADS="1")
    port, nodes = free_port(), []
    for node in (0, 1):
        log = open(str(tmp_path / f"{run}_node{node}.log"), "w")
        nodes.append((subprocess.Popen(
            [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--node-rank", str(node),
             "--nproc-per-node", "2", "--master-addr", "127.0.0.1", "--master-port", str(port),
             "-m", "ptdbg_ascend", "compare-distributed", npu, bench, out, "--quiet", "--no-xlsx", "--no-html",
             "--peer-timeout", "3"], stdout=log, stderr=subprocess.STDOUT, env=env, cwd=str(tmp_path)), log))
    return nodes


def finish(nodes, tmp_path, run):
    codes = []
    for process, log in nodes:
        codes.append(process.wait(timeout=120))
        log.close()
    return codes, [open(str(tmp_path / f"{run}_node{node}.log")).read() for node in (0, 1)]


def summary_rows(out, newest=True):
    names = sorted(name for name in os.listdir(out) if name.startswith("compare_summary_"))
    with open(os.path.join(out, names[-1 if newest else 0]), newline="") as handle:
        return list(csv.reader(handle))[1:]


def test_killed_process_loses_only_its_pair_and_the_rerun_completes_it(tmp_path, statistics_ranks):
    npu = statistics_ranks("npu", range(4), slow_rank=3, slow_calls=SLOW_CALLS)
    bench = statistics_ranks("bench", range(4), slow_rank=3, slow_calls=SLOW_CALLS)
    out = str(tmp_path / "out")
    records = os.path.join(out, ".ptdbg_compare")
    nodes = launch(tmp_path, npu, bench, out, "first")
    # on shared storage pair i goes to process i % 4: rank3-rank3 to process 3, on node 1
    owner, deadline = None, time.time() + 90
    while owner is None or len(os.listdir(records) if os.path.isdir(records) else ()) < 3:
        assert time.time() < deadline, open(str(tmp_path / "first_node1.log")).read()
        found = re.search(r"\((\d+)\)-\[INFO\]compare_distributed: process 3 of 4 compares 1 of the 4 rank pairs",
                          open(str(tmp_path / "first_node1.log")).read())
        owner = owner or (found and int(found.group(1)))
        time.sleep(0.1)
    assert sorted(os.listdir(records)) == ["rank0-rank0.json", "rank1-rank1.json", "rank2-rank2.json"]
    os.kill(owner, signal.SIGKILL)  # mid-compare of the slow pair
    codes, (log0, _) = finish(nodes, tmp_path, "first")
    assert codes[0] != 0, log0
    assert "Rank pair rank3-rank3 was not compared: lost: process died (process 3 of the launch)" in log0
    assert "ptdbg compare-distributed: not compared: rank3-rank3 (lost: process died (process 3 of the launch))" \
        in log0
    rows = summary_rows(out)
    assert [(row[0], row[2], row[-1]) for row in rows] == [
        ("rank0-rank0", "passed", ""), ("rank1-rank1", "passed", ""), ("rank2-rank2", "passed", ""),
        ("rank3-rank3", "not compared", "lost: process died (process 3 of the launch)")]
    assert sorted(os.listdir(records)) == ["rank0-rank0.json", "rank1-rank1.json", "rank2-rank2.json"]
    kept = {name: os.stat(os.path.join(records, name)).st_mtime_ns for name in os.listdir(records)}

    codes, (log0, log1) = finish(launch(tmp_path, npu, bench, out, "again"), tmp_path, "again")
    assert codes == [0, 0], log0 + log1
    assert "Resumed 3 rank pairs from their completion records" in log0
    # the one pair left goes to the process seeing it with the fewest pairs: all have none, the lowest wins
    assert "process 0 of 4 compares 1 of the 4 rank pairs" in log0
    assert "process 2 of 4 compares 0 of the 4 rank pairs" in log1 and "process 3 of 4 compares 0" in log1
    assert {name: os.stat(os.path.join(records, name)).st_mtime_ns for name in kept} == kept  # not compared again
    rows = summary_rows(out)
    assert [(row[0], row[2], row[3]) for row in rows] == [("rank0-rank0", "passed", "6"), ("rank1-rank1", "passed", "6"),
                                                          ("rank2-rank2", "passed", "6"),
                                                          ("rank3-rank3", "passed", str(2 * SLOW_CALLS))]
    results = sorted(name for name in os.listdir(out) if name.startswith("compare_result_"))
    assert [name.rsplit("_", 1)[0] for name in results] == [f"compare_result_rank{r}-rank{r}" for r in range(4)]
