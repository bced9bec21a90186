"""The flight recorder's cost on bench_dump.py's reference CPU model, as ratios to a plain training step, in one run.

    python bench/bench_flight_recorder.py [--steps 10] [--rounds 3] [--last-steps 4]

Rows (each its median round; rows alternate within a round so load from other processes hits all alike):
``plain`` (no tool); ``debugger_stats`` (``PrecisionDebugger(task="statistics", level="L1")``, start/stop/step around
each step: dump.json + stack.json written every step); ``flight`` (``FlightRecorder(last_steps=...)``, ``step(loss)``
after each step: the same records, kept in memory). Then what the healthy flight run wrote (bytes on disk: 0 is
the promise), what it keeps in memory, and the time one trigger takes to write the kept steps. Output goes under
``bench/out/flight/`` and is deleted afterwards.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "out", "flight")  # only this subdirectory is ours: other benchmarks share bench/out
sys.path.insert(0, HERE)

from bench_dump import Reference, dir_bytes  # noqa: E402 - the reference model of bench_dump.py


def make_step(model):
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randn(16, 3, 32, 32)
    y = torch.randint(0, 10, (16,))

    def step() -> torch.Tensor:
        loss = torch.nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return loss

    return step


def timed(step, steps: int, after) -> float:
    """Median seconds per step, ``after(loss)`` included."""
    after(step())
    durations = []
    for _ in range(steps):
        start = time.perf_counter()
        after(step())
        durations.append(time.perf_counter() - start)
    return statistics.median(durations)


def step_arguments(description: str, steps: int = 10, **more: int) -> argparse.Namespace:
    """The command line of a step bench: ``--steps`` (default ``steps``), ``--rounds`` (default 3) and each of
    ``more`` (``last_steps=4``: ``--last-steps``, default 4), every one at least 1."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--steps", type=int, default=steps, help=f"timed steps per row and round (default {steps})")
    parser.add_argument("--rounds", type=int, default=3, help="rounds over all rows (default 3)")
    for name, default in more.items():
        parser.add_argument("--" + name.replace("_", "-"), type=int, default=default, help=f"(default {default})")
    args = parser.parse_args()
    for option in ("steps", "rounds") + tuple(more):
        if getattr(args, option) < 1:
            parser.error(f"--{option.replace('_', '-')} must be at least 1, got {getattr(args, option)}")
    return args


def main() -> int:
    args = step_arguments(__doc__.splitlines()[0], last_steps=4)  # the recorder's last_steps
    torch.set_num_threads(1)
    from ptdbg_ascend import FlightRecorder, PrecisionDebugger
    from ptdbg_ascend.dump.session import get_session

    shutil.rmtree(OUT, ignore_errors=True)
    torch.manual_seed(0)
    step = make_step(Reference())
    session = get_session()
    times = {"plain": [], "debugger_stats": [], "flight": []}
    kept, written, trigger_seconds = 0, 0, 0.0
    try:
        for round_number in range(args.rounds):
            session.unwrap()
            times["plain"].append(timed(step, args.steps, lambda loss: None))
            debugger = PrecisionDebugger(task="statistics", level="L1",
                                         dump_path=os.path.join(OUT, f"debugger{round_number}"))

            def dumped(loss, debugger=debugger):
                debugger.stop()
                debugger.step()
                debugger.start()

            debugger.start()
            times["debugger_stats"].append(timed(step, args.steps, dumped))
            debugger.stop()
            flight_path = os.path.join(OUT, f"flight{round_number}")
            recorder = FlightRecorder(flight_path, last_steps=args.last_steps)
            recorder.start()
            times["flight"].append(timed(step, args.steps, recorder.step))
            kept = recorder.kept_bytes
            written = dir_bytes(flight_path) if os.path.exists(flight_path) else 0
            start = time.perf_counter()
            recorder._fire("bench", "a trigger fired by the bench", None)
            trigger_seconds = time.perf_counter() - start
            recorder.stop()
    finally:
        shutil.rmtree(OUT, ignore_errors=True)
    medians = {name: statistics.median(values) for name, values in times.items()}
    plain = medians["plain"]
    print(f"torch {torch.__version__}, 1 thread, bench_dump.py's reference model, {args.steps} steps x "
          f"{args.rounds} rounds, last_steps={args.last_steps}")
    for name, value in medians.items():
        print(f"{name:<15} {value * 1e3:8.1f} ms/step   {value / plain:5.2f}x plain")
    print("flight/debugger_stats: {:.2f}x".format(medians["flight"] / medians["debugger_stats"]))
    print(f"flight, healthy steps: {written} bytes written; {kept / 1e6:.2f} MB kept in memory for "
          f"{args.last_steps} steps ({kept / args.last_steps / 1e3:.0f} KB a step)")
    print(f"flight, one trigger: {trigger_seconds * 1e3:.1f} ms to write {args.last_steps} steps")
    return 0


if __name__ == "__main__":
    sys.exit(main())
