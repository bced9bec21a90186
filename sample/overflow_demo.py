"""Overflow check on CPU: a small model trains until one step blows up, and the tool says where.

    python sample/overflow_demo.py [--out sample/out/overflow_demo] [--overflow-nums 3] [--bad-step 3]

A linear layer followed by ``torch.exp``, trained with SGD. At step ``--bad-step`` the input batch is
scaled by 1000 (think: a corrupt sample), ``exp`` overflows to inf, and the overflow check dumps each
overflowing API call to ``Overflow_info_{timestamp}_{k}.pkl`` + npy directory. At the
``--overflow-nums``-th overflow training stops with ``ValueError: [overflow k times]: ...``; the demo
catches it, lists the files and prints the first one (stack line first, then the records).
"""

from __future__ import annotations

import argparse
import json
import os

import torch

from ptdbg_ascend import *  # noqa: F401,F403  (the legacy API, as the user guide writes it)


class ExpHead(torch.nn.Module):
    """linear -> exp -> mean: ``Torch_exp_{step}_forward`` overflows on a large input."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.exp(self.fc(x)).mean()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join("sample", "out", "overflow_demo"), help="dump directory")
    parser.add_argument("--overflow-nums", type=int, default=3, help="stop at this overflow (-1: never)")
    parser.add_argument("--bad-step", type=int, default=3, help="the step whose input is scaled by 1000")
    parser.add_argument("--steps", type=int, default=6)
    options = parser.parse_args()

    seed_all()
    model = ExpHead()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    set_dump_path(os.path.join(options.out, "overflow.pkl"), dump_tag="overflow")
    register_hook(model, overflow_check, overflow_nums=options.overflow_nums)
    try:
        for step in range(options.steps):
            x = torch.randn(4, 8) * (1000.0 if step == options.bad_step else 1.0)
            loss = model(x)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            print(f"step {step}: loss {loss.item():.4f}")
    except ValueError as error:
        print(f"training stopped: {error}")
    rank_dir = os.path.join(options.out, "overflow_v1.0", "rank0")
    pkls = sorted(name for name in os.listdir(rank_dir) if name.endswith(".pkl")) if os.path.isdir(rank_dir) else []
    print(f"\n{len(pkls)} overflow dump(s) in {rank_dir}:")
    for name in pkls:
        print(f"  {name}  ({len(os.listdir(os.path.join(rank_dir, name[:-4])))} npy)")
    if pkls:
        first = sorted(pkls, key=lambda name: int(name[:-4].rsplit("_", 1)[1]))[0]
        print(f"\n{first} (one JSON array per line; statistics are [max, min, mean, l2norm]):")
        with open(os.path.join(rank_dir, first), encoding="utf-8") as handle:
            for line in handle:
                record = json.loads(line)
                if record[0].endswith("_stack_info"):
                    print(f"  {record[0]}: innermost frame {record[1][0][:3]}")
                else:
                    print(f"  {record}")

if __name__ == "__main__":
    main()
