"""The migration promise: a script migrated by ``ptdbg migrate`` runs and dumps the same numbers as the
legacy script did (every matched compare row ``Yes``)."""

import csv
import json
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("torch")
pytest.importorskip("libcst")

from ptdbg_ascend.cli import main as ptdbg_main  # noqa: E402
from ptdbg_ascend.comparison.api import compare  # noqa: E402
from ptdbg_ascend.debugger import PrecisionDebugger  # noqa: E402

LEGACY_SCRIPT = textwrap.dedent("""\
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    from ptdbg_ascend import *

    seed_all(seed=1234, rm_dropout=True)
    set_dump_path("./dump/npu_dump.pkl")


    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(1, 4, 3, padding=1)
            self.bn = nn.BatchNorm2d(4)
            self.fc = nn.Linear(4 * 4 * 4, 3)

        def forward(self, x):
            x = F.max_pool2d(F.relu(self.bn(self.conv(x))), 2)
            return self.fc(x.flatten(1))


    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    register_hook(model, acc_cmp_dump)
    for step in range(2):
        x = torch.randn(2, 1, 8, 8)
        target = torch.tensor([0, 2])
        if step == 0:
            set_dump_switch("ON", mode="api_stack")
        loss = F.cross_entropy(model(x), target)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step == 0:
            set_dump_switch("OFF")
""")


@pytest.mark.skipif(not hasattr(PrecisionDebugger, "start"), reason="PrecisionDebugger (ptdbg_ascend/debugger.py) "
                    "is still the placeholder: the migrated script cannot run")
def test_migrated_script_dumps_what_the_legacy_script_dumped(tmp_path):
    for name in ("legacy", "migrated"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "train.py").write_text(LEGACY_SCRIPT)
    assert ptdbg_main(["migrate", str(tmp_path / "migrated" / "train.py"), "--write"]) == 0
    migrated = (tmp_path / "migrated" / "train.py").read_text()
    assert 'debugger = PrecisionDebugger(config_path="./config.json")' in migrated
    assert "set_dump_switch" not in migrated and "register_hook" not in migrated
    assert json.loads((tmp_path / "migrated" / "config.json").read_text())["task"] == "tensor"
    for name in ("legacy", "migrated"):
        subprocess.run([sys.executable, "train.py"], cwd=str(tmp_path / name), check=True, stdout=subprocess.DEVNULL)

    rank = tmp_path / "legacy" / "dump" / "ptdbg_dump_v1.0" / "rank0"
    dump_json = tmp_path / "migrated" / "dump" / "step0" / "rank" / "dump.json"
    assert dump_json.is_file() and (dump_json.parent / "stack.json").is_file()
    (tmp_path / "cmp").mkdir()
    outcome = compare({"npu_pkl_path": str(rank / "api_stack_npu_dump.pkl"),
                       "npu_dump_data_dir": str(rank / "api_stack_npu_dump"),
                       "bench_json_path": str(dump_json), "is_print_compare_log": False}, str(tmp_path / "cmp"))
    with open(outcome.csv_path, newline="") as handle:
        rows = list(csv.DictReader(handle))
    legacy_records = [json.loads(line)[0] for line in (rank / "api_stack_npu_dump.pkl").read_text().splitlines()
                      if "_stack_info" not in line]
    matched = [row for row in rows if row["NPU Name"] != "Nan" and row["Bench Name"] != "Nan"]
    # Every legacy record found its twin (the new dump also holds the 0-d/int tensors legacy filters out).
    assert [row["NPU Name"] for row in matched] == legacy_records
    assert all(row["Bench Name"] == row["NPU Name"] for row in matched)
    assert {row["Accuracy Reached or Not"] for row in matched} == {"Yes"}
    assert "Functional_conv2d_0_backward_output.1" in legacy_records  # backward really compared
    assert outcome.first_failure is None

    # The converter on a real dump.json from the msprobe writer: converted to pkl+npy, it still pairs up.
    assert ptdbg_main(["convert", str(dump_json.parent), str(tmp_path / "as_legacy")]) == 0
    (tmp_path / "cmp2").mkdir()
    again = compare({"npu_pkl_path": str(rank / "api_stack_npu_dump.pkl"),
                     "npu_dump_data_dir": str(rank / "api_stack_npu_dump"),
                     "bench_pkl_path": str(tmp_path / "as_legacy" / "dump.pkl"),
                     "bench_dump_data_dir": str(tmp_path / "as_legacy" / "dump"), "is_print_compare_log": False},
                    str(tmp_path / "cmp2"))
    with open(again.csv_path, newline="") as handle:
        rows = list(csv.DictReader(handle))
    matched = [row for row in rows if row["NPU Name"] != "Nan" and row["Bench Name"] != "Nan"]
    assert [row["NPU Name"] for row in matched] == legacy_records
    assert {row["Accuracy Reached or Not"] for row in matched} == {"Yes"}
