"""Benchmark of the API pre-check: APIs per second of ``run_ut`` and ``multi_run_ut -n 2`` on the
reference model's dump (``test/precheck/precheck_model.py``: transformer block + CNN + AdamW, one step,
dumped with ``PrecisionDebugger(task="tensor", level="L1")``), their ratio, and peak RSS.

    .venv/bin/python bench/bench_precheck.py [--repeat 2] [--workdir DIR]

Each measurement runs in a fresh interpreter (so peak RSS is that run's alone, and no run warms the next);
the best of ``--repeat`` runs is shown. "APIs/s" counts the API runs (multi: from starting the workers, their
start included); "start s" is the workers' start (fork server + torch import), "APIs/s started" the rate after
it; "wall" is the whole call (reading the dump, writing the CSVs, starting workers).
The multi runs must write the same CSVs as run_ut (checked here) with the default thread count.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL = os.path.join(REPO, "test", "precheck", "precheck_model.py")


def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([REPO] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    return env


def make_dump(workdir: str) -> str:
    """The reference model's tensor dump (in a subprocess: the debugger wraps torch there, not here)."""
    dump_dir = os.path.join(workdir, "dump")
    subprocess.run([sys.executable, MODEL, dump_dir, "tensor"], check=True, env=_env(),
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return os.path.join(dump_dir, "step0", "rank", "dump.json")


def one(kind: str, dump: str, out: str, threads: str) -> None:
    """Child: run one measurement and print it as JSON."""
    from ptdbg_ascend.precheck.multi_run_ut import multi_run_ut
    from ptdbg_ascend.precheck.run_ut import run_ut

    started = time.time()
    if kind == "run_ut":
        outcome = run_ut(dump, out, progress=False)
        workers = []
    else:
        outcome = multi_run_ut(dump, n=2, out_path=out, progress=False,
                               threads_per_worker=int(threads) if threads else None)
        workers = outcome.peak_rss_workers_kib
    wall = time.time() - started
    print(json.dumps({"apis": outcome.apis_run, "seconds": outcome.seconds, "wall": wall,
                      "startup": getattr(outcome, "startup_seconds", 0.0),
                      "parent_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, "workers_kib": workers,
                      "result": outcome.result_csv, "details": outcome.details_csv}))


def measure(kind: str, dump: str, workdir: str, repeat: int, threads: str = "") -> dict:
    best = None
    for attempt in range(repeat):
        out = os.path.join(workdir, f"{kind}{threads}_{attempt}")
        text = subprocess.run([sys.executable, __file__, "--one", kind, dump, out, threads], check=True, env=_env(),
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL).stdout.decode()
        result = json.loads(text.strip().splitlines()[-1])
        if best is None or result["seconds"] < best["seconds"]:
            best = result
    return best


def _same(a: dict, b: dict) -> bool:
    def read(path):
        with open(path, "rb") as handle:
            return handle.read()
    return read(a["result"]) == read(b["result"]) and read(a["details"]) == read(b["details"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--workdir", default=None)
    args = parser.parse_args()
    workdir = args.workdir or tempfile.mkdtemp(prefix="bench_precheck_")
    dump = make_dump(workdir)
    from ptdbg_ascend.precheck.ut_workers import worker_threads

    import torch

    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print("bench_precheck: reference model dump {} ({} CPUs, torch {} threads, best of {})".format(
        dump, cpus, torch.get_num_threads(), args.repeat))
    single = measure("run_ut", dump, workdir, args.repeat)
    multi = measure("multi", dump, workdir, args.repeat)
    spread = str(worker_threads(2))
    multi_spread = measure("multi", dump, workdir, args.repeat, threads=spread)
    rows = [("run_ut", single), ("multi_run_ut -n 2", multi),
            (f"multi_run_ut -n 2, {spread} thread/worker", multi_spread)]
    print("{:<36} {:>5} {:>9} {:>8} {:>10} {:>16} {:>8} {:>11} {:>11}".format(
        "run", "APIs", "APIs/s", "rate x", "start s", "APIs/s started", "wall s", "parent MiB", "worker MiB"))
    for name, result in rows:
        rate = result["apis"] / result["seconds"]
        started = result["apis"] / max(1e-9, result["seconds"] - result["startup"])
        print("{:<36} {:>5} {:>9.1f} {:>8.2f} {:>10.2f} {:>16.1f} {:>8.2f} {:>11.0f} {:>11}".format(
            name, result["apis"], rate, rate / (single["apis"] / single["seconds"]), result["startup"], started,
            result["wall"],
            result["parent_kib"] / 1024.0,
            "{:.0f}".format(max(result["workers_kib"]) / 1024.0) if result["workers_kib"] else "-"))
    print("multi_run_ut -n 2 CSVs identical to run_ut's: {}; with {} thread/worker: {} (float32 metrics "
          "depend on the thread count)".format(_same(single, multi), spread, _same(single, multi_spread)))


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--one":
        one(*sys.argv[2:6])
    else:
        main()
