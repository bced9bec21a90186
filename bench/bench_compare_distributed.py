"""Benchmark of ``compare_distributed`` over many small ranks: writes 1,024 simulated ranks a side (a small legacy
pkl + npy dump each, 4 calls, 11 tensors; rank 37's linear output perturbed), compares them with ``workers=1`` and
``workers=2`` and prints the seconds and the ratio; with ``--torchrun`` also under torchrun, 2 "nodes" x 2
processes on localhost (two torchrun invocations), checking that its summary is the one-process summary.

    python3 bench/bench_compare_distributed.py                  # 1,024 ranks, workers 1 and 2
    python3 bench/bench_compare_distributed.py --ranks 256 --torchrun

Reports: CSV, xlsx, advisor and HTML per pair (the defaults); the advisor's re-run is off (``rerun=False``: its torch
import on the one failing rank would be timed, not the scheduling). The dumps are deleted unless --keep is given.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
OUT = os.path.join(HERE, "out", "compare_distributed")
PLANTED = 37
STAMP = re.compile(r"_\d{14}(_\d+)?")


def _stats(array: np.ndarray) -> list:
    data = array.astype(np.float64)
    return [float(data.max()), float(data.min()), float(data.mean()), float(np.sqrt((data * data).sum()))]


def write_rank(rank_dir: str, side: str, rank: int) -> None:
    """One small rank: linear -> relu -> mul (+ a sum), tensors seeded by the rank number."""
    stem = f"api_stack_{side}_dump"
    data_dir = os.path.join(rank_dir, stem)
    os.makedirs(data_dir)
    rng = np.random.RandomState(rank)
    x, w = rng.randn(4, 8).astype(np.float32), rng.randn(8, 8).astype(np.float32)
    linear = x @ w
    if side == "npu" and rank == PLANTED:
        linear = linear + np.float32(0.5) * np.sign(linear)
    relu = np.maximum(linear, 0)
    out = relu * np.float32(2)
    calls = [("Functional_linear_0_forward", [("input.0", x), ("input.1", w), ("output", linear)]),
             ("Torch_relu_0_forward", [("input.0", linear), ("output", relu)]),
             ("Tensor___mul___0_forward", [("input.0", relu), ("output", out)]),
             ("Torch_sum_0_forward", [("input.0", out), ("output", out.sum(axis=1))])]
    lines = []
    for call, tensors in calls:
        for suffix, array in tensors:
            name = f"{call}_{suffix}"
            lines.append(json.dumps([name, 0, [], "torch.float32", list(array.shape), _stats(array)]))
            np.save(os.path.join(data_dir, name + ".npy"), array)
    with open(os.path.join(rank_dir, stem + ".pkl"), "w") as handle:
        handle.write("\n".join(lines) + "\n")


def write_ranks(root: str, ranks: int) -> tuple:
    tags = []
    for side in ("npu", "bench"):
        tag = os.path.join(root, side, "ptdbg_dump_v1.0")
        for rank in range(ranks):
            write_rank(os.path.join(tag, f"rank{rank}"), side, rank)
        tags.append(tag)
    return tuple(tags)


def summary(out: str) -> list:
    """The summary's rows, the output directory and the CSV names' timestamps taken out."""
    (name,) = [name for name in os.listdir(out) if name.startswith("compare_summary_")]
    with open(os.path.join(out, name), newline="") as handle:
        return [[STAMP.sub("", cell.replace(out, "OUT")) for cell in row] for row in csv.reader(handle)]


def timed(npu: str, bench: str, out: str, workers: int) -> float:
    from ptdbg_ascend.comparison.api import compare_distributed

    started = time.perf_counter()
    outcomes = compare_distributed(npu, bench, out, workers=workers, is_print_compare_log=False, rerun=False)
    seconds = time.perf_counter() - started
    assert len(outcomes.results) == len(outcomes), "every pair compared"
    return seconds


def torchrun(npu: str, bench: str, out: str) -> float:
    """Two torchrun invocations (node rank 0 and 1, 2 processes each) on localhost; their wall seconds."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([REPO] + ([os.environ["PYTHONPATH"]]
                                                               if os.environ.get("PYTHONPATH") else [])))
    started = time.perf_counter()
    nodes = [subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--node-rank",
                               str(node), "--nproc-per-node", "2", "--master-addr", "127.0.0.1", "--master-port",
                               str(port), "-m", "ptdbg_ascend", "compare-distributed", npu, bench, out, "--quiet",
                               "--no-rerun"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
             for node in (0, 1)]
    codes = [node.wait(timeout=1800) for node in nodes]
    seconds = time.perf_counter() - started
    print(f"torchrun exit statuses (node 0, node 1): {codes} (1 on node 0: rank {PLANTED} fails, as planted)")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", type=int, default=1024)
    parser.add_argument("--torchrun", action="store_true", help="also 2 nodes x 2 processes under torchrun")
    parser.add_argument("--keep", action="store_true", help="keep the dumps and reports under bench/out/")
    args = parser.parse_args()
    shutil.rmtree(OUT, ignore_errors=True)
    started = time.perf_counter()
    npu, bench = write_ranks(OUT, args.ranks)
    print(f"wrote {args.ranks} ranks a side in {time.perf_counter() - started:.1f} s; load {os.getloadavg()}")
    one = timed(npu, bench, os.path.join(OUT, "workers1"), 1)
    print(f"workers=1: {one:.1f} s ({args.ranks / one:.1f} pairs/s); load {os.getloadavg()}")
    two = timed(npu, bench, os.path.join(OUT, "workers2"), 2)
    print(f"workers=2: {two:.1f} s ({args.ranks / two:.1f} pairs/s); load {os.getloadavg()}")
    print(f"speed-up workers 2 / 1: {one / two:.2f}x")
    reference = summary(os.path.join(OUT, "workers1"))
    assert summary(os.path.join(OUT, "workers2")) == reference, "workers=2 wrote another summary"
    if args.torchrun:
        seconds = torchrun(npu, bench, os.path.join(OUT, "torchrun"))
        same = summary(os.path.join(OUT, "torchrun")) == reference
        print(f"torchrun 2 nodes x 2 processes: {seconds:.1f} s; summary {'the same' if same else 'DIFFERENT'} as "
              f"workers=1; load {os.getloadavg()}")
    if not args.keep:
        shutil.rmtree(OUT, ignore_errors=True)


if __name__ == "__main__":
    main()
