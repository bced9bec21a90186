"""Benchmark of ``compare``: writes two synthetic api_stack dumps with numpy under bench/out/, times the
whole compare call in a fresh process (start-up included) and reports wall time, GB/s and peak RSS.

    python3 bench/bench_compare.py            # the reference-model case: ~760 npy a side, ~50 MB
    python3 bench/bench_compare.py --large    # also >= 1 GB of npy a side (GB/s, peak RSS)

The dumps are deleted afterwards unless --keep is given.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from typing import Optional

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "out")
APIS = ("Functional_conv2d", "Functional_batch_norm", "Functional_relu", "Tensor___add__", "Functional_linear")


def write_dump(root: str, calls: int, elements: int, seed: int, noise: float) -> int:
    """``calls`` calls of 2 inputs + 1 output + 1 backward-ish input; returns the npy bytes written."""
    rng = np.random.RandomState(0)
    noise_rng = np.random.RandomState(seed)
    data_dir = os.path.join(root, "api_stack_dump")
    os.makedirs(data_dir, exist_ok=True)
    total = 0
    counters = {}
    with open(os.path.join(root, "api_stack_dump.pkl"), "w") as pkl:
        for index in range(calls):
            api = APIS[index % len(APIS)]
            counter = counters.get(api, 0)
            counters[api] = counter + 1
            call = f"{api}_{counter}_forward"
            size = elements // 2 + (index * 7919) % elements  # varied sizes around ``elements``
            for suffix in ("input.0", "input.1", "input.2", "output"):
                array = rng.standard_normal(size).astype(np.float32)
                if noise:
                    array += noise_rng.standard_normal(size).astype(np.float32) * noise
                name = f"{call}_{suffix}"
                np.save(os.path.join(data_dir, name + ".npy"), array)
                total += array.nbytes
                stats = [float(array.max()), float(array.min()), float(array.mean()), float(np.linalg.norm(array))]
                pkl.write(json.dumps([name, 0, [], "torch.float32", [size], stats]) + "\n")
            pkl.write(json.dumps([call + "_stack_info", [["train.py", "1", "forward", "x = f(x)"]]]) + "\n")
    return total


def timed_compare(npu: str, bench: str, output: str, code_dir: Optional[str] = None) -> tuple:
    code = (
        "from ptdbg_ascend import *\n"
        "compare({{'npu_pkl_path': {n!r} + '/api_stack_dump.pkl', 'bench_pkl_path': {b!r} + '/api_stack_dump.pkl',"
        " 'npu_dump_data_dir': {n!r} + '/api_stack_dump', 'bench_dump_data_dir': {b!r} + '/api_stack_dump',"
        " 'is_print_compare_log': False}}, {o!r}, stack_mode=True)\n"
    ).format(n=npu, b=bench, o=output)
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    start = time.perf_counter()
    env = dict(os.environ)
    # The package of this checkout, or the baseline's, first on the path; run from the output directory, since
    # `python -c` puts the current directory ahead of PYTHONPATH (from the repository root the baseline would
    # import this checkout's package).
    tree = code_dir if code_dir is not None else os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = tree + os.pathsep + env.get("PYTHONPATH", "")
    subprocess.run([sys.executable, "-c", code], check=True, stdout=subprocess.DEVNULL, env=env, cwd=output)
    wall = time.perf_counter() - start
    peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return wall, (peak_kib if peak_kib > before else before) / 1024.0


def case(label: str, calls: int, elements: int, repeat: int, baseline: Optional[str] = None) -> None:
    root = os.path.join(OUT, label)
    shutil.rmtree(root, ignore_errors=True)
    npu, bench, output = (os.path.join(root, p) for p in ("npu", "bench", "output"))
    os.makedirs(output)
    nbytes = write_dump(npu, calls, elements, 1, 1e-3) + write_dump(bench, calls, elements, 2, 0.0)
    walls, baseline_walls = [], []
    for _ in range(repeat):  # alternating with the baseline, so both see the same load on the machine
        wall, peak = timed_compare(npu, bench, output)
        walls.append(wall)
        if baseline is not None:
            baseline_walls.append(timed_compare(npu, bench, output, baseline)[0])
    best = min(walls)
    print("{}: {} npy a side, {:.1f} MB a side; compare wall (process start included) best {:.2f} s of {}; "
          "{:.2f} GB/s (both sides read); peak RSS {:.0f} MB".format(
              label, calls * 4, nbytes / 2 / 1e6, best, [f"{w:.2f}" for w in walls],
              nbytes / 1e9 / best, peak))
    if baseline_walls:
        print("{}: baseline {} best {:.2f} s of {}; new / baseline = {:.2f}".format(
            label, baseline, min(baseline_walls), [f"{w:.2f}" for w in baseline_walls],
            best / min(baseline_walls)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--large", action="store_true", help="also run the >= 1 GB a side case")
    parser.add_argument("--keep", action="store_true", help="keep the dumps under bench/out/")
    parser.add_argument("--baseline", metavar="DIR", help="another checkout of the repository (e.g. `git worktree "
                        "add /tmp/base <commit>`): its compare is timed alternately with this one")
    args = parser.parse_args()
    try:
        case("reference_model", calls=190, elements=16500, repeat=5 if args.baseline else 3, baseline=args.baseline)
        if args.large:
            case("large", calls=84, elements=1_200_000, repeat=1, baseline=args.baseline)
    finally:
        if not args.keep:
            for label in ("reference_model", "large"):
                shutil.rmtree(os.path.join(OUT, label), ignore_errors=True)


if __name__ == "__main__":
    main()
