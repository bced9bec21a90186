"""``ptdbg migrate`` on a msprobe 1.0.4 script (grad_probe, free_benchmark, any task): its msprobe imports become
ptdbg_ascend's, nothing else changes, and its own config.json is kept (none is written)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("libcst")

from ptdbg_ascend.compat.migrate import migrate_file, migrate_source

SCRIPT = """\
import torch
from msprobe.pytorch import PrecisionDebugger, seed_all
from msprobe.pytorch.grad_probe.grad_compare import GradComparator as Compare

debugger = PrecisionDebugger(config_path="./config.json")  # task free_benchmark or grad_probe
"""


@pytest.mark.torchfree
def test_the_msprobe_imports_are_rewritten_and_every_other_byte_kept():
    migration = migrate_source(SCRIPT, "train.py")
    assert migration.ok and not migration.writes_config
    assert migration.new_source == SCRIPT.replace(
        "from msprobe.pytorch import PrecisionDebugger, seed_all", "from ptdbg_ascend import PrecisionDebugger, seed_all"
    ).replace("from msprobe.pytorch.grad_probe.grad_compare import GradComparator as Compare",
              "from ptdbg_ascend import GradComparator as Compare")


@pytest.mark.torchfree
@pytest.mark.parametrize("line, says", [
    ("from msprobe.pytorch import PrecisionDebugger, OnlineRunUt", "OnlineRunUt: no ptdbg_ascend equivalent"),
    ("import msprobe.pytorch as probe", "import the names instead"),
    ("from msprobe.pytorch import *", "name the imports"),
])
def test_what_has_no_equivalent_is_an_issue_with_its_line_and_nothing_changes(line, says):
    migration = migrate_source("import os\n" + line + "\n", "train.py")
    assert not migration.ok and migration.new_source == migration.source
    assert [(issue.line, says in issue.message) for issue in migration.issues] == [(2, True)]


def test_a_migrated_free_benchmark_script_runs_with_its_own_config(tmp_path):
    pytest.importorskip("torch")
    script = tmp_path / "train.py"
    script.write_text(SCRIPT + """\
model = torch.nn.Linear(8, 8).bfloat16()
debugger.start()
model(torch.randn(4, 8).bfloat16()).sum()
debugger.stop()
""")
    config = {"task": "free_benchmark", "dump_path": "./out", "free_benchmark": {"pert_mode": "improve_precision"}}
    (tmp_path / "config.json").write_text(json.dumps(config))
    migration = migrate_file(str(script), write=True)
    assert migration.ok and json.loads((tmp_path / "config.json").read_text()) == config  # kept as it was
    run = subprocess.run([sys.executable, str(script)], cwd=str(tmp_path), capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert run.returncode == 0, run.stderr
    assert "free_benchmark (improve_precision) at step 0: 2 call(s) of 2 API(s) checked" in run.stdout  # linear, sum


@pytest.mark.parametrize("task, section", [
    ("grad_probe", {"grad_level": "L2", "param_list": [], "bounds": [-1, 0, 1]}),
    ("free_benchmark", {"pert_mode": "add_noise", "fuzz_stage": "backward", "list": ["softmax"]}),
])
def test_export_config_of_a_script_on_the_new_api_writes_its_debuggers_config(tmp_path, task, section):
    pytest.importorskip("torch")
    from ptdbg_ascend.compat.export import run_and_export
    from ptdbg_ascend.config import load_config

    given = tmp_path / "given.json"
    given.write_text(json.dumps({"task": task, "dump_path": str(tmp_path / "out"), task: section}))
    script = tmp_path / "train.py"
    script.write_text(f"from ptdbg_ascend import PrecisionDebugger\nPrecisionDebugger(config_path={str(given)!r})\n")
    run = run_and_export(str(script), [], str(tmp_path / "config.json"))
    assert run.error is None and run.caveats == ()
    exported = load_config(str(tmp_path / "config.json"))
    assert exported == load_config(str(given)) and exported.task == task
