"""Fixtures of the overflow tests: a clean session (no overflow/ACL observer left behind), the fake
torch_npu, a model whose third step overflows in ``torch.exp``, pkl reading."""

from __future__ import annotations

import json

import pytest
import torch

from fake_torch_npu.fixtures import fake_npu, no_npu, session  # noqa: F401 - fixtures


class ExpNet(torch.nn.Module):
    """linear -> torch.exp -> mean: ``Torch_exp_{step}_forward`` overflows when the input is large."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)

    def forward(self, x):
        return torch.exp(self.fc(x)).mean()


@pytest.fixture
def exp_net():
    torch.manual_seed(0)
    return ExpNet()


def scaled_input(step: int, overflow_steps=(2,)):
    generator = torch.Generator().manual_seed(step)
    return torch.randn(2, 4, generator=generator) * (1000.0 if step in overflow_steps else 1.0)


@pytest.fixture
def exp_input():
    """``exp_input(step, overflow_steps=(2,))``: the training input of that step (x1000 on overflow steps)."""
    return scaled_input


@pytest.fixture
def train_exp():
    """``train_exp(net, steps=4, overflow_steps=(2,))``: forward + backward steps (no weight update, so
    an inf gradient does not turn the weights into NaN); the given steps get inputs x1000."""

    def run(net, steps=4, overflow_steps=(2,)):
        for step in range(steps):
            loss = net(scaled_input(step, overflow_steps))
            net.zero_grad()
            loss.backward()

    return run


def read_pkl(path):
    with open(path, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle]


@pytest.fixture
def pkl_records():
    return read_pkl
