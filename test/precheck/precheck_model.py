"""The reference model of the pre-check tests, dumped with ``PrecisionDebugger(level="L1")``.

A transformer block (LayerNorm, attention with softmax and dropout, GELU MLP) and a small CNN (conv2d,
batch_norm, relu, max_pool2d, linear, cross_entropy), one AdamW step. Run as a script it writes one dump:

    python precheck_model.py DUMP_PATH TASK [--planted]

``--planted`` replaces ``torch.nn.functional.gelu`` with :func:`planted_gelu` (float32 computed through
bfloat16: inaccurate by design, exact in float64) before the debugger wraps the APIs, so the dump records
the inaccurate gelu; the tests re-run with the same replacement active.
"""

from __future__ import annotations

import sys

import torch

_REAL_GELU = torch.nn.functional.gelu


def planted_gelu(input, approximate="none"):  # noqa: A002 -- the signature of torch.nn.functional.gelu
    """gelu with float32 inputs computed in bfloat16 (about 3 significant digits); float64 exact."""
    if input.dtype == torch.float32:
        return _REAL_GELU(input.to(torch.bfloat16), approximate=approximate).to(torch.float32)
    return _REAL_GELU(input, approximate=approximate)


class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.ln1 = torch.nn.LayerNorm(16)
        self.qkv = torch.nn.Linear(16, 48)
        self.proj = torch.nn.Linear(16, 16)
        self.ln2 = torch.nn.LayerNorm(16)
        self.ff1 = torch.nn.Linear(16, 32)
        self.ff2 = torch.nn.Linear(32, 16)

    def forward(self, x):
        q, k, v = self.qkv(self.ln1(x)).chunk(3, dim=-1)
        attention = torch.softmax(torch.matmul(q, k.transpose(-2, -1)) / 4.0, dim=-1)
        attention = torch.nn.functional.dropout(attention, p=0.1, training=self.training)
        x = x + self.proj(torch.matmul(attention, v))
        return x + self.ff2(torch.nn.functional.gelu(self.ff1(self.ln2(x))))


class SmallCNN(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3)
        self.bn = torch.nn.BatchNorm2d(4)
        self.fc = torch.nn.Linear(4 * 3 * 3, 5)

    def forward(self, x):
        x = torch.nn.functional.max_pool2d(torch.relu(self.bn(self.conv(x))), 2)
        return self.fc(x.flatten(1))


def train_one_step(dump_path: str, task: str) -> None:
    from ptdbg_ascend import PrecisionDebugger

    torch.manual_seed(0)
    block, cnn = Block(), SmallCNN()
    optimizer = torch.optim.AdamW(list(block.parameters()) + list(cnn.parameters()), lr=1e-3)
    debugger = PrecisionDebugger(dump_path=dump_path, task=task, level="L1")
    x = torch.randn(2, 5, 16)
    image = torch.randn(2, 3, 8, 8)
    target = torch.tensor([1, 3])
    debugger.start()
    # a sum, not a mean: gradients of order 1, so an inaccurate backward shows beside 0.001 absolute error
    loss = block(x).pow(2).sum() + torch.nn.functional.cross_entropy(cnn(image), target)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    debugger.stop()
    debugger.step()


if __name__ == "__main__":
    if "--planted" in sys.argv:
        torch.nn.functional.gelu = planted_gelu
    train_one_step(sys.argv[1], sys.argv[2])
