"""The compare core: two checked dumps in, the reports out. ``compare`` (from its ``input_param`` dict) and
``compare_distributed`` (from each rank pair's files) both call :func:`compare_dumps`.

Imports neither torch nor pandas: reading npy needs numpy only (torch is imported lazily for ``.pt`` and for
the advisor's re-run of a failing compare's suspect, ``rerun.py``).
"""

from __future__ import annotations

import os
import time
from typing import List, Optional, Sequence, Tuple

from ptdbg_ascend.comparison import answer_text
from ptdbg_ascend.comparison import pairs_to_rows
from ptdbg_ascend.comparison import advisor, columns, html_report, modules, provenance, reports, rerun
from ptdbg_ascend.readers.dump_state import check_dump
from ptdbg_ascend.comparison.inputs import CompareInputs, CompareOptions, make_output_dir
from ptdbg_ascend.comparison.matching import RowPair, pair_rows
from ptdbg_ascend.comparison.outcome import CompareOutcome, Counts
from ptdbg_ascend.comparison.rows import CompareRow
from ptdbg_ascend.formats.layout import (ADVISOR_STEM, COMPARE_REPORT_STEM, COMPARE_RESULT_STEM, HTML_SUFFIX,
                                         is_dump_json)
from ptdbg_ascend.readers import read_dump
from ptdbg_ascend.errors import CompareError
from ptdbg_ascend.log import logger

MSG_FUZZY = "This task uses fuzzy matching, which may affect the accuracy of the comparison."


def compare_dumps(inputs: CompareInputs, options: CompareOptions) -> CompareOutcome:
    """Compare the dumps of ``inputs`` and write the reports ``options`` ask for into ``options.output_path``
    (what is written, and the outcome: :func:`ptdbg_ascend.comparison.api.compare`). Both arguments are
    already checked (:func:`~ptdbg_ascend.comparison.inputs.parse_input_param`,
    :func:`~ptdbg_ascend.comparison.inputs.check_options`)."""
    npu_calls, bench_calls, torn, level_notes = _read_dumps(inputs, options.stack_mode)
    if options.fuzzy_match:
        logger.warning(MSG_FUZZY)
    pairs = pair_rows(npu_calls, bench_calls, options.api_mapping)
    rows, column_names = _compared_rows(pairs, inputs, options)
    rows = provenance.carry_verdicts(rows)  # a tensor keeps the verdict of the call that made it
    counts = Counts.of(rows, statistics_only=not inputs.full_mode)
    failing = advisor.first_failure(rows)
    advice, finding = advisor.diagnose(rows, counts, failing)
    advice, finding = rerun.attach(advice, finding, rows, inputs, options.rerun and options.auto_analyze)
    if level_notes:
        advice = advice._replace(body=advice.body + level_notes)
    if torn:
        advice = advice._replace(body=advice.body + tuple("Note: " + dump.describe() for dump in torn))
    stamp = time.strftime("%Y%m%d%H%M%S", time.localtime())
    tail = f"{options.suffix}_{stamp}" if options.suffix else stamp
    table = reports.table_of(rows, column_names, options.stack_mode)
    paths = _write_reports(options, tail, column_names, table, rows, counts, advice, failing)
    first = None if failing is None else rows[failing].name
    outcome = CompareOutcome(paths[0], paths[1], paths[2], first, len(rows), finding, counts, torn, paths[3])
    logger.info(f"Compare outcome: {outcome}")
    return outcome


def _write_reports(options: CompareOptions, tail: str, column_names: Sequence[str], table: list,
                   rows: Sequence[CompareRow], counts: Counts, advice: answer_text.Advice, failing: Optional[int]
                   ) -> Tuple[str, Optional[str], Optional[str], Optional[str]]:
    """Claim the reports' names (one tail for all) and write the CSV, then the .xlsx, the advisor's files and the
    HTML page that ``options`` ask for; returns their paths (None: not written)."""
    others = ([(COMPARE_RESULT_STEM, ".xlsx")] if options.xlsx else []) + \
        ([(ADVISOR_STEM, ".txt")] if options.auto_analyze else []) + \
        ([(COMPARE_REPORT_STEM, HTML_SUFFIX)] if options.html else [])
    output_path = options.output_path
    make_output_dir(output_path)
    tail, csv_path, handle = reports.claim_report(output_path, tail, others)
    stem = COMPARE_RESULT_STEM + tail
    reports.write_csv(csv_path, column_names, table, handle)
    logger.info(f"Compare result is {csv_path}")
    xlsx_path = None
    if options.xlsx:
        xlsx_path = reports.write_xlsx(os.path.join(output_path, stem + ".xlsx"), column_names, table, rows, failing)
    advisor_path = None
    if options.auto_analyze:
        advisor_path = answer_text.write_advice(advice, output_path, ADVISOR_STEM + tail)
    html_path = None
    if options.html:
        files = html_report.ReportFiles(os.path.basename(csv_path), xlsx_path and os.path.basename(xlsx_path),
                                        advisor_path and os.path.basename(advisor_path))
        html_path = html_report.write_html_report(os.path.join(output_path, COMPARE_REPORT_STEM + tail + HTML_SUFFIX),
                                                  rows, counts, advice, failing, files)
        logger.info(f"The HTML report is {html_path}")
    return csv_path, xlsx_path, advisor_path, html_path


def _read_dumps(inputs: CompareInputs, stack_mode: bool) -> Tuple[list, list, tuple, tuple]:
    """Both dumps' calls, the dumps found torn, and the notes on record kinds one dump lacks; a CompareError
    when ``stack_mode`` asks for stacks the NPU dump does not hold."""
    npu_calls = read_dump(inputs.npu_dump, inputs.npu_data_dir, inputs.stack_path)
    bench_calls = read_dump(inputs.bench_dump, inputs.bench_data_dir, None)
    # A dump still being written or cut short by a kill is compared as far as it got, with a warning.
    torn = tuple(dump for dump in (check_dump("NPU", inputs.npu_dump, inputs.npu_data_dir, npu_calls),
                                   check_dump("Bench", inputs.bench_dump, inputs.bench_data_dir, bench_calls))
                 if dump is not None)
    # Module records pair only with module records: a kind one dump lacks is left out of the other, said in a note.
    npu_calls, bench_calls, level_notes = modules.comparable(npu_calls, bench_calls, inputs.npu_dump, inputs.bench_dump)
    has_stack = any(call.stack for call in npu_calls)
    if stack_mode and not has_stack:
        raise CompareError("The current file does not contain stack information, please turn off the stack_mode "
                           "({}){}.".format(inputs.npu_dump, _stack_hint(inputs)))
    if has_stack and not stack_mode:
        logger.warning("The current file contains stack information; turn on the stack_mode to see it in the "
                       "report.")
    return npu_calls, bench_calls, torn, level_notes


def _compared_rows(pairs: Sequence[RowPair], inputs: CompareInputs, options: CompareOptions
                   ) -> Tuple[List[CompareRow], List[str]]:
    """The rows and the CSV's columns: of a tensor comparison when both dumps have their tensor files, else of
    a statistics-only one (said in the log)."""
    if inputs.full_mode:
        rows = pairs_to_rows.full_rows(pairs, inputs.print_log, options.fuzzy_match)
        return rows, columns.full_columns(options.stack_mode)
    logger.warning("No tensor directory for {}: comparing statistics only (max, min, mean, norm); give "
                   "npu_dump_data_dir and bench_dump_data_dir to compare the tensors.".format(
                       " and ".join(side for side, data in (("the NPU dump", inputs.npu_data_dir),
                                                            ("the bench dump", inputs.bench_data_dir))
                                    if data is None)))
    return pairs_to_rows.summary_rows(pairs, options.fuzzy_match), columns.summary_columns(options.stack_mode)


def _stack_hint(inputs: CompareInputs) -> str:
    """What else the user can do when stack_mode finds no stack: a legacy pkl carries its stacks inside,
    a dump.json's are in a stack.json (beside it, else named with --stack-path)."""
    if not is_dump_json(inputs.npu_dump):
        return ""
    if inputs.stack_path is None:
        return ", or give the NPU stack.json with --stack-path (input_param['stack_path']): there is no " \
               "stack.json beside the dump.json"
    return ", or give another stack.json with --stack-path (input_param['stack_path']): {} holds no stack of " \
           "these calls".format(inputs.stack_path)
