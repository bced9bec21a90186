"""Tool time per recorded call in statistics mode on CPU, for both front-ends, in one run.

    python bench/bench_per_call.py [--calls 2000] [--rounds 5] [--size 16] [--tree CHECKOUT] [--device-path]

A loop of tiny API calls on small tensors (matmul, relu, add, mul, sum, ... on ``size`` x ``size`` float32,
no autograd) is timed plain (wrappers removed) and dumped by each front-end:

* ``legacy``: ``register_hook(model, acc_cmp_dump)`` + ``set_dump_switch("ON", mode="api_stack",
  summary_only=True)`` (statistics in the pkl plus each call's stack line, bench_dump.py's ``summary+stack``);
* ``legacy_all``: the same with the default mode ``all`` (no stack lines, bench_dump.py's ``summary_only``);
* ``debugger``: ``PrecisionDebugger(task="statistics", level="L1")`` with start()/stop() around the loop;
* ``floor``: no tool, a plain Python wrapper per API computing the same four numpy statistics of each tensor
  in and out (an input that is the previous call's unchanged output skipped, as the tools' cache does) and
  nothing else: no names, stack, text or file. What a statistics dump costs at the least in Python; the
  last line gives each front-end as a multiple of it.

``--device-path`` runs the accelerator's path on these CPU tensors (``statistics.planner.DEFAULTS.defer_cpu``, as
tests do): reductions queued and read back in batches, the host work a call costs on a GPU or NPU besides the launches.

Tool time = (time with the tool, the flush of its files included) - (plain time), divided by the number
of recorded calls counted from the dump itself (distinct call names in the pkl; entries of dump.json).
Both wall time and the process's CPU time (all its threads: background writers included) are reported;
on a shared machine the CPU time is the steadier of the two.
Rows alternate within each round so load from other processes hits all alike; each row reports its
median round. Output goes to a temporary directory, deleted afterwards.
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import os
import re
import shutil
import statistics
import sys
import tempfile
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))


def work(x: torch.Tensor, w: torch.Tensor, calls: int) -> int:
    """``calls`` (rounded down to a multiple of 8) tiny API calls; returns how many were made."""
    made = 0
    for _ in range(calls // 8):
        y = torch.matmul(x, w)
        y = torch.relu(y)
        y = torch.add(y, x)
        y = y.mul(0.5)
        y = torch.nn.functional.gelu(y)
        y = y.transpose(0, 1)
        z = torch.sum(y, 0)  # not 0-d: the legacy pkl leaves 0-d tensors out in some modes
        z = z.abs()
        made += 8
    return made


# The APIs ``work`` calls, as (owner, attribute): the floor row wraps exactly these.
WORK_APIS = ((torch, "matmul"), (torch, "relu"), (torch, "add"), (torch.Tensor, "mul"), (torch.nn.functional, "gelu"),
             (torch.Tensor, "transpose"), (torch, "sum"), (torch.Tensor, "abs"))


def floor_run(x: torch.Tensor, w: torch.Tensor, calls: int) -> tuple[float, float]:
    """``work`` through the least a statistics dump must do per call, in Python: a plain wrapper per API that
    computes max, min, mean and norm (numpy's four reductions on the same memory, as the tool's small-tensor
    path) of each tensor in and out, skipping an input that is the previous call's output unchanged (as the
    tools' statistics cache does), and keeps the numbers. No names, stack, text nor file. Returns the
    (wall, CPU) seconds of the loop."""
    import math

    import numpy

    maximum, minimum, add = numpy.maximum.reduce, numpy.minimum.reduce, numpy.add.reduce
    tensor_type = torch.Tensor
    kept = []
    last = [None, -1]

    def statistics_of(tensor: torch.Tensor) -> list:
        array = tensor.detach().numpy().reshape(-1)
        return [float(maximum(array)), float(minimum(array)), float(add(array)) / array.size,
                math.sqrt(float(add(array * array)))]

    def wrap(original: object) -> object:
        def wrapper(*args, **kwargs):
            output = original(*args, **kwargs)
            for item in args:
                if type(item) is tensor_type and not (item is last[0] and item._version == last[1]):
                    kept.append(statistics_of(item))
            kept.append(statistics_of(output))
            last[0], last[1] = output, output._version
            return output
        return wrapper

    originals = [(owner, name, getattr(owner, name)) for owner, name in WORK_APIS]
    for owner, name, original in originals:
        setattr(owner, name, wrap(original))
    try:
        start = time.perf_counter(), time.process_time()
        work(x, w, calls)
        return time.perf_counter() - start[0], time.process_time() - start[1]
    finally:
        for owner, name, original in originals:
            setattr(owner, name, original)


CALL_NAME = re.compile(r"^(.*_(?:forward|backward))_(?:input|output|stack_info)")


def pkl_calls(path: str) -> int:
    """Distinct recorded calls of a legacy pkl (a line per tensor, ``Torch_add_3_forward_input.0``, and
    per stack, ``Torch_add_3_forward_stack_info``)."""
    names = set()
    with open(path) as handle:
        for line in handle:
            name = json.loads(line)[0]
            match = CALL_NAME.match(name)
            if match is None:
                raise ValueError(f"{path}: unexpected record name {name!r}")
            names.add(match.group(1))
    return len(names)


def dump_json_calls(root: str) -> int:
    """Entries of every dump.json under ``root``."""
    total = 0
    for folder, _, files in os.walk(root):
        if "dump.json" in files:
            with open(os.path.join(folder, "dump.json")) as handle:
                total += len(json.load(handle)["data"])
    return total


def find_pkls(root: str) -> list:
    return [os.path.join(folder, name) for folder, _, files in os.walk(root) for name in files
            if name.endswith(".pkl")]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000, help="API calls per timed loop (default 2000)")
    parser.add_argument("--rounds", type=int, default=5, help="rounds over all rows; median reported (default 5)")
    parser.add_argument("--size", type=int, default=16, help="side of the square float32 tensors (default 16)")
    parser.add_argument("--tree", default=os.path.dirname(HERE),
                        help="the checkout whose ptdbg_ascend is measured (default: this one)")
    parser.add_argument("--device-path", action="store_true",
                        help="take the accelerator's path (statistics read back in batches) on the CPU tensors")
    args = parser.parse_args()
    if not os.path.isdir(os.path.join(args.tree, "ptdbg_ascend")):
        parser.error(f"--tree {args.tree!r} has no ptdbg_ascend package")
    sys.path.insert(0, os.path.abspath(args.tree))
    for option in ("calls", "rounds", "size"):
        if getattr(args, option) < 1:
            parser.error(f"--{option} must be at least 1, got {getattr(args, option)}")
    torch.set_num_threads(1)
    from ptdbg_ascend import (PrecisionDebugger, acc_cmp_dump, register_hook, seed_all, set_dump_path,
                              set_dump_switch)
    from ptdbg_ascend.dump.session import get_session

    from ptdbg_ascend.log import logger

    if args.device_path:
        # The old module first: this checkout's editable install also answers for ptdbg_ascend.statistics
        # when --tree names a checkout from before that package.
        try:
            from ptdbg_ascend.dump import statistics as statistics_module

            statistics_module.DEFERRAL.on_cpu = True
        except ImportError:
            from ptdbg_ascend.statistics import planner

            planner.DEFAULTS.defer_cpu = True  # read by every writer built from now on

    logger.setLevel(logging.WARNING)  # one INFO line per window would flood the output
    seed_all()
    out = tempfile.mkdtemp(prefix="bench_per_call_")
    x = torch.randn(args.size, args.size)
    w = torch.randn(args.size, args.size)
    session = get_session()
    made = work(x, w, args.calls)  # warm-up, plain

    def clocks() -> tuple[float, float]:
        return time.perf_counter(), time.process_time()

    def since(start: tuple[float, float]) -> tuple[float, float]:
        now = clocks()
        return now[0] - start[0], now[1] - start[1]

    def plain() -> tuple[float, float]:
        session.unwrap()
        start = clocks()
        work(x, w, args.calls)
        return since(start)

    def legacy(mode: str):
        def run() -> tuple[tuple[float, float], int]:
            folder = tempfile.mkdtemp(dir=out)
            set_dump_path(os.path.join(folder, "bench.pkl"), dump_tag="bench")
            register_hook(torch.nn.Linear(1, 1), acc_cmp_dump)
            session.ensure_wrapped()
            set_dump_switch("ON", mode=mode, summary_only=True)
            start = clocks()
            work(x, w, args.calls)
            session.legacy.recorder.flush()
            seconds = since(start)
            set_dump_switch("OFF")
            recorded = sum(pkl_calls(path) for path in find_pkls(folder))
            session.opened_files.clear()
            return seconds, recorded
        return run

    def debugger() -> tuple[tuple[float, float], int]:
        folder = tempfile.mkdtemp(dir=out)
        dbg = PrecisionDebugger(task="statistics", level="L1", dump_path=folder)
        session.ensure_wrapped()
        start = clocks()
        dbg.start()
        work(x, w, args.calls)
        dbg.stop()
        seconds = since(start)
        return seconds, dump_json_calls(folder)

    def floor() -> tuple[tuple[float, float], int]:
        session.unwrap()
        return floor_run(x, w, args.calls), made

    tools = (("legacy", legacy("api_stack")), ("legacy_all", legacy("all")), ("debugger", debugger))
    rows = tools + (("floor", floor),)
    for _, run in rows:  # warm-up of every path (imports, first files)
        run()
    plains = []
    per_call = {name: [] for name, _ in rows}
    per_call_cpu = {name: [] for name, _ in rows}
    recorded = {}
    try:
        for _ in range(args.rounds):
            # A full collection before each row: one started by what earlier rows kept (the wrappers each row
            # installs again, above all) would land in whichever row comes next. What a front-end keeps
            # itself, which is what makes full collections come in a long run, is counted below.
            gc.collect()
            base = plain()
            plains.append(base)
            for name, run in rows:
                gc.collect()
                seconds, count = run()
                if count == 0:
                    raise RuntimeError(f"row {name}: the dump holds no recorded call")
                recorded[name] = count
                per_call[name].append((seconds[0] - base[0]) / count)
                per_call_cpu[name].append((seconds[1] - base[1]) / count)
        deferred = deferred_per_call(tools) if args.device_path else ""
        kept = kept_per_call(session, lambda: PrecisionDebugger(task="statistics", level="L1",
                                                                dump_path=tempfile.mkdtemp(dir=out)),
                             lambda calls: work(x, w, calls), args.calls)
    finally:
        shutil.rmtree(out, ignore_errors=True)
    base = statistics.median(wall for wall, _ in plains)
    base_cpu = statistics.median(cpu for _, cpu in plains)
    print(f"ptdbg_ascend from {os.path.abspath(args.tree)}")
    print("torch {}, 1 thread, {} API calls per loop on {}x{} float32, median of {} rounds{}".format(
        torch.__version__, made, args.size, args.size, args.rounds,
        ", the accelerator's path (--device-path)" if args.device_path else ""))
    print("plain loop {:.2f} ms wall, {:.2f} ms CPU ({:.1f} us wall per API call)".format(
        base * 1e3, base_cpu * 1e3, base / made * 1e6))
    results, results_cpu = {}, {}
    for name in per_call:
        results[name] = statistics.median(per_call[name])
        results_cpu[name] = statistics.median(per_call_cpu[name])
        print("{:<11} {:7.1f} us/call wall  {:7.1f} us/call CPU  ({} recorded calls; wall rounds: {})".format(
            name, results[name] * 1e6, results_cpu[name] * 1e6, recorded[name],
            " ".join(f"{v * 1e6:.1f}" for v in per_call[name])))
    for label, numbers in (("wall", results), ("CPU", results_cpu)):
        print("ratio debugger/legacy ({}): {:.2f}x (api_stack), {:.2f}x (all)".format(
            label, numbers["debugger"] / numbers["legacy"], numbers["debugger"] / numbers["legacy_all"]))
    print("ratio to the floor (CPU): legacy {:.1f}x, legacy_all {:.1f}x, debugger {:.1f}x".format(
        *(results_cpu[name] / results_cpu["floor"] for name in ("legacy", "legacy_all", "debugger"))))
    print(device_launches(args.size))
    if deferred:
        print(deferred)
    print(kept)
    return 0


def kept_per_call(session: object, make_debugger: object, loop: object, calls: int) -> str:
    """Objects the garbage collector tracks that the PrecisionDebugger keeps per recorded call until its files
    are next written (up to a second, or ``stop()``): in a long run they make Python's full collections
    come, each walking every object of the process (~0.1 s with torch imported here). Counted in one window
    of ``calls`` calls after a warm-up of 80 (the legacy front-end writes a call's lines at once, but for
    statistics waiting for a device batch of 64 tensors)."""
    debugger = make_debugger()
    session.ensure_wrapped()
    debugger.start()
    loop(80)
    gc.collect()
    before = len(gc.get_objects())
    recorded = loop(calls)
    gc.collect()
    after = len(gc.get_objects())
    debugger.stop()
    return "PrecisionDebugger, objects kept per recorded call until dump.json is next written: {:.1f}".format(
        (after - before) / recorded)


def _batch_class() -> type:
    """``DeviceStatisticsBatch`` of the measured tree (its module moved twice)."""
    # Old modules first (see main: this checkout's editable install answers for the new one in any --tree).
    for module, name in (("ptdbg_ascend.dump.device_statistics", "DeviceStatisticsBatch"),
                         ("ptdbg_ascend.dump.statistics", "DeviceStatisticsBatch"),
                         ("ptdbg_ascend.statistics.device_batch", "DeviceStatisticsBatch")):
        found = _attribute(module, name)
        if found is not None:
            return found
    raise ImportError("no DeviceStatisticsBatch in this checkout")


def _attribute(module: str, name: str) -> object:
    """``module.name``, or None when the module cannot be imported or has no such name."""
    import importlib

    try:
        return getattr(importlib.import_module(module), name, None)
    except ImportError:
        return None


def deferred_per_call(rows: tuple) -> str:
    """Tensors whose statistics each front-end queues on the device per recorded call (one run of each row,
    untimed, counting ``DeviceStatisticsBatch.enqueue``, which ``add`` and the 0-d values go through; ``add``
    in a --tree from before it): a tensor recorded as one call's output and the next call's input, unchanged,
    is reduced once when the front-end's cache serves it."""
    DeviceStatisticsBatch = _batch_class()

    method = "enqueue" if hasattr(DeviceStatisticsBatch, "enqueue") else "add"
    original = getattr(DeviceStatisticsBatch, method)
    added = [0]

    def counting(self, *args, **kwargs):
        added[0] += 1
        return original(self, *args, **kwargs)

    setattr(DeviceStatisticsBatch, method, counting)
    parts = []
    try:
        for name, run in rows:
            added[0] = 0
            _, count = run()
            parts.append(f"{name} {added[0] / count:.2f}")
    finally:
        setattr(DeviceStatisticsBatch, method, original)
    return "device path, tensors reduced on the device per recorded call: " + ", ".join(parts)


def device_launches(size: int) -> str:
    """On an accelerator the host pays per kernel launch (microseconds each), not per element: the
    operators a deferred statistics read (the accelerator path, run here on a CPU tensor) launches per
    tensor, counted with a TorchDispatchMode, for both front-ends, and per batch read back."""
    from torch.utils._python_dispatch import TorchDispatchMode

    DeviceStatisticsBatch = _batch_class()
    deferred_reductions = (_attribute("ptdbg_ascend.msprobe.leaves", "deferred_reductions")
                           or _attribute("ptdbg_ascend.statistics.device_batch", "finite_pair"))

    allocations = (torch.ops.aten.empty.memory_format, torch.ops.aten.empty_strided.default)

    class Counting(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.ops = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if not (func.is_view or func in allocations):  # a view or an allocation: no kernel
                self.ops += 1
            return func(*args, **(kwargs or {}))

    tensor = torch.randn(size, size)
    counts = []
    # A batch each, as each front-end's writer has (--tree: an older checkout's PrecisionDebugger may
    # stack each tensor's numbers, a launch more).
    for extra, stacked in ((None, False), (deferred_reductions, True)):
        try:
            batch = DeviceStatisticsBatch(stacked=stacked)
        except TypeError:  # this tree (every batch stacks once per run), or one from before stacked batches
            batch = DeviceStatisticsBatch()
        with Counting() as adding:
            for _ in range(10):
                batch.add(tensor, extra=extra)
        with Counting() as reading:
            batch.resolve()
        counts.extend([adding.ops / 10, reading.ops])
    return ("device path, operators launched per deferred float tensor (counted on CPU): legacy {:.0f}, debugger "
            "{:.0f}; per batch of 10 read back: {} and {}".format(counts[0], counts[2], counts[1], counts[3]))


if __name__ == "__main__":
    sys.exit(main())
