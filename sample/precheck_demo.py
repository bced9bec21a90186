"""API pre-check on CPU: which API computes inaccurately, and does it matter in this run?

    python sample/precheck_demo.py [--out sample/out/precheck_demo]

A small model (LayerNorm -> Linear -> GELU -> Linear, MSE loss, AdamW) whose ``F.gelu`` is *planted*:
in float32 it computes through bfloat16 (about 3 significant digits), standing in for a device kernel
with a lower internal precision. One process, one ``PrecisionDebugger(task="run_ut")``, two steps from
the same seed and weights:

- step 0: the planted gelu switched off (the reference, what a GPU run would give);
- step 1: switched on (the "NPU" run).

Then:

1. ``run_ut`` on step 1's dump.json with ``dumped_outputs=True``: every dumped API is re-run on the CPU in
   float64 (the benchmark) and its dumped outputs -- what the "device" computed, planted gelu included --
   are judged against it. It names ``Functional.gelu.0`` -- from this one dump, no second run needed. The
   same from the command line (as a user does with a dump from an NPU, on a machine without one)::

       ptdbg run-ut -api_info sample/out/precheck_demo/dump/step1/rank/dump.json -o ut_out --dumped-outputs

   Without ``--dumped-outputs`` the APIs are re-run in their dtypes on this machine's kernels, where the
   planted gelu does not exist in a new process: "No failing API" (on an NPU, that re-run is the device's).
2. ``compare`` of step 1 against step 0, and ``run_ut(..., compare_csv=...)``: the summary also says
   whether gelu's inaccuracy shows in this run (failing in the compare too, and the advisor's suspect).

Runs in a few seconds.
"""

from __future__ import annotations

import argparse
import os
import shutil

import torch

_REAL_GELU = torch.nn.functional.gelu
PLANTED = {"on": False}


def planted_gelu(input, approximate="none"):  # noqa: A002 -- the signature of torch.nn.functional.gelu
    """gelu; with PLANTED["on"], float32 inputs are computed in bfloat16 (the planted inaccuracy)."""
    if PLANTED["on"] and input.dtype == torch.float32:
        return _REAL_GELU(input.to(torch.bfloat16), approximate=approximate).to(torch.float32)
    return _REAL_GELU(input, approximate=approximate)


# Planted before the debugger wraps torch: the dump records it as Functional.gelu, and run_ut's re-run
# (which looks through the debugger's wrapper) calls it too.
torch.nn.functional.gelu = planted_gelu


class Mlp(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = torch.nn.LayerNorm(32)
        self.fc1 = torch.nn.Linear(32, 64)
        self.fc2 = torch.nn.Linear(64, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.nn.functional.gelu(self.fc1(self.norm(x))))


def train_step(debugger) -> None:
    """One step from the same seed, weights and batch every time (so two steps are two runs of it)."""
    torch.manual_seed(0)
    model = Mlp()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x, target = torch.randn(16, 32), torch.randn(16, 8)
    debugger.start()
    # a sum, not a mean: gradients of order 1, so the inaccurate gelu shows in its backward too
    loss = torch.nn.functional.mse_loss(model(x), target, reduction="sum")
    loss.backward()
    optimizer.step()
    debugger.stop()
    debugger.step()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join("sample", "out", "precheck_demo"), help="output directory")
    out = os.path.abspath(parser.parse_args().out)
    if os.path.isdir(out):
        shutil.rmtree(out)
    os.makedirs(out)

    from ptdbg_ascend import PrecisionDebugger, compare, run_ut

    debugger = PrecisionDebugger(dump_path=os.path.join(out, "dump"), task="run_ut", level="L1")
    for planted in (False, True):
        PLANTED["on"] = planted
        train_step(debugger)
    bench_json, npu_json = (os.path.join(out, "dump", f"step{step}", "rank", "dump.json") for step in (0, 1))

    print("== 1. run_ut on the NPU run's dump alone ==")
    outcome = run_ut(npu_json, os.path.join(out, "run_ut"), progress=False, dumped_outputs=True)
    print(outcome.summary())

    print("\n== 2. the same, linked to the compare of the two runs ==")
    compare_dir = os.path.join(out, "compare")
    os.makedirs(compare_dir)
    compared = compare({"npu_json_path": npu_json, "bench_json_path": bench_json, "is_print_compare_log": False},
                       compare_dir, xlsx=False)
    linked = run_ut(npu_json, os.path.join(out, "run_ut_linked"), progress=False, compare_csv=compared,
                    dumped_outputs=True)
    print(linked.summary())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
