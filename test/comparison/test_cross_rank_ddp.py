"""The rank where it started, on a real 4-process data-parallel run over gloo (test/comparison/ddp_worker.py):
every rank dumped with the legacy API, each rank pair compared with the public ``compare``, the PairResults
summed up. A NaN (or a 2 % error) planted in rank 2's first ``F.linear`` reaches every rank through the first
gradient ``all_reduce``; every rank's own compare fails, and the answer across ranks names rank 2 and that call.
Two equal runs claim no origin. One 4-rank launch dumps all four legacy runs, another a clean and a NaN run with
PrecisionDebugger (dump.json: the answer names the calls dotted); about 5 s each on 2 cores."""

from __future__ import annotations

import csv
import os
import subprocess
import sys

import pytest

pytest.importorskip("torch")

from ptdbg_ascend import compare  # noqa: E402
from ptdbg_ascend.comparison.rank_summary import PairResult, cross_rank_answer, write_summary  # noqa: E402

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ddp_worker.py")
WORLD, PLANTED_RANK = 4, 2
SPREAD = ("First divergence across ranks: rank 2, Functional_linear_0_forward, before "
          "Distributed_all_reduce_0_forward (collective #1) spread it to every rank")


def launch(root, dump_format):
    """One 4-rank run of ddp_worker.py (its ranks forked from one process) dumping in ``dump_format``."""
    process = subprocess.run([sys.executable, WORKER, str(WORLD), str(root / f"init_{dump_format}"),
                              str(root / dump_format), str(PLANTED_RANK), dump_format],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             env=dict(os.environ, OMP_NUM_THREADS="1"), timeout=180)
    assert process.returncode == 0, process.stdout.decode(errors="replace")[-3000:]
    return root / dump_format


@pytest.fixture(scope="module")
def dumps(tmp_path_factory):
    """The four legacy runs' tag directories (``bench``, ``equal``, ``nan``, ``error``) of one 4-rank launch."""
    out = launch(tmp_path_factory.mktemp("ddp"), "legacy")
    return {tag: out / f"{tag}_v1.0" for tag in ("bench", "equal", "nan", "error")}


def compare_ranks(dumps, tag, output, tensors=True):
    """Each rank pair compared with ``compare`` (the bench run as bench; ``tensors=False``: by the statistics
    only), and its PairResult."""
    results = []
    for rank in range(WORLD):
        pair = f"rank{rank}-rank{rank}"
        npu, bench = dumps[tag] / f"rank{rank}", dumps["bench"] / f"rank{rank}"
        files = {"npu_pkl_path": str(npu / "dump.pkl"), "bench_pkl_path": str(bench / "dump.pkl")}
        if tensors:
            files.update(npu_dump_data_dir=str(npu / "dump"), bench_dump_data_dir=str(bench / "dump"))
        outcome = compare(files, str(output), suffix=pair, xlsx=False, html=False, rerun=False)
        results.append(PairResult.of(pair, rank, outcome, str(npu / "dump.pkl")))
    return results


def test_a_nan_on_rank_2_is_traced_to_rank_2_although_every_rank_ends_with_nan(dumps, tmp_path):
    results = compare_ranks(dumps, "nan", tmp_path)
    assert [result.passed for result in results] == [False] * WORLD
    # each rank's own compare names its own first failure: the others blame the all_reduce that brought the NaN
    assert [result.first_failure for result in results] == [
        "Distributed_all_reduce_0_forward_output.0", "Distributed_all_reduce_0_forward_output.0",
        "Functional_linear_0_forward_output", "Distributed_all_reduce_0_forward_output.0"]
    assert all(result.first_overflow for result in results)  # every rank ends with NaN
    divergence, overflow = cross_rank_answer(results)
    assert divergence == SPREAD
    assert overflow == SPREAD.replace("First divergence", "First inf/NaN")
    rank2 = results[PLANTED_RANK]
    assert (rank2.suspect, rank2.kind, rank2.collectives, rank2.collectives_before_failure) == (
        "Functional_linear_0_forward", "cause", 8, 0)  # 4 parameters x 2 steps, each gradient all_reduced

    path = write_summary(str(tmp_path), results, {"rank4-rank4": "only in the NPU dump"}, "20260101000000")
    with open(path, newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    assert [(row["Rank Pair"], row["Status"], row["Collectives Before Failure"]) for row in rows] == [
        ("rank0-rank0", "failed", "1"), ("rank1-rank1", "failed", "1"), ("rank2-rank2", "failed", "0"),
        ("rank3-rank3", "failed", "1"), ("rank4-rank4", "not compared", "")]
    assert rows[2]["Next Collective"] == "Distributed_all_reduce_0_forward"
    assert rows[2]["First Inf/NaN"] == "Functional_linear_0_forward_output"
    assert int(rows[2]["Failing Forward"]) > 0 and int(rows[2]["Failing Backward"]) > 0
    assert rows[4]["Not Compared"] == "only in the NPU dump"


def test_a_2_percent_error_on_rank_2_is_traced_to_rank_2(dumps, tmp_path):
    results = compare_ranks(dumps, "error", tmp_path)
    assert [result.passed for result in results] == [False] * WORLD
    assert [result.first_failure for result in results][PLANTED_RANK] == "Functional_linear_0_forward_output"
    assert cross_rank_answer(results) == [
        SPREAD, f"No inf/NaN across ranks: no NPU row of the {WORLD} compared ranks holds one"]


def test_compared_by_the_statistics_only_the_answer_is_the_same(dumps, tmp_path):
    results = compare_ranks(dumps, "nan", tmp_path, tensors=False)
    assert cross_rank_answer(results) == [SPREAD, SPREAD.replace("First divergence", "First inf/NaN")]


def test_two_equal_runs_claim_no_origin(dumps, tmp_path):
    results = compare_ranks(dumps, "equal", tmp_path)
    assert [result.passed for result in results] == [True] * WORLD
    assert [(result.failed_forward, result.failed_backward, result.first_failure) for result in results] == [
        (0, 0, "")] * WORLD
    assert cross_rank_answer(results) == [
        f"No divergence across ranks: nothing failed in the {WORLD} compared rank pairs",
        f"No inf/NaN across ranks: no NPU row of the {WORLD} compared ranks holds one"]


def test_a_rank_not_compared_is_never_claimed_as_the_origin(dumps, tmp_path):
    """Rank 2's bench is missing: ranks 0, 1, 3 went bad at the all_reduce, and nothing says where it began."""
    results = [result for result in compare_ranks(dumps, "nan", tmp_path) if result.rank != PLANTED_RANK]
    divergence = cross_rank_answer(results, {"rank2-rank2": "only in the NPU dump"})[0]
    assert divergence.startswith("First divergence across ranks (among the compared ranks): no single origin: "
                                 "ranks 0, 1, 3 (every compared rank) went bad in Distributed_all_reduce_0_forward "
                                 "(collective #1), its inputs still good: rank 0 at Distributed_all_reduce_0_forward")
    assert divergence.endswith("; not compared in full, so it may have started there: rank2-rank2")
    assert "rank 2," not in divergence


def test_a_nan_on_rank_2_in_msprobe_dumps_is_named_in_their_dotted_names(tmp_path):
    """PrecisionDebugger, task tensor: step 0 is the clean run, step 1 the one with rank 2's NaN."""
    out = launch(tmp_path, "msprobe")
    results = []
    for rank in range(WORLD):
        npu, bench = out / "step1" / f"rank{rank}", out / "step0" / f"rank{rank}"
        outcome = compare({"npu_path": str(npu / "dump.json"), "bench_path": str(bench / "dump.json"),
                           "npu_dump_data_dir": str(npu / "dump_tensor_data"),
                           "bench_dump_data_dir": str(bench / "dump_tensor_data")},
                          str(tmp_path / "output"), suffix=f"rank{rank}-rank{rank}", xlsx=False, html=False,
                          rerun=False)
        results.append(PairResult.of(f"rank{rank}-rank{rank}", rank, outcome, str(npu / "dump.json")))
    dotted = ("First divergence across ranks: rank 2, Functional.linear.0.forward, before "
              "Distributed.all_reduce.0.forward (collective #1) spread it to every rank")
    assert cross_rank_answer(results) == [dotted, dotted.replace("First divergence", "First inf/NaN")]


def test_compare_distributed_on_two_workers_says_the_origin_and_writes_the_summary(dumps, tmp_path, capsys):
    from ptdbg_ascend import compare_distributed

    outcomes = compare_distributed(str(dumps["nan"]), str(dumps["bench"]), str(tmp_path), workers=2, xlsx=False,
                                   html=False, rerun=False, is_print_compare_log=False)
    assert SPREAD in capsys.readouterr().out
    with open(outcomes.summary_path, newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert [(row["Rank Pair"], row["Status"]) for row in rows] == [
        (f"rank{rank}-rank{rank}", "failed") for rank in range(WORLD)]  # every rank ends with NaN
