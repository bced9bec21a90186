"""Statistics of special tensors, the pkl/npy writer and the background writer's error reporting."""

from __future__ import annotations

import json
import os
import time
import weakref

import numpy as np
import pytest
import torch

from ptdbg_ascend.statistics.eager import scalar_statistics, tensor_statistics
from ptdbg_ascend.errors import DumpWriteError
from ptdbg_ascend.sinks.background import BackgroundWriter
from ptdbg_ascend.sinks.legacy.pkl_writer import LegacyPklWriter


def test_statistics_of_special_tensors():
    assert tensor_statistics(torch.tensor([1.0, -3.0, 2.0])) == pytest.approx([2.0, -3.0, 0.0, 14 ** 0.5])
    assert tensor_statistics(torch.empty(0, 3)) == [None, None, None, None]
    assert tensor_statistics(torch.tensor(-2.5)) == [-2.5, -2.5, -2.5, 2.5]
    assert tensor_statistics(torch.tensor([True, False, True, True])) == pytest.approx([1.0, 0.0, 0.75, 3 ** 0.5])
    assert tensor_statistics(torch.tensor([2 ** 40, 1], dtype=torch.int64))[0] == float(2 ** 40)
    assert tensor_statistics(torch.tensor([3 + 4j, 0j])) == pytest.approx([5.0, 0.0, 2.5, 5.0])
    assert tensor_statistics(torch.tensor([1.0, 2.0], dtype=torch.bfloat16)) == pytest.approx([2.0, 1.0, 1.5, 5 ** 0.5])
    stats = tensor_statistics(torch.tensor([1.0, float("inf")]))
    assert stats[0] == float("inf") and stats[1] == 1.0
    assert scalar_statistics(-3) == [-3.0, -3.0, -3.0, 3.0]


def test_statistics_of_a_large_tensor_match_numpy_in_float64():
    tensor = torch.randn(4, 256, 32, 32, generator=torch.Generator().manual_seed(0)) * 3 + 1  # 1M elements
    values = tensor.double().numpy()
    expected = [values.max(), values.min(), values.mean(), np.linalg.norm(values.reshape(-1))]
    np.testing.assert_allclose(tensor_statistics(tensor), expected, rtol=1e-6)
    half = tensor.half()
    values = half.double().numpy()
    expected = [values.max(), values.min(), values.mean(), np.linalg.norm(values.reshape(-1))]
    np.testing.assert_allclose(tensor_statistics(half), expected, rtol=1e-6)


@pytest.mark.parametrize("count", [64, 8192, 32768, 262144])
def test_norm_of_equal_values_stays_within_float32_rounding(count):
    # Equal values are the hard case for a float32 accumulator (a fresh LayerNorm weight, a constant
    # mask): every addition rounds the same way. A BLAS dot product is off by 1.5e-6 at 8192 elements.
    tensor = torch.full((count,), 0.3337)
    value = float(np.float32(0.3337))
    expected = [value, value, value, (count * value * value) ** 0.5]
    np.testing.assert_allclose(tensor_statistics(tensor), expected, rtol=3e-7)
    np.testing.assert_allclose(tensor_statistics(tensor.view(-1, 64).t()), expected, rtol=3e-7)  # not contiguous


def test_writer_lines_and_npy(tmp_path):
    writer = LegacyPklWriter(str(tmp_path / "r" / "x.pkl"), str(tmp_path / "r" / "x"), dump_step=101,
                             background=BackgroundWriter(), own_background=True)
    source = torch.tensor([[1.5, -2.0]], dtype=torch.bfloat16)
    writer.write_record("Torch_add_0_forward_input.0", source)
    source.add_(10)  # changed after recording: the file keeps the recorded values
    writer.write_record("Torch_add_0_forward_input.1", 2.0)
    writer.write_stack("Torch_add_0_forward_stack_info", [["a.py", "3", "f", "x = y"]])
    writer.close()
    with open(tmp_path / "r" / "x.pkl", encoding="utf-8") as handle:
        lines = [json.loads(line) for line in handle]
    assert lines == [
        ["Torch_add_0_forward_input.0", 101, [], "torch.bfloat16", [1, 2], [1.5, -2.0, -0.25, 2.5]],
        ["Torch_add_0_forward_input.1", 101, [], "<class 'float'>", "[]", [2.0, 2.0, 2.0, 2.0]],
        ["Torch_add_0_forward_stack_info", [["a.py", "3", "f", "x = y"]]],
    ]
    array = np.load(str(tmp_path / "r" / "x" / "Torch_add_0_forward_input.0.npy"))
    assert array.dtype == np.float32 and array.tolist() == [[1.5, -2.0]]
    assert oct(os.stat(tmp_path / "r" / "x.pkl").st_mode & 0o777) == "0o640"


def test_given_statistics_of_a_large_tensor_with_npy_files(tmp_path):
    # Large float CPU tensors normally get their statistics on the writer thread; given ones are kept.
    writer = LegacyPklWriter(str(tmp_path / "x.pkl"), str(tmp_path / "x"), background=BackgroundWriter(),
                             own_background=True)
    tensor = torch.ones(70000)
    writer.write_record("A_0_forward_output", tensor, statistics=[1.0, 1.0, 1.0, 264.5])
    writer.write_record("B_0_forward_input.0", tensor, same_as="A_0_forward_output")
    writer.close()
    with open(tmp_path / "x.pkl", encoding="utf-8") as handle:
        lines = [json.loads(line) for line in handle]
    assert [line[5] for line in lines] == [[1.0, 1.0, 1.0, 264.5], [1.0, 1.0, 1.0, 70000 ** 0.5]]
    assert os.path.samefile(tmp_path / "x" / "A_0_forward_output.npy", tmp_path / "x" / "B_0_forward_input.0.npy")


def test_write_errors_surface_on_the_training_thread(tmp_path):
    writer = LegacyPklWriter(str(tmp_path / "x.pkl"), str(tmp_path / "x"), background=BackgroundWriter(),
                             own_background=True)
    os.rmdir(tmp_path / "x")  # the npy directory disappears (disk unmounted, cleaned up by someone)
    writer.write_record("Torch_add_0_forward_input.0", torch.ones(2))
    with pytest.raises(DumpWriteError, match="Torch_add_0_forward_input.0.npy"):
        writer.flush()
    writer.close()
    assert open(tmp_path / "x.pkl").read() == ""  # no line without its npy


def test_background_writer_counts_the_seconds_it_runs_jobs():
    writer = BackgroundWriter()
    writer.submit(lambda: time.sleep(0.05))
    writer.flush()
    assert writer.busy_seconds >= 0.05
    first = writer.busy_seconds
    writer.submit(lambda: time.sleep(0.02))
    writer.close()
    assert writer.busy_seconds >= first + 0.02


def test_what_a_job_holds_is_freed_before_flush_returns():
    """A job's closure (its tensor copies) is dropped before flush() returns: freed later, on the writer thread,
    it could be freed while the interpreter exits after the dump's last flush, which aborts the process
    ("terminate called without an active exception", seen in CI)."""
    class Held:
        def __del__(self):
            time.sleep(0.05)  # a slow free (a large copy), during which the weak reference still answers

    writer = BackgroundWriter()
    for _ in range(3):
        held = Held()
        alive = weakref.ref(held)
        writer.submit(lambda held=held: None)
        del held
        writer.flush()
        assert alive() is None
    writer.close()


def test_background_writer_bounds_memory_and_keeps_order(tmp_path):
    order = []
    writer = BackgroundWriter(max_pending_bytes=10)
    for index in range(20):
        writer.submit(lambda index=index: order.append(index), nbytes=6)
    writer.close()
    assert order == list(range(20))
    with pytest.raises(DumpWriteError, match="closed"):
        writer.submit(lambda: None)


@pytest.mark.filterwarnings("error")  # the fast path must not raise numpy's floating-point warnings
@pytest.mark.parametrize("values, expected", [
    # max, min, mean (sum / n), l2norm as numpy computes them in float64 from the float32 values
    ([1e20, -1e20, 3.0], [1e20, -1e20, 1.0, float("inf")]),  # the float32 squares overflow, as in numpy
    ([float("inf"), float("-inf"), 1.0], [float("inf"), float("-inf"), float("nan"), float("inf")]),
    ([float("nan"), 2.0, 1.0], [float("nan")] * 4),
    ([3e38, 3e38], [3e38, 3e38, float("inf"), float("inf")]),  # the float32 sum overflows, as in numpy
])
def test_small_tensor_statistics_with_extreme_values(values, expected):
    tensor = torch.tensor(values, dtype=torch.float32)
    with np.errstate(all="ignore"):
        array = tensor.numpy()
        reference = [float(array.max()), float(array.min()), float(array.sum()) / array.size,
                     float(np.sqrt(np.sum(array * array)))]
    np.testing.assert_allclose(tensor_statistics(tensor), reference, rtol=1e-6)
    np.testing.assert_allclose(reference, expected, rtol=1e-6)


def test_small_tensor_statistics_of_views_and_tensors_that_require_grad():
    leaf = torch.tensor([[1.0, -2.0], [3.0, 4.0]], requires_grad=True)
    assert tensor_statistics(leaf) == pytest.approx([4.0, -2.0, 1.5, 30 ** 0.5])
    assert tensor_statistics(leaf.t()) == pytest.approx([4.0, -2.0, 1.5, 30 ** 0.5])  # not contiguous
    negated = torch.tensor([1.0, -2.0])._neg_view()  # numpy() refuses lazy negation: torch's path
    assert tensor_statistics(negated) == pytest.approx([2.0, -1.0, 0.5, 5 ** 0.5])


def test_recurring_statistics_lists_are_formatted_once_and_copies_of_given_ones(tmp_path):
    writer = LegacyPklWriter(str(tmp_path / "x.pkl"))
    shared = [1.0, 2.0, 3.0, 4.0]
    tensor = torch.ones(2)
    writer.write_call([("A_0_forward_output", tensor), ("B_0_forward_input.0", tensor)],
                      lookup=lambda value, name: (shared, None))
    given = [5.0, 6.0, 7.0, 8.0]
    writer.write_record("C_0_forward_input.0", tensor, statistics=given)
    given[0] = 50.0  # a caller that reuses its list: the next line shows the new numbers
    writer.write_record("C_0_forward_input.1", tensor, statistics=given)
    writer.close()
    with open(tmp_path / "x.pkl", encoding="utf-8") as handle:
        summaries = [json.loads(line)[5] for line in handle]
    assert summaries == [[1.0, 2.0, 3.0, 4.0], [1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 8.0], [50.0, 6.0, 7.0, 8.0]]
