"""``compare`` and ``compare_distributed``: the public entry points of the compare side.

Imports neither torch nor pandas: reading npy needs numpy only (torch is imported lazily for ``.pt``).
"""

from __future__ import annotations

import os
import re
import time
from typing import Any, Dict, Mapping, Optional, Union

from ptdbg_ascend.comparison import advisor, columns, engine, reports
from ptdbg_ascend.comparison.dump_state import check_dump
from ptdbg_ascend.comparison.inputs import check_api_mapping, check_bool, check_output_path, parse_input_param
from ptdbg_ascend.comparison.matching import pair_rows
from ptdbg_ascend.comparison.outcome import CompareOutcome, Counts, Finding
from ptdbg_ascend.readers import read_dump
from ptdbg_ascend.errors import CompareError, ParameterError
from ptdbg_ascend.log import logger

SUFFIX = re.compile(r"^[A-Za-z0-9_.-]*$")
MSG_FUZZY = "This task uses fuzzy matching, which may affect the accuracy of the comparison."
__all__ = ["compare", "compare_distributed", "CompareOutcome", "Counts", "Finding"]


def compare(input_param: Dict[str, Any], output_path: str, stack_mode: bool = False, auto_analyze: bool = True,
            suffix: str = "", fuzzy_match: bool = False, xlsx: bool = True,
            api_mapping: Optional[Union[Mapping[str, str], str]] = None) -> CompareOutcome:
    """Compare two dumps API by API.

    ``input_param`` keys: ``npu_pkl_path``, ``bench_pkl_path`` (required; msprobe's ``npu_path``/``bench_path``
    or ``npu_json_path``/``bench_json_path`` dump.json files are accepted too, and may be mixed with a pkl),
    ``npu_dump_data_dir``, ``bench_dump_data_dir`` (default: absent = statistics-only comparison; for a
    dump.json, its ``dump_tensor_data`` directory when present), ``stack_path``/``stack_json_path``
    (dump.json only), ``is_print_compare_log`` (default True).
    ``output_path``: an existing directory; writes ``compare_result_{suffix}_{timestamp}.csv`` (``suffix``
    default "" drops the part) and the same-named ``.xlsx`` (``xlsx=True``), and with ``auto_analyze``
    (default True) ``advisor[_{suffix}]_{timestamp}.txt``; when such a report exists already (two compares
    in one second), ``_1``, ``_2``... is added to the stem of all three (never replacing a report).
    ``stack_mode`` (default False) adds the ``NPU_Stack_Info`` column. Calls are aligned across counter shifts by default; ``fuzzy_match``
    (default False) keeps its legacy meaning: rows whose call names differ say so in Err_message.
    ``api_mapping`` (default None): NPU API -> bench API names without counter and direction
    (``{"NPU_npu_rms_norm": "Functional_rms_norm"}``), as a dict or the path of a JSON/YAML file.

    Returns a :class:`CompareOutcome`: ``bool(outcome)`` is True when no compared tensor failed the
    robust verdict and enough tensors could be compared. A dump whose rank directory still holds the
    writer's lock (still being written, or killed) is compared as far as it got, with a warning; see
    ``outcome.torn`` (:mod:`ptdbg_ascend.comparison.dump_state`).
    """
    for name, value in (("stack_mode", stack_mode), ("auto_analyze", auto_analyze), ("fuzzy_match", fuzzy_match),
                        ("xlsx", xlsx)):
        check_bool(name, value)
    if not isinstance(suffix, str) or not SUFFIX.match(suffix):
        raise ParameterError("suffix", suffix, "must be a str of letters, digits, '_', '.' or '-'")
    output_path = check_output_path(output_path)
    mapping = check_api_mapping(api_mapping)
    inputs = parse_input_param(input_param)
    npu_calls = read_dump(inputs.npu_dump, inputs.npu_data_dir, inputs.stack_path)
    bench_calls = read_dump(inputs.bench_dump, inputs.bench_data_dir, None)
    # A dump still being written or cut short by a kill is compared as far as it got, with a warning.
    torn = tuple(dump for dump in (check_dump("NPU", inputs.npu_dump, inputs.npu_data_dir, npu_calls),
                                   check_dump("Bench", inputs.bench_dump, inputs.bench_data_dir, bench_calls))
                 if dump is not None)
    has_stack = any(call.stack for call in npu_calls)
    if stack_mode and not has_stack:
        raise CompareError("The current file does not contain stack information, please turn off the stack_mode "
                           "({}).".format(inputs.npu_dump))
    if has_stack and not stack_mode:
        logger.warning("The current file contains stack information; turn on the stack_mode to see it in the "
                       "report.")
    if fuzzy_match:
        logger.warning(MSG_FUZZY)
    pairs = pair_rows(npu_calls, bench_calls, mapping)
    if inputs.full_mode:
        rows = engine.full_rows(pairs, inputs.print_log, fuzzy_match)
        column_names = columns.full_columns(stack_mode)
    else:
        logger.info("A dump data directory is missing: comparing statistics only (summary mode).")
        rows = engine.summary_rows(pairs, fuzzy_match)
        column_names = columns.summary_columns(stack_mode)
    counts = Counts.of(rows)
    failing = advisor.first_failure(rows)
    advice, finding = advisor.diagnose(rows, counts, failing)
    if torn:
        advice = advice._replace(body=advice.body + tuple("Note: " + dump.describe() for dump in torn))
    stamp = time.strftime("%Y%m%d%H%M%S", time.localtime())
    tail = "{}_{}".format(suffix, stamp) if suffix else stamp
    table = reports.table_of(rows, column_names, stack_mode)
    others = ([("compare_result_", ".xlsx")] if xlsx else []) + ([("advisor_", ".txt")] if auto_analyze else [])
    tail, csv_path, handle = reports.claim_report(output_path, tail, others)
    stem = "compare_result_" + tail
    reports.write_csv(csv_path, column_names, table, handle)
    logger.info("Compare result is {}".format(csv_path))
    xlsx_path = None
    if xlsx:
        xlsx_path = os.path.join(output_path, stem + ".xlsx")
        reports.write_xlsx(xlsx_path, column_names, table, rows, failing)
    advisor_path = None
    if auto_analyze:
        advisor_path = advisor.write_advice(advice, output_path, "advisor_" + tail)
    first = None if failing is None else rows[failing].name
    outcome = CompareOutcome(csv_path, xlsx_path, advisor_path, first, len(rows), finding, counts, torn)
    logger.info("Compare outcome: {}".format(outcome))
    return outcome


def compare_distributed(npu_dump_dir: str, bench_dump_dir: str, output_path: str, **kwargs: Any):
    """Compare every rank of two multi-rank dumps; see :mod:`ptdbg_ascend.comparison.distributed`."""
    from ptdbg_ascend.comparison import distributed

    return distributed.compare_distributed(npu_dump_dir, bench_dump_dir, output_path, **kwargs)
