"""Out of memory while dumping: a tensor whose copy cannot be made keeps its pkl line (dtype, shape) without an
npy, the dump goes on, the warning names the record and the cause, and compare's row says why its file is
missing. A real allocation failure: the run lowers its own address-space limit (``RLIMIT_AS``) to leave room
for the computation but not for the dump's copy of a 100 MB tensor."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import textwrap

import pytest

from ptdbg_ascend.comparison.api import compare

TRAIN = textwrap.dedent('''
    import os, re, resource, sys
    import torch
    torch.set_num_threads(1)
    from ptdbg_ascend import *
    out, limited = sys.argv[1], sys.argv[2] == "limited"
    register_hook(torch.nn.Linear(2, 2), acc_cmp_dump, rank=0)
    set_dump_path(os.path.join(out, "npu_dump.pkl"))
    big = torch.ones(25_000_000)  # 100 MB
    set_dump_switch("ON")
    torch.relu(torch.ones(3))  # the writer thread starts before the limit
    if limited:  # room for relu's output, not for the dump's copy of it (nor its float64 statistics)
        mapped = int(re.search(r"VmSize:\\s+(\\d+)", open("/proc/self/status").read()).group(1)) * 1024
        resource.setrlimit(resource.RLIMIT_AS, (mapped + 150_000_000, resource.RLIM_INFINITY))
    for _ in range(2):
        torch.relu(big)  # input and output: 100 MB each
    resource.setrlimit(resource.RLIMIT_AS, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    torch.relu(torch.full((3,), 2.0))  # memory back: recorded whole again
    set_dump_switch("OFF")
    print("DONE", flush=True)
''')


def _run(tmp_path, name, limited):
    script = tmp_path / "train.py"
    script.write_text(TRAIN)
    out = tmp_path / name
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env.pop("RANK", None)
    run = subprocess.run([sys.executable, str(script), str(out), "limited" if limited else "free"],
                         capture_output=True, text=True, env=env, timeout=300)
    assert run.returncode == 0 and "DONE" in run.stdout, run.stdout + run.stderr
    return out / "ptdbg_dump_v1.0" / "rank0", run.stdout


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS and /proc/self/status")
def test_a_copy_that_runs_out_of_memory_is_said_at_dump_time_and_in_the_compare(tmp_path):
    output_dir = str(tmp_path / "compare")
    os.mkdir(output_dir)
    rank_dir, log = _run(tmp_path, "npu", limited=True)
    with open(str(rank_dir / "npu_dump.pkl"), encoding="utf-8") as handle:
        lines = {line[0]: line for line in map(json.loads, handle)}
    missing = sorted(name for name in lines if not (rank_dir / "npu_dump" / (name + ".npy")).exists())
    # the four records of the two big relu calls lost their npy, nothing else; their lines keep dtype and shape
    assert missing == ["Torch_relu_1_forward_input.0", "Torch_relu_1_forward_output", "Torch_relu_2_forward_input.0",
                       "Torch_relu_2_forward_output"], missing
    assert all(lines[name][3:5] == ["torch.float32", [25000000]] for name in missing)
    assert (rank_dir / "npu_dump" / "Torch_relu_3_forward_output.npy").exists()  # memory back: whole again
    warnings = [line.split("-[WARNING]", 1)[1] for line in log.splitlines() if "-[WARNING]" in line]
    first = [w for w in warnings if w.startswith("No npy file for Torch_relu_1_forward_input.0")]
    assert first and "out of memory" in first[0], warnings
    summary = [w for w in warnings if w.startswith("4 tensor records of this window have no npy file")]
    assert summary and "out of memory" in summary[0] and "Torch_relu_1_forward_input.0" in summary[0], warnings

    bench_dir, _ = _run(tmp_path, "bench", limited=False)
    outcome = compare({"npu_pkl_path": str(rank_dir / "npu_dump.pkl"), "bench_pkl_path": str(bench_dir / "npu_dump.pkl"),
                       "npu_dump_data_dir": str(rank_dir / "npu_dump"),
                       "bench_dump_data_dir": str(bench_dir / "npu_dump"), "is_print_compare_log": False},
                      output_dir, xlsx=False, auto_analyze=False)
    with open(outcome.csv_path, newline="", encoding="utf-8") as handle:
        rows = {row["NPU Name"]: row for row in csv.DictReader(handle)}
    for name in missing:
        message = [cell for cell in rows[name].values() if "not found" in cell]
        assert message and "the dump wrote no npy for it: out of memory" in message[0], rows[name]
    assert rows["Torch_relu_3_forward_output"]["Accuracy Reached or Not"] == "Yes"


def test_a_hostile_no_npy_file_gives_no_reason_it_should_not(tmp_path, capsys):
    from ptdbg_ascend.readers import no_npy

    data_dir = tmp_path / "npu_dump"
    data_dir.mkdir()
    noted = data_dir / ".ptdbg.no_npy"
    noted.write_text('["Torch_a_0_forward_output", "out of memory while copying the tensor (MemoryError: x)"]\n'
                     '["Torch_b_0_forward_output"]\n{"not": "a pair"}\nnot json\n'
                     '["Torch_c_0_forward_output", "' + "y" * 5000 + '"]\n')
    assert no_npy.reason(str(data_dir), "Torch_a_0_forward_output").startswith("out of memory")
    assert no_npy.reason(str(data_dir), "Torch_b_0_forward_output") is None
    assert len(no_npy.reason(str(data_dir), "Torch_c_0_forward_output")) == no_npy.MAX_REASON
    assert f"Skipped 3 lines of {noted} that are not [record name, reason]." in capsys.readouterr().out
    # a link is not followed, a directory is not read
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_text('["Torch_d_0_forward_output", "planted"]\n')
    other = tmp_path / "other"
    other.mkdir()
    os.symlink(str(elsewhere), str(other / ".ptdbg.no_npy"))
    assert no_npy.reason(str(other), "Torch_d_0_forward_output") is None
    third = tmp_path / "third"
    (third / ".ptdbg.no_npy").mkdir(parents=True)
    assert no_npy.reason(str(third), "Torch_d_0_forward_output") is None
    # changed since it was read: read again
    noted.write_text('["Torch_a_0_forward_output", "another reason"]\n')
    assert no_npy.reason(str(data_dir), "Torch_a_0_forward_output") == "another reason"


TRAIN_MSPROBE = textwrap.dedent('''
    import re, resource, sys
    import torch
    torch.set_num_threads(1)
    from ptdbg_ascend import PrecisionDebugger
    out, limited = sys.argv[1], sys.argv[2] == "limited"
    debugger = PrecisionDebugger(task="tensor", level="L1", dump_path=out)
    big = torch.ones(25_000_000)  # 100 MB
    debugger.start()
    torch.relu(torch.ones(3))  # the writer thread starts before the limit
    if limited:
        mapped = int(re.search(r"VmSize:\\s+(\\d+)", open("/proc/self/status").read()).group(1)) * 1024
        resource.setrlimit(resource.RLIMIT_AS, (mapped + 150_000_000, resource.RLIM_INFINITY))
    for _ in range(2):
        torch.relu(big)
    resource.setrlimit(resource.RLIMIT_AS, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    torch.relu(torch.full((3,), 2.0))
    debugger.stop()
    print("DONE", flush=True)
''')


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS and /proc/self/status")
def test_a_pt_copy_that_runs_out_of_memory_leaves_a_leaf_that_says_why(tmp_path):
    script = tmp_path / "train_msprobe.py"
    script.write_text(TRAIN_MSPROBE)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env.pop("RANK", None)
    runs = {}
    for name, limited in (("npu", True), ("bench", False)):
        run = subprocess.run([sys.executable, str(script), str(tmp_path / name), "limited" if limited else "free"],
                             capture_output=True, text=True, env=env, timeout=300)
        assert run.returncode == 0 and "DONE" in run.stdout, run.stdout + run.stderr
        runs[name] = (tmp_path / name / "step0" / "rank", run.stdout)
    rank_dir, log = runs["npu"]
    with open(str(rank_dir / "dump.json"), encoding="utf-8") as handle:
        data = json.load(handle)["data"]
    # every call is there; the big tensors' leaves have no file and say why, the small ones after them do
    assert list(data) == ["Torch.relu.0.forward", "Torch.relu.1.forward", "Torch.relu.2.forward", "Torch.full.0.forward",
                          "Torch.relu.3.forward"]
    for k in (1, 2):
        entry = data[f"Torch.relu.{k}.forward"]
        for leaf in (entry["input_args"][0], entry["output"][0]):
            assert "data_name" not in leaf and leaf["shape"] == [25000000], leaf
            assert leaf["not_saved"].startswith("out of memory while copying the tensor"), leaf
    assert data["Torch.relu.3.forward"]["output"][0]["data_name"] == "Torch.relu.3.forward.output.0.pt"
    assert "No .pt file for Torch.relu.1.forward.input.0: out of memory" in log
    assert f"4 tensors of {rank_dir} have no .pt file: out of memory" in log

    output_dir = str(tmp_path / "compare")
    os.mkdir(output_dir)
    outcome = compare({"npu_json_path": str(rank_dir / "dump.json"),
                       "bench_json_path": str(runs["bench"][0] / "dump.json"), "is_print_compare_log": False},
                      output_dir, xlsx=False, auto_analyze=False)
    with open(outcome.csv_path, newline="", encoding="utf-8") as handle:
        rows = {row["NPU Name"]: row for row in csv.DictReader(handle)}
    message = [cell for cell in rows["Torch_relu_1_forward_output"].values() if "saved no tensor file" in cell]
    assert message and "out of memory while copying the tensor" in message[0], rows["Torch_relu_1_forward_output"]
    assert rows["Torch_relu_3_forward_output"]["Accuracy Reached or Not"] == "Yes"
