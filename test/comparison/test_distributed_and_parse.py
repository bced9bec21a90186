"""compare_distributed rank pairing, parse output, the ptdbg console script."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from ptdbg_ascend.comparison.api import compare_distributed
from ptdbg_ascend.errors import CompareError, ParameterError
from ptdbg_ascend import parse

pytestmark = pytest.mark.torchfree


def make_ranks(tmp_path, legacy_dump_cls, model_calls, side, ranks, planted_rank=None):
    tag = tmp_path / side / "ptdbg_dump_v1.0"
    for rank in ranks:
        dump = legacy_dump_cls(str(tag / "rank{}".format(rank)), "api_stack_{}_dump".format(side))
        planted = "Functional_linear_0_forward" if rank == planted_rank else None
        for call, tensors in model_calls(planted=planted):
            dump.add_call(call, tensors)
    return str(tag)


@pytest.fixture
def rank_dumps(tmp_path, legacy_dump, model_calls):
    cls = type(legacy_dump("probe"))
    return lambda side, ranks, planted_rank=None: make_ranks(tmp_path, cls, model_calls, side, ranks, planted_rank)


def test_ranks_pair_numerically(rank_dumps, output_dir):
    npu = rank_dumps("npu", [0, 2, 10], planted_rank=10)
    bench = rank_dumps("bench", [0, 2, 10])
    outcomes = compare_distributed(npu, bench, output_dir, stack_mode=True, auto_analyze=True)
    names = [os.path.basename(o.csv_path).rsplit("_", 1)[0] for o in outcomes]
    assert names == ["compare_result_rank0-rank0", "compare_result_rank2-rank2", "compare_result_rank10-rank10"]
    assert [o.first_failure for o in outcomes] == [None, None, "Functional_linear_0_forward_output"]
    assert len([f for f in os.listdir(output_dir) if f.startswith("advisor_rank")]) == 3


def test_rank_count_mismatch_and_stray_files(rank_dumps, output_dir, tmp_path):
    npu = rank_dumps("npu", [0, 1])
    bench = rank_dumps("bench", [0])
    with pytest.raises(CompareError, match=r"number of ranks in the two runs are different.*NPU: \['rank0', 'rank1'\]; bench: \['rank0'\]"):
        compare_distributed(npu, bench, output_dir)
    open(os.path.join(bench, "notes.txt"), "w").close()
    with pytest.raises(CompareError, match="dump_dir contains 'notes.txt'"):
        compare_distributed(npu, bench, output_dir)
    with pytest.raises(ParameterError, match="suffix"):
        compare_distributed(npu, npu, output_dir, suffix="x")
    with pytest.raises(ParameterError, match="Invalid stackmode="):
        compare_distributed(npu, npu, output_dir, stackmode=True)


def test_stray_directory_in_rank_dir(rank_dumps, output_dir):
    npu = rank_dumps("npu", [0])
    bench = rank_dumps("bench", [0])
    os.mkdir(os.path.join(npu, "rank0", "old_dump"))
    with pytest.raises(CompareError, match="The names of pkl and directory do not match.*old_dump"):
        compare_distributed(npu, bench, output_dir)


def test_parse_prints_stack_outermost_first_and_statistics(legacy_dump, capsys):
    dump = legacy_dump("npu")
    dump.add_call("Torch_norm_1_forward", [("input.0", np.array([3.0, 4.0], np.float32)),
                                           ("output", np.array(5.0, np.float32))])
    dump.add_call("Torch_norm_10_forward", [("input.0", np.array([1.0], np.float32))])
    parse(dump.pkl, "Torch_norm_1_forward")
    assert capsys.readouterr().out == (
        "\nTrace back(Torch_norm_1_forward):\n"
        '  File "/work/train.py", line 90, in <module>\n'
        "      model(x)\n"
        '  File "/work/train.py", line 42, in forward\n'
        "      x = self.conv(x)\n"
        "\nStatistic Info:\n"
        "  [Torch_norm_1_forward_input.0][dtype: torch.float32][shape: [2]][max: 4.0][min: 3.0][mean: 3.5][l2norm: 5.0]\n"
        "  [Torch_norm_1_forward_output][dtype: torch.float32][shape: []][max: 5.0][min: 5.0][mean: 5.0][l2norm: Nan]\n")
    with pytest.raises(ParameterError, match="module_name_prefix"):
        parse(dump.pkl, 3)


def test_cli_compare_and_parse(two_dumps, output_dir):
    npu, bench = two_dumps(planted="Functional_linear_0_forward")
    run = [sys.executable, "-m", "ptdbg_ascend.cli"]
    result = subprocess.run(run + ["compare", npu.pkl, bench.pkl, output_dir, "--npu-dump-data-dir", npu.data_dir,
                                   "--bench-dump-data-dir", bench.data_dir, "--stack-mode", "--quiet"],
                            capture_output=True, text=True)
    assert result.returncode == 1, result.stderr  # an API's accuracy not reached
    assert "Suspect Nodes: Functional_linear_0_forward_output" in result.stdout
    result = subprocess.run(run + ["compare", npu.pkl, bench.pkl, "/nonexistent/out"], capture_output=True, text=True)
    assert result.returncode == 2
    assert result.stderr.startswith("ptdbg compare: error: Invalid output_path='/nonexistent/out'")
    result = subprocess.run(run + ["parse", npu.pkl, "Torch_relu_0_forward"], capture_output=True, text=True)
    assert result.returncode == 0 and "Trace back(Torch_relu_0_forward):" in result.stdout


def test_msprobe_step_dirs_with_plain_rank_dir(tmp_path, output_dir):
    """msprobe without torch.distributed writes ``step0/rank/dump.json``; statistics-only (no tensor dir)."""
    import json
    leaf = {"type": "torch.Tensor", "dtype": "torch.float32", "shape": [2], "Max": 2.0, "Min": 1.0, "Mean": 1.5,
            "Norm": 2.236, "requires_grad": False}
    for side in ("npu", "bench"):
        rank = tmp_path / side / "step0" / "rank"
        rank.mkdir(parents=True)
        (rank / "dump.json").write_text(json.dumps({"task": "statistics", "level": "L1", "dump_data_dir": None,
                                                    "data": {"Torch.relu.0.forward": {"input_args": [leaf],
                                                                                      "input_kwargs": {},
                                                                                      "output": [leaf]}}}))
    (outcome,) = compare_distributed(str(tmp_path / "npu" / "step0"), str(tmp_path / "bench" / "step0"), output_dir)
    assert os.path.basename(outcome.csv_path).startswith("compare_result_rank-rank_")
    assert outcome.rows == 2 and outcome.first_failure is None
