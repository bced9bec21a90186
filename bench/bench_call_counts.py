"""Python function calls per recorded call (cProfile), for both front-ends, this checkout against another.

    python bench/bench_call_counts.py [--tree OLD] [--steps 5]

On this VM timings swing by ±30 % between processes; a count of Python calls does not move with load, so a
change of a few per cent on the per-call path shows here when the timed benches cannot see it. The workload:
four ``Linear(64, 64) + LayerNorm + GELU`` blocks, batch 8, forward, backward and AdamW (``foreach=False``),
one window per step, ``steps`` steps profiled after one warm-up step (171 dump.json entries per step). Rows:

* ``legacy``: ``register_hook`` + ``set_dump_switch("ON", mode="api_stack", summary_only=True)``;
* ``debugger``: ``PrecisionDebugger(task="statistics", level="L1")``;
* ``device``: the same with the accelerator's path on CPU tensors (``statistics.planner.DEFAULTS.defer_cpu``);
* ``tensor``: ``PrecisionDebugger(task="tensor", level="L1")`` (every tensor to a ``.pt`` file).

Each row runs in a fresh process per checkout; the figure is cProfile's total calls over the recorded calls
(pkl lines of distinct calls for ``legacy``, dump.json entries otherwise).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROWS = ("legacy", "debugger", "device", "tensor")

CHILD = r'''
import cProfile, glob, json, logging, os, pstats, sys
tree, row, out, steps = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
sys.path.insert(0, tree)
import torch
torch.set_num_threads(1)
logging.disable(logging.WARNING)
from ptdbg_ascend.statistics import planner
planner.DEFAULTS.defer_cpu = row == "device"
torch.manual_seed(0)
model = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.LayerNorm(64), torch.nn.GELU())
                              for _ in range(4)])
optimizer = torch.optim.AdamW(model.parameters(), foreach=False)

def train():
    model(torch.randn(8, 64)).sum().backward()
    optimizer.step()
    optimizer.zero_grad()

if row == "legacy":
    from ptdbg_ascend import acc_cmp_dump, register_hook, set_dump_path, set_dump_switch
    set_dump_path(os.path.join(out, "dump"))
    register_hook(model, acc_cmp_dump)

    def step():
        set_dump_switch("ON", mode="api_stack", summary_only=True)
        train()
        set_dump_switch("OFF")
else:
    from ptdbg_ascend import PrecisionDebugger
    debugger = PrecisionDebugger(task="tensor" if row == "tensor" else "statistics", level="L1", dump_path=out)

    def step():
        debugger.start()
        train()
        debugger.stop()
        debugger.step()

step()
profile = cProfile.Profile()
profile.enable()
for _ in range(steps):
    step()
profile.disable()
if row == "legacy":  # one pkl for every step: its distinct calls over all steps, the profiled share of them
    import re
    names = set()
    for path in glob.glob(os.path.join(out, "**", "*.pkl"), recursive=True):
        with open(path) as handle:
            names.update(re.match(r"(.*?_(?:forward|backward))", json.loads(line)[0]).group(1)
                         for line in handle if line.strip())
    recorded = len(names) * steps / (steps + 1)
else:
    last = sorted(glob.glob(os.path.join(out, "step*", "rank", "dump.json")))[-1]
    with open(last) as handle:
        recorded = len(json.load(handle)["data"]) * steps
print(pstats.Stats(profile).total_calls / recorded)
'''


def _count(tree: str, row: str, steps: int) -> float:
    with tempfile.TemporaryDirectory() as out:
        done = subprocess.run([sys.executable, "-c", CHILD, tree, row, out, str(steps)], capture_output=True,
                              text=True, timeout=600)
    if done.returncode != 0:
        raise SystemExit(f"{row} in {tree} failed:\n{done.stderr[-2000:]}")
    return float(done.stdout.split()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", help="another checkout to count against (default: none)")
    parser.add_argument("--steps", type=int, default=5, help="profiled steps after one warm-up (default 5)")
    args = parser.parse_args()
    if args.steps < 1:
        parser.error(f"--steps must be at least 1, got {args.steps}")
    if args.tree is not None and not os.path.isdir(os.path.join(args.tree, "ptdbg_ascend")):
        parser.error(f"--tree {args.tree!r} has no ptdbg_ascend package")
    print("Python calls per recorded call (cProfile):")
    for row in ROWS:
        new = _count(os.path.dirname(HERE), row, args.steps)
        if args.tree is None:
            print(f"  {row:<9} {new:7.1f}")
            continue
        old = _count(args.tree, row, args.steps)
        print(f"  {row:<9} new {new:7.1f}  old {old:7.1f}  new/old {new / old:.3f}")


if __name__ == "__main__":
    main()
