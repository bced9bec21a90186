"""``run_ut``: the offline API pre-check of one dump (msprobe 1.0.4 ``run_ut``).

Every API call of a ``dump.json`` (written by ``PrecisionDebugger(task="tensor", level="L1")``) is rebuilt
from its dumped inputs (``api_inputs``), run on the CPU in float64 (the benchmark) and in its dumped dtypes
(``execution``), forward and backward, and each output is judged (``judge``). Results go to
``accuracy_checking_result_{ts}.csv`` (one row per API) and ``accuracy_checking_details_{ts}.csv`` (one row
per output) in ``out_path``, line by line (a SIGKILL loses at most the API in flight; ``result_csv_path``
resumes). A statistics-only dump is run on random inputs within the recorded ranges (seeded).

``dumped_outputs=True`` judges the outputs the dump holds (the device's own forward outputs and input
gradients) against the float64 CPU benchmark instead of re-running in the dumped dtypes: this is what a
user with an NPU dump on a machine without an NPU needs (the re-run in the dumped dtypes would measure the
CPU, not the NPU).

The run is planned (``plan``: options, dump, calls), each call checked (``call_check``) and its rows
committed (``results``: written line by line, counted in memory for the summary).
"""

from __future__ import annotations

import time
from typing import Any, List, Optional, Sequence

from ptdbg_ascend.errors import RunInterrupted
from ptdbg_ascend.log import logger
from ptdbg_ascend.precheck.api_inputs import DumpedCall
from ptdbg_ascend.precheck.call_check import check_call
from ptdbg_ascend.precheck.plan import UtPlan, plan_run, select_calls
from ptdbg_ascend.precheck.results import RunUtOutcome, open_results


def run_ut(api_info: str, out_path: str = ".", save_error_data: bool = False, filter_same: bool = False,
           result_csv_path: Optional[str] = None, white_list: Sequence[str] = (), black_list: Sequence[str] = (),
           error_data_path: Optional[str] = None, random_data: Optional[bool] = None, seed: int = 1234,
           progress: bool = True, dumped_outputs: bool = False, device: str = "cpu",
           compare_csv: Optional[Any] = None, memory_budget: Optional[Any] = None,
           data_dir: Optional[str] = None) -> RunUtOutcome:
    """Pre-check every API call of the dump ``api_info`` (see the module doc).

    Args:
        api_info: the ``dump.json`` (``dump_path/step0/rank/dump.json``, ``rank{R}`` under
            torch.distributed); its ``dump_tensor_data/`` and ``stack.json`` are read from beside it.
        out_path: directory for the CSVs (created if absent). Default ".".
        save_error_data: write the inputs, outputs and gradients of APIs judged error or warning as
            ``.pt`` under ``{error_data_path}/ut_error_data{ts}/``. Default False.
        filter_same: run only the first of calls identical in everything but the statistics Max/Min.
            Default False.
        result_csv_path: an interrupted run's ``accuracy_checking_result_{ts}.csv``: append to it and its
            details CSV, skipping the APIs it holds (``out_path`` is then not used). Default None: a new pair.
        white_list / black_list: API names of the wrap list (``conv2d`` or ``Functional.conv2d``): run only /
            never these; the black list wins. Default (): every API.
        error_data_path: existing directory for save_error_data. Default None: ``out_path`` (or the resumed
            CSV's directory).
        random_data: True: random inputs within the recorded Max/Min; False: the dumped tensors; None
            (default): the dumped tensors if the dump has them, else random data.
        seed: seeds the runs (the run device's generators, per API) and random data. Default 1234.
        progress: show a tqdm progress bar on stderr. Default True.
        dumped_outputs: judge the dump's own outputs against the benchmark instead of re-running in the
            dumped dtypes. Default False.
        device: where the device-dtype run happens. Default "cpu".
        compare_csv: the compare of the same run (a ``compare_result_{ts}.csv`` path or the CompareOutcome
            of ``compare()``): each failing API is linked to it (``compare_link``: failing / passing / absent
            there, and where it stands to the advisor's suspect), in the summary and in a ``Compare Link``
            column appended to the result CSV. Default None: no link.
        memory_budget: the memory one call may take, in bytes or as "8G", "512M": its inputs, their float64
            and dumped-dtype copies and both runs' outputs (from a dry run on the meta device), computed
            before anything is loaded; a call over it is a SKIP row saying how much it needs. Default None:
            a quarter of the memory available when the run starts (the smallest of MemAvailable, the
            container's limit and ``ulimit -v``; ``ptdbg_ascend.memory``).
        data_dir: the directory of the dump's tensor files. Default None: ``dump_tensor_data/`` beside the
            dump.json (the directory recorded inside the dump is never used).

    Files: beside the CSV pair, ``accuracy_checking_run_{ts}.jsonl`` records the dump.json's fingerprint
    and a chain digest of each API committed (a resume of another dump, or of rows its run file does not
    record, is refused) and ``.accuracy_checking_result_{ts}.csv.lock`` is locked while the run writes (a
    second run on the same CSV is refused).

    Raises (before anything is written): ParameterError (a list name not in the wrap list, a bad
    result_csv_path: not a regular file, of another dump, missing its run file or with another pair's,
    holding rows its run file does not record, in use by another run; error_data_path missing or not
    writable, random_data=False on a dump without tensors, an unknown device), FileFormatError (dump.json missing/corrupt/legacy pkl, tensor directory missing).
    RunInterrupted (a KeyboardInterrupt) on Ctrl-C once the CSVs are open: its ``result_csv`` resumes.
    DumpWriteError when the CSVs cannot be written (a full disk): they end at the last whole API and the
    message names the file and the ``-csv_path`` that resumes.
    """
    plan = plan_run(api_info, out_path=out_path, save_error_data=save_error_data, filter_same=filter_same,
                    result_csv_path=result_csv_path, white_list=white_list, black_list=black_list,
                    error_data_path=error_data_path, random_data=random_data, seed=seed,
                    dumped_outputs=dumped_outputs, device=device, compare_csv=compare_csv,
                    memory_budget=memory_budget, data_dir=data_dir)
    return _check_planned_calls(plan, progress)


def _check_planned_calls(plan: UtPlan, progress: bool) -> RunUtOutcome:
    """Open the result files of ``plan`` (or resume them), check each call not done yet and commit its rows;
    the outcome counts what was written."""
    results = open_results(plan)
    files, done = results.files, results.done
    outcome = RunUtOutcome(files.result_path, files.details_path, random_data=plan.use_random, apis_resumed=len(done))
    loop_started = time.time()
    try:
        error_dir = plan.error_dir(files.tail)
        outcome.error_data_dir = error_dir
        source = plan.source()
        calls = select_calls(plan.dump, plan.white_list, plan.black_list, plan.filter_same, done)
        logger.info(f"run_ut: {len(calls)} API calls to run ({len(done)} done before); results in {files.result_path}")
        loop_started = time.time()  # the rate counts the API runs, not reading the dump
        for call in _progress(calls, progress):
            results.write_api(*check_call(call, source, plan, error_dir))
            outcome.apis_run += 1
        outcome.seconds = time.time() - loop_started
        results.fill(outcome)  # counts and failures from the rows as they were written, not read back
    except KeyboardInterrupt as interrupt:
        raise RunInterrupted(files.result_path) from interrupt
    finally:
        files.close()
    return outcome


def _progress(calls: List[DumpedCall], enabled: bool) -> Any:
    if not enabled:
        return calls
    from tqdm import tqdm

    return tqdm(calls, desc="run_ut", unit="API", smoothing=0, dynamic_ncols=True)
