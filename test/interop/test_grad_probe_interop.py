"""grad_probe interop with the real msprobe 1.0.4 (``.venv-msprobe/``, built by ``scripts/interop_msprobe.sh --setup``;
run_tests.sh builds it first). Opt-in: ``PTDBG_INTEROP=1``; skips, saying why, without the environment.

* the same training monitored by msprobe's grad_probe and by ours writes the same grad_summary numbers (L2: the
  intervals, ``=0``, max, min, norm, shape; L0: the MD5);
* msprobe's own GradComparator reads our grad_summary CSV (its parameter order, by pandas' ``param_name``);
* our GradComparator reads msprobe's dumps (its boolean direction files) and finds msprobe's own similarities.
"""

from __future__ import annotations

import csv
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MSPROBE_PYTHON = os.path.join(os.environ.get("MSPROBE_VENV", os.path.join(ROOT, ".venv-msprobe")), "bin", "python")

pytestmark = pytest.mark.skipif(os.environ.get("PTDBG_INTEROP") != "1",
                                reason="interop with msprobe 1.0.4 is opt-in: set PTDBG_INTEROP=1")

TRAIN = textwrap.dedent('''
    import json, sys, torch
    tool, dump_path, level, lr_from = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    with open(dump_path + ".json", "w") as handle:
        json.dump({"task": "grad_probe", "dump_path": dump_path, "rank": [], "step": [],
                   "grad_probe": {"grad_level": level, "param_list": [], "bounds": [-0.01, 0, 0.01]}}, handle)
    if tool == "msprobe":
        import numpy
        if not hasattr(numpy, "unicode_"):   # msprobe 1.0.4 predates NumPy 2
            numpy.unicode_ = numpy.str_
        from msprobe.pytorch import PrecisionDebugger
    else:
        from ptdbg_ascend import PrecisionDebugger
    debugger = PrecisionDebugger(config_path=dump_path + ".json")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.GELU(), torch.nn.Linear(32, 3))
    debugger.monitor(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    data = torch.Generator().manual_seed(1)
    for step in range(5):
        if step == lr_from:
            optimizer.param_groups[0]["lr"] = 0.5
        x, y = torch.randn(16, 8, generator=data), torch.randint(0, 3, (16,), generator=data)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad(); loss.backward(); optimizer.step()
''')

MSPROBE_COMPARE = textwrap.dedent('''
    import sys, numpy
    if not hasattr(numpy, "unicode_"):
        numpy.unicode_ = numpy.str_
    from msprobe.core.grad_probe.grad_compare import GradComparator
    first, second, out, ours = sys.argv[1:5]
    GradComparator.compare(first, second, out)
    print("ORDER", ",".join(GradComparator._get_grad_weight_order(ours, ours)))
''')


def _run(python, *arguments):
    result = subprocess.run([python, *map(str, arguments)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            timeout=300, cwd=ROOT)
    output = result.stdout.decode(errors="replace")
    assert result.returncode == 0, output[-3000:]
    return output


def _dump(tmp_path, tool, name, level, lr_from=-1):
    python = MSPROBE_PYTHON if tool == "msprobe" else sys.executable
    path = tmp_path / name
    _run(python, "-c", TRAIN, tool, path, level, lr_from)
    ranks = [entry for entry in os.listdir(path) if entry.startswith("rank")]
    assert len(ranks) == 1, ranks
    if ranks[0] != "rank0":  # msprobe names the directory by the pid without torch.distributed
        os.rename(path / ranks[0], path / "rank0")
    return path / "rank0"


def _rows(path):
    with open(path, newline="", encoding="utf-8-sig") as handle:  # msprobe writes a byte-order mark
        return list(csv.reader(handle))


@pytest.fixture
def msprobe_python():
    if not os.path.isfile(MSPROBE_PYTHON):
        pytest.skip(f"no msprobe 1.0.4 environment at {MSPROBE_PYTHON}: bash scripts/interop_msprobe.sh --setup")
    return MSPROBE_PYTHON


@pytest.mark.parametrize("level", ["L0", "L2"])
def test_the_same_training_gives_msprobes_grad_summary_numbers(tmp_path, msprobe_python, level):
    theirs, ours = _dump(tmp_path, "msprobe", "theirs", level), _dump(tmp_path, "ours", "ours", level)
    for step in range(5):
        their_rows, our_rows = _rows(theirs / f"grad_summary_{step}.csv"), _rows(ours / f"grad_summary_{step}.csv")
        assert [cell.lstrip("'") for cell in our_rows[0]] == their_rows[0]  # ('=0 written as text)
        assert len(our_rows) == len(their_rows) == 5
        for their_row, our_row in zip(their_rows[1:], our_rows[1:]):
            assert our_row[0] == their_row[0] and our_row[-1] == their_row[-1]  # name, shape
            if level == "L0":
                assert our_row[1] == their_row[1]  # the MD5 of the float32 bytes
            numbers = 2 if level == "L0" else 1
            assert [float(cell) for cell in our_row[numbers:-1]] == pytest.approx(
                [float(cell) for cell in their_row[numbers:-1]], rel=1e-6, abs=1e-9)


def test_msprobes_comparator_reads_our_csv_and_ours_reads_msprobes_dumps(tmp_path, msprobe_python):
    first, second = _dump(tmp_path, "msprobe", "a", "L1"), _dump(tmp_path, "msprobe", "b", "L1", lr_from=2)
    ours = _dump(tmp_path, "ours", "ours", "L1")
    output = _run(msprobe_python, "-c", MSPROBE_COMPARE, first, second, tmp_path / "msprobe_out", ours)
    assert "ORDER 0.weight,0.bias,2.weight,2.bias" in output
    theirs = {row[0]: [float(value) for value in row[1:]] for row in _rows(tmp_path / "msprobe_out" /
                                                                           "similarities.csv")[1:]}
    from ptdbg_ascend import GradComparator

    result = GradComparator.compare(str(first), str(second), str(tmp_path / "our_out"))
    assert set(result.similarities) == set(theirs)
    for name, values in theirs.items():
        assert result.similarities[name] == pytest.approx(values, abs=1e-12)
    assert result.first_step == 3
    shutil.rmtree(tmp_path / "msprobe_out")
