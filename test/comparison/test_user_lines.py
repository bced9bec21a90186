"""The user's code line on real dumps: a backward suspect carries its forward call's line (not
``loss.backward()``), and frames are the library's by where torch and this tool are installed, not by a
folder's name (a user's files under ``torch/proj/`` or ``/opt/torch/.venv/.../transformers/`` keep their
lines). Two CPU runs of a small model in subprocesses (the engine wraps torch globally), legacy pkl and
msprobe dump.json + stack.json, compared."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from ptdbg_ascend.comparison.api import compare

pytest.importorskip("torch")

# The user's layers in a project folder named torch: the custom autograd function whose backward the NPU
# run gets wrong (a kernel outside the dump: numpy), and the block whose forward line applies it.
LAYERS = '''
import numpy
import torch


class ScaleGrad(torch.autograd.Function):
    """Identity forward; backward scales the gradient by FACTOR (1.0 right, 1.01 the planted bug)."""
    FACTOR = 1.0

    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        return torch.from_numpy(grad.numpy() * numpy.float32(ScaleGrad.FACTOR))


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)

    def forward(self, x):
        return ScaleGrad.apply(torch.tanh(self.fc(x)))  # LAYERS_LINE
'''

# A transformers-like model file inside a virtual environment under /opt/torch/.venv.
MODELING = '''
import torch
from layers import Block

SLOPE = 0.01


class TinyModel(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(4, 8)
        self.block = Block()
        self.fc2 = torch.nn.Linear(8, 3)

    def forward(self, x):
        h = torch.nn.functional.leaky_relu(self.fc1(x), SLOPE)  # MODELING_LINE
        return self.fc2(self.block(h))
'''

# The training script, outside any folder named torch.
TRAIN = '''
import sys
import torch
from ptdbg_ascend import PrecisionDebugger, acc_cmp_dump, register_hook, seed_all, set_dump_path, set_dump_switch

out, variant, layout = sys.argv[1], sys.argv[2], sys.argv[3]
sys.path[:0] = sys.argv[4:]
import layers
import modeling_tiny

if variant == "backward":
    layers.ScaleGrad.FACTOR = 1.01
if variant == "forward":
    modeling_tiny.SLOPE = 0.5
seed_all(1234)
torch.set_num_threads(1)
model = modeling_tiny.TinyModel()
if layout == "pkl":
    set_dump_path(out)
    register_hook(model, acc_cmp_dump)
    set_dump_switch("ON", mode="api_stack")
else:
    debugger = PrecisionDebugger(dump_path=out, task="tensor", level="L1")
    debugger.start()
loss = model(torch.randn(2, 4)).sum()
loss.backward()
if layout == "pkl":
    set_dump_switch("OFF")
else:
    debugger.stop()
    debugger.step()
'''


def _line_of(text: str, marker: str) -> int:
    return next(number for number, line in enumerate(text.splitlines(), 1) if marker in line)


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    """The user's files: ``torch/proj/layers.py``, ``opt/torch/.venv/.../transformers/modeling_tiny.py`` and
    ``run/train.py``; returns their paths."""
    root = tmp_path_factory.mktemp("lines")
    layers_dir = root / "torch" / "proj"
    modeling_dir = root / "opt" / "torch" / ".venv" / "lib" / "python3.11" / "site-packages" / "transformers"
    run_dir = root / "run"
    for directory in (layers_dir, modeling_dir, run_dir):
        directory.mkdir(parents=True)
    (layers_dir / "layers.py").write_text(LAYERS)
    (modeling_dir / "modeling_tiny.py").write_text(MODELING)
    (run_dir / "train.py").write_text(TRAIN)
    return {"root": root, "layers": str(layers_dir / "layers.py"), "modeling": str(modeling_dir / "modeling_tiny.py"),
            "train": str(run_dir / "train.py")}


@pytest.fixture(scope="module")
def dumps(project):
    """``(variant, layout)`` -> compare parameters of that run: variants base, backward (ScaleGrad's backward
    scales by 1.01), forward (leaky_relu's slope 0.5, not 0.01); layouts pkl and json."""
    found = {}
    for layout, variants in (("pkl", ("base", "backward", "forward")), ("json", ("base", "backward"))):
        for variant in variants:
            out = str(project["root"] / "dumps" / layout / variant)
            result = subprocess.run([sys.executable, project["train"], out, variant, layout,
                                     os.path.dirname(project["layers"]), os.path.dirname(project["modeling"])],
                                    capture_output=True, text=True, cwd=str(project["root"] / "run"), timeout=300)
            assert result.returncode == 0, result.stderr[-3000:]
            if layout == "pkl":
                rank = os.path.join(out, "ptdbg_dump_v1.0", "rank0")
                found[variant, layout] = {"pkl_path": os.path.join(rank, "api_stack_dump.pkl"),
                                          "dump_data_dir": os.path.join(rank, "api_stack_dump")}
            else:
                found[variant, layout] = {"json_path": os.path.join(out, "step0", "rank", "dump.json")}
    return found


def _compare(dumps, variant, layout, output):
    npu, bench = dumps[variant, layout], dumps["base", layout]
    param = {"npu_" + key: value for key, value in npu.items()}
    param.update({"bench_" + key: value for key, value in bench.items()}, is_print_compare_log=False)
    if layout == "json":  # msprobe keeps the stacks beside dump.json
        param["stack_path"] = os.path.join(os.path.dirname(npu["json_path"]), "stack.json")
    output.mkdir()
    outcome = compare(param, str(output), stack_mode=True)
    with open(outcome.advisor_path, encoding="utf-8") as handle:
        return outcome, handle.read()


@pytest.mark.parametrize("layout", ["pkl", "json"])
def test_backward_suspect_carries_the_forward_line(project, dumps, layout, tmp_path):
    """ScaleGrad's backward (no dumped API) scales the gradient: tanh's backward is the first call whose
    arriving gradient differs, and its Code line is the user's forward line that calls tanh and ScaleGrad,
    in a project folder named torch; not loss.backward() in the script."""
    outcome, text = _compare(dumps, "backward", layout, tmp_path / "out")
    finding = outcome.finding
    assert outcome.first_failure == "Torch_tanh_0_backward_input.0"
    assert (finding.call, finding.kind) == ("Torch_tanh_0_backward", "input")
    line = _line_of(LAYERS, "LAYERS_LINE")
    expected = f"{project['layers']}:{line}  return ScaleGrad.apply(torch.tanh(self.fc(x)))  # LAYERS_LINE"
    assert finding.user_line == expected
    assert f"Code: {expected}\n" in text
    assert "loss.backward()" not in text


def test_forward_cause_in_a_transformers_folder_under_torch_keeps_its_line(project, dumps, tmp_path):
    outcome, text = _compare(dumps, "forward", "pkl", tmp_path / "out")
    finding = outcome.finding
    assert (finding.call, finding.kind) == ("Functional_leaky_relu_0_forward", "cause")
    line = _line_of(MODELING, "MODELING_LINE")
    assert finding.user_line == f"{project['modeling']}:{line}  {MODELING.splitlines()[line - 1].strip()}"
    assert f"Code: {project['modeling']}:{line}" in text


@pytest.mark.parametrize("layout", ["pkl", "json"])
def test_equal_runs_no_false_alarm(dumps, layout, tmp_path):
    outcome, text = _compare(dumps, "base", layout, tmp_path / "out")
    assert outcome and outcome.finding is None
    assert "All data in comparison result meets the accuracy requirements." in text
