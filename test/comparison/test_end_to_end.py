"""End to end: two real CPU runs of a small model dumped by the engine (in subprocesses, since the engine
wraps torch globally), compared. Also a dump.json with .pt tensors against a legacy pkl dump."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from ptdbg_ascend.comparison.api import compare

torch = pytest.importorskip("torch")

DUMP_SCRIPT = '''
import sys
import torch
from ptdbg_ascend import *

out, variant = sys.argv[1], sys.argv[2]
seed_all(1234)
torch.set_num_threads(1)


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(4, 8)
        self.fc2 = torch.nn.Linear(8, 3)

    def forward(self, x):
        h = self.fc1(x)
        if variant == "extra":
            h = torch.clone(h)  # an API only this run calls (Tensor.clone is not in the default list)
        slope = 0.5 if variant == "planted" else 0.01  # the planted difference
        h = torch.nn.functional.leaky_relu(h, slope)
        return self.fc2(h)


torch.manual_seed(0)
model = Net()
set_dump_path(out)
register_hook(model, acc_cmp_dump)
set_dump_switch("ON", mode="api_stack")
loss = model(torch.randn(2, 4)).sum()
loss.backward()
set_dump_switch("OFF")
'''


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Dumps of the same model: ``base``, ``planted`` (leaky_relu slope changed), ``extra`` (one more API)."""
    root = tmp_path_factory.mktemp("runs")
    script = root / "dump_run.py"
    script.write_text(DUMP_SCRIPT)
    dumps = {}
    for variant in ("base", "planted", "extra"):
        result = subprocess.run([sys.executable, str(script), str(root / variant), variant],
                                capture_output=True, text=True, cwd=str(root))
        assert result.returncode == 0, result.stderr
        rank = root / variant / "ptdbg_dump_v1.0" / "rank0"
        dumps[variant] = (str(rank / "api_stack_dump.pkl"), str(rank / "api_stack_dump"))
    return dumps


def run_compare(runs, npu, output, **kwargs):
    param = {"npu_pkl_path": runs[npu][0], "bench_pkl_path": runs["base"][0], "npu_dump_data_dir": runs[npu][1],
             "bench_dump_data_dir": runs["base"][1], "is_print_compare_log": False}
    outcome = compare(param, str(output), stack_mode=True, **kwargs)
    with open(outcome.csv_path) as handle:
        return outcome, list(csv.DictReader(handle))


def test_planted_api_is_first_no_and_the_suspect(runs, tmp_path):
    outcome, rows = run_compare(runs, "planted", tmp_path)
    first_no = next(r for r in rows if r["Accuracy Reached or Not"] == "No")
    assert first_no["NPU Name"] == "Functional_leaky_relu_0_forward_output"
    # everything before it (linear and the leaky_relu input) still matches
    before = rows[:rows.index(first_no)]
    assert [r["Accuracy Reached or Not"] for r in before] == ["Yes"] * len(before) and len(before) == 5, \
        [(r["NPU Name"], r["Err_message"]) for r in before]
    with open(outcome.advisor_path) as handle:
        advice = handle.read()
    assert advice.startswith("Suspect API: Functional_leaky_relu_0_forward (Cause:")
    assert "\nLine: 7\nSuspect Nodes: Functional_leaky_relu_0_forward_output\n" in advice
    assert "Suspect API: Functional_leaky_relu_0_forward (Cause:" in advice


def test_extra_api_does_not_break_pairing(runs, tmp_path):
    outcome, rows = run_compare(runs, "extra", tmp_path)
    extra = [r["NPU Name"] for r in rows if r["Bench Name"] == "Nan"]
    assert extra == ["Torch_clone_0_forward_input.0", "Torch_clone_0_forward_output",
                     "Torch_clone_0_backward_input.0", "Torch_clone_0_backward_output.0"]
    paired = [r for r in rows if r["Bench Name"] != "Nan"]
    assert all(r["NPU Name"] == r["Bench Name"] and r["Accuracy Reached or Not"] == "Yes" for r in paired)
    assert len(paired) == 21 and outcome.first_failure is None


def test_dump_json_with_pt_tensors_against_legacy_pkl(runs, tmp_path):
    """A hand-written dump.json whose .pt tensors are the bench run's npy values (planted run as NPU)."""
    pkl, data_dir = runs["base"]
    ms = tmp_path / "ms"
    (ms / "dump_tensor_data").mkdir(parents=True)
    entries = {}
    with open(pkl) as handle:
        for line in handle:
            record = json.loads(line)
            if len(record) != 6 or not record[0].startswith("Functional_linear_0_forward"):
                continue  # stack lines and other calls
            name, _, _, dtype, shape, stats = record
            leaf = name.replace("Functional_linear_0_forward_", "Functional.linear.0.forward.")
            leaf = leaf if leaf.endswith((".0", ".1", ".2")) else leaf + ".0"
            torch.save(torch.from_numpy(np.load(os.path.join(data_dir, name + ".npy"))),
                       str(ms / "dump_tensor_data" / (leaf + ".pt")))
            item = {"type": "torch.Tensor", "dtype": dtype, "shape": shape, "Max": stats[0], "Min": stats[1],
                    "Mean": stats[2], "Norm": stats[3], "requires_grad": False, "data_name": leaf + ".pt"}
            entry = entries.setdefault("Functional.linear.0.forward", {"input_args": [], "input_kwargs": {},
                                                                      "output": []})
            entry["output" if ".output" in leaf else "input_args"].append(item)
    (ms / "dump.json").write_text(json.dumps({"task": "tensor", "level": "L1", "dump_data_dir": None,
                                              "data": entries}))
    out = tmp_path / "out"
    out.mkdir()
    param = {"npu_pkl_path": runs["planted"][0], "npu_dump_data_dir": runs["planted"][1],
             "bench_json_path": str(ms / "dump.json"), "is_print_compare_log": False}
    outcome = compare(param, str(out), stack_mode=True, auto_analyze=False)
    with open(outcome.csv_path) as handle:
        rows = list(csv.DictReader(handle))
    linear = [r for r in rows if r["Bench Name"] != "Nan"]
    assert [r["NPU Name"] for r in linear] == ["Functional_linear_0_forward_input.0",
                                               "Functional_linear_0_forward_input.1",
                                               "Functional_linear_0_forward_input.2",
                                               "Functional_linear_0_forward_output"]
    assert {r["Cosine"] for r in linear} == {"1.000000000000"}
    assert {r["Accuracy Reached or Not"] for r in linear} == {"Yes"}
