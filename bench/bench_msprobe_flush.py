"""Cost of PrecisionDebugger's periodic dump.json rewrite on a dump that grows to ~5000 entries.

    PYTHONPATH=. python bench/bench_msprobe_flush.py [--entries 5000] [--rounds 3] [--task tensor]

One ``start()`` for the whole run (every entry in ``step0``, so each rewrite holds every entry so far),
the reference model of ``bench_dump.py``, steps until the dump holds ``--entries`` entries, then
``stop()``. Rows, alternating in each round: ``rewrites`` (the default: every ``max_delay`` = 1 s) and
``no rewrites`` (the periodic rewrite disabled: only stop() writes, as before it existed). Prints the
median seconds of the run (steps + stop) per row, the periodic rewrites' count and their own time.
Output goes under ``bench/out/msprobe_flush/`` and is deleted afterwards.
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
sys.path.insert(0, HERE)
OUT = os.path.join(HERE, "out", "msprobe_flush")  # only this subdirectory is ours


def one_run(task: str, entries: int, rewrites: bool, step):
    """(seconds, steps, rewrites, rewrite seconds, entries, seconds of one more rewrite of the whole
    dump, every entry already encoded: the steady-state cost) of one dumped run."""
    from ptdbg_ascend import PrecisionDebugger
    from ptdbg_ascend.dump.session import get_session

    shutil.rmtree(OUT, ignore_errors=True)
    debugger = PrecisionDebugger(task=task, level="L1", dump_path=OUT)
    started = time.perf_counter()
    debugger.start()
    writer = debugger._recorder.writer
    if not rewrites:
        writer._schedule.next = writer._schedule.earliest = float("inf")
    steps = 0
    while len(writer._entries.data) < entries:
        step()
        steps += 1
    debugger.stop()
    seconds = time.perf_counter() - started
    again = time.perf_counter()
    writer._rewrite(with_others=True, periodic=False)
    again = time.perf_counter() - again
    result = (seconds, steps, writer.rewrites, writer.rewrite_seconds, len(writer._entries.data), again)
    get_session().reset_counters()
    debugger.forward_backward_dump_end()
    shutil.rmtree(OUT, ignore_errors=True)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=5000, help="dump.json entries per run (default 5000)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of both rows (default 3)")
    parser.add_argument("--task", default="tensor", choices=("tensor", "statistics"), help="default tensor")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    from bench_dump import Reference, make_step

    from ptdbg_ascend.seed import seed_all

    seed_all()
    step = make_step(Reference(), batch=16, image=32)
    step()
    rows = {True: [], False: []}
    for _ in range(args.rounds):
        for rewrites in (True, False):
            rows[rewrites].append(one_run(args.task, args.entries, rewrites, step))
    print(f"torch {torch.__version__}, task {args.task}, {args.threads} thread(s), median of {args.rounds} rounds")
    base = statistics.median(run[0] for run in rows[False])
    for rewrites in (True, False):
        runs = rows[rewrites]
        seconds = statistics.median(run[0] for run in runs)
        print("{:<12} {:7.2f} s for {} steps / {} entries  {:+6.1f} %   periodic rewrites: {} taking {:.3f} s  "
              "(rounds: {})".format("rewrites" if rewrites else "no rewrites", seconds, runs[0][1], runs[0][4],
                                    100.0 * (seconds / base - 1), runs[0][2], runs[0][3],
                                    " ".join(f"{run[0]:.2f}" for run in runs)))
    again = statistics.median(run[5] for runs in rows.values() for run in runs)
    print("one rewrite of the final dump (3 files, entries already encoded): {:.1f} ms; at most one per "
          "max(1 s, 10 x that): <= {:.1f} % of the run".format(again * 1e3, 100.0 * again / max(1.0, 10 * again)))
    shutil.rmtree(OUT, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
