"""Benchmark of ``compare`` as a dump grows: writes legacy pkl dump pairs of 10^4, 10^5 and 10^6 tensor rows
(a transformer layer's forward and backward calls, repeated; statistics only, with stack lines) under
bench/out/scale/, compares each pair in a fresh process with the default reports (csv, xlsx, advisor, html,
stack_mode) and prints rows/s and the child's peak RSS per size, then the ratios measured in this run: time
per row at the largest size over the smallest, and peak RSS at the largest over the next one.

    python3 bench/bench_compare_scale.py                      # 10^4, 10^5, 10^6 rows (the last takes minutes)
    python3 bench/bench_compare_scale.py --sizes 10000 100000
    python3 bench/bench_compare_scale.py --npy                # also a 10^4-row pair with small .npy tensors

The dumps are deleted afterwards unless --keep is given (the CSVs of a kept run can be diffed across checkouts).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from typing import List, Optional, Tuple

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "out", "scale")
TREE = os.path.dirname(HERE)

# One transformer layer's forward calls: (API, inputs); each has one output. Backward runs them in reverse.
LAYER = (("Functional_layer_norm", 3), ("Functional_linear", 3), ("Functional_linear", 3), ("Functional_linear", 3),
         ("Torch_matmul", 2), ("Functional_softmax", 1), ("Functional_dropout", 1), ("Torch_matmul", 2),
         ("Functional_linear", 3), ("Tensor___add__", 2), ("Functional_layer_norm", 3), ("Functional_linear", 3),
         ("Functional_gelu", 1), ("Functional_linear", 3), ("Tensor___add__", 2))
FRAMES = ('["/home/user/model/layers.py", "{line}", "forward", "x = self.{api}(x)"], '
          '["/usr/lib/python3/site-packages/torch/nn/modules/module.py", "1518", "_call_impl", '
          '"return forward_call(*args, **kwargs)"]')


def _stats(rng: np.random.RandomState, count: int) -> np.ndarray:
    """``count`` rows of (max, min, mean, norm)."""
    return rng.standard_normal((count, 4)) * 0.5 + np.array([2.0, -2.0, 0.0, 30.0])


def write_pkl(path: str, rows: int, noise: float, planted: int) -> int:
    """A legacy pkl of about ``rows`` tensor rows; the NPU side (``noise`` > 0) has its statistics moved by
    ``noise`` and one row, the ``planted``-th, off by 10 %. Returns the tensor rows written."""
    counters: dict = {}
    lines: List[str] = []
    calls: List[Tuple[str, int]] = []
    written = 0
    stats = _stats(np.random.RandomState(0), rows + 64)
    if noise:
        stats = stats * (1.0 + np.random.RandomState(1).standard_normal(stats.shape) * noise)
    texts = [f"[{a!r}, {b!r}, {c!r}, {d!r}]" for a, b, c, d in stats.tolist()]
    with open(path, "w") as handle:
        while written < rows:
            calls.clear()
            for api, inputs in LAYER:  # forward
                counter = counters.get(api, 0)
                counters[api] = counter + 1
                call = f"{api}_{counter}_forward"
                calls.append((f"{api}_{counter}_backward", inputs))
                lines.append('["%s_stack_info", [%s]]\n' % (call, FRAMES.format(line=100 + len(calls), api=api)))
                for index in range(inputs):
                    shape = "[8, 512, 1024]" if index == 0 else "[1024, 1024]"
                    lines.append(f'["{call}_input.{index}", 0, [], "torch.float16", {shape}, '
                                 f'{_planted(texts, written, planted)}]\n')
                    written += 1
                lines.append(f'["{call}_output", 0, [], "torch.float16", [8, 512, 1024], '
                             f'{_planted(texts, written, planted)}]\n')
                written += 1
            for call, inputs in reversed(calls):  # backward: grad_output in, grad_input out
                lines.append(f'["{call}_input.0", 0, [], "torch.float16", [8, 512, 1024], '
                             f'{_planted(texts, written, planted)}]\n')
                written += 1
                for index in range(inputs):
                    lines.append(f'["{call}_output.{index}", 0, [], "torch.float16", [8, 512, 1024], '
                                 f'{_planted(texts, written, planted)}]\n')
                    written += 1
            handle.writelines(lines)
            lines.clear()
    return written


def _planted(texts: List[str], row: int, planted: int) -> str:
    if row != planted or planted < 0:
        return texts[row]
    return "[" + ", ".join(repr(float(value) * 1.1) for value in texts[row][1:-1].split(", ")) + "]"


def write_npy_dir(pkl: str, data_dir: str, seed: int) -> None:
    """A small float32 .npy (16 values) for every tensor line of ``pkl``, the same data on both sides but
    for ``seed`` (0: none)."""
    os.makedirs(data_dir, exist_ok=True)
    rng = np.random.RandomState(0)
    noise = np.random.RandomState(seed)
    with open(pkl) as handle:
        for line in handle:
            name = line[2:line.index('"', 2)]
            if name.endswith("_stack_info"):
                continue
            array = rng.standard_normal(16).astype(np.float32)
            if seed:
                array += noise.standard_normal(16).astype(np.float32) * 1e-4
            np.save(os.path.join(data_dir, name + ".npy"), array)


def timed_compare(npu: str, bench: str, output: str, npy: bool, code_dir: str) -> Tuple[float, float]:
    """Wall seconds (process start included) and the child's peak RSS in MB of one compare."""
    data = (f", 'npu_dump_data_dir': {npu[:-4]!r}, 'bench_dump_data_dir': {bench[:-4]!r}" if npy else "")
    code = ("from ptdbg_ascend import compare\n"
            f"compare({{'npu_pkl_path': {npu!r}, 'bench_pkl_path': {bench!r}, 'is_print_compare_log': False"
            f"{data}}}, {output!r}, stack_mode=True)\n")
    env = dict(os.environ)
    env["PYTHONPATH"] = code_dir + os.pathsep + env.get("PYTHONPATH", "")
    log = os.path.join(os.path.dirname(output), "compare.log")
    start = time.perf_counter()
    with open(log, "wb") as handle:  # cwd: `python -c` puts the current directory ahead of PYTHONPATH
        child = subprocess.Popen([sys.executable, "-c", code], stdout=handle, stderr=subprocess.STDOUT, env=env,
                                 cwd=output)
        _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - start
    if status != 0:
        with open(log, "rb") as handle:
            tail = handle.read()[-3000:].decode("utf-8", "replace")
        raise SystemExit(f"compare of {npu} failed (wait status {status}):\n{tail}\nthe code:\n{code}")
    return wall, usage.ru_maxrss / 1024.0


def case(rows: int, npy: bool, code_dir: str, keep: bool) -> Tuple[int, float, float]:
    label = f"{rows}{'_npy' if npy else ''}"
    root = os.path.join(OUT, label)
    shutil.rmtree(root, ignore_errors=True)
    output = os.path.join(root, "output")
    os.makedirs(output)
    npu, bench = os.path.join(root, "npu_dump.pkl"), os.path.join(root, "bench_dump.pkl")
    start = time.perf_counter()
    written = write_pkl(npu, rows, 1e-6, rows // 2)
    write_pkl(bench, rows, 0.0, -1)
    if npy:
        write_npy_dir(npu, npu[:-4], 1)
        write_npy_dir(bench, bench[:-4], 0)
    made = time.perf_counter() - start
    wall, peak = timed_compare(npu, bench, output, npy, code_dir)
    print("{:>9} rows{}: pkl {:.0f} MB a side (written in {:.1f} s); compare {:.1f} s, {:,.0f} rows/s, "
          "{:.1f} us/row; peak RSS {:.0f} MB".format(written, " + npy" if npy else "", os.path.getsize(npu) / 1e6,
                                                    made, wall, written / wall, wall / written * 1e6, peak),
          flush=True)
    if not keep:
        shutil.rmtree(root, ignore_errors=True)
    return written, wall, peak


def main(argv: Optional[List[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000],
                        help="tensor rows of each pair (default: 10000 100000 1000000)")
    parser.add_argument("--npy", action="store_true", help="also a 10^4-row pair with a .npy file per tensor")
    parser.add_argument("--code", default=TREE, metavar="DIR",
                        help="the checkout whose ptdbg_ascend is timed (default: this one)")
    parser.add_argument("--keep", action="store_true", help="keep the dumps and reports under bench/out/scale/")
    args = parser.parse_args(argv)
    results = [case(rows, False, args.code, args.keep) for rows in sorted(args.sizes)]
    if args.npy:
        case(10_000, True, args.code, args.keep)
    if len(results) >= 2:
        (small, small_wall, _), (_, _, before_peak), (large, large_wall, large_peak) = \
            results[0], results[-2], results[-1]
        print("time per row at {} / at {} rows: {:.2f}; peak RSS at {} / at {} rows: {:.2f}".format(
            large, small, (large_wall / large) / (small_wall / small), large, results[-2][0],
            large_peak / before_peak))


if __name__ == "__main__":
    main()
