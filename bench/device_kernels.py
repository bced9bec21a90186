"""What a dumped tensor's statistics cost the training thread, as launched today and fused (CUDA when present).

    python bench/device_kernels.py [--device cuda] [--rounds 7] [--no-compile]

On an accelerator the training thread pays for every kernel it launches, whatever the kernel's size: issue
20's device runs put the statistics modes' extra time at ~14 us of host time per launch (cProfile), and the
large model records 2,285 tensors a step. This measures, per tensor of a fixed mix shaped like that model's
(activations, attention scores, weights, biases, a transposed view, bfloat16), three designs:

* ``legacy``   the deferred statistics as the legacy pkl launches them (``statistics/device_batch.device_reductions``):
               aminmax, sum, vector_norm, 3 launches;
* ``debugger`` those plus msprobe's finite extremes (``statistics/device_batch.finite_pair``): 7 launches;
* ``fused``    ``debugger``'s functions under one ``torch.compile`` (dynamic shapes, whole graph): inductor
               fuses the reductions into as few kernels as it can (one when they share a loop). The candidate
               design, not used by the tools: this row says whether its call costs the host less than the
               launches it replaces. Dynamo still compiles a graph per rank, layout and dtype (6 for this mix,
               ~1 s each on the CPU; a flattened view passed in does not help: it guards on the view's base),
               so a real model would need more.
* ``triton``   the whole mix in one fused pass (``statistics/fused_triton``: one chunk launch over a table of
               tensor pointers, one finalize launch, one read-back), where triton imports: the design the
               device batch is to take. Its host time per tensor is the batch's launches (and the pointer
               table's upload) over the mix's tensors; its numbers are the format's, compared like ``fused``'s.
               Under ``TRITON_INTERPRET=1`` on the CPU it runs in the interpreter: a check of the numbers, not
               a timing.

Then the dump path itself, through ``statistics/planner.StatisticsPlanner`` with msprobe's rules (what a
PrecisionDebugger statistics dump runs per tensor): ``path_off`` the per-tensor launches (``fused="off"``),
``path_queue`` the fused queue (``fused="auto"`` on CUDA; ``"emulated"`` on the CPU, where its launch is the numpy
emulator: a check, not a timing); host time = every tensor queued and the batch launched, device time = read back,
and the queue's numbers against the per-tensor path's.

Per row: host us per tensor (the enqueue loop only, the device drained before each round), device us per
tensor (the round synchronised), median of ``--rounds``; then the largest relative difference of each fused
number from the eager one. On the CPU every launch runs at once, so host time there includes the arithmetic:
the rows only show that the script works; the smaller mix keeps it short.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from typing import Any, Callable, Dict, List

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import torch  # noqa: E402

from ptdbg_ascend.statistics.device_batch import device_reductions, finite_pair  # noqa: E402
from ptdbg_ascend.statistics.eager import torch_types  # noqa: E402
from ptdbg_ascend.statistics import fused_plan, fused_triton  # noqa: E402

NAMES = ("max", "min", "sum", "norm", "finite max", "finite min")


def tensor_mix(device: str, d: int, seq: int, batch: int) -> List[Any]:
    """One of each kind of tensor a GPT-2 step with width ``d`` records (the large model: d 1024, seq 512)."""
    heads = max(1, d // 64)
    shapes = [(batch, seq, d), (batch, seq, 4 * d), (batch, heads, seq, seq), (d, d), (4 * d, d), (d,), (4 * d,)]
    mix = [torch.randn(*shape, device=device) for shape in shapes]
    mix.append(torch.randn(4 * d, d, device=device).t())  # a transposed view: not contiguous
    mix.append(torch.randn(batch, seq, d, device=device).to(torch.bfloat16))
    mix[2][0, 0, 0, 1:] = float("-inf")  # a masked attention score row: the finite extremes matter
    return mix


def legacy_launches(tensor: Any) -> List[Any]:
    high, low, total, norm, _ = device_reductions(tensor, torch_types())
    return [high, low, total, norm]


def debugger_launches(tensor: Any) -> List[Any]:
    return legacy_launches(tensor) + finite_pair(tensor)


def fused_six(tensor: Any) -> Any:
    """The six numbers of ``debugger_launches`` as one float32 vector: the tools' own functions, traced whole
    (``fullgraph``: a graph break would split the kernel and raise instead), so the fused kernel computes what
    they compute."""
    return torch.stack([part.float() for part in debugger_launches(tensor.reshape(-1))])


def fused_launches(compiled: Callable[[Any], Any]) -> Callable[[Any], List[Any]]:
    def launch(tensor: Any) -> List[Any]:
        return [compiled(tensor)]
    return launch


def print_row(row: str, timing: Dict[str, float]) -> None:
    print(f"{row:<9} {timing['host']:>16.1f} {timing['device']:>18.1f}")


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def measure(launch: Callable[[Any], List[Any]], mix: List[Any], device: str, rounds: int) -> Dict[str, float]:
    """Median host and synchronised microseconds per tensor over ``rounds`` passes over ``mix``."""
    host, total = [], []
    for round_index in range(rounds + 1):
        sync(device)
        start = time.perf_counter()
        results = [launch(tensor) for tensor in mix]
        enqueued = time.perf_counter()
        sync(device)
        done = time.perf_counter()
        del results
        if round_index:  # the first pass warms the allocator (and compiles)
            host.append((enqueued - start) / len(mix) * 1e6)
            total.append((done - start) / len(mix) * 1e6)
    return {"host": statistics.median(host), "device": statistics.median(total)}


def compare(mix: List[Any], fused: Callable[[Any], List[Any]]) -> List[float]:
    """Largest relative difference per statistic, fused against the tools' eager launches."""
    worst = [0.0] * len(NAMES)
    for tensor in mix:
        eager = [float(value) for value in debugger_launches(tensor)]
        compiled = fused(tensor)[0].tolist()
        for index, (want, got) in enumerate(zip(eager, compiled)):
            if got == want or (want != want and got != got):  # the same number, infinities and NaN included
                continue
            worst[index] = max(worst[index], abs(got - want) / max(abs(want), 1e-30))  # inf: one is infinite
    return worst


def triton_row(mix: List[Any], device: str, rounds: int) -> int:
    """The ``triton`` row: the mix as one fused batch (launches only, then the read-back), and its numbers
    against the eager launches'. Returns 1 when the kernels fail on this device."""
    if not fused_triton.available():
        print(f"triton: skipped, triton does not import ({fused_triton.IMPORT_ERROR})")
        return 0
    if device == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
        print("triton: skipped on the CPU without TRITON_INTERPRET=1 (the kernels need a GPU or the interpreter)")
        return 0
    accepted = [tensor for tensor in mix if fused_plan.accepts(tensor)]
    try:
        numbers = fused_triton.fused_statistics(accepted, fused_plan.MSPROBE)  # (the first call compiles)
    except Exception as error:  # noqa: BLE001 - a device without a working triton: say so, the rows above stand
        print(f"triton: the fused pass failed on {device}: {type(error).__name__}: {str(error).splitlines()[0]}")
        return 1
    host, total = [], []
    for _ in range(rounds):
        sync(device)
        start = time.perf_counter()
        finals = fused_triton.fused_finals(fused_plan.Plan(accepted, fused_plan.MSPROBE))
        enqueued = time.perf_counter()
        finals.tolist()
        done = time.perf_counter()
        host.append((enqueued - start) / len(accepted) * 1e6)
        total.append((done - start) / len(accepted) * 1e6)
    print_row("triton", {"host": statistics.median(host), "device": statistics.median(total)})
    worst = [0.0] * len(NAMES)
    for tensor, got in zip(accepted, numbers):
        eager = [float(value) for value in debugger_launches(tensor)]
        # The record's Mean back to a sum; a record without the finite pair has finite Max and Min (its pair).
        fused = [got[0], got[1], got[2] * tensor.numel(), got[3]] + (got[4:6] if len(got) > 4 else got[:2])
        for index, (want, value) in enumerate(zip(eager, fused)):
            if value == want or (want != want and value != value):
                continue
            worst[index] = max(worst[index], abs(value - want) / max(abs(want), 1e-30))
    print("triton vs eager, largest relative difference: " + ", ".join(
        f"{label} {value:.1e}" for label, value in zip(NAMES, worst)))
    return 0


def path_rows(mix: List[Any], device: str, rounds: int) -> None:
    """The ``path_off`` and ``path_queue`` rows (the module docstring) and the queue's numbers against the
    per-tensor path's."""
    from ptdbg_ascend.statistics.planner import StatisticsPlanner
    from ptdbg_ascend.statistics.rules import MSPROBE

    results = {}
    for row, fused in (("path_off", "off"), ("path_queue", "auto" if device.startswith("cuda") else "emulated")):
        host, total = [], []
        for round_index in range(rounds + 1):
            planner = StatisticsPlanner(MSPROBE, defer_cpu=True, fused=fused)
            sync(device)
            start = time.perf_counter()
            pending = [planner.device(tensor) for tensor in mix]
            planner.batch.launch()
            enqueued = time.perf_counter()
            planner.batch.resolve()
            done = time.perf_counter()
            if round_index:
                host.append((enqueued - start) / len(mix) * 1e6)
                total.append((done - start) / len(mix) * 1e6)
        results[row] = [list(item) for item in pending]
        print_row(row, {"host": statistics.median(host), "device": statistics.median(total)})
    worst = [0.0] * 6
    for want_row, got_row in zip(results["path_off"], results["path_queue"]):
        for index, (want, got) in enumerate(zip(want_row, got_row)):
            if got == want or want is None or got is None or (want != want and got != got):
                continue
            worst[index] = max(worst[index], abs(got - want) / max(abs(want), 1e-30))
    print("path_queue vs path_off, largest relative difference: " + ", ".join(
        f"{label} {value:.1e}" for label, value in zip(("max", "min", "mean", "norm", "max_except", "min_except"),
                                                       worst)))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--rounds", type=int, default=7, help="timed passes over the mix (default 7)")
    parser.add_argument("--no-compile", action="store_true", help="leave out the fused row (no torch.compile)")
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error(f"--rounds must be at least 1, got {args.rounds}")
    torch.manual_seed(0)
    on_cpu = args.device == "cpu"
    d, seq, batch = (256, 128, 2) if on_cpu else (1024, 512, 8)
    mix = tensor_mix(args.device, d, seq, batch)
    name = torch.cuda.get_device_name(0) if args.device.startswith("cuda") else "CPU"
    print("torch {} on {}; {} tensors (GPT-2 width {}, seq {}, batch {}), median of {} rounds".format(
        torch.__version__, name, len(mix), d, seq, batch, args.rounds))
    print(f"{'row':<9} {'host us/tensor':>16} {'device us/tensor':>18}")
    for row, launch in (("legacy", legacy_launches), ("debugger", debugger_launches)):
        print_row(row, measure(launch, mix, args.device, args.rounds))
    if on_cpu:
        print("(CPU: every launch runs at once, host time includes the arithmetic; run on a GPU for the answer)")
    status = triton_row(mix, args.device, args.rounds)
    path_rows(mix, args.device, args.rounds)
    if args.no_compile:
        return status
    started = time.perf_counter()
    fused = fused_launches(torch.compile(fused_six, dynamic=True, fullgraph=True))
    try:
        for tensor in mix:
            fused(tensor)
        sync(args.device)
    except Exception as error:  # noqa: BLE001 - a device image without a working compiler: say so, rows above stand
        print("fused: torch.compile failed on {}: {}: {}".format(args.device, type(error).__name__,
                                                               str(error).splitlines()[0] if str(error) else ""))
        return 1
    compile_seconds = time.perf_counter() - started
    print_row("fused", measure(fused, mix, args.device, args.rounds))
    print("fused: compiled for the mix in {:.1f} s, {} graphs".format(
        compile_seconds, torch._dynamo.utils.counters["stats"]["unique_graphs"]))
    worst = compare(mix, fused)
    print("fused vs eager, largest relative difference: " + ", ".join(
        f"{label} {value:.1e}" for label, value in zip(NAMES, worst)))
    return status


if __name__ == "__main__":
    sys.exit(main())
