"""Memory bombs against the pre-check (issue 17, item 3): a few hundred bytes of dump that would make the
tool allocate gigabytes. Each runs under a real address-space cap (``prlimit --as``), so a bomb that got
through would kill the run: every one must end as a SKIP row within seconds, the run exiting normally."""

from __future__ import annotations

import csv
import os
import re
import shutil
import subprocess
import sys
import time

import pytest

torch = pytest.importorskip("torch")

from hostile_dumps import tensor_leaf, value, write_dump  # noqa: E402
from tensor_bombs import deflated_pt  # noqa: E402

from ptdbg_ascend.errors import ParameterError  # noqa: E402

CAP = 3 * 1024 ** 3  # the address space the run may map: torch itself maps ~0.7 GiB
pytestmark = pytest.mark.skipif(shutil.which("prlimit") is None, reason="needs prlimit (util-linux)")


def read_rows(path):
    with open(path, encoding="utf-8-sig", newline="") as handle:
        return {row[0]: row for row in list(csv.reader(handle))[1:]}


def run_capped(args, cwd, env, cap=CAP):
    started = time.time()
    process = subprocess.run(["prlimit", f"--as={cap}", sys.executable, "-m", "ptdbg_ascend.cli"] + args,
                             cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=300)
    return process.returncode, process.stdout.decode(errors="replace"), time.time() - started


def result_rows(out):
    name = [n for n in os.listdir(str(out)) if n.startswith("accuracy_checking_result_")][0]
    return read_rows(str(out / name))


def test_memory_bombs_in_a_tensor_dump_are_skip_rows_within_seconds(tmp_path, child_env):
    x = torch.randn(4)
    stride0 = torch.zeros(1).expand(2 ** 31)  # 1.5 KB on disk, 8 GiB (16 GiB in float64) once copied
    counts = torch.tensor([2 ** 31])  # bincount of it: 2**31 int64 counts
    calls = [
        ("Torch.relu", [tensor_leaf("x.pt", x)], {}),
        ("Torch.relu", [tensor_leaf("stride0.pt", stride0)], {}),  # the record tells the truth: budget
        ("Torch.relu", [tensor_leaf("stride0.pt", stride0, shape=[1])], {}),  # the record lies: the file is checked
        ("Torch.relu", [tensor_leaf("bomb.pt", x)], {}),  # a 4-element record, a 1 GiB deflated member
        ("Torch.relu", [tensor_leaf("x.pt", x, shape=[2 ** 40])], {}),  # a terabyte shape
        ("Torch.full", [value("torch.Size", [2 ** 20, 2 ** 20]), value("float", 1.0)], {}),  # 4 TiB from ints
        ("Torch.arange", [value("int", 0), value("int", 2 ** 40)], {}),
        ("Torch.bincount", [tensor_leaf("counts.pt", counts)], {}),  # data-dependent output size
    ]
    tensors = {"x.pt": x, "stride0.pt": stride0, "counts.pt": counts, "bomb.pt": deflated_pt(1024 ** 3)}
    dump = write_dump(str(tmp_path / "dump"), calls, tensors)
    assert os.path.getsize(str(tmp_path / "dump" / "dump_tensor_data" / "stride0.pt")) < 4096
    code, output, seconds = run_capped(["run-ut", "-api_info", dump, "-o", str(tmp_path / "out"), "--no-progress"],
                                       str(tmp_path), child_env)
    assert code == 0, output
    assert seconds < 60, output
    rows = result_rows(tmp_path / "out")
    assert rows["Torch.relu.0"][1] == "pass"
    expected = {
        "Torch.relu.1": r"^Needs about 32\.0 GiB \(inputs as loaded, their float64 and dumped-dtype "
                        r"copies\), over the memory budget of [\d.]+ MiB per call; not run",
        "Torch.relu.2": r"stride0\.pt holds a tensor of shape \(2147483648,\) \(8\.0 GiB once copied\), over the",
        "Torch.relu.3": r"bomb\.pt unpacks to 1\.0 GiB, over the [\d.]+ MiB a tensor may take here",
        "Torch.relu.4": r"Needs about 16\.0 TiB",
        "Torch.full.5": r"^Needs about 12\.0 TiB \(inputs, their float64 and dumped-dtype copies, "
                        r"both runs' outputs\)",
        "Torch.arange.6": r"Needs about 16\.0 TiB",
        "Torch.bincount.7": r"Needs about 32\.0 GiB \(inputs, their copies and outputs estimated from the inputs, "
                            r"as the meta device cannot run it\)",
    }
    for name, pattern in expected.items():
        assert rows[name][1] == "SKIP" and re.search(pattern, rows[name][3]), (name, rows[name][3])
    assert "1 pass, 0 warning, 0 error, 7 SKIP" in output


def test_memory_bombs_in_a_statistics_dump_are_skip_rows(tmp_path, child_env):
    x = torch.randn(4)
    calls = [("Torch.relu", [tensor_leaf(None, x)], {}),
             ("Torch.relu", [tensor_leaf(None, x, shape=[2 ** 31])], {}),  # a 16 GiB random tensor before
             ("Torch.relu", [tensor_leaf(None, x, shape=[2 ** 40])], {})]
    dump = write_dump(str(tmp_path / "dump"), calls, task="statistics")
    assert os.path.getsize(dump) < 1024
    code, output, seconds = run_capped(["run-ut", "-api_info", dump, "-o", str(tmp_path / "out"), "--no-progress"],
                                       str(tmp_path), child_env)
    assert code == 0 and seconds < 60, output
    rows = result_rows(tmp_path / "out")
    assert rows["Torch.relu.0"][1] == "pass"
    assert rows["Torch.relu.1"][1] == "SKIP" and "Needs about 32.0 GiB" in rows["Torch.relu.1"][3]
    assert rows["Torch.relu.2"][1] == "SKIP" and "Needs about 16.0 TiB" in rows["Torch.relu.2"][3]


def test_an_allocator_error_is_the_calls_row_and_the_run_goes_on(tmp_path, child_env):
    """With the budget lifted on purpose, the allocation fails inside torch: that call's SKIP row, and the
    calls after it still run."""
    x = torch.randn(4)
    calls = [("Torch.full", [value("torch.Size", [2 ** 31]), value("float", 1.0)], {}),
             ("Torch.relu", [tensor_leaf("x.pt", x)], {})]
    dump = write_dump(str(tmp_path / "dump"), calls, {"x.pt": x})
    code, output, _ = run_capped(["run-ut", "-api_info", dump, "-o", str(tmp_path / "out"), "--no-progress",
                                  "--memory-budget", "1T"], str(tmp_path), child_env)
    assert code == 0, output
    rows = result_rows(tmp_path / "out")
    assert rows["Torch.full.0"][1] == "SKIP" and "can't allocate memory" in rows["Torch.full.0"][3]
    assert rows["Torch.relu.1"][1] == "pass"


def test_the_default_budget_follows_the_address_space_limit(child_env):
    from ptdbg_ascend.memory import available_memory, default_budget

    script = ("from ptdbg_ascend.memory import available_memory, default_budget\n"
              "print(available_memory(), default_budget())")
    process = subprocess.run(["prlimit", f"--as={CAP}", sys.executable, "-c", script], env=child_env,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120)
    available, budget = (int(word) for word in process.stdout.decode().split())
    assert 0 < available < CAP and budget == max(256 * 1024 ** 2, available // 4)
    assert available_memory() > available  # without the cap this process may take more
    assert default_budget(4) < default_budget(1)


def test_sizes_in_words():
    from ptdbg_ascend.memory import format_size, parse_size

    assert parse_size("memory_budget", "8G") == 8 * 1024 ** 3
    assert parse_size("memory_budget", "512MiB") == 512 * 1024 ** 2
    assert parse_size("memory_budget", "1.5g") == 3 * 1024 ** 3 // 2
    assert parse_size("memory_budget", 4096) == 4096
    for bad in ("lots", "-1G", 0, True, "8 GB please"):
        with pytest.raises(ParameterError, match="memory_budget"):
            parse_size("memory_budget", bad)
    assert format_size(17179869184) == "16.0 GiB" and format_size(1536) == "1.5 KiB" and format_size(12) == "12 B"
