"""Dump cost where users train: a GPT-2 + AdamW on CUDA when present (CPU otherwise), one process per row.

    python bench/device_bench.py [--sizes small|large|both] [--quick] [--steps 10] [--limit 240]
                                 [--configs plain,hooks_off,...] [--vocab 50257] [--device cuda]
                                 [--baseline OLD_CHECKOUT] [--profile]

Sizes: ``small`` 4 layers, d 256, seq 128, batch 8; ``large`` 8 layers, d 1024, seq 512, batch 8;
heads d/64, GPT-2's vocabulary (``--vocab``). The model is transformers' ``GPT2LMHeadModel`` when
transformers is installed, else a built-in GPT-like transformer of the same shape (token + position
embeddings, pre-LN blocks of causal attention and a GELU MLP, tied LM head; say which in the table).

Rows, each a fresh process that times ``--steps`` plain steps, then ``--steps`` steps with the tool on,
every step ended by a device synchronisation; the row's ratio is to the plain step of its own process:

* ``plain``            no tool (its ratio is 1 by construction: the plain step of that process)
* ``hooks_off``        ``register_hook`` done, switch OFF (wrappers installed, nothing recorded)
* ``legacy_stats``     ``set_dump_switch("ON", mode="api_stack", summary_only=True)``
* ``debugger_stats``   ``PrecisionDebugger(task="statistics", level="L1")``, start/stop/step per step
* ``legacy_tensors``   ``set_dump_switch("ON", mode="api_stack")`` (every tensor to npy)
* ``debugger_tensors`` ``PrecisionDebugger(task="tensor", level="L1")``
* ``msprobe_stats``, ``msprobe_tensors``: msprobe's own PrecisionDebugger, the same tasks, only when
  ``msprobe`` is importable (never a dependency of this project).

Host syncs per step (CUDA only): one more dumped step run under ``torch.cuda.set_sync_debug_mode("warn")``,
counting the warnings (from every thread). The tensor rows are left out at size ``large`` unless asked for
by ``--configs`` (GBs per step). On CUDA the plain row also says how long the host takes to enqueue a plain
step against the GPU time of that step (CUDA events): the host work a dump can add before the GPU waits.
``--quick``: 3 steps per phase and a 120 s limit per row. Each row is bounded
by ``--limit`` seconds (reported as ``timeout``). Output goes to a temporary directory, removed per row.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SIZES = {
    "small": dict(layers=4, d=256, seq=128, batch=8),
    "large": dict(layers=8, d=1024, seq=512, batch=8),
}
TOOL_ROWS = ("plain", "hooks_off", "legacy_stats", "debugger_stats", "legacy_tensors", "debugger_tensors")
MSPROBE_ROWS = ("msprobe_stats", "msprobe_tensors")

CHILD = r'''
import json, math, os, re, statistics, sys, time, warnings
config, size, out, device, tree = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
steps, profile = int(sys.argv[6]), sys.argv[7] == "profile"
sys.path.insert(0, tree)
import torch
if os.environ.get("PTDBG_BENCH_FUSED"):  # off: the per-tensor device path, against the fused queue (auto)
    from ptdbg_ascend.statistics import planner
    planner.DEFAULTS.fused = os.environ["PTDBG_BENCH_FUSED"]
torch.manual_seed(1234)
cuda = device.startswith("cuda")
layers, d, seq, batch, vocab = size["layers"], size["d"], size["seq"], size["batch"], size["vocab"]


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1 = torch.nn.LayerNorm(d)
        self.qkv = torch.nn.Linear(d, 3 * d)
        self.proj = torch.nn.Linear(d, d)
        self.ln_2 = torch.nn.LayerNorm(d)
        self.fc = torch.nn.Linear(d, 4 * d)
        self.fc_out = torch.nn.Linear(4 * d, d)

    def forward(self, x):
        b, t, _ = x.shape
        heads = d // 64
        q, k, v = self.qkv(self.ln_1(x)).split(d, dim=2)
        q, k, v = [z.view(b, t, heads, 64).transpose(1, 2) for z in (q, k, v)]
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(64)
        mask = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
        scores = scores.masked_fill(~mask, float("-inf"))
        attn = torch.matmul(torch.softmax(scores, dim=-1), v).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(attn)
        return x + self.fc_out(torch.nn.functional.gelu(self.fc(self.ln_2(x))))


class BuiltinGPT(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = torch.nn.Embedding(vocab, d)
        self.wpe = torch.nn.Embedding(seq, d)
        self.blocks = torch.nn.ModuleList(Block() for _ in range(layers))
        self.ln_f = torch.nn.LayerNorm(d)

    def forward(self, ids):
        x = self.wte(ids) + self.wpe(torch.arange(ids.shape[1], device=ids.device))
        for block in self.blocks:
            x = block(x)
        logits = torch.matmul(self.ln_f(x), self.wte.weight.t())
        return torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, vocab), ids[:, 1:].reshape(-1))


try:
    import transformers
    gpt2 = transformers.GPT2LMHeadModel(transformers.GPT2Config(
        n_layer=layers, n_embd=d, n_head=d // 64, n_positions=seq, vocab_size=vocab))
    model = gpt2.to(device)
    loss_of = lambda ids: model(ids, labels=ids).loss  # noqa: E731
    kind = "transformers {} GPT2LMHeadModel".format(transformers.__version__)
except ImportError:
    model = BuiltinGPT().to(device)
    loss_of = model
    kind = "built-in GPT-like transformer (transformers not installed)"
model.train()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
ids = torch.randint(0, vocab, (batch, seq), device=device)


def sync():
    if cuda:
        torch.cuda.synchronize()


def step():
    loss = loss_of(ids)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()


def timed(run, count):
    times = []
    for _ in range(count):
        start = time.perf_counter()
        run()
        sync()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


step(); sync()  # warm-up: kernels, allocator
plain = timed(step, steps)
enqueue = gpu = None  # the plain step: host time to enqueue it against the GPU time it takes (CUDA events)
if cuda and config == "plain":
    host_times, gpu_times = [], []
    for _ in range(steps):
        sync()
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        started = time.perf_counter()
        step()
        host_times.append(time.perf_counter() - started)
        end.record()
        sync()
        gpu_times.append(begin.elapsed_time(end) / 1e3)
    enqueue, gpu = statistics.median(host_times), statistics.median(gpu_times)
dumped = step
if config in ("hooks_off", "legacy_stats", "legacy_tensors"):
    from ptdbg_ascend import acc_cmp_dump, register_hook, set_dump_path, set_dump_switch
    set_dump_path(os.path.join(out, "bench.pkl"), dump_tag="bench")
    register_hook(model, acc_cmp_dump)
    if config == "legacy_stats":
        set_dump_switch("ON", mode="api_stack", summary_only=True)
    elif config == "legacy_tensors":
        set_dump_switch("ON", mode="api_stack")
elif config != "plain":
    if config.startswith("msprobe"):
        import numpy
        if not hasattr(numpy, "unicode_"):  # msprobe 1.0.4 names numpy 1's alias, gone in numpy 2
            numpy.unicode_ = numpy.str_
        from msprobe.pytorch import PrecisionDebugger
    else:
        from ptdbg_ascend import PrecisionDebugger
    task = "statistics" if config.endswith("_stats") else "tensor"
    debugger = PrecisionDebugger(task=task, dump_path=out, level="L1")

    def dumped():
        debugger.start(); step(); debugger.stop(); debugger.step()
dumped(); sync()  # the first dumped step opens files and wraps: not timed
if profile:
    import cProfile, io, pstats
    profiler = cProfile.Profile()
    profiler.enable()
tool = timed(dumped, steps)
if profile:
    profiler.disable()
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(25)
    with open(os.path.join(out, "profile.txt"), "w") as sink:
        sink.write(text.getvalue())
syncs = None
if cuda and config != "plain":
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            dumped(); sync()
        finally:
            torch.cuda.set_sync_debug_mode(0)
    syncs = sum(1 for w in caught if "synchroniz" in str(w.message))
if config in ("legacy_stats", "legacy_tensors"):
    set_dump_switch("OFF")
calls = None  # API calls recorded per step: the last complete step's dump.json (PrecisionDebugger, msprobe)
dumps = sorted((os.path.join(d, "dump.json") for d, _, names in os.walk(out) if "dump.json" in names),
               key=os.path.getmtime)
if len(dumps) > 1:
    with open(dumps[-2]) as source:
        calls = len(json.load(source).get("data", {}))
elif config.startswith("legacy_"):  # one pkl for every step: distinct call names over the dumped steps
    names = set()
    for directory, _, files in os.walk(out):
        for name in files:
            if name.endswith(".pkl"):
                with open(os.path.join(directory, name), encoding="utf-8", errors="replace") as source:
                    names.update(re.sub(r"_(input|output|stack_info).*$", "", line[2:line.find('"', 2)])
                                 for line in source if line.startswith('["'))
    calls = len(names) // (steps + 1 + (syncs is not None)) or None
print("RESULT " + json.dumps({"plain": plain, "tool": tool, "syncs": syncs, "kind": kind, "calls": calls,
                              "enqueue": enqueue, "gpu": gpu}))
'''


def run_row(config: str, size: dict, device: str, steps: int, limit: float, profile: bool = False,
            tree: str = ROOT) -> dict:
    """One fresh process for ``config``, importing ptdbg_ascend from ``tree`` (default this checkout); its
    times, or ``{"error": why}``; with ``profile`` (default off), the top of a cProfile of its timed dumped
    steps as ``"profile"``."""
    out = tempfile.mkdtemp(prefix="device_bench_")
    env = dict(os.environ, PYTHONHASHSEED="0")
    started = time.perf_counter()
    try:
        done = subprocess.run([sys.executable, "-c", CHILD, config, json.dumps(size), out, device,
                               tree, str(steps), "profile" if profile else "time"],
                              env=env, capture_output=True, text=True, timeout=limit)
        profiled = os.path.join(out, "profile.txt")
        profile_text = open(profiled).read() if os.path.exists(profiled) else None
    except subprocess.TimeoutExpired:
        return {"error": f"timeout after {limit:.0f} s"}
    finally:
        shutil.rmtree(out, ignore_errors=True)
    if done.returncode != 0:
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        return {"error": f"exit {done.returncode}: {lines[-1][:200] if lines else ''}"}
    line = [text for text in done.stdout.splitlines() if text.startswith("RESULT ")][-1]
    result = json.loads(line[len("RESULT "):])
    result["wall"] = time.perf_counter() - started
    result["profile"] = profile_text
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", choices=("small", "large", "both"), default="both", help="default both")
    parser.add_argument("--quick", action="store_true", help="3 steps per phase, 120 s per row")
    parser.add_argument("--steps", type=int, default=None, help="timed steps per phase (default 10; --quick 3)")
    parser.add_argument("--limit", type=float, default=None, help="seconds per row (default 300; --quick 120)")
    parser.add_argument("--configs", default=None,
                        help=f"comma-separated rows (default all of {', '.join(TOOL_ROWS)}; msprobe's when importable)")
    parser.add_argument("--vocab", type=int, default=50257, help="vocabulary size (default 50257, GPT-2's)")
    parser.add_argument("--device", default=None, help="device (default cuda when available, else cpu)")
    parser.add_argument("--baseline", default=None,
                        help="another checkout: each tool row runs again with it, right after this tree's (an "
                             "A/B on one machine; rows marked 'old', with new/old of the step time)")
    parser.add_argument("--profile", action="store_true",
                        help="print a cProfile of each row's timed dumped steps (its times are then not the tool's)")
    args = parser.parse_args()
    steps = args.steps if args.steps is not None else (3 if args.quick else 10)
    limit = args.limit if args.limit is not None else (120.0 if args.quick else 300.0)
    if steps < 1 or limit <= 0 or args.vocab < 2:
        parser.error(f"--steps must be >= 1, --limit > 0 and --vocab >= 2 (got {steps}, {limit}, {args.vocab})")
    device = args.device
    if device is None:
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
    has_msprobe = importlib.util.find_spec("msprobe") is not None
    if args.baseline is not None:
        if not os.path.isfile(os.path.join(args.baseline, "ptdbg_ascend", "__init__.py")):
            # (a child would import the installed package instead, and compare this tree with itself)
            parser.error(f"--baseline {args.baseline!r} has no ptdbg_ascend package")
        args.baseline = os.path.abspath(args.baseline)
    asked = args.configs.split(",") if args.configs else None
    known = TOOL_ROWS + MSPROBE_ROWS
    for name in asked or ():
        if name not in known:
            parser.error(f"--configs: unknown row {name!r} (rows: {', '.join(known)})")
    sizes = ("small", "large") if args.sizes == "both" else (args.sizes,)
    print("device {}, {} timed steps per phase, {} s limit per row, msprobe {}".format(
        device, steps, limit, "importable" if has_msprobe else "not installed (its rows left out)"))
    for size_name in sizes:
        size = dict(SIZES[size_name], vocab=args.vocab)
        rows = asked or [row for row in TOOL_ROWS + (MSPROBE_ROWS if has_msprobe else ())
                         if size_name == "small" or not row.endswith("_tensors")]
        print("\nsize {}: {layers} layers, d {d}, seq {seq}, batch {batch}, vocab {vocab}".format(size_name, **size))
        print("{:<18} {:>11} {:>11} {:>8} {:>12} {:>11} {:>9}".format(
            "row", "plain ms", "step ms", "ratio", "syncs/step", "calls/step", "us/call"))
        kind, calls_seen = None, None  # calls/step, counted in the dump; hooks_off's us/call uses the last count
        for row in rows:
            compared = args.baseline and row != "plain" and not row.startswith("msprobe")
            trees = [(row, ROOT)] + ([(row + " old", args.baseline)] if compared else [])
            ratios = []
            for label, tree in trees:
                result = run_row(row, size, device, steps, limit, args.profile, tree)
                if "error" in result:
                    print(f"{label:<18} {result['error']}")
                    continue
                kind = result["kind"]
                calls = result.get("calls")
                calls_seen = calls if calls else calls_seen
                per_call = (result["tool"] - result["plain"]) * 1e6 / calls_seen if calls_seen else None
                ratios.append(result["tool"] / result["plain"])
                print("{:<18} {:>11.2f} {:>11.2f} {:>7.2f}x {:>12} {:>11} {:>9}".format(
                    label, result["plain"] * 1e3, result["tool"] * 1e3, ratios[-1],
                    "-" if result["syncs"] is None else result["syncs"], calls or "-",
                    "-" if per_call is None or row == "plain" else f"{per_call:.1f}"))
                if result.get("enqueue") is not None:  # how much host work can hide behind the GPU
                    print("{:<18} host enqueues the plain step in {:.2f} ms of its {:.2f} ms on the GPU "
                          "({:.0f} %)".format("", result["enqueue"] * 1e3, result["gpu"] * 1e3,
                                              100 * result["enqueue"] / result["gpu"]))
                if result.get("profile"):
                    print(result["profile"])
                sys.stdout.flush()
            if len(ratios) == 2:
                print(f"{'':<18} new/old {ratios[0] / ratios[1]:.2f} (ratios to each process's plain step)")
            sys.stdout.flush()
        if kind:
            print(f"model: {kind}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
