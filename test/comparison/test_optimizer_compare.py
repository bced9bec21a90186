"""A wrong optimizer on the foreach or fused path (torch.optim's default on accelerators, and fused=True) is
named as the cause: two real CPU runs of a GPT-like block trained for two AdamW steps, the "NPU" one with a
planted learning-rate difference (1.1e-3 against 1e-3), dumped in subprocesses and compared."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from ptdbg_ascend.comparison.api import compare

torch = pytest.importorskip("torch")

DUMP_SCRIPT = '''
import sys
import torch
from ptdbg_ascend import *

out, lr, path = sys.argv[1], float(sys.argv[2]), sys.argv[3]
seed_all(1234)
torch.set_num_threads(1)


class Block(torch.nn.Module):
    """linear -> layer_norm -> gelu -> linear; biases start at zero, as GPT-like models initialise them."""

    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(6, 8)
        self.norm = torch.nn.LayerNorm(8)
        self.fc2 = torch.nn.Linear(8, 3)
        for linear in (self.fc1, self.fc2):
            torch.nn.init.zeros_(linear.bias)

    def forward(self, x):
        return self.fc2(torch.nn.functional.gelu(self.norm(self.fc1(x))))


torch.manual_seed(0)
model = Block()
optimizer = torch.optim.AdamW(model.parameters(), lr=lr, **{path: True})
set_dump_path(out)
register_hook(model, acc_cmp_dump)
data, target = torch.randn(4, 6), torch.tensor([0, 2, 1, 2])
set_dump_switch("ON", mode="api_stack")
for step in range(2):
    optimizer.zero_grad()
    torch.nn.functional.cross_entropy(model(data), target).backward()
    optimizer.step()  # the optimizer line
set_dump_switch("OFF")
'''


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """``{(path, lr): (pkl, npy dir)}`` for path foreach/fused, lr 1e-3 (bench), 1.1e-3 (planted) and
    1e-3 again (an equal run)."""
    root = tmp_path_factory.mktemp("optimizer_runs")
    script = root / "train_step.py"
    script.write_text(DUMP_SCRIPT)
    dumps = {}
    for path in ("foreach", "fused"):
        for name, lr in (("bench", "1e-3"), ("planted", "1.1e-3"), ("equal", "1e-3")):
            out = root / f"{path}_{name}"
            result = subprocess.run([sys.executable, str(script), str(out), lr, path],
                                    capture_output=True, text=True, cwd=str(root))
            assert result.returncode == 0, result.stderr
            rank = out / "ptdbg_dump_v1.0" / "rank0"
            dumps[path, name] = (str(rank / "api_stack_dump.pkl"), str(rank / "api_stack_dump"))
    return dumps


def _compare(runs, path, npu, output):
    param = {"npu_pkl_path": runs[path, npu][0], "bench_pkl_path": runs[path, "bench"][0],
             "npu_dump_data_dir": runs[path, npu][1], "bench_dump_data_dir": runs[path, "bench"][1],
             "is_print_compare_log": False}
    os.makedirs(str(output), exist_ok=True)
    return compare(param, str(output), stack_mode=True)


@pytest.mark.parametrize("path, suspect", [("foreach", "Torch__foreach_addcdiv__0_forward"),
                                           ("fused", "Torch__fused_adamw__0_forward")])
def test_planted_learning_rate_names_the_optimizer_call_as_the_cause(runs, tmp_path, path, suspect):
    if path == "fused" and not hasattr(torch, "_fused_adamw_"):
        pytest.skip("this torch has no fused AdamW")
    outcome = _compare(runs, path, "planted", tmp_path / path)
    assert not outcome
    finding = outcome.finding
    assert (finding.call, finding.kind) == (suspect, "cause")
    assert finding.record.startswith(suspect + "_output.")  # step 1's update, before step 2's forward
    assert finding.user_line.endswith("optimizer.step()  # the optimizer line")
    with open(outcome.advisor_path, encoding="utf-8") as handle:
        advice = handle.read()
    assert f"The inputs of {suspect} are within what their precision explains, but its output is not" in advice
    assert "Check the optimizer's hyper-parameters on both sides (lr, betas, eps" in advice  # its class's next step
    assert "no dumped API produced it" not in advice and "seed_all() on both sides" not in advice


@pytest.mark.parametrize("path", ["foreach", "fused"])
def test_two_equal_runs_have_no_failure(runs, tmp_path, path):
    if path == "fused" and not hasattr(torch, "_fused_adamw_"):
        pytest.skip("this torch has no fused AdamW")
    outcome = _compare(runs, path, "equal", tmp_path / path)
    assert outcome, str(outcome)
    assert outcome.finding is None
