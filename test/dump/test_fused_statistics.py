"""The fused statistics pass (``statistics/fused_plan.py``, ``statistics/fused_triton.py``), on the CPU.

The numpy emulator of the chunk/partial/finalize arithmetic is checked against the eager statistics of both
formats; the Triton kernels against the emulator under ``TRITON_INTERPRET=1`` when triton is installed
(``bash scripts/triton_venv.sh --test``; skipped otherwise).

Tolerances: Max, Min, the counts and the ``*_except_inf_nan`` pair are exact (bit for bit). Mean and Norm may
differ from the eager path by the eager path's own rounding: it sums in float32 (float64 for legacy ints and
float64), pairwise or cascaded, whose error is at most about log2(n) units of the last place of the sum of
|x| (of x*x for the norm, plus one unit for each square's rounding); the fused sums are float64 and far more
accurate. So the bound is (ceil(log2 n) + 2) * u * sum|x| / n for the mean and the same relative bound for
the norm, u = 2**-24 (2**-53 in float64).
"""

from __future__ import annotations

import importlib
import importlib.util
import math
from typing import Any, List

import numpy as np
import pytest
import torch

from ptdbg_ascend.statistics import fused_plan, msprobe_rules, rules
from ptdbg_ascend.statistics.device_batch import DeviceStatisticsBatch
from ptdbg_ascend.statistics.fused_plan import CHUNK, FINAL_BLOCK, LEGACY, MSPROBE, Plan

INF, NAN = math.inf, math.nan
FORMATS = (LEGACY, MSPROBE)
SIZES = (1, CHUNK - 1, CHUNK, CHUNK + 1, 3 * CHUNK + 7)
FLOATS = (torch.float32, torch.bfloat16, torch.float16, torch.float64)
INTS = (torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64)


def eager(tensor: Any, fmt: str) -> List[Any]:
    """Today's numbers of ``tensor`` in format ``fmt`` (the pkl's four, or dump.json's four or six)."""
    return rules.LEGACY.eager(tensor) if fmt == LEGACY else msprobe_rules.eager_statistics(tensor)


def emulated(tensors: List[Any], fmt: str, order: Any = None) -> List[List[float]]:
    """The fused numbers of ``tensors`` by the emulator (``order``: a planted combine order, see emulate_finals)."""
    plan = Plan(tensors, fmt)
    return plan.numbers(fused_plan.emulate_finals(plan.arrays(), plan.widths(), order))


def same(a: float, b: float) -> bool:
    """Equal bit for bit as floats (NaN equal to NaN, -0.0 and 0.0 alike as torch and numpy return either)."""
    return (math.isnan(a) and math.isnan(b)) or a == b


def assert_like_eager(fused: List[float], tensor: Any, fmt: str) -> None:
    """``fused`` is the eager path's numbers of ``tensor``: exact extremes, mean/norm within the bound above."""
    expected = eager(tensor, fmt)
    assert len(fused) == len(expected), (fused, expected)
    for index in (0, 1):
        assert same(fused[index], expected[index]), (index, fused, expected)
    pair = expected[4:]
    if pair and tensor.dtype == torch.float64:
        # msprobe's float64 pair: the eager path's comes from the float64 values, the device batch's (and the
        # fused pass's, which replaces it) from the float32 ones the format reduces.
        pair = device_pair(tensor)
    assert all(same(got, want) for got, want in zip(fused[4:], pair)), (fused, expected, pair)
    work = msprobe_rules.msprobe_reduced(tensor) if fmt == MSPROBE else tensor
    wide = fmt == MSPROBE or tensor.dtype in (torch.float32, torch.float16, torch.bfloat16)
    values = work.detach().double().reshape(-1)
    count = values.numel()
    unit = (math.ceil(math.log2(max(count, 2))) + 2) * (2.0 ** -24 if wide else 2.0 ** -53)
    finite = values[torch.isfinite(values)]
    magnitude = float(finite.abs().sum()) / count if finite.numel() else 0.0
    for index, bound in ((2, unit * magnitude), (3, unit * abs(expected[3]))):
        got, want = fused[index], expected[index]
        if not (math.isfinite(got) and math.isfinite(want)):
            assert same(got, want), (index, fused, expected)
        else:
            assert abs(got - want) <= bound, (index, got, want, bound)


def device_pair(tensor: Any) -> List[float]:
    """msprobe's ``*_except_inf_nan`` of ``tensor`` by today's device batch (run on the CPU)."""
    batch = DeviceStatisticsBatch()
    pending = msprobe_rules.on_device(batch, tensor)
    batch.resolve()
    return msprobe_rules.extremes_except_inf_nan(list(pending)) or []


def same_lists(a: List[List[float]], b: List[List[float]]) -> bool:
    return len(a) == len(b) and all(len(x) == len(y) and all(map(same, x, y)) for x, y in zip(a, b))


def random_tensor(size: int, dtype: Any, seed: int = 0) -> Any:
    generator = torch.Generator().manual_seed(seed)
    if dtype.is_floating_point:
        return (torch.randn(size, generator=generator, dtype=torch.float64) * 3 + 1).to(dtype)
    info = torch.iinfo(dtype)
    return torch.randint(max(info.min, -1000), min(info.max, 1000), (size,), generator=generator, dtype=dtype)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("dtype", FLOATS + INTS, ids=str)
@pytest.mark.parametrize("size", SIZES)
def test_random_tensors_across_chunk_boundaries_match_the_eager_statistics(fmt, dtype, size):
    tensor = random_tensor(size, dtype, seed=size)
    assert_like_eager(emulated([tensor], fmt)[0], tensor, fmt)


def _planted(size: int, where: List[int], values: List[float], dtype: Any = torch.float32) -> Any:
    tensor = random_tensor(size, torch.float64, seed=7)
    tensor[where] = torch.tensor(values, dtype=torch.float64)
    return tensor.to(dtype)


SPECIAL = {
    "inf": torch.tensor([1.0, INF, -2.0]),
    "-inf": torch.tensor([1.0, -INF, -2.0]),
    "nan": torch.tensor([1.0, NAN, -2.0]),
    "both infinities": torch.tensor([INF, -INF, 3.0]),
    "nan and inf": torch.tensor([NAN, INF, 2.0]),
    "all -inf": torch.full((5,), -INF),
    "all +inf": torch.full((CHUNK + 3,), INF),
    "only infinities": torch.tensor([INF, -INF, INF]),
    "infinities and nan": torch.tensor([INF, NAN, -INF]),
    "all nan": torch.full((CHUNK + 1,), NAN),
    "nan in the last chunk": _planted(3 * CHUNK + 7, [3 * CHUNK + 5], [NAN]),
    "inf in a middle chunk": _planted(3 * CHUNK + 7, [CHUNK + 5], [INF]),
    "a mix over chunks": _planted(3 * CHUNK + 7, [3, CHUNK, 2 * CHUNK + 1], [INF, -INF, 5.0]),
    "half inf": _planted(CHUNK + 1, [CHUNK], [INF], torch.float16),
    "bf16 nan and -inf": _planted(CHUNK + 1, [0, CHUNK], [NAN, -INF], torch.bfloat16),
    "float64 -inf": _planted(17, [4], [-INF], torch.float64),
}


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("name", sorted(SPECIAL))
def test_inf_and_nan_give_the_eager_numbers_of_both_formats(fmt, name):
    tensor = SPECIAL[name]
    assert_like_eager(emulated([tensor], fmt)[0], tensor, fmt)


def test_the_special_cases_map_to_the_documented_numbers():
    # Pinned by value, not only against the eager path: what each format writes.
    assert emulated([SPECIAL["nan and inf"]], LEGACY)[0] == pytest.approx([NAN] * 4, nan_ok=True)
    assert emulated([SPECIAL["nan and inf"]], MSPROBE)[0][4:] == [2.0, 2.0]  # the finite elements' pair
    assert emulated([SPECIAL["all -inf"]], MSPROBE)[0] == [-INF, -INF, -INF, INF, -INF, -INF]
    assert emulated([SPECIAL["only infinities"]], MSPROBE)[0][4:] == [INF, -INF]  # the non-NaN ones' extremes
    assert all(math.isnan(value) for value in emulated([SPECIAL["all nan"]], MSPROBE)[0])
    assert emulated([SPECIAL["both infinities"]], LEGACY)[0][:2] == [INF, -INF]
    assert math.isnan(emulated([SPECIAL["both infinities"]], LEGACY)[0][2])  # inf + -inf


@pytest.mark.parametrize("fmt", FORMATS)
def test_views_are_read_where_they_lie_or_copied_when_not_dense(fmt):
    base = random_tensor(70 * 130, torch.float32).reshape(70, 130)
    dense_views = [base.t(), base.reshape(10, 7, 130).permute(2, 0, 1),
                   base.to(torch.bfloat16).t(), base.reshape(2, 5, 7, 130).to(memory_format=torch.channels_last)]
    gappy = [base[:, ::3], base[5:40, 10:100], base[:1].expand(50, 130)]
    plan = Plan(dense_views + gappy, fmt)
    assert plan.copied == len(gappy)
    assert [source.data_ptr() for source in plan.sources[:len(dense_views)]] == \
        [view.data_ptr() for view in dense_views]  # no copy of a dense view
    for numbers, tensor in zip(emulated(dense_views + gappy, fmt), dense_views + gappy):
        assert_like_eager(numbers, tensor, fmt)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("values, dtype", [
    ([2 ** 62 + 1, -(2 ** 63), 2 ** 53 + 1, 7], torch.int64),  # float32 rounding of large ints (msprobe)
    # A float32 tie only after rounding to float64: rounded up straight to float32 (torch's cast), down through
    # float64 (double rounding); msprobe's Max must be the former.
    ([2 ** 62 + 2 ** 38 + 1, 1], torch.int64),
    ([16777217, -16777219, 3], torch.int32),  # beyond 2**24: rounded in float32, exact in float64
    ([255, 0, 128], torch.uint8),
])
def test_int_tensors_are_reduced_in_each_formats_float(fmt, values, dtype):
    tensor = torch.tensor(values, dtype=dtype)
    assert_like_eager(emulated([tensor], fmt)[0], tensor, fmt)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("name, tensor", [
    ("squares beyond float32", torch.full((100,), 1e20)),  # x*x overflows float32: the eager norm is inf
    ("sum beyond float32", torch.full((40000,), 1e35)),  # the float32 sum overflows: mean and norm inf
    ("near float32's max", torch.tensor([3.4e38, -3.4e38, 1.0])),
    ("squares summing beyond float32", torch.full((CHUNK + 1,), 1e18)),  # each 1e36, their sum 4.1e39
    ("large but safe", torch.full((CHUNK + 1,), 1e17)),  # squares summing to 4.1e37: no overflow anywhere
    ("float64 squares beyond float64", torch.tensor([1e200, -1e200, 3.0], dtype=torch.float64)),
    ("half at its max", torch.full((CHUNK,), 65504.0, dtype=torch.float16)),
])
def test_large_magnitudes_overflow_as_the_eager_float32_reductions_do(fmt, name, tensor):
    assert_like_eager(emulated([tensor], fmt)[0], tensor, fmt)


def test_msprobe_float64_beyond_float32_keeps_the_device_batchs_pair_not_the_eager_one():
    # msprobe reduces float64 in float32, where 1e300 is inf. The eager path's *_except_inf_nan comes from the
    # float64 values (1e300), the device batch's from the float32 ones (2.0); the fused pass is the device
    # batch's, as it replaces it. Documented in the report, left as it is.
    tensor = torch.tensor([1e300, 1.0, 2.0], dtype=torch.float64)
    fused = emulated([tensor], MSPROBE)[0]
    assert fused[:4] == [INF, 1.0, INF, INF]
    assert fused[4:] == device_pair(tensor) == [2.0, 1.0]
    assert eager(tensor, MSPROBE)[4:] == [1e300, 1.0]


@pytest.mark.parametrize("dtype", (torch.float32, torch.bfloat16, torch.float16))
def test_the_sums_are_at_least_as_accurate_as_the_device_batchs(dtype):
    tensor = (random_tensor(3 * CHUNK + 7, torch.float64, seed=3) * 100 + 1e4).to(dtype)
    exact = tensor.double().reshape(-1).tolist()
    exact_mean = math.fsum(exact) / len(exact)
    exact_norm = math.sqrt(math.fsum(value * value for value in exact))
    batch = DeviceStatisticsBatch()
    pending = batch.add(tensor)
    batch.resolve()
    fused = emulated([tensor], LEGACY)[0]
    assert abs(fused[2] - exact_mean) <= abs(pending[2] - exact_mean) + 1e-12 * exact_mean
    assert abs(fused[3] - exact_norm) <= abs(pending[3] - exact_norm) + 1e-12 * exact_norm


MANY_CHUNKS = random_tensor(300 * CHUNK + 11, torch.float32, seed=1)  # 301 chunks: three finalize blocks


@pytest.mark.parametrize("fmt", FORMATS)
def test_tensors_over_several_finalize_blocks_match_the_eager_statistics(fmt):
    last_block_inf = MANY_CHUNKS.clone()
    last_block_inf[-1] = -INF  # in the last chunk of the last finalize block
    assert MANY_CHUNKS.numel() > 2 * CHUNK * FINAL_BLOCK
    for numbers, tensor in zip(emulated([MANY_CHUNKS, last_block_inf], fmt), [MANY_CHUNKS, last_block_inf]):
        assert_like_eager(numbers, tensor, fmt)


def test_a_batch_of_many_tensors_gives_each_its_own_numbers():
    tensors = [random_tensor(size, dtype, seed=size) for size in SIZES for dtype in (torch.float32, torch.int32)]
    tensors.append(SPECIAL["a mix over chunks"])
    for fmt in FORMATS:
        for numbers, tensor in zip(emulated(tensors, fmt), tensors):
            assert_like_eager(numbers, tensor, fmt)


def test_the_emulator_gives_the_same_bits_twice_and_the_public_emulate_agrees():
    tensors = [random_tensor(300 * CHUNK + 11, torch.float32, seed=1), SPECIAL["a mix over chunks"]]
    plan = Plan(tensors, MSPROBE)
    first = fused_plan.emulate_finals(plan.arrays(), plan.widths())
    second = fused_plan.emulate_finals(plan.arrays(), plan.widths())
    assert first.tobytes() == second.tobytes()
    assert same_lists(fused_plan.emulate([tensor.numpy() for tensor in tensors], MSPROBE), plan.numbers(first))


# -- the checks must be able to fail: broken arithmetic is caught ------------------------------------------


def test_a_wrong_combine_order_changes_the_bits():
    # The fixed order is what makes the bits reproducible; a reversed order is a different result.
    plan = Plan([MANY_CHUNKS], LEGACY)
    right = fused_plan.emulate_finals(plan.arrays(), plan.widths())
    wrong = fused_plan.emulate_finals(plan.arrays(), plan.widths(), order=lambda partials: partials[::-1])
    assert right[:, :2].tobytes() == wrong[:, :2].tobytes()  # max and min do not see the order
    assert right[:, 2:4].tobytes() != wrong[:, 2:4].tobytes()


@pytest.mark.parametrize("tensor", [SPECIAL["nan in the last chunk"], random_tensor(3 * CHUNK + 7, torch.float32)],
                         ids=["nan lost", "elements lost"])
def test_a_dropped_chunk_is_caught(tensor):
    broken = emulated([tensor], LEGACY, order=lambda partials: partials[:-1])[0]
    with pytest.raises(AssertionError):
        assert_like_eager(broken, tensor, LEGACY)


def test_a_sum_off_by_more_than_the_eager_rounding_is_caught():
    tensor = random_tensor(CHUNK + 1, torch.float32)
    good = emulated([tensor], LEGACY)[0]
    for index, factor in ((2, 1 + 1e-4), (3, 1 + 1e-5)):
        bad = list(good)
        bad[index] *= factor
        with pytest.raises(AssertionError):
            assert_like_eager(bad, tensor, LEGACY)


def test_accepts_only_what_the_kernel_reads():
    assert fused_plan.accepts(torch.ones(3)) and fused_plan.accepts(torch.ones(2, 3, dtype=torch.int64).t())
    assert fused_plan.accepts(torch.nn.Parameter(torch.ones(2)))
    refused = [torch.tensor(1.0), torch.ones(0), torch.ones(3, dtype=torch.bool), torch.ones(3, dtype=torch.complex64),
               torch.ones(3, device="meta"), torch.ones(3, 3).to_sparse(), torch._neg_view(torch.ones(3))]
    if hasattr(torch, "float8_e4m3fn"):
        refused.append(torch.ones(3).to(torch.float8_e4m3fn))
    assert not any(fused_plan.accepts(tensor) for tensor in refused)
    with pytest.raises(ValueError):
        fused_plan.width32("float32", "neither")


# -- the Triton kernels under the interpreter ------------------------------------------------------------

@pytest.mark.skipif(importlib.util.find_spec("triton") is not None, reason="triton is installed here")
def test_the_kernel_module_imports_without_triton():
    fused_triton = importlib.import_module("ptdbg_ascend.statistics.fused_triton")
    assert not fused_triton.available() and "triton" in fused_triton.IMPORT_ERROR
    with pytest.raises(RuntimeError, match="triton"):
        fused_triton.fused_statistics([torch.ones(3)], LEGACY)


# ``interpreted``: fused_triton with its kernels under TRITON_INTERPRET=1 (test/dump/conftest.py).


KERNEL_CASES = ([random_tensor(size, dtype, seed=size) for size in SIZES for dtype in FLOATS + INTS]
                + list(SPECIAL.values()) + [torch.full((100,), 1e20), random_tensor(70 * 130, torch.float32)
                                            .reshape(70, 130).t(), torch.tensor([2 ** 62 + 2 ** 38 + 1, -7])])


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")  # the interpreter's inf - inf
@pytest.mark.parametrize("fmt", FORMATS)
def test_the_kernel_matches_the_emulator_and_the_eager_statistics(interpreted, fmt):
    plan = Plan(KERNEL_CASES + [MANY_CHUNKS], fmt)
    finals = interpreted.fused_finals(plan).numpy()
    expected = fused_plan.emulate_finals(plan.arrays(), plan.widths())
    # Max, min and the counts exactly; the sums within float64 rounding (the order inside a block may differ).
    assert finals[:, [0, 1, 4, 5, 6]].tobytes() == expected[:, [0, 1, 4, 5, 6]].tobytes()
    np.testing.assert_allclose(finals[:, 2:4], expected[:, 2:4], rtol=1e-12, atol=1e-300)
    for numbers, tensor in zip(plan.numbers(finals.tolist()), plan.sources):
        assert_like_eager(numbers, tensor, fmt)
    again = interpreted.fused_finals(plan).numpy()
    assert again.tobytes() == finals.tobytes()  # the same bits twice
    assert same_lists(interpreted.fused_statistics(KERNEL_CASES, fmt),
                      Plan(KERNEL_CASES, fmt).numbers(finals[:len(KERNEL_CASES)].tolist()))
