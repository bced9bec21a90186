"""What the PrecisionDebugger's rewrites of dump.json cost in one long statistics window, new against old.

    python bench/bench_rewrite.py [--calls 40000] [--rounds 2] [--baseline OLD_CHECKOUT]

One ``PrecisionDebugger(task="statistics", level="L1")`` window of ``calls`` tiny API calls (the loop of
``bench_per_call.py``), in a fresh process per tree and round (alternating when ``--baseline`` is given).
A statistics dump rewrites dump.json, stack.json and construct.json on the training thread, at most once
a second and no sooner than 10x the last rewrite's duration, and once more at ``stop()``. Printed per tree:
the window's duration, the number of periodic rewrites and their total time, the time of ``stop()`` (its
rewrite holds every entry) and the size of dump.json; with a baseline, the new/old ratio of ``stop()``.
Output goes to a temporary directory, deleted afterwards.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

CHILD = r'''
import json, os, shutil, sys, tempfile, time, logging
tree, calls = sys.argv[1], int(sys.argv[2])
sys.path.insert(0, tree)
sys.path.insert(0, sys.argv[3])
import torch
torch.set_num_threads(1)
from bench_per_call import work
from ptdbg_ascend import PrecisionDebugger
from ptdbg_ascend.dump.session import get_session
from ptdbg_ascend.log import logger
from ptdbg_ascend.sinks.msprobe import json_writer
logger.setLevel(logging.WARNING)
rewrites = []
original = json_writer.MsprobeJsonWriter._periodic_rewrite
def timed(self):
    started = time.perf_counter()
    try:
        original(self)
    finally:
        rewrites.append(time.perf_counter() - started)
json_writer.MsprobeJsonWriter._periodic_rewrite = timed
out = tempfile.mkdtemp(prefix="bench_rewrite_")
try:
    x, w = torch.randn(16, 16), torch.randn(16, 16)
    debugger = PrecisionDebugger(task="statistics", level="L1", dump_path=out)
    get_session().ensure_wrapped()
    debugger.start()
    started = time.perf_counter()
    work(x, w, calls)
    window = time.perf_counter() - started
    debugger.stop()
    stop = time.perf_counter() - started - window
    size = sum(os.path.getsize(os.path.join(folder, "dump.json"))
               for folder, _, files in os.walk(out) if "dump.json" in files)
    print(json.dumps({"window": window, "rewrites": rewrites, "stop": stop, "bytes": size}))
finally:
    shutil.rmtree(out, ignore_errors=True)
'''


def run(tree: str, calls: int) -> dict:
    """One window in a fresh process with ``tree``'s ptdbg_ascend."""
    completed = subprocess.run([sys.executable, "-c", CHILD, tree, str(calls), HERE], capture_output=True, text=True,
                               timeout=1800)
    if completed.returncode != 0:
        raise RuntimeError(f"the window with {tree} failed:\n{completed.stderr[-3000:]}")
    return json.loads(completed.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=40000, help="API calls in the window (default 40000)")
    parser.add_argument("--rounds", type=int, default=2, help="windows per tree; medians reported (default 2)")
    parser.add_argument("--baseline", help="a checkout to compare with (e.g. git archive of an older commit)")
    args = parser.parse_args()
    if args.calls < 8 or args.rounds < 1:
        parser.error("--calls must be at least 8 and --rounds at least 1")
    trees = [("new", os.path.dirname(HERE))]
    if args.baseline:
        if not os.path.isdir(os.path.join(args.baseline, "ptdbg_ascend")):
            parser.error(f"--baseline {args.baseline!r} has no ptdbg_ascend package")
        trees.append(("old", os.path.abspath(args.baseline)))
    results = {label: [] for label, _ in trees}
    for _ in range(args.rounds):
        for label, tree in trees:
            results[label].append(run(tree, args.calls))
    for label, tree in trees:
        rows = results[label]
        print("{} ({}): window {:.2f} s for {} calls, {:.1f} periodic rewrites taking {:.0f} ms, stop() {:.0f} ms, "
              "dump.json {:.1f} MB".format(
                  label, tree, statistics.median(r["window"] for r in rows), args.calls,
                  statistics.median(len(r["rewrites"]) for r in rows),
                  statistics.median(sum(r["rewrites"]) for r in rows) * 1e3,
                  statistics.median(r["stop"] for r in rows) * 1e3,
                  statistics.median(r["bytes"] for r in rows) / 1e6))
    if args.baseline:
        new, old = (statistics.median(r["stop"] for r in results[label]) for label in ("new", "old"))
        print(f"stop() new/old: {new / old:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
