"""Column titles and cell words of the pre-check CSVs, exactly as msprobe 1.0.4 writes and reads them
(``compare/compare_utils.py``, ``compare/compare.py``, ``compare/api_precision_compare.py``), so that
msprobe's own ``api_precision_compare`` reads our details CSVs and the other way round.

No torch and no numpy here: ``api_precision_compare`` (``device_compare``) only needs these titles.
"""

from __future__ import annotations

from typing import List, Sequence

# statuses (the interface of the pre-check; 1.0.4 writes its warning as "Warning", the seed "warning")
PASS, WARNING, ERROR, SKIP = "pass", "warning", "error", "SKIP"
# the empty cell of 1.0.4 (CompareConst.SPACE): a metric not measured, a backward without outputs
SPACE = " "

# --- accuracy_checking_details_{ts}.csv ---------------------------------------------------------------
API_NAME = "API Name"
BENCH_DTYPE = "Bench Dtype"
DEVICE_DTYPE = "DEVICE Dtype"
SHAPE = "Shape"
COSINE = "余弦相似度"
MAX_ABS_ERR = "最大绝对误差"
REL_ERR_HUNDREDTH = "双百指标"
REL_ERR_THOUSANDTH = "双千指标"
REL_ERR_TEN_THOUSANDTH = "双万指标"
ERROR_RATE = "二进制一致错误率"
EB = "误差均衡性"
RMSE = "均方根误差"
SMALL_VALUE_ERR_RATIO = "小值域错误占比"
MAX_REL_ERR = "相对误差最大值"
MEAN_REL_ERR = "相对误差平均值"
INF_NAN_ERR_RATIO = "inf/nan错误率"
REL_ERR_RATIO = "相对误差错误率"
ABS_ERR_RATIO = "绝对误差错误率"
MAX_ULP_ERR = "ULP误差最大值"
MEAN_ULP_ERR = "ULP误差平均值"
ULP_ERR_PROPORTION = "ULP误差大于阈值占比"
STATUS = "Status"
MESSAGE = "Message"
# ours, appended after 1.0.4's columns (readers select by title, so extra columns do not disturb them)
STANDARD = "Standard"
SEVERITY = "Severity"

METRIC_COLUMNS: List[str] = [
    COSINE, MAX_ABS_ERR, REL_ERR_HUNDREDTH, REL_ERR_THOUSANDTH, REL_ERR_TEN_THOUSANDTH, ERROR_RATE, EB, RMSE,
    SMALL_VALUE_ERR_RATIO, MAX_REL_ERR, MEAN_REL_ERR, INF_NAN_ERR_RATIO, REL_ERR_RATIO, ABS_ERR_RATIO,
    MAX_ULP_ERR, MEAN_ULP_ERR, ULP_ERR_PROPORTION,
]
DETAIL_COLUMNS: List[str] = ([API_NAME, BENCH_DTYPE, DEVICE_DTYPE, SHAPE] + METRIC_COLUMNS
                             + [STATUS, MESSAGE, STANDARD, SEVERITY])

# --- accuracy_checking_result_{ts}.csv (compare.py: "API name", not "API Name") -----------------------
RESULT_API_NAME = "API name"
FORWARD_SUCCESS = "Forward Test Success"
BACKWARD_SUCCESS = "Backward Test Success"
RESULT_COLUMNS: List[str] = [RESULT_API_NAME, FORWARD_SUCCESS, BACKWARD_SUCCESS, MESSAGE]
# beyond 1.0.4: appended after its four when run_ut links its failures to a compare (compare_link)
LINK_COLUMN = "Compare Link"

# --- api_precision_compare_{result,details}_{ts}.csv -------------------------------------------------
SMALL_VALUE_ERR_RATIO_RATIO = "小值域错误比值"
SMALL_VALUE_ERR_STATUS = "小值域判定结果"
RMSE_RATIO = "均方根误差比值"
RMSE_STATUS = "均方根误差判定结果"
MAX_REL_ERR_RATIO = "相对误差最大值比值"
MAX_REL_ERR_STATUS = "相对误差最大值判定结果"
MEAN_REL_ERR_RATIO = "相对误差平均值比值"
MEAN_REL_ERR_STATUS = "相对误差平均值判定结果"
EB_RATIO = "误差均衡性比值"
EB_STATUS = "误差均衡性判定结果"
INF_NAN_STATUS = "inf/nan判定结果"
REL_ERR_STATUS = "相对误差判定结果"
ABS_ERR_STATUS = "绝对误差判定结果"
ERROR_RATE_STATUS = "二进制一致错误率判定结果"
ULP_ERR_PROPORTION_RATIO = "ULP误差大于阈值占比比值"
ULP_ERR_STATUS = "ULP误差判定结果"
REL_ERR_THOUSANDTH_STATUS = "双千指标判定结果"
FINAL_RESULT = "比对结果"
ALGORITHM = "比对算法"

PRECISION_DETAIL_COLUMNS: List[str] = [
    API_NAME, SMALL_VALUE_ERR_RATIO_RATIO, SMALL_VALUE_ERR_STATUS, RMSE_RATIO, RMSE_STATUS,
    MAX_REL_ERR_RATIO, MAX_REL_ERR_STATUS, MEAN_REL_ERR_RATIO, MEAN_REL_ERR_STATUS, EB_RATIO, EB_STATUS,
    INF_NAN_ERR_RATIO, INF_NAN_STATUS, REL_ERR_RATIO, REL_ERR_STATUS, ABS_ERR_RATIO, ABS_ERR_STATUS,
    ERROR_RATE, ERROR_RATE_STATUS, MEAN_ULP_ERR, ULP_ERR_PROPORTION, ULP_ERR_PROPORTION_RATIO, ULP_ERR_STATUS,
    REL_ERR_THOUSANDTH, REL_ERR_THOUSANDTH_STATUS, FINAL_RESULT, ALGORITHM, MESSAGE,
]
# api_precision_compare_result: 1.0.4 titles it "API Name" (ApiPrecisionCompareColumn), unlike run_ut's result
PRECISION_RESULT_COLUMNS: List[str] = [API_NAME, FORWARD_SUCCESS, BACKWARD_SUCCESS, MESSAGE]
# the details columns api_precision_compare needs from each input CSV (1.0.4 to_required_columns)
PRECISION_REQUIRED_COLUMNS: List[str] = [
    API_NAME, DEVICE_DTYPE, SMALL_VALUE_ERR_RATIO, RMSE, MAX_REL_ERR, MEAN_REL_ERR, EB, ERROR_RATE,
    INF_NAN_ERR_RATIO, REL_ERR_RATIO, ABS_ERR_RATIO, MEAN_ULP_ERR, ULP_ERR_PROPORTION, REL_ERR_THOUSANDTH,
]

FLOAT_DECIMALS = 14  # 1.0.4 writes every float cell as '{:.14f}' (msCheckerConfig.precision)


def format_cell(value: object) -> object:
    """A metric as 1.0.4 writes it: None -> ``" "``, a float -> 14 decimals (``nan``/``inf`` as words),
    anything else unchanged."""
    if value is None:
        return SPACE
    if isinstance(value, bool):
        return value
    if isinstance(value, float):
        return "{:.{}f}".format(value, FLOAT_DECIMALS)
    return value


def aggregate_status(statuses: Sequence[str]) -> str:
    """The status of an API (a direction) from its rows' statuses (seed §4, 1.0.4
    ``get_api_checker_result``): none -> SPACE (no backward); all SKIP -> SKIP; any error -> error; else
    any warning -> warning; else pass (SKIP rows beside passing ones do not fail the API)."""
    if not statuses:
        return SPACE
    if all(status == SKIP for status in statuses):
        return SKIP
    if ERROR in statuses:
        return ERROR
    if WARNING in statuses:
        return WARNING
    return PASS


def overall_status(forward: str, backward: str) -> str:
    """One status per API (the run_ut summary's counts): SKIP when nothing was compared, else the worse
    of its Forward and Backward Test Success."""
    statuses = [s for s in (forward, backward) if s not in (SPACE, "", SKIP)]
    if not statuses:
        return SKIP
    for status in (ERROR, WARNING):
        if status in statuses:
            return status
    return PASS
