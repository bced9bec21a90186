"""Interop with the real msprobe 1.0.4: its compare accepts our dumps, ours reads its dumps.

Runs ``scripts/interop_msprobe.sh`` (builds ``.venv-msprobe/`` from PyPI on first use, then about a
minute on 2 CPU cores). Opt-in: set ``PTDBG_INTEROP=1``. Skips, saying why, when the msprobe
environment cannot be built (no network).
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "scripts", "interop_msprobe.sh")


@pytest.mark.skipif(os.environ.get("PTDBG_INTEROP") != "1",
                    reason="interop with msprobe 1.0.4 is opt-in: set PTDBG_INTEROP=1 (needs PyPI the first time, ~2 min)")
def test_msprobe_compare_accepts_our_dumps_and_ours_reads_theirs(tmp_path):
    result = subprocess.run(["bash", SCRIPT, str(tmp_path / "out")], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, timeout=900)
    output = result.stdout.decode(errors="replace")
    if result.returncode == 3:
        pytest.skip("the msprobe 1.0.4 environment cannot be built here: " + output[-1500:])
    assert result.returncode == 0, output[-4000:]
    summary = json.loads(output.strip().splitlines()[-1])
    assert summary["msprobe_version"] == "1.0.4"
    assert summary["problems"] == []
    # 13 calls (6 forward, torch.ones_like of backward, 6 backward) -> 33 tensor rows in both compares
    assert summary["entries"] == 13
    assert summary["a_rows"] == 33 and summary["b_rows"] == 33
    # the bench differs from the fc layer on: its input weight, its output and every gradient after it
    assert "Functional.linear.0.forward.output.0" in summary["a_not_reached"]
    assert "Functional.conv2d.0.forward.output.0" not in summary["a_not_reached"]
