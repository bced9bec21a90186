"""A small attention block (real torch.nn layers, random init) and the planted bfloat16-fragile softmax of
``sample/free_benchmark_demo.py`` for the free_benchmark tests: a stand-in for a device kernel that adds up the
exponentials in bfloat16, one by one (about 3 % off on 64 columns; a correct kernel keeps the sum in float32). It
must be installed before the tool wraps ``F.softmax`` (the dump session wraps what it finds), and computes exactly
on float32 inputs."""

from __future__ import annotations

import json
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

SAMPLE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "sample")
if SAMPLE not in sys.path:
    sys.path.insert(0, SAMPLE)
from free_benchmark_demo import EXACT_SOFTMAX, bf16_accumulating_softmax as fragile_softmax  # noqa: E402 F401


class Attention(nn.Module):
    """layer_norm -> linear -> scores -> softmax -> gelu -> dropout -> linear (input batch x 64 x 32)."""

    def __init__(self, dropout: float = 0.0) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(32)
        self.query = nn.Linear(32, 32)
        self.head = nn.Linear(32, 4)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        h = self.norm(x)
        weights = F.softmax(self.query(h) @ h.transpose(-1, -2) / 5.0, dim=-1)  # the line a finding names
        return self.head(self.dropout(F.gelu(weights @ h)))


def write_config(tmp_path, name: str = "fb", **section) -> str:
    top = {key: section.pop(key) for key in ("step", "rank", "level") if key in section}
    config = {"task": "free_benchmark", "dump_path": str(tmp_path / name), "free_benchmark": section, **top}
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(config))
    return str(path)


def train(debugger, dtype=torch.bfloat16, steps: int = 2, dropout: float = 0.0, seed: int = 0):
    """``steps`` SGD steps of :class:`Attention` in ``dtype`` (the debugger started and stopped around each, when
    given); returns the losses and the model."""
    torch.manual_seed(seed)
    model = Attention(dropout).to(dtype)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    data = torch.Generator().manual_seed(seed + 1)
    losses = []
    for _ in range(steps):
        x = torch.randn(2, 64, 32, generator=data).to(dtype)
        if debugger is not None:
            debugger.start()
        loss = model(x).float().pow(2).mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        if debugger is not None:
            debugger.stop()
            debugger.step()
        losses.append(loss.item())
    return losses, model
