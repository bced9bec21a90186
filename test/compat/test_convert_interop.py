"""The real msprobe 1.0.4 compare accepts a legacy dump converted by ``ptdbg convert``: every tensor row of the
legacy pkl is found, its ``.pt`` loads, and it reads ``Yes`` against itself.

Opt-in like test/interop (``PTDBG_INTEROP=1``) and needs the msprobe environment that
``scripts/interop_msprobe.sh`` builds (``.venv-msprobe/``, or ``MSPROBE_VENV``); skips, saying why, without it.
"""

import json
import os
import subprocess
import sys
import textwrap

import pytest

from ptdbg_ascend.formats.naming import to_dotted

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
VENV = os.environ.get("MSPROBE_VENV", os.path.join(ROOT, ".venv-msprobe"))
MSPROBE_PYTHON = os.path.join(VENV, "bin", "python")

LEGACY_SCRIPT = textwrap.dedent("""
    import torch, torch.nn as nn
    from ptdbg_ascend import *
    seed_all(seed=3, rm_dropout=True)
    set_dump_path("./dump/npu_dump.pkl")
    model = nn.Sequential(nn.Conv2d(1, 2, 3), nn.ReLU(), nn.Flatten(), nn.Linear(8, 2))
    register_hook(model, acc_cmp_dump, rank=0)
    set_dump_switch("ON", mode="api_stack")
    model(torch.randn(2, 1, 4, 4)).sum().backward()
    set_dump_switch("OFF")
""")
MSPROBE_COMPARE = ("import sys, numpy\nif not hasattr(numpy, 'unicode_'): numpy.unicode_ = numpy.str_\n"
                   "from msprobe.msprobe import main\nsys.argv = ['msprobe'] + sys.argv[1:]\nsys.exit(main())")


@pytest.mark.skipif(os.environ.get("PTDBG_INTEROP") != "1", reason="interop with msprobe 1.0.4 is opt-in: PTDBG_INTEROP=1")
@pytest.mark.skipif(not os.path.isfile(MSPROBE_PYTHON), reason="no msprobe environment at {} (build it with "
                    "scripts/interop_msprobe.sh, or set MSPROBE_VENV)".format(VENV))
def test_msprobe_compare_accepts_a_converted_legacy_dump(tmp_path):
    pandas = pytest.importorskip("pandas")
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "train.py").write_text(LEGACY_SCRIPT)
    subprocess.run([sys.executable, "train.py"], cwd=str(tmp_path / "run"), check=True, stdout=subprocess.DEVNULL)
    rank = tmp_path / "run" / "dump" / "ptdbg_dump_v1.0" / "rank0"
    subprocess.run([sys.executable, "-m", "ptdbg_ascend.cli", "convert", str(rank), str(tmp_path / "json")],
                   check=True, stdout=subprocess.DEVNULL)
    dump_json, stack_json = str(tmp_path / "json" / "dump.json"), str(tmp_path / "json" / "stack.json")
    (tmp_path / "cmp").mkdir()
    (tmp_path / "compare.json").write_text(json.dumps({"npu_path": dump_json, "bench_path": dump_json,
                                                       "stack_path": stack_json, "is_print_compare_log": False}))
    subprocess.run([MSPROBE_PYTHON, "-c", MSPROBE_COMPARE, "-f", "pytorch", "compare", "-i",
                    str(tmp_path / "compare.json"), "-o", str(tmp_path / "cmp"), "-s"],
                   check=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    reports = [name for name in os.listdir(str(tmp_path / "cmp")) if name.startswith("compare_result_")]
    assert len(reports) == 1
    table = pandas.read_excel(str(tmp_path / "cmp" / reports[0]))
    tensors = table[table["NPU Dtype"].astype(str).str.startswith("torch.")]
    pkl = rank / "api_stack_npu_dump.pkl"
    legacy_names = [to_dotted(json.loads(line)[0]) for line in pkl.read_text().splitlines() if "_stack_info" not in line]
    assert sorted(tensors["NPU Name"]) == sorted(legacy_names)
    assert set(tensors["Accuracy Reached or Not"]) == {"Yes"}
    assert tensors["NPU_Stack_Info"].notna().any()
