"""``ptdbg export-config`` runs a real legacy script (its real legacy calls are recorded) and writes the
config even when the script crashes."""

import json
import subprocess
import sys
import textwrap

CRASHING_SCRIPT = textwrap.dedent("""
    import sys
    import torch
    from ptdbg_ascend import *
    seed_all(seed=11, mode=True, rm_dropout=True)
    set_dump_path("./dump/npu_dump.pkl")
    model = torch.nn.Linear(2, 2)
    register_hook(model, acc_cmp_dump, rank=0)
    set_dump_switch("ON", mode="api_list", api_list=["linear"], dump_mode=["forward"], filter_switch="OFF")
    model(torch.ones(1, 2))
    assert sys.argv[1:] == ["--epochs", "1"], sys.argv
    raise RuntimeError("boom after the dump started")
""")


def test_export_config_of_a_crashing_script(tmp_path):
    (tmp_path / "train.py").write_text(CRASHING_SCRIPT)
    done = subprocess.run(
        [sys.executable, "-m", "ptdbg_ascend.cli", "export-config", "-o", "cfg.json", "train.py", "--epochs", "1"],
        cwd=str(tmp_path), capture_output=True, text=True)
    assert done.returncode == 1, done.stderr
    assert "RuntimeError: boom after the dump started" in done.stderr
    assert json.loads((tmp_path / "cfg.json").read_text()) == {
        "task": "tensor", "dump_path": "./dump", "rank": [], "step": [], "level": "L1", "seed": 11,
        "is_deterministic": True, "enable_dataloader": False, "acl_config": "",
        "tensor": {"scope": [], "list": ["linear"], "data_mode": ["forward"], "backward_input": [],
                   "file_format": "npy"},
    }
    assert "register_hook(rank=0)" in done.stdout
    assert (tmp_path / "dump" / "ptdbg_dump_v1.0" / "rank0").is_dir()  # the script really ran its dump
