"""free_benchmark without a bench run: which API is fragile in bfloat16?

    python sample/free_benchmark_demo.py [--fp32] [--fix] [--dump-path ./free_benchmark_dump]

A small attention block trains in bfloat16 for 3 steps. Its softmax runs through a faulty "device kernel" that adds
up the exponentials in bfloat16 one by one (about 3 % off; a correct kernel keeps the sum in float32). With
``"task": "free_benchmark"`` and ``pert_mode`` improve_precision, every API call is run a second time on float32
inputs and compared; the softmax is the one beyond the bfloat16 standard (0.4 %), in
``{dump_path}/free_benchmark.csv`` with the line below that called it. ``--fix`` replaces its output with the
float32 run's (handler_type fix) so the loss can be watched; ``--fp32`` trains in float32, where improve_precision
has nothing to raise (the summary says so).
"""

from __future__ import annotations

import argparse
import json
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

EXACT_SOFTMAX = F.softmax


def bf16_accumulating_softmax(x, dim=None, _stacklevel=3, dtype=None):
    """Stand in for a faulty device kernel (installed by main() before ptdbg_ascend wraps F.softmax, so the tool
    sees it as the one API call it is on a device; the tests plant it too)."""
    if x.dtype != torch.bfloat16:
        return EXACT_SOFTMAX(x, dim=dim, dtype=dtype)
    exps = torch.exp(x - x.amax(dim, keepdim=True))
    total = torch.zeros_like(exps.select(dim, 0))
    for k in range(exps.shape[dim]):
        total = total + exps.select(dim, k)  # the bug: each partial sum rounded to bfloat16
    return exps / total.unsqueeze(dim)


class Attention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(32)
        self.query = nn.Linear(32, 32)
        self.head = nn.Linear(32, 4)

    def forward(self, x):
        h = self.norm(x)
        weights = F.softmax(self.query(h) @ h.transpose(-1, -2) / 5.0, dim=-1)
        return self.head(F.gelu(weights @ h))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fp32", action="store_true", help="train in float32 (nothing for improve_precision)")
    parser.add_argument("--fix", action="store_true", help="handler_type fix: the float32 run's output is used")
    parser.add_argument("--dump-path", default="./free_benchmark_dump", help="default ./free_benchmark_dump")
    args = parser.parse_args()
    F.softmax = bf16_accumulating_softmax  # the device's kernel, before the tool wraps torch
    config = {"task": "free_benchmark", "dump_path": args.dump_path,
              "free_benchmark": {"pert_mode": "improve_precision", "handler_type": "fix" if args.fix else "check"}}
    with open("free_benchmark_config.json", "w") as handle:
        json.dump(config, handle, indent=4)

    from ptdbg_ascend import PrecisionDebugger

    debugger = PrecisionDebugger(config_path="free_benchmark_config.json")
    dtype = torch.float32 if args.fp32 else torch.bfloat16
    model = Attention().to(dtype)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    for step in range(3):
        x = torch.randn(2, 64, 32, dtype=dtype)
        debugger.start()
        loss = model(x).float().pow(2).mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        debugger.stop()
        debugger.step()
        print(f"step {step}: loss {loss.item():.6f}")
    found = os.path.join(args.dump_path, "free_benchmark.csv")
    print(f"findings: {found}" if os.path.exists(found) else "findings: none")


if __name__ == "__main__":
    main()
