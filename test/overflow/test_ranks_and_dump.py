"""Overflow check next to a dump, and two real gloo ranks that count their overflows separately."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import textwrap

import pytest

from ptdbg_ascend import acc_cmp_dump, overflow_check, register_hook, set_dump_path, set_dump_switch

RANK_SCRIPT = textwrap.dedent('''
    import os, sys, torch
    import torch.distributed as dist
    from ptdbg_ascend import *

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 4)
    set_dump_path(sys.argv[1])
    register_hook(model, overflow_check, overflow_nums=2)
    stopped = None
    for step in range(3):
        x = torch.ones(2, 4) * (1000.0 if rank == 1 and step >= 1 else 1.0)
        if stopped is None:
            try:
                torch.exp(model(x)).sum().backward()
            except ValueError as error:
                stopped = (step, str(error))
        dist.barrier()  # both ranks stay in step; a barrier carries no data, so no inf crosses ranks
    print(repr(stopped))
    dist.barrier()  # gloo: a rank tearing down while its peer still talks can abort (std::terminate)
    dist.destroy_process_group()
''')


ALL_REDUCE_SCRIPT = textwrap.dedent('''
    import sys, torch
    import torch.distributed as dist
    from ptdbg_ascend import *

    dist.init_process_group("gloo")
    set_dump_path(sys.argv[1])
    value = float("inf") if dist.get_rank() == 1 else 1.0
    grads = torch.full((3,), value)  # before register_hook: torch.full is wrapped (the original 4.0's list)
    register_hook(torch.nn.Identity(), overflow_check)
    try:
        dist.all_reduce(grads)  # the inf of rank 1 reaches rank 0 through the collective
    except ValueError as error:
        print(error)
    dist.barrier()  # gloo: a rank tearing down while its peer still talks can abort (std::terminate)
    dist.destroy_process_group()
''')


def _run_ranks(tmp_path, source):
    script = tmp_path / "train.py"
    script.write_text(source)
    port = str(_free_port())
    processes = []
    for rank in range(2):
        env = dict(os.environ, OMP_NUM_THREADS="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=port, RANK=str(rank),
                   WORLD_SIZE="2")
        env.pop("ASCEND_WORK_PATH", None)
        processes.append(subprocess.Popen([sys.executable, str(script), str(tmp_path / "out")], env=env,
                                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outputs = []
    for process in processes:
        out, err = process.communicate(timeout=120)
        assert process.returncode == 0, err
        outputs.append(out.strip().splitlines()[-1])
    return outputs


def test_an_overflow_arriving_through_all_reduce_is_found_on_every_rank(tmp_path):
    outputs = _run_ranks(tmp_path, ALL_REDUCE_SCRIPT)
    for rank in range(2):
        rank_dir = tmp_path / "out" / "ptdbg_dump_v1.0" / f"rank{rank}"
        pkls = [name for name in os.listdir(str(rank_dir)) if name.endswith(".pkl")]
        assert len(pkls) == 1
        assert outputs[rank] == f"[overflow 1 times]: dump file is saved in '{rank_dir / pkls[0]}'."
        with open(str(rank_dir / pkls[0]), encoding="utf-8") as handle:
            lines = [json.loads(line) for line in handle]
        assert [line[0] for line in lines] == ["Distributed_all_reduce_0_forward_stack_info",
                                               "Distributed_all_reduce_0_forward_output.0"]
        assert lines[1][5][0] == float("inf")


def _free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_each_rank_counts_its_own_overflows(tmp_path):
    outputs = _run_ranks(tmp_path, RANK_SCRIPT)
    tag_dir = tmp_path / "out" / "ptdbg_dump_v1.0"
    assert outputs[0] == "None"  # rank 0 never overflowed and trained all steps
    assert sorted(os.listdir(str(tag_dir))) == ["rank1"]
    pkls = sorted(name for name in os.listdir(str(tag_dir / "rank1")) if name.endswith(".pkl"))
    assert [re.sub(r"_\d{8}_\d{6}_", "_T_", name) for name in pkls] == ["Overflow_info_T_1.pkl", "Overflow_info_T_2.pkl"]
    # rank 1 stopped at step 1, on its second overflow (exp, then sum of inf)
    second = str(tag_dir / "rank1" / pkls[1])
    assert outputs[1] == repr((1, f"[overflow 2 times]: dump file is saved in '{second}'."))
    with open(second, encoding="utf-8") as handle:
        assert json.loads(handle.readline())[0] == "Tensor_sum_1_forward_stack_info"


def test_overflow_check_next_to_an_api_stack_dump(tmp_path, session, no_npu, exp_net, train_exp, pkl_records):
    set_dump_path(str(tmp_path / "npu_dump.pkl"))
    register_hook(exp_net, acc_cmp_dump)
    set_dump_switch("ON", mode="api_stack")
    register_hook(exp_net, overflow_check)
    with pytest.raises(ValueError, match=r"^\[overflow 1 times\]"):
        train_exp(exp_net, steps=3)
    set_dump_switch("OFF")
    rank_dir = tmp_path / "ptdbg_dump_v1.0" / "rank0"
    dumped = [line[0] for line in pkl_records(rank_dir / "api_stack_npu_dump.pkl")]
    # the dump recorded everything up to the overflowing call, which is recorded too (same names)
    assert "Torch_exp_1_forward_output" in dumped and "Torch_exp_2_forward_output" in dumped
    overflow = [name for name in os.listdir(str(rank_dir)) if name.startswith("Overflow_info_") and name.endswith(".pkl")]
    assert len(overflow) == 1
    assert pkl_records(rank_dir / overflow[0])[0][0] == "Torch_exp_2_forward_stack_info"
