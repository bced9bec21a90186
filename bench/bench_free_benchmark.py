"""free_benchmark's cost per mode on bench_dump.py's reference CPU model in bfloat16, as ratios to a plain training
step, in one run.

    python bench/bench_free_benchmark.py [--steps 5] [--rounds 3]

Rows (each its median round; rows alternate within a round): ``plain`` (no tool), then a PrecisionDebugger with
``"task": "free_benchmark"`` over every API of the step: each pert_mode with ``check`` at ``fuzz_stage: forward``;
``improve_precision`` with ``fix``; ``improve_precision`` and ``add_noise`` at ``fuzz_stage: backward``. msprobe
1.0.4's own figures (LLaMA2-7B, one layer, whole network, check, forward): 14.37x improve_precision, 19.46x
add_noise, 70.79x bit_noise, 13.42x no_change. Output goes under ``bench/out/free_benchmark/``, deleted after.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "out", "free_benchmark")
sys.path.insert(0, HERE)

from bench_dump import Reference  # noqa: E402 - the reference model of bench_dump.py
from bench_flight_recorder import step_arguments, timed  # noqa: E402

ROWS = [("improve_precision", "check", "forward"), ("add_noise", "check", "forward"), ("bit_noise", "check", "forward"),
        ("change_value", "check", "forward"), ("no_change", "check", "forward"), ("to_cpu", "check", "forward"),
        ("improve_precision", "fix", "forward"), ("improve_precision", "check", "backward"),
        ("add_noise", "check", "backward")]
MSPROBE = {("improve_precision", "check", "forward"): 14.37, ("add_noise", "check", "forward"): 19.46,
           ("bit_noise", "check", "forward"): 70.79, ("no_change", "check", "forward"): 13.42}


def _label(row) -> str:
    return "{} {} {}".format(*row)


def main() -> int:
    args = step_arguments(__doc__.splitlines()[0], steps=5)
    torch.set_num_threads(1)
    from ptdbg_ascend import PrecisionDebugger
    from ptdbg_ascend.dump.session import get_session

    shutil.rmtree(OUT, ignore_errors=True)
    os.makedirs(OUT)
    torch.manual_seed(0)
    model = Reference().bfloat16()
    step_with = _bf16_step(model)
    inputs = torch.randn(16, 3, 32, 32).bfloat16()

    def plain_step() -> torch.Tensor:
        return step_with(inputs)

    times = {"plain": []}
    times.update({_label(row): [] for row in ROWS})
    try:
        for round_number in range(args.rounds):
            times["plain"].append(timed(plain_step, args.steps, _nothing))
            for row in ROWS:
                mode, handler, stage = row
                config = os.path.join(OUT, f"{mode}_{handler}_{stage}_{round_number}.json")
                section = {"pert_mode": mode, "handler_type": handler, "fuzz_stage": stage,
                           "fuzz_device": "cpu" if mode == "to_cpu" else "npu"}
                with open(config, "w") as handle:
                    json.dump({"task": "free_benchmark", "dump_path": os.path.join(OUT, "dump"),
                               "free_benchmark": section}, handle)
                debugger = PrecisionDebugger(config_path=config)
                debugger.start()
                try:
                    times[_label(row)].append(timed(plain_step, args.steps, _nothing))
                finally:
                    debugger.stop()
                    debugger._free_benchmark.close()
                    get_session().reset_counters()
    finally:
        shutil.rmtree(OUT, ignore_errors=True)
    plain = statistics.median(times["plain"])
    print(f"free_benchmark on the reference model in bfloat16 ({args.steps} steps x {args.rounds} rounds, 1 thread)")
    print(f"  {'plain step':<36} {plain * 1e3:8.1f} ms")
    for row in ROWS:
        cost = statistics.median(times[_label(row)])
        reference = MSPROBE.get(row)
        against = f"   (msprobe 1.0.4: {reference:.2f}x)" if reference else ""
        print(f"  {_label(row):<36} {cost * 1e3:8.1f} ms  {cost / plain:6.2f}x a plain step{against}")
    return 0


def _bf16_step(model):
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    y = torch.randint(0, 10, (16,))

    def step(x: torch.Tensor) -> torch.Tensor:
        loss = torch.nn.functional.cross_entropy(model(x).float(), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return loss

    return step


def _nothing(loss: object) -> None:
    """What runs after each step here: nothing."""


if __name__ == "__main__":
    sys.exit(main())
