"""Real processes: two gloo ranks, DataLoader workers, a run killed in the middle, no OFF at the end."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap

import numpy as np
import pytest

TRAIN = textwrap.dedent('''
    import os, sys, torch
    from ptdbg_ascend import *

    seed_all()
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Linear(3, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    set_dump_path(os.path.join(sys.argv[1], "npu_dump.pkl"), dump_tag="run")
    register_hook(model, acc_cmp_dump)
    set_dump_switch("ON", mode="api_stack")
    {body}
''')

STEP = '''
def step(x):
    loss = model(x).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
'''


def _run(tmp_path, body, env=None, check=True):
    script = tmp_path / "train.py"
    script.write_text(TRAIN.format(body=textwrap.indent(textwrap.dedent(body), "").replace("\n", "\n")))
    full_env = dict(os.environ, OMP_NUM_THREADS="1")
    full_env.update(env or {})
    return subprocess.run([sys.executable, str(script), str(tmp_path / "out")], env=full_env,
                          capture_output=True, text=True, timeout=120, check=False)


def _lines(path):
    with open(path, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle]


def test_no_off_call_still_leaves_a_complete_pkl(tmp_path):
    result = _run(tmp_path, STEP + "\nstep(torch.randn(2, 4))\n")
    assert result.returncode == 0, result.stderr
    pkl = tmp_path / "out" / "run_v1.0" / "rank0" / "api_stack_npu_dump.pkl"
    names = [line[0] for line in _lines(pkl)]
    assert "Functional_linear_1_backward_output.1" in names and "Functional_linear_0_forward_output" in names


def test_killed_run_leaves_every_line_readable_with_its_npy(tmp_path):
    body = STEP + '''
import time
pkl = os.path.join(sys.argv[1], "run_v1.0", "rank0", "api_stack_npu_dump.pkl")
for i in range(1000):
    step(torch.randn(2, 4))
    if i == 3:
        # The writer thread may lag up to about a second behind (doc/safety_guide.md), longer on a loaded box:
        # wait until it has caught up with the 4 steps without any OFF, then go on stepping and be killed.
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if os.path.exists(pkl):
                with open(pkl, encoding="utf-8") as handle:
                    if handle.read().count("\\n") >= 40:
                        break
            time.sleep(0.05)
        print("STEPPED", flush=True)
'''
    script = tmp_path / "train.py"
    script.write_text(TRAIN.format(body=body))
    process = subprocess.Popen([sys.executable, str(script), str(tmp_path / "out")], stdout=subprocess.PIPE,
                               text=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
    try:
        for line in process.stdout:
            if "STEPPED" in line:
                break
        process.send_signal(signal.SIGKILL)
    finally:
        process.wait(timeout=60)
    rank_dir = tmp_path / "out" / "run_v1.0" / "rank0"
    # Bytes: SIGKILL stops a write at a page boundary, which may fall inside a character of the last line.
    lines = (rank_dir / "api_stack_npu_dump.pkl").read_bytes().split(b"\n")
    complete = [json.loads(line) for line in lines[:-1]]  # every terminated line parses
    # The 4 steps finished before "STEPPED" reached disk with no OFF (10 lines each with the original 4.0 list);
    # the kill may come before any line of the 5th. A script that never wrote them would print STEPPED after 60 s.
    assert len(complete) >= 40
    for record in complete:
        if not record[0].endswith("_stack_info"):
            array = np.load(str(rank_dir / "api_stack_npu_dump" / (record[0] + ".npy")), allow_pickle=False)
            assert list(array.shape) == record[4]


def _free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_two_gloo_ranks_write_their_own_rank_dirs(tmp_path):
    body = '''
import torch.distributed as dist
dist.init_process_group("gloo")
x = torch.full((2, 4), float(dist.get_rank() + 1))
y = model(x).sum(0)
dist.all_reduce(y)
y.sum().backward()
set_dump_switch("OFF")
dist.barrier()  # gloo: a rank tearing down while its peer still talks can abort (std::terminate)
dist.destroy_process_group()
'''
    script = tmp_path / "train.py"
    script.write_text(TRAIN.format(body=body))
    port = str(_free_port())
    processes = []
    for rank in range(2):
        env = dict(os.environ, OMP_NUM_THREADS="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=port,
                   RANK=str(rank), WORLD_SIZE="2")
        processes.append(subprocess.Popen([sys.executable, str(script), str(tmp_path / "out")], env=env,
                                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    for process in processes:
        out, err = process.communicate(timeout=120)
        assert process.returncode == 0, err
    tag_dir = tmp_path / "out" / "run_v1.0"
    assert sorted(os.listdir(tag_dir)) == ["rank0", "rank1"]
    reduce_in, reduce_out = [], []
    for rank in range(2):
        records = {line[0]: line for line in _lines(tag_dir / f"rank{rank}" / "api_stack_npu_dump.pkl")}
        # each rank saw its own input; all_reduce is recorded with its in-place result as output
        assert records["Functional_linear_0_forward_input.0"][5][0] == float(rank + 1)
        reduce_in.append(records["Distributed_all_reduce_0_forward_input.0"][5])
        reduce_out.append(records["Distributed_all_reduce_0_forward_output.0"][5])
        assert "Distributed_all_reduce_0_backward_input.0" not in records
    # all_reduce works in place: inputs are each rank's own values, the output (the sum) is the same on
    # both ranks and its mean is the sum of the input means
    assert reduce_in[0] != reduce_in[1] and reduce_out[0] == reduce_out[1]
    assert abs(reduce_out[0][2] - (reduce_in[0][2] + reduce_in[1][2])) < 1e-4


def test_dataloader_workers_neither_count_nor_write(tmp_path):
    body = STEP + '''
class Data(torch.utils.data.Dataset):
    def __len__(self):
        return 8
    def __getitem__(self, index):
        return torch.ones(4).mul(index).add(1)   # torch calls inside the worker

loader = torch.utils.data.DataLoader(Data(), batch_size=4, num_workers=int(sys.argv[2]))
for batch in loader:
    step(batch)
set_dump_switch("OFF")
'''
    script = tmp_path / "train.py"
    script.write_text(TRAIN.format(body=body))
    names = {}
    for workers in ("0", "2"):
        out = tmp_path / f"out{workers}"
        result = subprocess.run([sys.executable, str(script), str(out), workers], capture_output=True, text=True,
                                timeout=120, env=dict(os.environ, OMP_NUM_THREADS="1"))
        assert result.returncode == 0, result.stderr
        names[workers] = [line[0] for line in _lines(out / "run_v1.0" / "rank0" / "api_stack_npu_dump.pkl")]
    # with workers the data calls (Tensor_mul, Tensor_add in __getitem__) happen elsewhere and leave no trace
    with_workers = [name for name in names["2"] if not name.startswith("Torch_stack")]
    assert not any(name.startswith(("Tensor_mul_0_", "Tensor_add_0_", "Torch_ones_0_")) for name in with_workers)
    assert "Functional_linear_0_forward_output" in with_workers and "Functional_linear_2_forward_output" in with_workers
    assert any(name.startswith("Tensor_mul_0_forward") for name in names["0"])
    # the model's calls keep the same names with and without workers
    model_calls = lambda found: [name for name in found if name.startswith("Functional_linear")]  # noqa: E731
    assert model_calls(names["0"]) == model_calls(names["2"])
