"""The README's first command: ``sample/end_to_end.py`` names its planted bfloat16 ``F.linear`` (a device kernel
that also accumulates in bfloat16, cutting each partial sum toward zero: 3.5 % off, beyond bfloat16's round-off)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.slow
def test_end_to_end_sample_names_the_planted_bf16_linear(tmp_path):
    result = subprocess.run([sys.executable, os.path.join(ROOT, "sample", "end_to_end.py"), "--out", str(tmp_path)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
    assert result.returncode == 0, result.stdout
    advice = result.stdout[result.stdout.index("\nAdvisor:\n"):]
    # The planted layer (legacy_train.py: F.linear on bfloat16 copies) is the cause, with its code line.
    # The advisor file answers first: its first line names the planted layer.
    assert advice.splitlines()[2].startswith("Suspect API: Functional_linear_1_forward (Cause: "), advice
    # ... and proves it: re-run from the NPU's own dumped inputs (the legacy dump's npy files), the planted kernel's
    # output is far from the float64 result, while the CPU's own bfloat16 linear stays within bfloat16's standard.
    head = "Re-run: reproduced. Functional_linear_1_forward's output is "
    rerun = advice.splitlines()[3]
    assert rerun.startswith(head) and ("x further from the float64 re-run of its own inputs than bfloat16 allows: "
                                       "the API is inaccurate here." in rerun), advice
    assert float(rerun[len(head):].split("x ")[0]) > 10, rerun  # 82.8 here: most elements off by more than 1 %
    assert "A CPU run in bfloat16 is within it (" in rerun, advice
    assert "legacy_train.py:" in advice and "x = F.linear(x.bfloat16()" in advice, advice
    first = [line for line in advice.splitlines() if line.startswith("First failure: ")][0]
    assert first.startswith("First failure: Functional_linear_1_forward_output (CSV line 27): Relative error "), first
    assert "allowed for bfloat16 (round-off 3.9e-03 combined with " in first, first  # what was allowed, and why
    assert "First dtype mismatch before it: Functional_linear_1_forward (NPU torch.bfloat16, bench torch.float32)" \
        in advice, advice
    # The conv bias gradient (zero before BatchNorm up to round-off) is never named.
    assert "conv2d" not in advice.split("Compared:")[0], advice
    assert "Outcome: first failure Functional_linear_1_forward_output (line 27): cause at Functional_linear_1_forward" \
        in result.stdout


def test_precheck_demo_names_the_planted_gelu_and_links_it_to_the_compare(tmp_path):
    """``sample/precheck_demo.py``: run_ut on one dump names the planted gelu (and nothing else), and the
    linked run says the compare of the two runs fails there too, with gelu as the advisor's suspect."""
    result = subprocess.run([sys.executable, os.path.join(ROOT, "sample", "precheck_demo.py"), "--out", str(tmp_path)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
    assert result.returncode == 0, result.stdout
    alone, linked = result.stdout.split("== 1. run_ut on the NPU run's dump alone ==")[1].split("== 2. ")
    for part in (alone, linked):
        failing = [line for line in part.splitlines() if line.startswith(("  error ", "  warning "))]
        assert len(failing) == 1 and failing[0].startswith(
            "  error   Functional.gelu.0  forward error / backward error  "), part
        assert failing[0].endswith("x the allowed error"), part
        assert "precheck_demo.py:" in part and "torch.nn.functional.gelu(self.fc1(self.norm(x)))" in part
    assert "compare:" not in alone
    assert "the advisor's suspect is Functional_gelu_0_forward" in linked, linked
    assert "          compare: failing there too: error (Relative error" in linked, linked
    assert linked.rstrip().endswith("; it is the advisor's suspect"), linked
