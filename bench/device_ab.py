"""Dumps of this tree against another checkout on the current device (CUDA when present, else CPU):
the files must be the same, byte for byte, and the step times are printed side by side.

    python bench/device_ab.py --baseline /path/to/old/checkout [--steps 6] [--device cuda]

What a redesign must not change is what lands on disk, on the device users train on. For each tree and each
configuration a fresh process seeds everything, builds bench_dump.py's reference model (a CNN stem, a
transformer block, a classifier; AdamW) on the device with deterministic kernels, runs two plain steps, then
``--steps`` steps with the tool on:

* ``legacy_stats``   legacy calls, ``set_dump_switch("ON", mode="api_stack", summary_only=True)``
* ``legacy_tensors`` legacy calls, ``mode="all"`` with npy files
* ``debugger_stats`` ``PrecisionDebugger(task="statistics", level="L1")``, start/stop/step per step
* ``debugger_tensors`` ``PrecisionDebugger(task="tensor", level="L1")``

Then the two trees' output directories are compared file by file (names and bytes; ``.pt`` files by their
tensors). Times are medians of the timed steps, each ended by a device synchronisation, as ratios to the plain
step of the same process.
Exit status 1 when any file differs or this tree's run fails (a failing baseline is reported, not fatal).
"""

from __future__ import annotations

import argparse
import filecmp
import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
CONFIGS = ("legacy_stats", "legacy_tensors", "debugger_stats", "debugger_tensors")

CHILD = r'''
import json, os, statistics, sys, time
tree, config, out, device, bench = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[5], sys.argv[6]
steps = int(sys.argv[4])
sys.path[:0] = [tree, bench]  # the model of this script's bench_dump.py for both trees: same code lines in stacks
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
import torch
torch.use_deterministic_algorithms(True, warn_only=True)
torch.backends.cudnn.benchmark = False
import bench_dump as b
from ptdbg_ascend import PrecisionDebugger, acc_cmp_dump, register_hook, seed_all, set_dump_path, set_dump_switch
seed_all(1234)
model = b.Reference().to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
x = torch.randn(16, 3, 32, 32).to(device)
y = torch.randint(0, 10, (16,)).to(device)
def sync():
    if device.startswith("cuda"):
        torch.cuda.synchronize()
def step():
    loss = torch.nn.functional.cross_entropy(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
def timed(run):
    start = time.perf_counter(); run(); sync(); return time.perf_counter() - start
plain = [timed(step) for _ in range(3)][1:]
tool = []
if config.startswith("legacy"):
    set_dump_path(os.path.join(out, "ab.pkl"), dump_tag="ab")
    register_hook(model, acc_cmp_dump)
    if config == "legacy_stats":
        set_dump_switch("ON", mode="api_stack", summary_only=True)
    else:
        set_dump_switch("ON", mode="all")
    tool = [timed(step) for _ in range(steps)]
    set_dump_switch("OFF")
else:
    debugger = PrecisionDebugger(task="statistics" if config == "debugger_stats" else "tensor",
                                 dump_path=out, level="L1")
    def dumped_step():
        debugger.start(); step(); debugger.stop(); debugger.step()
    tool = [timed(dumped_step) for _ in range(steps)]
sync()
print("RESULT " + json.dumps({"plain": statistics.median(plain), "tool": statistics.median(tool)}))
'''


def run_child(tree: str, config: str, out: str, steps: int, device: str) -> dict:
    """One fresh process of ``tree`` dumping ``config`` into ``out``; its step times, or ``{"error": last line
    of its output}`` when it failed."""
    env = dict(os.environ, PYTHONPATH=tree, PYTHONHASHSEED="0")
    done = subprocess.run([sys.executable, "-c", CHILD, tree, config, out, str(steps), device, HERE], env=env,
                          capture_output=True, text=True)
    if done.returncode != 0:
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        return {"error": f"exit {done.returncode}: {lines[-1] if lines else ''}"}
    line = [text for text in done.stdout.splitlines() if text.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT "):])


def relative_files(root: str) -> list:
    found = []
    for directory, _, names in os.walk(root):
        found.extend(os.path.relpath(os.path.join(directory, name), root) for name in names)
    return sorted(found)


def first_difference(left: str, right: str) -> str:
    """A short description of where two text files part (binary files: their sizes)."""
    try:
        with open(left, encoding="utf-8") as a, open(right, encoding="utf-8") as b:
            for number, (line_a, line_b) in enumerate(zip(a, b), 1):
                if line_a != line_b:
                    return f"line {number}: {line_a[:160]!r} != {line_b[:160]!r}"
        return "one file is longer"
    except UnicodeDecodeError:
        return f"{os.path.getsize(left)} bytes != {os.path.getsize(right)} bytes"


def same_tensor_file(left: str, right: str) -> bool:
    """Two ``.pt`` files holding equal tensors (dtype, shape, values; NaN equal to NaN): since this tree's
    files of accelerator tensors hold their host copies (``sinks/host_copies.py``), the device a file names
    may differ from an older tree's, and with it the bytes."""
    if not left.endswith(".pt"):
        return False
    import torch

    a = torch.load(left, map_location="cpu", weights_only=True)
    b = torch.load(right, map_location="cpu", weights_only=True)
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    return bool(torch.equal(a, b) or (a.is_floating_point() and torch.allclose(a.double(), b.double(), rtol=0, atol=0,
                                                                               equal_nan=True)))


def compare_trees(new_out: str, old_out: str) -> list:
    """Differences between two output directories: missing files and files whose bytes differ (``.pt`` files:
    whose tensors differ)."""
    new_files, old_files = relative_files(new_out), relative_files(old_out)
    problems = ["only in new: " + name for name in sorted(set(new_files) - set(old_files))]
    problems += ["only in old: " + name for name in sorted(set(old_files) - set(new_files))]
    for name in sorted(set(new_files) & set(old_files)):
        left, right = os.path.join(new_out, name), os.path.join(old_out, name)
        if not filecmp.cmp(left, right, shallow=False) and not same_tensor_file(left, right):
            problems.append(f"differs: {name} ({first_difference(left, right)})")
    return problems, len(new_files)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", required=True, help="the old checkout (a git worktree of an earlier commit)")
    parser.add_argument("--steps", type=int, default=6, help="dumped steps per configuration (default 6)")
    parser.add_argument("--device", default=None, help="device (default cuda when available, else cpu)")
    parser.add_argument("--configs", default=",".join(CONFIGS), help="comma-separated subset of " + ", ".join(CONFIGS))
    args = parser.parse_args()
    if not os.path.isfile(os.path.join(args.baseline, "ptdbg_ascend", "__init__.py")):
        # (a child would import the installed package instead, and compare this tree with itself)
        parser.error(f"--baseline {args.baseline!r} has no ptdbg_ascend package")
    device = args.device
    if device is None:
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
    new_tree, old_tree = os.path.dirname(HERE), os.path.abspath(args.baseline)
    work = tempfile.mkdtemp(prefix="device_ab_")
    failed = False
    print(f"device {device}, {args.steps} dumped steps; ratios to a plain step of the same process")
    print(f"{'configuration':<18} {'new':>10} {'old':>10} {'new/old':>9}  files")
    try:
        for config in args.configs.split(","):
            outs = {tree: os.path.join(work, label, config) for label, tree in (("new", new_tree), ("old", old_tree))}
            times = {}
            for tree in (new_tree, old_tree):
                # both trees write to the same path (dump.json records its own directory), then it moves aside
                shared = os.path.join(work, "dump", config)
                times[tree] = run_child(tree, config, shared, args.steps, device)
                os.makedirs(shared, exist_ok=True)
                os.makedirs(os.path.dirname(outs[tree]), exist_ok=True)
                os.rename(shared, outs[tree])
            errors = {label: times[tree].get("error") for label, tree in (("new", new_tree), ("old", old_tree))}
            if any(errors.values()):
                failed = failed or bool(errors["new"])
                print("{:<18} {}".format(config, "; ".join(f"{label} failed ({error})"
                                                            for label, error in errors.items() if error)))
                continue
            ratio = {tree: times[tree]["tool"] / times[tree]["plain"] for tree in times}
            problems, count = compare_trees(outs[new_tree], outs[old_tree])
            failed = failed or bool(problems) or count == 0
            verdict = (f"{count} identical" if not problems and count
                       else f"{len(problems)} of {count} differ")
            print("{:<18} {:>9.2f}x {:>9.2f}x {:>9.2f}  {}".format(
                config, ratio[new_tree], ratio[old_tree], ratio[new_tree] / ratio[old_tree], verdict))
            for problem in problems[:10]:
                print("    " + problem)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
