"""Fixtures of the PrecisionDebugger tests: a clean dump session, small real models, dump readers."""

from __future__ import annotations

import json
import os

import pytest
import torch
from fake_torch_npu.fixtures import session  # noqa: F401 - the clean dump session fixture


class TinyNet(torch.nn.Module):
    """conv -> relu -> leaky_relu -> flatten -> linear (input 2x3x6x6)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3)
        self.fc = torch.nn.Linear(4 * 4 * 4, 5)

    def forward(self, x):
        x = torch.relu(self.conv(x))
        x = torch.nn.functional.leaky_relu(x, 0.1)
        return self.fc(x.flatten(1))


class NestedNet(torch.nn.Module):
    """A Sequential inside the model, to check module paths and construct.json."""

    def __init__(self) -> None:
        super().__init__()
        self.block = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Tanh())
        self.head = torch.nn.Linear(3, 2)

    def forward(self, x):
        return self.head(self.block(x))


@pytest.fixture
def tiny():
    torch.manual_seed(0)
    return TinyNet()


@pytest.fixture
def nested():
    torch.manual_seed(0)
    return NestedNet()


@pytest.fixture
def one_step():
    """``one_step(model, x=None)``: forward, sum, backward (no optimizer: parameters unchanged)."""

    def run(model, x=None):
        if x is None:
            x = torch.randn(2, 3, 6, 6, generator=torch.Generator().manual_seed(1))
        model(x).sum().backward()

    return run


def load_json(path):
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


@pytest.fixture
def read_dump():
    """``read_dump(rank_dir)`` -> (dump.json, stack.json, construct.json) as parsed JSON."""

    def read(rank_dir):
        return tuple(load_json(os.path.join(rank_dir, name)) for name in ("dump.json", "stack.json", "construct.json"))

    return read
