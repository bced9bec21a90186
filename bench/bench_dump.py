"""Dump overhead on a reference CPU model, as ratios to a plain training step, in one run.

    python bench/bench_dump.py [--steps 10] [--threads 1]

Rows: ``hooks_off`` (wrappers installed, switch OFF), ``summary_only`` (statistics in the pkl, no npy),
``api_stack`` (every tensor to npy + stack lines); then, on a model ~20x heavier, the MB/s of npy data the
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1: stable numbers)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    from ptdbg_ascend import acc_cmp_dump, register_hook, seed_all, set_dump_path, set_dump_switch
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
    # plain and hooks_off alternate (unwrap / wrap again) so that load from other processes hits both alike
    plain_times, off_times = [], []
    for _ in range(5):
        session.unwrap()
        plain_times.append(timed(step, args.steps))
        session.ensure_wrapped()
        off_times.append(timed(step, args.steps))
    plain = statistics.median(plain_times)
    rows = [("plain", plain), ("hooks_off", statistics.median(off_times))]
    set_dump_switch("ON", mode="api_stack", summary_only=True)
    rows.append(("summary_only", timed(step, args.steps, after=lambda: recorder().flush())))
    set_dump_switch("OFF")
    set_dump_switch("ON", mode="api_stack")
    rows.append(("api_stack", timed(step, args.steps, after=lambda: recorder().flush())))
    records_per_step = sum(1 for _ in open(recorder().pkl_path)) / (args.steps + 1) / 2 if recorder().pkl_path else 0
    set_dump_switch("OFF")

    print("torch {}, {} thread(s), reference model batch 16, median of {} steps".format(
        torch.__version__, args.threads, args.steps))
    for name, seconds in rows:
        print("{:<14} {:8.2f} ms/step  {:5.2f}x".format(name, seconds * 1e3, seconds / plain))
    print("pkl lines per step: {:.0f}".format(records_per_step))

    # Throughput on the heavy model: the dumped run vs np.save of the same arrays.
    shutil.rmtree(OUT, ignore_errors=True)
    get_session().opened_files.clear()
    set_dump_path(os.path.join(OUT, "heavy.pkl"), dump_tag="heavy")
    set_dump_switch("ON", mode="api_stack")
    heavy_step()
    recorder().flush()
    npy_dir = recorder().pkl_path[: -len(".pkl")]
    before = set(os.stat(os.path.join(npy_dir, name)).st_ino for name in os.listdir(npy_dir))
    names_before = len(os.listdir(npy_dir))
    start = time.perf_counter()
    heavy_step()
    recorder().flush()
    dumped_seconds = time.perf_counter() - start
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
    start = time.perf_counter()
    for index, array in enumerate(arrays):
        np.save(os.path.join(target, "{}.npy".format(index)), array)
    save_seconds = time.perf_counter() - start
    dump_rate = written / dumped_seconds / 1e6
    save_rate = written / save_seconds / 1e6
    print("heavy model: plain {:.1f} ms/step ({:.0f}x the reference); api_stack step {:.1f} ms, {:.0f} MB in {} distinct npy ({} names)".format(
        heavy_plain * 1e3, heavy_plain / plain, dumped_seconds * 1e3, written / 1e6, len(arrays), new_names))
    print("MB/s: dumped run {:.0f}, np.save loop {:.0f} -> {:.0f} %".format(dump_rate, save_rate, 100 * dump_rate / save_rate))
    shutil.rmtree(OUT, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
