"""Fixtures of the dump tests: a clean dump session, a tiny CNN, a 2-step training loop, pkl reading."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import torch
from fake_torch_npu.fixtures import session  # noqa: F401 - the clean dump session fixture


class TinyNet(torch.nn.Module):
    """conv -> relu -> flatten -> linear: the first conv is ``Functional_conv2d_0``."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3)
        self.fc = torch.nn.Linear(4 * 4 * 4, 5)

    def forward(self, x):
        x = torch.relu(self.conv(x))
        x = torch.nn.functional.leaky_relu(x, 0.1)
        return self.fc(x.flatten(1))


@pytest.fixture
def dump_session(session):
    """The process's dump session, reset before and after the test (counters, windows, path)."""
    return session


@pytest.fixture
def model():
    torch.manual_seed(0)
    return TinyNet()


@pytest.fixture
def train():
    """``train(model, steps=2)``: SGD steps on fixed random data (batch 2, 6x6 images)."""

    def run(net, steps=2):
        optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
        generator = torch.Generator().manual_seed(1)
        for _ in range(steps):
            x = torch.randn(2, 3, 6, 6, generator=generator)
            target = torch.tensor([1, 3])
            loss = torch.nn.functional.cross_entropy(net(x), target)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()

    return run


def read_pkl(path):
    """Every line of a legacy pkl as a parsed JSON list (fails the test on a line that does not parse)."""
    records = []
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            assert line.endswith("\n"), f"line {number} of {path} is not terminated"
            records.append(json.loads(line))
    return records


@pytest.fixture
def pkl_records():
    return read_pkl


@pytest.fixture
def check_npy():
    """``check_npy(record, npy_dir)``: the npy exists and its dtype/shape/statistics match the record."""

    def check(record, npy_dir):
        name, step, reserved, dtype, shape, stats = record
        assert step == 0 and reserved == []
        array = np.load(os.path.join(npy_dir, name + ".npy"), allow_pickle=False)
        assert list(array.shape) == ([] if shape == "[]" else shape), name  # a Python scalar's shape: "[]"
        numpy_dtype = {"torch.float32": np.float32, "torch.bfloat16": np.float32, "torch.float16": np.float16,
                       "torch.float64": np.float64, "torch.int64": np.int64, "torch.bool": np.bool_}.get(dtype)
        if numpy_dtype is not None:
            assert array.dtype == numpy_dtype, name
        values = array.astype(np.float64)
        if values.size == 0:
            assert stats == [None, None, None, None]
            return
        expected = [values.max(), values.min(), values.mean(), np.linalg.norm(values.reshape(-1))]
        np.testing.assert_allclose(stats, expected, rtol=2e-6, atol=1e-6, err_msg=name)

    return check


@pytest.fixture
def interpreted(monkeypatch):
    """fused_triton with its kernels interpreted on the CPU: TRITON_INTERPRET=1 before triton is imported."""
    import importlib
    import importlib.util

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    if importlib.util.find_spec("triton") is None:
        pytest.skip("triton is not installed (bash scripts/triton_venv.sh --test runs this under the interpreter)")
    fused_triton = importlib.import_module("ptdbg_ascend.statistics.fused_triton")
    if not fused_triton.available():
        pytest.skip(f"triton cannot be imported: {fused_triton.IMPORT_ERROR}")
    if type(fused_triton._chunk_kernel).__name__ != "InterpretedFunction":
        pytest.fail("fused_triton was imported before TRITON_INTERPRET=1 was set: its kernels are not interpreted")
    return fused_triton
