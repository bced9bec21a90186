"""Cost of the overflow check on CPU: median step time with ``register_hook(model, overflow_check)``
against the same steps without the tool's wrappers.

    python bench/bench_overflow.py [--steps 30]

A 6 x Linear(256, 256) + GELU stack, batch 64, AdamW, one torch thread (about 120 top-level API calls
per step). Nothing overflows, so no file is written (the dump path is bench/out/overflow).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch

from ptdbg_ascend import overflow_check, register_hook, set_dump_path
from ptdbg_ascend.dump.session import get_session


class Stack(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList([torch.nn.Linear(256, 256) for _ in range(6)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = torch.nn.functional.gelu(layer(x))
        return x.pow(2).mean()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30)
    options = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = Stack()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn(64, 256)

    def step() -> None:
        loss = model(x)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    def median_ms() -> float:
        for _ in range(3):
            step()
        times = []
        for _ in range(options.steps):
            start = time.perf_counter()
            step()
            times.append(time.perf_counter() - start)
        return statistics.median(times) * 1e3

    plain = median_ms()
    set_dump_path(os.path.join(os.path.dirname(os.path.abspath(__file__)), "out", "overflow"))
    register_hook(model, overflow_check)
    session = get_session()
    before = sum(session.counters.values())
    step()
    calls = sum(session.counters.values()) - before
    checked = median_ms()
    session.unwrap()
    plain_after = median_ms()
    base = min(plain, plain_after)
    print("plain step {:.2f} ms (again after: {:.2f} ms); with overflow_check {:.2f} ms = {:.2f}x; {} calls per step, "
          "{:.0f} us per call".format(plain, plain_after, checked, checked / base, calls, (checked - base) * 1e3 / calls))


if __name__ == "__main__":
    main()
