"""The pre-check judge: metrics and verdict of one output, with hand-computed golden numbers."""

import math

import pytest

torch = pytest.importorskip("torch")

from ptdbg_ascend.precheck import standards  # noqa: E402
from ptdbg_ascend.precheck.judge import (  # noqa: E402
    DETAIL_COLUMNS, ERROR, PASS, RESULT_COLUMNS, SKIP, WARNING, OutputJudgement, api_status, judge_output,
    severity_order, skipped)

F64, F32, F16 = torch.float64, torch.float32, torch.float16


def judge(api, bench, device, name="X.api.0.forward.output.0"):
    return judge_output(name, api, bench, device)


# --- the columns --------------------------------------------------------------------------------------

def test_detail_columns_are_msprobe_1_0_4_titles_then_ours():
    assert DETAIL_COLUMNS[:23] == [
        "API Name", "Bench Dtype", "DEVICE Dtype", "Shape", "余弦相似度", "最大绝对误差", "双百指标", "双千指标",
        "双万指标", "二进制一致错误率", "误差均衡性", "均方根误差", "小值域错误占比", "相对误差最大值",
        "相对误差平均值", "inf/nan错误率", "相对误差错误率", "绝对误差错误率", "ULP误差最大值", "ULP误差平均值",
        "ULP误差大于阈值占比", "Status", "Message"]
    assert DETAIL_COLUMNS[23:] == ["Standard", "Severity"]
    assert RESULT_COLUMNS == ["API name", "Forward Test Success", "Backward Test Success", "Message"]


def test_standards_lookup_follows_the_yaml_facts():
    assert standards.standard_of("Functional.conv2d") == standards.THOUSANDTH
    assert standards.standard_of("Tensor.relu") == standards.BINARY
    assert standards.standard_of("Tensor.__radd__") == standards.ABSOLUTE
    assert standards.standard_of("Torch.matmul") == standards.ULP
    assert standards.standard_of("Functional.gelu") == standards.BENCHMARK
    assert standards.api_key("Torch.linalg.inv") == "linalg.inv"
    assert standards.ABSOLUTE_THRESHOLDS["torch.bfloat16"]["rtol"] == 4e-3
    assert standards.SMALL_VALUE["torch.float32"] == {"small_value": 1e-6, "small_value_atol": 1e-9}


# --- dual ratios (float32: thousandth -> error, ten-thousandth -> warning) ----------------------------

def test_dual_thousandth_ratio_of_a_known_error_pattern():
    # 2000 elements of 10.0; k of them off by +0.02 (relative error 0.002 > 0.001).
    bench = torch.full((2000,), 10.0, dtype=F64)
    one = torch.full((2000,), 10.0, dtype=F32)
    one[7] = 10.02
    j = judge("Functional.gelu", bench, one)
    # 1999/2000 = 0.9995 > 0.999 passes the thousandth; 0.9995 <= 0.9999 fails the ten-thousandth
    assert j.status == WARNING
    assert j.metrics["双千指标"] == pytest.approx(0.9995)
    assert j.metrics["双万指标"] == pytest.approx(0.9995)
    assert j.metrics["最大绝对误差"] == pytest.approx(0.02, rel=1e-4)
    assert j.severity == pytest.approx(0.5)          # (1 - 0.9995) / 0.001

    three = one.clone()
    three[8] = three[9] = 10.02
    j = judge("Functional.gelu", bench, three)
    assert j.status == ERROR                          # 1997/2000 = 0.9985 <= 0.999
    assert j.metrics["双千指标"] == pytest.approx(0.9985)
    assert j.severity == pytest.approx(1.5)


def test_small_max_abs_error_passes_before_the_ratios():
    bench = torch.full((100,), 0.1, dtype=F64)
    device = (bench * (1 + 5e-3)).to(F32)               # 0.5 % off, but |err| = 5e-4 < 0.001
    j = judge("Functional.gelu", bench, device)
    assert j.status == PASS
    assert j.metrics["最大绝对误差"] == pytest.approx(5e-4, rel=1e-4)
    assert j.severity == pytest.approx(0.5, rel=1e-4)  # 5e-4 / 0.001
    assert "双千指标" not in j.metrics


def test_cosine_failure_is_an_error_with_severity_from_the_cosine():
    bench = torch.tensor([1.0, 2.0, 3.0], dtype=F64)
    j = judge("Functional.gelu", bench, -bench.to(F32))
    assert j.status == ERROR
    assert j.metrics["余弦相似度"] == pytest.approx(-1.0)
    assert j.severity == pytest.approx(200.0)          # (1 - (-1)) / (1 - 0.99)


def test_float16_hundredth_and_thousandth():
    # relative errors 2**-10 (< 0.001), 0, 0, 2**-9 (> 0.001): hundredth 4/4 passes, thousandth 3/4 warns
    bench = torch.tensor([1.0, 1.0, 2.0, 4.0], dtype=F64)
    device = torch.tensor([1 + 2 ** -10, 1.0, 2.0, 4 + 2 ** -7], dtype=F16)
    j = judge("Functional.linear", bench, device)
    assert j.status == WARNING
    assert j.metrics["双百指标"] == 1.0
    assert j.metrics["双千指标"] == 0.75
    # ULP of 1.0 in float16 is 2**-10, of 4.0 is 2**-8: errors 1, 0, 0, 2 ULP; threshold 1 -> 1 of 4 above
    assert j.metrics["ULP误差最大值"] == 2.0
    assert j.metrics["ULP误差平均值"] == 0.75
    assert j.metrics["ULP误差大于阈值占比"] == 0.25


def test_float16_one_ulp_error():
    bench = torch.tensor([1.0, 0.5, 3.0, 1000.0], dtype=F64)
    device = bench.to(F16)
    device[0] = 1 + 2 ** -10                           # one ULP above 1.0
    j = judge("Torch.matmul", bench, device)
    assert j.metrics["ULP误差最大值"] == 1.0
    assert j.metrics["ULP误差平均值"] == 0.25
    assert j.metrics["ULP误差大于阈值占比"] == 0.0    # 1 ULP is not above the float16 threshold 1
    assert j.status == PASS                            # max abs 2**-10 = 0.00098 < 0.001


def test_float32_ulp_threshold_is_32():
    bench = torch.tensor([1.0, 1.0], dtype=F64)
    device = torch.tensor([1 + 33 * 2 ** -23, 1 + 32 * 2 ** -23], dtype=F32)
    j = judge("Functional.linear", bench, device)
    assert j.metrics["ULP误差最大值"] == 33.0
    assert j.metrics["ULP误差平均值"] == 32.5
    assert j.metrics["ULP误差大于阈值占比"] == 0.5


# --- binary consistency -------------------------------------------------------------------------------

def test_int_tensor_with_one_differing_element_is_a_binary_error():
    j = judge("Torch.argmax", torch.tensor([1, 2, 3, 4]), torch.tensor([1, 2, 9, 4]))
    assert j.status == ERROR
    assert j.metrics["二进制一致错误率"] == 0.25
    assert j.severity == 1.0
    assert j.device_dtype == "torch.int64" and j.shape == "(4,)"
    same = judge("Torch.argmax", torch.tensor([1, 2]), torch.tensor([1, 2]))
    assert same.status == PASS and same.metrics["二进制一致错误率"] == 0.0


def test_bool_tensors_and_builtins():
    j = judge("Tensor.__eq__", torch.tensor([True, False]), torch.tensor([True, True]))
    assert j.status == ERROR and j.metrics["二进制一致错误率"] == 0.5
    assert judge("Tensor.size", 3, 3).status == PASS
    j = judge("Tensor.size", 3, 4)
    assert j.status == ERROR and j.bench_dtype == "<class 'int'>"


def test_binary_standard_float_rate_is_against_the_bench_in_the_device_dtype():
    # masked_fill(x, m, 0.1): float32 0.1 is not float64 0.1, yet the op is exact in float32
    x = torch.tensor([1.0, 2.0, 3.0, 4.0])
    mask = torch.tensor([True, False, True, False])
    j = judge("Tensor.masked_fill", x.double().masked_fill(mask, 0.1), x.masked_fill(mask, 0.1))
    assert j.metrics["二进制一致错误率"] == 0.0
    wrong = x.masked_fill(mask, 0.1)
    wrong[1] = 2.5
    assert judge("Tensor.masked_fill", x.double().masked_fill(mask, 0.1), wrong).metrics["二进制一致错误率"] == 0.25


# --- small-value domain, absolute threshold, inf/nan --------------------------------------------------

def test_small_value_domain_of_the_benchmark_algorithm():
    # float32: small values are |b| <= 1e-6, an error when |d - b| > 1e-9
    bench = torch.tensor([1e-7, 5e-7, 1.0, 2.0], dtype=F64)
    device = torch.tensor([1.05e-7, 5e-7, 1.0, 2.0], dtype=F32)     # 5e-9 off at 1e-7; round-off at 5e-7
    j = judge("Functional.gelu", bench, device)
    assert j.metrics["小值域错误占比"] == 0.5
    assert j.metrics["均方根误差"] == 0.0                            # the two normal values are exact
    assert j.metrics["相对误差最大值"] == 0.0
    assert j.metrics["误差均衡性"] == 0.25                           # one element above, none below
    assert j.status == PASS


def test_absolute_threshold_float16_rates():
    # float16: rtol 1e-3 on |b| > 1e-3, atol 1e-5 on |b| <= 1e-3
    bench = torch.tensor([1.0, 2.0, 1e-4, 5e-4], dtype=F64)
    device = torch.tensor([1 + 2 ** -9, 2.0, 1e-4, 5.5e-4], dtype=F16)
    j = judge("Torch.add", bench, device)
    assert j.metrics["相对误差错误率"] == 0.5       # 1.00195 is 1.95e-3 off; 2.0 exact
    assert j.metrics["绝对误差错误率"] == 0.5       # 5.5e-4 is ~5e-5 > 1e-5 off; 1e-4 rounds within 1e-5
    assert j.metrics["inf/nan错误率"] == 0.0
    assert j.standard == standards.ABSOLUTE


def test_nan_in_device_only_is_an_inf_nan_error():
    bench = torch.tensor([1.0, 2.0, 3.0, 4.0], dtype=F64)
    device = torch.tensor([1.0, float("nan"), 3.0, 4.0], dtype=F32)
    j = judge("Torch.mul", bench, device)
    assert j.status == ERROR
    assert j.metrics["inf/nan错误率"] == 1.0        # the one inf/nan position disagrees
    assert j.metrics["相对误差错误率"] == 0.0
    assert "inf/nan" in j.message
    assert j.severity == 1.0


def test_agreeing_infinities_do_not_fail_the_output():
    x = torch.tensor([1.0, -2.0, 3.0, 0.5])
    mask = torch.tensor([False, True, False, True])
    j = judge("Tensor.masked_fill", x.double().masked_fill(mask, float("-inf")), x.masked_fill(mask, float("-inf")))
    assert j.status == PASS
    assert "CONSISTENT_NONFINITE" in j.message
    wrong = x.masked_fill(mask, float("inf"))           # the wrong sign
    assert judge("Tensor.masked_fill", x.double().masked_fill(mask, float("-inf")), wrong).status == ERROR


def test_float32_round_off_around_a_float64_zero_is_not_an_error():
    bench = torch.zeros(64, dtype=F64)
    residue = torch.full((64,), 3e-8, dtype=F32)
    residue[::2] = -2e-8
    j = judge("Functional.softmax", bench, residue)
    assert j.status == PASS and "SMALL_TENSOR_COSINE" in j.message
    # a device that loses real values (1e-4 >> the small-value threshold 1e-6) still fails
    j = judge("Functional.softmax", torch.full((64,), 1e-4, dtype=F64), torch.zeros(64, dtype=F32))
    assert j.status == ERROR and "zero in device" in j.message


def test_clean_float32_reruns_pass():
    torch.manual_seed(0)
    x = torch.randn(32, 64)
    w = torch.randn(48, 64)
    for api, fn in [("Functional.linear", lambda a, b: torch.nn.functional.linear(a, b)),
                    ("Torch.matmul", lambda a, b: a @ b.t()),
                    ("Functional.softmax", lambda a, b: torch.softmax(a @ b.t(), -1)),
                    ("Functional.gelu", lambda a, b: torch.nn.functional.gelu(a))]:
        j = judge(api, fn(x.double(), w.double()), fn(x, w))
        assert j.status == PASS, (api, j.message)


# --- odd inputs ---------------------------------------------------------------------------------------

def test_shape_mismatch_none_and_empty():
    j = judge("Functional.gelu", torch.zeros(2, 3, dtype=F64), torch.zeros(3, 2))
    assert j.status == ERROR and "(2, 3)" in j.message
    j = judge("Functional.gelu", None, torch.zeros(1))
    assert j.status == SKIP and j.message == "Bench output is None, skip this test."
    assert judge("Functional.gelu", torch.zeros(0, 3, dtype=F64), torch.zeros(0, 3)).status == PASS
    assert judge("Functional.gelu", torch.zeros(2, dtype=F64), 1.0).status == ERROR
    assert judge("Functional.gelu", torch.zeros(2, dtype=F64), torch.zeros(2, dtype=torch.int64)).status == ERROR


def test_detail_row_formats_as_1_0_4():
    bench = torch.full((2000,), 10.0, dtype=F64)
    device = torch.full((2000,), 10.0, dtype=F32)
    device[0] = 10.5
    row = judge("Functional.gelu", bench, device, name="Functional.gelu.0.forward.output.0").detail_row()
    assert len(row) == len(DETAIL_COLUMNS)
    cells = dict(zip(DETAIL_COLUMNS, row))
    assert cells["API Name"] == "Functional.gelu.0.forward.output.0"
    assert cells["Bench Dtype"] == "torch.float64" and cells["DEVICE Dtype"] == "torch.float32"
    assert cells["Shape"] == "(2000,)"
    assert cells["最大绝对误差"] == "0.50000000000000"
    assert cells["双千指标"] == "0.99950000000000"
    assert cells["双百指标"] == " " and cells["ULP误差最大值"] == " "
    assert cells["Status"] == "warning" and cells["Standard"] == "benchmark"
    assert cells["Severity"] == "0.5"


# --- per API ------------------------------------------------------------------------------------------

def _row(status, severity=float("nan"), name="n"):
    return OutputJudgement(name, "Functional.gelu", "torch.float64", "torch.float32", "(1,)", status, "", "benchmark",
                           {}, severity)


def test_api_status_combination():
    assert api_status([_row(PASS), _row(PASS)]) == PASS
    assert api_status([_row(PASS), _row(WARNING)]) == WARNING
    assert api_status([_row(WARNING), _row(ERROR), _row(PASS)]) == ERROR
    assert api_status([_row(SKIP), _row(SKIP)]) == SKIP
    assert api_status([_row(SKIP), _row(PASS)]) == PASS
    assert api_status([]) == " "
    assert skipped("A.b.0.backward.output.0", "Functional.gelu", "no grad").status == SKIP


def test_severity_order_puts_the_worst_first():
    rows = [_row(PASS, 0.1, "a"), _row(ERROR, 3.0, "b"), _row(ERROR, 40.0, "c"), _row(WARNING, 0.5, "d"),
            _row(ERROR, math.nan, "e")]
    assert [r.name for r in severity_order(rows)] == ["c", "b", "e", "d", "a"]


def test_zero_dim_sparse_and_negative_bit_views():
    j = judge("Torch.sum", torch.tensor(2.0, dtype=F64), torch.tensor(2.0))
    assert j.status == PASS and j.shape == "()"
    sparse = torch.tensor([[0.0, 1.0], [2.0, 0.0]]).to_sparse()
    assert judge("Torch.add", sparse.double(), sparse).status == PASS
    x = torch.tensor([1.0, -2.0])
    assert judge("Torch.neg", (-x).double(), torch._neg_view(x)).status == PASS
