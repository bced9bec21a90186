"""The README's first command: ``sample/end_to_end.py`` names its planted bfloat16 ``F.linear``."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.slow
def test_end_to_end_sample_names_the_planted_bf16_linear(tmp_path):
    result = subprocess.run([sys.executable, os.path.join(ROOT, "sample", "end_to_end.py"), "--out", str(tmp_path)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True, timeout=300)
    assert result.returncode == 0, result.stdout
    advice = result.stdout[result.stdout.index("\nAdvisor:\n"):]
    # The planted layer (legacy_train.py: F.linear on bfloat16 copies) is the suspect, with its code line.
    assert "Suspect API: Functional_linear_1_forward (Propagation:" in advice, advice
    assert "legacy_train.py:" in advice and "x = F.linear(x.bfloat16()" in advice, advice
    assert "First dtype mismatch before it: Functional_linear_1_forward (NPU torch.bfloat16, bench torch.float32)" \
        in advice, advice
    # The conv bias gradient (zero before BatchNorm up to round-off) is never named.
    assert "conv2d" not in advice.split("Compared:")[0], advice
    assert "Outcome: first failure" in result.stdout and "at Functional_linear_1_forward" in result.stdout
