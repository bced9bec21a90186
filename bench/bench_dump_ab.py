"""Dump overhead of this tree against another checkout (new vs old), rows of bench_dump.py without files.

    python bench/bench_dump_ab.py --baseline /path/to/old/checkout [--pairs 3] [--steps 20] [--rounds 5]

Each measurement is a fresh process that times, on bench_dump.py's reference model, a plain step, the
step with hooks registered and the switch OFF, the two statistics-only rows (``summary_only`` in
modes ``all`` and ``api_stack``) and ``debugger_stats`` (``PrecisionDebugger(task="statistics",
level="L1")``, start/stop/step around each step), rounds alternating within the process. Processes alternate new, old,
new, old... so load from other processes hits both alike. Ratios are to the plain step of the same
process; the last lines compare the medians (new / old). The npy row is left out: it measures the disk.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROWS = ("hooks_off", "summary_only", "summary+stack", "debugger_stats")

CHILD = r'''
import json, os, shutil, statistics, sys, tempfile
tree, steps, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
sys.path[:0] = [os.path.join(tree, "bench"), tree]
import torch
torch.set_num_threads(1)
import bench_dump as b
from ptdbg_ascend import PrecisionDebugger, acc_cmp_dump, register_hook, seed_all, set_dump_path, set_dump_switch
from ptdbg_ascend.dump.session import get_session
import logging
from ptdbg_ascend.log import logger
logger.setLevel(logging.WARNING)  # one INFO line per debugger step
seed_all()
out = tempfile.mkdtemp()
model = b.Reference()
step = b.make_step(model, batch=16, image=32)
set_dump_path(os.path.join(out, "bench.pkl"), dump_tag="bench")
register_hook(model, acc_cmp_dump)
session = get_session()
times = {"plain": [], "hooks_off": [], "summary_only": [], "summary+stack": [], "debugger_stats": []}
for _ in range(rounds):
    session.unwrap()
    times["plain"].append(b.timed(step, steps))
    session.ensure_wrapped()
    times["hooks_off"].append(b.timed(step, steps))
    for name, mode in (("summary_only", "all"), ("summary+stack", "api_stack")):
        set_dump_switch("ON", mode=mode, summary_only=True)
        times[name].append(b.timed(step, steps, after=lambda: session.legacy.recorder.flush()))
        set_dump_switch("OFF")
        shutil.rmtree(out, ignore_errors=True)
        session.opened_files.clear()
    debugger = PrecisionDebugger(task="statistics", level="L1", dump_path=os.path.join(out, "debugger"))
    def debugger_step():
        debugger.start(); step(); debugger.stop(); debugger.step()
    times["debugger_stats"].append(b.timed(debugger_step, steps))
    shutil.rmtree(out, ignore_errors=True)
plain = statistics.median(times["plain"])
print("RESULT " + json.dumps({name: statistics.median(values) / plain for name, values in times.items()}))
'''


def measure(tree: str, steps: int, rounds: int) -> dict:
    """The ratios to a plain step of one fresh process on ``tree``."""
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=tree)
    output = subprocess.run([sys.executable, "-c", CHILD, tree, str(steps), str(rounds)], env=env, check=True,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True).stdout
    line = [text for text in output.splitlines() if text.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT "):])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", required=True, help="the old checkout (a git worktree of an earlier commit)")
    parser.add_argument("--pairs", type=int, default=3, help="new/old process pairs (default 3)")
    parser.add_argument("--steps", type=int, default=20, help="timed steps per row and round (default 20)")
    parser.add_argument("--rounds", type=int, default=5, help="rounds per process; each row its median (default 5)")
    args = parser.parse_args()
    baseline = os.path.abspath(args.baseline)
    if not os.path.isfile(os.path.join(baseline, "bench", "bench_dump.py")):
        parser.error(f"--baseline {baseline!r} has no bench/bench_dump.py: give a checkout of this project")
    new_tree = os.path.dirname(HERE)
    results = {"new": [], "old": []}
    for _ in range(args.pairs):
        for side, tree in (("new", new_tree), ("old", baseline)):
            ratios = measure(tree, args.steps, args.rounds)
            results[side].append(ratios)
            print(f"{side}: {'  '.join((f'{row} {ratios[row]:.3f}x' for row in ROWS))}", flush=True)
    print(f"median ratio to a plain step over {args.pairs} processes each (new / old):")
    medians = {}
    for row in ROWS:
        new = statistics.median(item[row] for item in results["new"])
        old = statistics.median(item[row] for item in results["old"])
        medians[row] = (new, old)
        print(f"  {row:<14} new {new:.3f}x  old {old:.3f}x  new/old {new / old:.3f}")
    print("  debugger_stats / summary+stack: new {:.3f}  old {:.3f}".format(
        medians["debugger_stats"][0] / medians["summary+stack"][0],
        medians["debugger_stats"][1] / medians["summary+stack"][1]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
