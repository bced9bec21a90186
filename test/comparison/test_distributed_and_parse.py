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


def test_ranks_pair_numerically(rank_dumps, output_dir):
    npu = rank_dumps("npu", [0, 2, 10], planted_rank=10)
    bench = rank_dumps("bench", [0, 2, 10])
    outcomes = compare_distributed(npu, bench, output_dir, stack_mode=True, auto_analyze=True)
    names = [os.path.basename(o.csv_path).rsplit("_", 1)[0] for o in outcomes]
    assert names == ["compare_result_rank0-rank0", "compare_result_rank2-rank2", "compare_result_rank10-rank10"]
    assert [o.first_failure for o in outcomes] == [None, None, "Functional_linear_0_forward_output"]
    assert len([f for f in os.listdir(output_dir) if f.startswith("advisor_rank")]) == 3


def test_ranks_pair_by_number_not_by_position(rank_dumps, output_dir, capsys):
    """rank0,rank1 against rank0,rank2: rank1 is never compared with rank2 (the planted failure of NPU rank1
    would otherwise show); both are named as present on one side only."""
    npu = rank_dumps("npu", [0, 1, 3], planted_rank=1)
    bench = rank_dumps("bench", [0, 2, 3])
    outcomes = compare_distributed(npu, bench, output_dir, is_print_compare_log=False)
    names = [os.path.basename(o.csv_path).rsplit("_", 1)[0] for o in outcomes]
    assert names == ["compare_result_rank0-rank0", "compare_result_rank3-rank3"]
    assert [o.first_failure for o in outcomes] == [None, None]
    assert (outcomes.npu_only, outcomes.bench_only, outcomes.skipped) == (("rank1",), ("rank2",), ())
    assert outcomes.not_compared() == "not compared: rank1 only in the NPU dump; rank2 only in the bench dump"
    assert ("[WARNING]Ranks present on one side only are not compared: rank1 only in npu_dump_dir {}; rank2 only "
            "in bench_dump_dir {}. Ranks pair by number, not by position.".format(npu, bench)) in capsys.readouterr().out
    assert sorted(f for f in os.listdir(output_dir) if f.startswith("compare_result_") and f.endswith(".csv")) == \
        sorted(os.path.basename(o.csv_path) for o in outcomes)


def test_no_rank_in_common_names_each_sides_ranks(rank_dumps, output_dir):
    npu = rank_dumps("npu", [0, 1])
    bench = rank_dumps("bench", [2, 10])
    with pytest.raises(CompareError) as error:
        compare_distributed(npu, bench, output_dir)
    assert str(error.value) == ("The two dumps have no rank in common: npu_dump_dir {} has rank0, rank1; bench_dump_dir "
                                "{} has rank2, rank10. Ranks pair by number; use compare() to compare two chosen "
                                "ranks.".format(npu, bench))
    assert os.listdir(output_dir) == []


def test_two_directories_of_one_rank_are_refused(rank_dumps, output_dir):
    npu = rank_dumps("npu", [0, 1])
    bench = rank_dumps("bench", [0, 1])
    os.rename(os.path.join(bench, "rank1"), os.path.join(bench, "rank01"))
    rank_dumps("bench", [1])
    with pytest.raises(CompareError, match=r"bench_dump_dir .* holds two directories of one rank: rank01 and rank1\."):
        compare_distributed(npu, bench, output_dir)


def test_cli_rank_on_one_side_only_is_incomplete_exit_3_and_named(rank_dumps, output_dir):
    npu = rank_dumps("npu", [0, 1])
    bench = rank_dumps("bench", [0])
    result = subprocess.run([sys.executable, "-m", "ptdbg_ascend.cli", "compare-distributed", npu, bench, output_dir,
                             "--quiet"], capture_output=True, text=True)
    assert result.returncode == 3, result.stderr  # incomplete: no compared rank failed, one was not compared
    assert result.stderr == "ptdbg compare-distributed: not compared: rank1 only in the NPU dump\n"
    assert len([f for f in os.listdir(output_dir) if f.startswith("compare_result_rank0-rank0_")]) == 2  # csv, xlsx


def test_stray_files(rank_dumps, output_dir, tmp_path):
    npu = rank_dumps("npu", [0, 1])
    bench = rank_dumps("bench", [0])
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
    below_a_file = os.path.join(npu.pkl, "out")  # a missing directory is created; one below a file cannot be
    result = subprocess.run(run + ["compare", npu.pkl, bench.pkl, below_a_file], capture_output=True, text=True)
    assert result.returncode == 2
    assert result.stderr.startswith(f"ptdbg compare: error: Invalid output_path={below_a_file!r}: cannot be created")
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


def test_plain_rank_alone_pairs_with_rank0(tmp_path, output_dir):
    """A one-process msprobe run (plain ``rank``) against rank0 of a distributed run: the same rank 0."""
    import json
    leaf = {"type": "torch.Tensor", "dtype": "torch.float32", "shape": [2], "Max": 2.0, "Min": 1.0, "Mean": 1.5,
            "Norm": 2.236, "requires_grad": False}
    for side, rank_dir in (("npu", "rank"), ("bench", "rank0")):
        rank = tmp_path / side / "step0" / rank_dir
        rank.mkdir(parents=True)
        (rank / "dump.json").write_text(json.dumps({"task": "statistics", "level": "L1", "dump_data_dir": None,
                                                    "data": {"Torch.relu.0.forward": {"input_args": [leaf],
                                                                                      "input_kwargs": {},
                                                                                      "output": [leaf]}}}))
    outcomes = compare_distributed(str(tmp_path / "npu" / "step0"), str(tmp_path / "bench" / "step0"), output_dir)
    assert [os.path.basename(o.csv_path).rsplit("_", 1)[0] for o in outcomes] == ["compare_result_rank-rank0"]
    assert outcomes.not_compared() == ""
