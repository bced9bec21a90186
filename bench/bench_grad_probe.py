"""grad_probe's cost on bench_dump.py's reference CPU model, as ratios to a plain training step, in one run.

    python bench/bench_grad_probe.py [--steps 10] [--rounds 3]

Rows (each its median round; rows alternate within a round): ``plain``; ``L0``, ``L1``, ``L2``
(``PrecisionDebugger(task="grad_probe")`` + ``monitor(model)`` at that level, writing every optimizer step). Then the
bytes each level writes per step against the model's parameter count, and the disk a 1 B-parameter model would take
per step (the directions dominate: a bit per element). Output goes under ``bench/out/grad_probe/``, deleted after.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "out", "grad_probe")
sys.path.insert(0, HERE)

from bench_dump import Reference, dir_bytes  # noqa: E402 - the reference model of bench_dump.py
from bench_flight_recorder import make_step, step_arguments, timed  # noqa: E402


def _nothing(loss: object) -> None:
    """What runs after each step here: nothing (the monitor works inside optimizer.step())."""


def main() -> int:
    args = step_arguments(__doc__.splitlines()[0], steps=10)
    torch.set_num_threads(1)
    from ptdbg_ascend import PrecisionDebugger

    shutil.rmtree(OUT, ignore_errors=True)
    torch.manual_seed(0)
    model = Reference()
    step = make_step(model)
    parameters = sum(parameter.numel() for parameter in model.parameters())
    times = {name: [] for name in ("plain", "L0", "L1", "L2")}
    per_step = {}
    try:
        for round_number in range(args.rounds):
            times["plain"].append(timed(step, args.steps, _nothing))
            for level in ("L0", "L1", "L2"):
                path = os.path.join(OUT, f"{level}_{round_number}")
                config = os.path.join(OUT, f"{level}_{round_number}.json")
                os.makedirs(OUT, exist_ok=True)
                with open(config, "w") as handle:
                    json.dump({"task": "grad_probe", "dump_path": path, "grad_probe": {"grad_level": level}}, handle)
                debugger = PrecisionDebugger(config_path=config)
                debugger.monitor(model)
                try:
                    times[level].append(timed(step, args.steps, _nothing))
                finally:
                    debugger._grad_monitor.remove()
                per_step[level] = dir_bytes(path) / (args.steps + 1)
    finally:
        shutil.rmtree(OUT, ignore_errors=True)
    plain = statistics.median(times["plain"])
    print(f"torch {torch.__version__}, 1 thread, bench_dump.py's reference model ({parameters} parameters), "
          f"{args.steps} steps x {args.rounds} rounds")
    for name, values in times.items():
        value = statistics.median(values)
        written = f"   {per_step[name] / 1e3:7.1f} KB written a step" if name in per_step else ""
        print(f"{name:<6} {value * 1e3:8.2f} ms/step   {value / plain:5.2f}x plain{written}")
    tensors = sum(1 for _ in model.parameters())
    packed = sum((parameter.numel() + 7) // 8 for parameter in model.parameters())
    overhead = (per_step["L1"] - packed) / tensors  # per tensor: the .npy header and the CSV row
    print(f"L1: {per_step['L1'] * 8 / parameters:.2f} bits per parameter here ({tensors} tensors: {overhead:.0f} "
          f"bytes each besides the packed signs); a 1 B-parameter model of 1,000 tensors: "
          f"{(1e9 / 8 + 1000 * overhead) / 1e6:.0f} MB a step (as 1.0.4's booleans: {(1e9 + 1000 * overhead) / 1e6:.0f} "
          "MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
