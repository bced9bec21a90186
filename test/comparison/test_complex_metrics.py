"""Complex pairs are compared on both parts: a conjugate fails, an equal pair passes."""

from __future__ import annotations

import numpy as np
import pytest

from ptdbg_ascend.comparison import metrics as met
from ptdbg_ascend.comparison.verdicts import accuracy_reached

pytestmark = pytest.mark.torchfree

VALUES = np.array([[1 + 2j, -3 + 0.5j, 0.25 - 1j], [2 - 2j, 0.5j, -1.5 + 4j]])


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_conjugate_fails_and_equal_pair_passes(dtype):
    m = met.compare_arrays(VALUES.astype(dtype), VALUES.astype(dtype))
    assert m.status == met.Status.COMPARED and m.size == 2 * VALUES.size  # real and imaginary parts
    assert m.cosine == 1.0 and m.max_abs_err == 0.0 and m.max_relative_err == 0.0
    assert accuracy_reached(m) == "Yes"
    npu, bench = VALUES.astype(dtype), np.conj(VALUES).astype(dtype)
    m = met.compare_arrays(npu, bench)
    # the real parts agree: only the imaginary parts (sign flipped) show the error
    assert m.max_abs_err == pytest.approx(8.0)  # |4 - (-4)| on the last element's imaginary part
    assert m.worst_index == (1, 2, 1)  # element [1, 2], imaginary part
    assert m.cosine < 0.99
    assert accuracy_reached(m) == "No"


def test_complex_against_real_counts_the_imaginary_part():
    m = met.compare_arrays(VALUES, VALUES.real.copy())
    assert m.max_abs_err == pytest.approx(4.0) and accuracy_reached(m) == "No"
    same = met.compare_arrays(VALUES.real.astype(np.complex64), VALUES.real.astype(np.float32))
    assert same.max_abs_err == 0.0 and same.cosine == 1.0
