"""free_benchmark's judge and perturbations on hand-made tensors (golden values by hand, not from the code)."""

from __future__ import annotations

import math

import pytest
import torch

from ptdbg_ascend.free_benchmark import judge
from ptdbg_ascend.free_benchmark.perturb import NotPerturbed, perturbed_inputs


def test_the_relative_error_counts_negatives_sign_flips_and_one_sided_infs():
    small = 1e-4
    a = torch.tensor([1.0, -2.0, 3.0])
    assert judge.max_relative_error(a, torch.tensor([1.0, -2.02, 3.0]), small) == pytest.approx(0.01)  # 0.02 / 2
    assert judge.max_relative_error(torch.tensor([0.5]), torch.tensor([-0.5]), small) == pytest.approx(2.0)
    # small in one run, large in the other: the error is over the small-value floor
    assert judge.max_relative_error(torch.tensor([0.0]), torch.tensor([0.01]), small) == pytest.approx(100.0)
    # both below the floor: left out
    assert judge.max_relative_error(torch.tensor([1e-6]), torch.tensor([5e-5]), small) == 0.0
    assert judge.max_relative_error(torch.tensor([1.0, math.inf]), torch.tensor([1.0, 2.0]), small) == math.inf
    assert judge.max_relative_error(torch.tensor([math.nan, -math.inf]), torch.tensor([math.nan, -math.inf]),
                                    small) == 0.0
    assert judge.max_relative_error(torch.tensor([math.inf]), torch.tensor([-math.inf]), small) == math.inf


def test_the_standards_are_1_0_4s_and_a_gradient_is_judged_normwise():
    assert (judge.threshold("bfloat16", "add_noise"), judge.threshold("float16", "bit_noise"),
            judge.threshold("float32", "improve_precision"), judge.threshold("float64", "to_cpu"),
            judge.threshold("bfloat16", "no_change")) == (0.004, 0.002, 0.0002, 0.0002, 0.0)
    assert judge.small_value(torch.zeros(1, dtype=torch.float32)) == pytest.approx(1e-4)  # sqrt(1e-8)
    real, perturbed = torch.tensor([10.0, 0.001]), torch.tensor([10.0, 0.002])
    assert judge.normwise_error(real, perturbed) == pytest.approx(0.0001)  # 0.001 / 10, not 100 % at the tiny one


def test_improve_precision_raises_only_half_precision_tensors_and_copies_for_in_place_calls():
    low, high = torch.ones(3, dtype=torch.bfloat16), torch.ones(3)
    (new_low, new_high), kwargs = perturbed_inputs("improve_precision", (low, high), {"other": [low]})
    assert new_low.dtype == torch.float32 and new_high is high and kwargs["other"][0].dtype == torch.float32
    (_, copied), _ = perturbed_inputs("improve_precision", (low, high), {}, copy_all=True)
    assert copied is not high and torch.equal(copied, high)
    with pytest.raises(NotPerturbed, match="nothing to raise"):
        perturbed_inputs("improve_precision", (high, 2), {})


def test_the_one_tensor_modes_change_the_first_floating_input_as_1_0_4_does():
    index, x = torch.arange(3), torch.tensor([[1e-3, 2.0], [3.0, 1e-9]])
    (same_index, noisy), _ = perturbed_inputs("add_noise", (index, x), {})
    assert same_index is index  # integers are never perturbed
    # + 1e-8 (absolute, as 1.0.4): seen at 1e-3, below one float32 ulp at 2 and 3; 1e-9 < sqrt(1e-8) is left alone
    assert noisy[0, 0].item() == pytest.approx(1e-3 + 1e-8, rel=1e-7) and noisy[0, 0].item() != x[0, 0].item()
    assert noisy.tolist()[0][1:] + noisy.tolist()[1] == [2.0, 3.0, x[1, 1].item()]
    (flipped,), _ = perturbed_inputs("bit_noise", (torch.tensor([1.0, -2.0, 0.0]),), {})
    assert flipped.tolist() == [1.0 + 2 ** -23, -(2.0 + 2 ** -22), 0.0]  # the last mantissa bit; 0 is not normal
    before = x.clone()
    (swapped,), _ = perturbed_inputs("change_value", (x,), {})
    assert swapped.tolist() == [[before[1, 1].item(), 2.0], [3.0, before[0, 0].item()]]
    assert torch.equal(x, before)  # the caller's tensor is untouched
    (copy,), _ = perturbed_inputs("no_change", (x,), {})
    assert copy is not x and torch.equal(copy, x)
    with pytest.raises(NotPerturbed, match="below the noise"):
        perturbed_inputs("add_noise", (torch.full((2,), 1e-9),), {})
    with pytest.raises(NotPerturbed, match="first dimension of at least 2"):
        perturbed_inputs("change_value", (torch.ones(1, 3),), {})


def test_to_cpu_moves_every_tensor_and_raises_half_precision():
    (moved, other), _ = perturbed_inputs("to_cpu", (torch.ones(2, dtype=torch.float16), torch.ones(2)), {})
    assert moved.dtype == torch.float32 and other.device.type == "cpu"


APPENDER = """
import sys
from ptdbg_ascend.free_benchmark.report import CsvAppender, UnequalRow
appender = CsvAppender(sys.argv[1])
for index in range(300):
    appender.append(UnequalRow(int(sys.argv[2]), "add_noise", "forward", index, "Torch.add.0.forward", 0.5,
                               "torch.float32", "torch.Size([2])", None, 0.0002, "=HYPERLINK(1), a line"))
"""


def test_ranks_appending_at_once_share_one_header_and_whole_rows(tmp_path):
    import subprocess
    import sys

    from ptdbg_ascend.free_benchmark.report import FILE_NAME, read_rows

    runs = [subprocess.Popen([sys.executable, "-c", APPENDER, str(tmp_path / "dump"), str(rank)]) for rank in range(3)]
    assert [run.wait(timeout=120) for run in runs] == [0, 0, 0]
    text = (tmp_path / "dump" / FILE_NAME).read_text()
    assert text.count("rank,pert_mode") == 1 and text.startswith("rank,pert_mode")
    rows = read_rows(str(tmp_path / "dump" / FILE_NAME))
    assert sorted((row["rank"], row["step"]) for row in rows) == sorted(
        (str(rank), str(step)) for rank in range(3) for step in range(300))
    assert {row["code_line"] for row in rows} == {"=HYPERLINK(1), a line"}  # restored from the quoted cell
    assert "'=HYPERLINK" in text  # written so that no spreadsheet runs it
