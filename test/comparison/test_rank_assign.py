"""Who compares which rank pair under torchrun (``rank_world.assign``/``merge``, torch-free): each pair to a process
that sees its files, the least loaded first; pairs whose sides are on different machines are named."""

from __future__ import annotations

import os

import pytest

from ptdbg_ascend.comparison import rank_world
from ptdbg_ascend.comparison.distributed import scan

pytestmark = pytest.mark.torchfree


def test_shared_storage_gives_pair_i_to_process_i_mod_world():
    seen = [[(rank, f"rank{rank}-rank{rank}") for rank in range(6)]] * 4
    assert rank_world.assign(seen, done=set()) == {f"rank{r}-rank{r}": r % 4 for r in range(6)}


def test_a_pair_goes_only_to_a_process_that_sees_it_and_done_pairs_to_none():
    seen = [[(0, "rank0-rank0"), (1, "rank1-rank1")], [(2, "rank2-rank2"), (3, "rank3-rank3")],
            [(0, "rank0-rank0"), (1, "rank1-rank1"), (2, "rank2-rank2"), (3, "rank3-rank3")]]
    assert rank_world.assign(seen, done={"rank1-rank1"}) == {"rank0-rank0": 0, "rank2-rank2": 1, "rank3-rank3": 2}


def test_ranks_on_two_machines_merge_and_a_rank_split_between_them_is_named(rank_dumps, tmp_path):
    """Machine A holds ranks 0, 1 of both sides and NPU rank 5; machine B ranks 2, 3 and bench rank 5."""
    machine_a = scan(rank_dumps("a/npu", [0, 1, 5]), rank_dumps("a/bench", [0, 1]))
    machine_b = scan(rank_dumps("b/npu", [2, 3]), rank_dumps("b/bench", [2, 3, 5]))
    view, resumed, apart = rank_world.merge([machine_a, machine_b], [{}, {}])
    assert [task.pair for task in view.tasks] == ["rank0-rank0", "rank1-rank1", "rank2-rank2", "rank3-rank3"]
    assert os.path.dirname(view.tasks[2].npu_dir) == str(tmp_path / "b" / "npu" / "ptdbg_dump_v1.0")
    assert (view.npu_only, view.bench_only, resumed) == ([], [], {})
    assert apart == {"rank5": "files not found together on any machine"}
