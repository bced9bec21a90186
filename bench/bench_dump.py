"""Dump overhead on a reference CPU model, as ratios to a plain training step, in one run.

    python bench/bench_dump.py [--steps 10] [--threads 1]

Rows: ``hooks_off`` (wrappers installed, switch OFF), ``summary_only`` (statistics in the pkl, no npy,
the default mode "all"), ``summary+stack`` (the same plus every call's stack line, mode api_stack),
``api_stack`` (every tensor to npy + stack lines), ``debugger_stats`` (``PrecisionDebugger(task="statistics",
level="L1")``, start/stop/step around each step: dump.json + stack.json, as ``summary+stack`` records),
``debugger_tensors`` (the same with ``task="tensor"``: a ``.pt`` file per tensor, as ``api_stack`` writes npy files);
then, on a model ~20x heavier, the MB/s of npy data the
dumped run sustains against ``np.save`` writing the same arrays in a tight loop. Output goes under
``bench/out/dump/`` and is deleted afterwards.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import time

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "out", "dump")  # only this subdirectory is ours: other benchmarks share bench/out


class Reference(torch.nn.Module):
    """A small CNN stem + one transformer encoder block + a classifier."""

    def __init__(self, width: int = 64, image: int = 32) -> None:
        super().__init__()
        self.stem = torch.nn.Sequential(
            torch.nn.Conv2d(3, width // 2, 3, stride=2, padding=1), torch.nn.BatchNorm2d(width // 2), torch.nn.GELU(),
            torch.nn.Conv2d(width // 2, width, 3, stride=2, padding=1), torch.nn.BatchNorm2d(width), torch.nn.GELU(),
        )
        self.block = torch.nn.TransformerEncoderLayer(width, nhead=4, dim_feedforward=width * 2, dropout=0.0,
                                                      batch_first=True)
        self.head = torch.nn.Linear(width, 10)

    def forward(self, x):
        x = self.stem(x)
        x = x.flatten(2).transpose(1, 2)
        x = self.block(x)
        return self.head(x.mean(1))


def make_step(model, batch: int, image: int):
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randn(batch, 3, image, image)
    y = torch.randint(0, 10, (batch,))

    def step():
        loss = torch.nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    return step


def timed(step, steps: int, after=None) -> float:
    """Median seconds per step (``after`` runs after each step and is included: the writer flush)."""
    step()
    durations = []
    for _ in range(steps):
        start = time.perf_counter()
        step()
        if after is not None:
            after()
        durations.append(time.perf_counter() - start)
    return statistics.median(durations)


def dir_bytes(path: str) -> int:
    """Bytes really written: a tensor recorded twice (output of one call, input of the next) is one
    file with two hard links, counted once."""
    sizes = {}
    for root, _, names in os.walk(path):
        for name in names:
            info = os.stat(os.path.join(root, name))
            sizes[info.st_ino] = info.st_size
    return sum(sizes.values())


# The dumped rows: (label, set_dump_switch keyword arguments). "summary_only" is the issue's
# set_dump_switch("ON", summary_only=True) with the default mode "all"; the "+stack" row adds the
# stack line of every call (mode api_stack), as the api_stack row does with npy files.
DUMPED_ROWS = (
    ("summary_only", dict(mode="all", summary_only=True)),
    ("summary+stack", dict(mode="api_stack", summary_only=True)),
    ("api_stack", dict(mode="api_stack")),
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10, help="timed steps per row and round (default 10)")
    parser.add_argument("--rounds", type=int, default=3,
                        help="rounds over all rows; each row reports its median round (default 3)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1: stable numbers)")
    args = parser.parse_args()
    for option in ("steps", "rounds", "threads"):
        if getattr(args, option) < 1:
            parser.error(f"--{option} must be at least 1, got {getattr(args, option)}")
    torch.set_num_threads(args.threads)
    from ptdbg_ascend import PrecisionDebugger, acc_cmp_dump, register_hook, seed_all, set_dump_path, set_dump_switch
    from ptdbg_ascend.dump.session import get_session

    seed_all()
    shutil.rmtree(OUT, ignore_errors=True)
    model = Reference()
    step = make_step(model, batch=16, image=32)
    heavy = Reference(width=256, image=64)
    heavy_step = make_step(heavy, batch=16, image=64)
    heavy_plain = timed(heavy_step, 3)

    set_dump_path(os.path.join(OUT, "bench.pkl"), dump_tag="bench")
    register_hook(model, acc_cmp_dump)
    session = get_session()
    recorder = lambda: session.legacy.recorder  # noqa: E731
    # Rounds over every row, plain and hooks_off alternating (unwrap / wrap again) in each, so that load
    # from other processes on a shared machine hits all rows alike; each row reports its median round.
    times = {name: [] for name in ["plain", "hooks_off"] + [row for row, _ in DUMPED_ROWS] + ["debugger_stats", "debugger_tensors"]}
    records_per_step = 0.0
    npy_floor = []  # seconds np.save takes for one step's npy files, measured after each api_stack row
    for _ in range(args.rounds):
        session.unwrap()
        times["plain"].append(timed(step, args.steps))
        session.ensure_wrapped()
        times["hooks_off"].append(timed(step, args.steps))
        for name, switch in DUMPED_ROWS:
            set_dump_switch("ON", **switch)
            times[name].append(timed(step, args.steps, after=lambda: recorder().flush()))
            if name == "summary+stack":
                records_per_step = sum(1 for _ in open(recorder().pkl_path)) / (args.steps + 1)
            if name == "api_stack":
                npy_floor.append(np_save_seconds(recorder().pkl_path[: -len(".pkl")], args.steps + 1))
            set_dump_switch("OFF")
            shutil.rmtree(OUT, ignore_errors=True)
            session.opened_files.clear()
            if name == "summary+stack":
                # Right after the row it is compared with, before api_stack: the ~100 MB that row writes are
                # still being written back to disk for a while, which slowed whatever row came next.
                times["debugger_stats"].append(debugger_row(PrecisionDebugger, step, args.steps))
            if name == "api_stack":  # right after the row it is compared with, as above
                times["debugger_tensors"].append(debugger_row(PrecisionDebugger, step, args.steps, task="tensor"))
    plain = statistics.median(times["plain"])

    print("torch {}, {} thread(s), reference model batch 16, median of {} rounds of {} steps (each the median step)".format(
        torch.__version__, args.threads, args.rounds, args.steps))
    for name, values in times.items():
        seconds = statistics.median(values)
        print("{:<14} {:8.2f} ms/step  {:5.2f}x   rounds: {}".format(
            name, seconds * 1e3, seconds / plain, " ".join(f"{value / plain:.2f}x" for value in values)))
    print(f"pkl lines per step (summary+stack): {records_per_step:.0f}")
    print("debugger_stats / summary+stack: {:.2f}x   debugger_tensors / api_stack: {:.2f}x".format(
        statistics.median(times["debugger_stats"]) / statistics.median(times["summary+stack"]),
        statistics.median(times["debugger_tensors"]) / statistics.median(times["api_stack"])))
    # api_stack writes ~350 new npy files per step: where creating a file is slow, that, not the tool,
    # sets the step time (on the development VM `openat` of a new file took 0.9 ms median under strace
    # in phases after heavy writing, 25-45 us in quiet ones, whatever the number of files in the
    # directory). The floor: np.save of the same files in a tight loop right after the row, per step.
    print("api_stack floor: np.save of the same npy files {} ms per step (rounds), plain step {:.2f} ms".format(
        " ".join(f"{value * 1e3:.1f}" for value in npy_floor), plain * 1e3))

    # Throughput on the heavy model: one dumped step vs np.save of the same arrays, in alternation.
    percents = []
    for _ in range(args.rounds):
        percents.append(heavy_round(heavy_step, heavy_plain, plain, recorder, set_dump_path, set_dump_switch))
    print("heavy model MB/s, dumped run vs np.save loop: median {:.0f} %  (rounds: {})".format(
        statistics.median(percents), " ".join(f"{value:.0f} %" for value in percents)))
    shutil.rmtree(OUT, ignore_errors=True)
    return 0


def debugger_row(PrecisionDebugger, step, steps: int, task: str = "statistics") -> float:
    """Median seconds per step with ``PrecisionDebugger(task=task, level="L1")`` (default task "statistics"),
    start/stop/step around each step (dump.json + stack.json, as ``summary+stack`` records; with "tensor",
    the ``.pt`` files too, as ``api_stack`` writes npy files)."""
    debugger = PrecisionDebugger(task=task, level="L1", dump_path=os.path.join(OUT, "debugger"))

    def debugger_step() -> None:
        debugger.start()
        step()
        debugger.stop()
        debugger.step()

    seconds = timed(debugger_step, steps)
    shutil.rmtree(OUT, ignore_errors=True)
    return seconds


def np_save_seconds(npy_dir: str, steps: int) -> float:
    """Seconds per step that ``np.save`` takes to write the distinct npy files of ``npy_dir`` (hard links
    counted once; ``steps`` steps' worth) into a fresh directory, in a tight loop."""
    seen = {}
    for name in sorted(os.listdir(npy_dir)):
        seen.setdefault(os.stat(os.path.join(npy_dir, name)).st_ino, name)
    target = os.path.join(OUT, "np_save_floor")
    os.makedirs(target)
    total = 0.0
    for index, name in enumerate(seen.values()):
        array = np.load(os.path.join(npy_dir, name))
        start = time.perf_counter()
        np.save(os.path.join(target, f"{index}.npy"), array)
        total += time.perf_counter() - start
    return total / steps


def heavy_round(heavy_step, heavy_plain: float, plain: float, recorder, set_dump_path, set_dump_switch) -> float:
    """One dumped step of the heavy model (after a warm-up step), then np.save of the same arrays;
    prints the round and returns the dumped MB/s as a percentage of np.save's."""
    from ptdbg_ascend.dump.session import get_session

    shutil.rmtree(OUT, ignore_errors=True)
    get_session().opened_files.clear()
    set_dump_path(os.path.join(OUT, "heavy.pkl"), dump_tag="heavy")
    set_dump_switch("ON", mode="api_stack")
    heavy_step()
    recorder().flush()
    npy_dir = recorder().pkl_path[: -len(".pkl")]
    before = {os.stat(os.path.join(npy_dir, name)).st_ino for name in os.listdir(npy_dir)}
    names_before = len(os.listdir(npy_dir))
    os.sync()  # the warm-up's dirty pages must not be written back during the timed step
    busy_before = recorder().writer_busy_seconds
    start = time.perf_counter()
    heavy_step()
    recorder().flush()
    dumped_seconds = time.perf_counter() - start
    writer_seconds = recorder().writer_busy_seconds - busy_before
    set_dump_switch("OFF")
    new_files = {}
    for name in sorted(os.listdir(npy_dir)):
        info = os.stat(os.path.join(npy_dir, name))
        if info.st_ino not in before:
            new_files.setdefault(info.st_ino, (name, info.st_size))
    written = sum(size for _, size in new_files.values())
    arrays = [np.load(os.path.join(npy_dir, name)) for name, _ in new_files.values()]
    new_names = len(os.listdir(npy_dir)) - names_before
    target = os.path.join(OUT, "np_save")
    os.makedirs(target)
    os.sync()
    start = time.perf_counter()
    for index, array in enumerate(arrays):
        np.save(os.path.join(target, f"{index}.npy"), array)
    save_seconds = time.perf_counter() - start
    dump_rate = written / dumped_seconds / 1e6
    save_rate = written / save_seconds / 1e6
    print("heavy model: plain {:.1f} ms/step ({:.0f}x the reference); api_stack step {:.1f} ms, {:.0f} MB in {} distinct npy ({} names); MB/s dumped run {:.0f}, np.save loop {:.0f} -> {:.0f} %".format(
        heavy_plain * 1e3, heavy_plain / plain, dumped_seconds * 1e3, written / 1e6, len(arrays), new_names,
        dump_rate, save_rate, 100 * dump_rate / save_rate))
    # Where the gap is: the writer thread's own rate while it has work, against np.save. Its work is
    # np.save's plus the statistics of large tensors, hard links and pkl lines; when it is busy for most
    # of the step, the writer (one core) and training (the other) both bound the run's rate.
    writer_rate = written / writer_seconds / 1e6 if writer_seconds > 0 else float("nan")
    print("  writer thread busy {:.1f} ms of the step -> {:.0f} MB/s while writing, {:.0f} % of np.save".format(
        writer_seconds * 1e3, writer_rate, 100 * writer_rate / save_rate))
    return 100 * dump_rate / save_rate


if __name__ == "__main__":
    sys.exit(main())
