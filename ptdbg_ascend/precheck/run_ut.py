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
"""

from __future__ import annotations

import functools
import json
import math
import os
import time
from dataclasses import dataclass, field
from typing import Any, Dict, FrozenSet, List, Optional, Sequence, Set, Tuple

from ptdbg_ascend.errors import ParameterError, RunInterrupted
from ptdbg_ascend.formats.naming import ut_api_of_row
from ptdbg_ascend.log import logger
from ptdbg_ascend.memory import default_budget, parse_size
from ptdbg_ascend.precheck import columns as col
from ptdbg_ascend.precheck import csv_files, ut_files, ut_identity, ut_lock
from ptdbg_ascend.precheck.api_inputs import ApiCall, Dump, open_dump
from ptdbg_ascend.precheck.call_values import Source
from ptdbg_ascend.precheck.compare_link import (LINK_COLUMN, drop_link_column, link_outcome, read_compare,
                                                times_allowed)
from ptdbg_ascend.terminal import printable

# statistics that may differ between calls filter_same still takes for identical
_FILTER_IGNORED = frozenset(("Max", "Min", "Max_except_inf_nan", "Min_except_inf_nan", "data_name"))
SUMMARY_FAILURES = 15  # failing APIs listed by the summary (one screen)


@dataclass
class FailingApi:
    """An API whose forward or backward is error/warning: its worst row and the user's code line."""

    name: str
    forward: str
    backward: str
    status: str
    severity: float
    worst_row: str
    message: str
    code_line: Optional[str]
    link: Optional[Any] = None  # compare_link.CompareLink when run with compare_csv


@dataclass
class RunUtOutcome:
    """What a run_ut produced. ``counts``: APIs by overall status (pass / warning / error / SKIP) over
    the whole result CSV (a resumed run included); ``failures``: error then warning APIs, worst first;
    ``skipped``: (API, reason); ``apis_run``/``seconds``: this invocation's work."""

    result_csv: str
    details_csv: str
    counts: Dict[str, int] = field(default_factory=dict)
    failures: List[FailingApi] = field(default_factory=list)
    skipped: List[Tuple[str, str]] = field(default_factory=list)
    apis_run: int = 0
    apis_resumed: int = 0
    seconds: float = 0.0
    random_data: bool = False
    error_data_dir: Optional[str] = None
    compare: Optional[Any] = None  # compare_link.CompareReport when run with compare_csv

    @property
    def failed(self) -> bool:
        """Whether an API's accuracy is an error (warnings alone are not a failure)."""
        return self.counts.get(col.ERROR, 0) > 0

    def summary(self) -> str:
        """The one-screen summary: counts, then the failing APIs worst first with their code lines."""
        total = sum(self.counts.values())
        rate = self.apis_run / self.seconds if self.seconds > 0 else float("nan")
        lines = ["run_ut: {} APIs: {} pass, {} warning, {} error, {} SKIP{} ({} run now in {:.1f} s, {:.1f} APIs/s{})"
                 .format(total, self.counts.get(col.PASS, 0), self.counts.get(col.WARNING, 0),
                         self.counts.get(col.ERROR, 0), self.counts.get(col.SKIP, 0),
                         "; random inputs" if self.random_data else "", self.apis_run, self.seconds, rate,
                         "; {} done before".format(self.apis_resumed) if self.apis_resumed else ""),
                 "  result:  " + self.result_csv, "  details: " + self.details_csv]
        if self.error_data_dir:
            lines.append("  error data: " + self.error_data_dir)
        if self.compare is not None:
            lines.append("  linked to " + self.compare.describe())
        if self.failures:
            lines.append("Failing APIs, worst first (by error size; 1x = at the error threshold of the dtype):")
            for failure in self.failures[:SUMMARY_FAILURES]:
                lines.append("  {:<7} {}  forward {} / backward {}  {}".format(
                    failure.status, failure.name, failure.forward, failure.backward.strip() or "-",
                    times_allowed(failure.severity)))
                lines.append("          {}".format(failure.code_line or "(no stack.json line)"))
                if failure.link is not None:
                    lines.append("          compare: " + failure.link.text())
            if len(self.failures) > SUMMARY_FAILURES:
                lines.append("  ... and {} more in the result CSV.".format(len(self.failures) - SUMMARY_FAILURES))
        else:
            lines.append("No failing API.")
        if self.skipped:
            reasons: Dict[str, int] = {}
            for _, reason in self.skipped:
                reasons[reason[:90]] = reasons.get(reason[:90], 0) + 1
            lines.append("SKIP reasons: " + "; ".join("{}x {}".format(n, r) for r, n in
                                                     sorted(reasons.items(), key=lambda item: -item[1])[:5]))
        # API names, code lines, messages and SKIP reasons come from the dump and the CSVs: one line each,
        # control characters escaped (printable).
        return "\n".join(printable(line) for line in lines)


# --- white/black lists ------------------------------------------------------------------------------------

@functools.lru_cache(None)
def known_api_names() -> FrozenSet[str]:
    """Every API name of the wrap lists (``dump/wrapped_apis.txt`` + ``wrapped_apis_extra.txt``), bare
    (``linear``) and with its prefix (``Functional.linear``)."""
    from ptdbg_ascend.precheck.admission import wrap_list

    names: Set[str] = set()
    for prefix, apis in wrap_list().items():
        for api in apis:
            names.add(api)
            names.add(prefix + "." + api)
    return frozenset(names)


def check_api_list(parameter: str, values: Sequence[str]) -> Tuple[str, ...]:
    """The names of a white/black list, each checked against the wrap lists."""
    if isinstance(values, str) or not all(isinstance(v, str) for v in values):
        raise ParameterError(parameter, values, "must be a list of API names, e.g. [\"conv2d\", \"Functional.linear\"]")
    if not values:
        return ()
    known = known_api_names()
    unknown = [name for name in values if name not in known]
    if unknown:
        raise ParameterError(parameter, list(values), "every name must be a wrapped API, bare (\"linear\") or with its "
                             "prefix (\"Functional.linear\"); not in the wrap list: {}".format(", ".join(unknown)),
                             "The list is ptdbg_ascend/dump/wrapped_apis.txt (+ wrapped_apis_extra.txt).")
    return tuple(values)


def _listed(call: ApiCall, names: Sequence[str]) -> bool:
    return call.api in names or call.api_key in names


# --- filter_same ------------------------------------------------------------------------------------------

def _without_extremes(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_extremes(v) for k, v in value.items() if k not in _FILTER_IGNORED}
    if isinstance(value, list):
        return [_without_extremes(v) for v in value]
    return value


def same_call_key(call: ApiCall) -> str:
    """What two calls must share to be "the same" for filter_same: the API and every recorded input in
    everything but Max/Min (and the tensor file name, which holds the counter)."""
    if call.problem:
        return call.full_name  # not run anyway: never "the same" as another call
    inputs = {"args": call.forward.get("input_args"), "kwargs": call.forward.get("input_kwargs")}
    return call.api_key + json.dumps(_without_extremes(inputs), sort_keys=True, default=str)


def select_calls(dump: Dump, white_list: Sequence[str], black_list: Sequence[str], filter_same: bool,
                 done: Set[str]) -> List[ApiCall]:
    """The calls to run now, in dump order (black list first, then white list, then filter_same, then
    the APIs a resumed run has done)."""
    chosen, seen = [], set()
    for call in dump.calls:
        if black_list and _listed(call, black_list):
            continue
        if white_list and not _listed(call, white_list):
            continue
        if filter_same:
            key = same_call_key(call)
            if key in seen:
                continue
            seen.add(key)
        if call.full_name in done:
            continue
        chosen.append(call)
    return chosen


# --- one API ----------------------------------------------------------------------------------------------

def _device(device: str) -> str:
    import torch

    try:
        parsed = torch.device(device)
    except (RuntimeError, TypeError):
        raise ParameterError("device", device, "must be a torch device: \"cpu\" (default) or an accelerator "
                             "present here, e.g. \"cuda:0\"") from None
    if parsed.type != "cpu":
        module = getattr(torch, parsed.type, None)
        available = getattr(module, "is_available", None)
        if available is None or not available():
            raise ParameterError("device", device, "must be a device present on this machine (\"cpu\" always is)")
    return str(parsed)


def judge_call(call: ApiCall, runs: Any) -> Tuple[List[Any], List[Any], str, str, str]:
    """(forward judgements, backward judgements, forward status, backward status, message)."""
    from ptdbg_ascend.precheck.judge import api_status, judge_output, skipped

    forward_name = call.full_name + ".forward.output."
    backward_name = call.full_name + ".backward.output."
    if runs.forward_skip:
        row = skipped(forward_name + "0", call.api_key, runs.forward_skip)
        return [row], [], col.SKIP, col.SKIP, runs.forward_skip
    count = max(len(runs.forward_bench), len(runs.forward_device))
    forward = [judge_output(forward_name + str(i), call.api_key, _at(runs.forward_bench, i),
                            _at(runs.forward_device, i)) for i in range(count)]
    backward: List[Any] = []
    message = ""
    if runs.backward_skip:
        backward = [skipped(backward_name + "0", call.api_key, runs.backward_skip)]
        message = "backward: " + runs.backward_skip
    else:
        backward = [judge_output(backward_name + str(i), call.api_key, runs.backward_bench[i],
                                 runs.backward_device.get(i)) for i in sorted(runs.backward_bench)]
    backward_status = api_status(backward)  # SPACE without rows: the call has no backward
    return forward, backward, api_status(forward), backward_status, message


def _at(values: List[Any], index: int) -> Any:
    return values[index] if index < len(values) else None


def _save_error_data(directory: str, call: ApiCall, runs: Any) -> None:
    from ptdbg_ascend.precheck.call_values import tensor_leaves

    base = call.full_name
    for index, tensor in enumerate(tensor_leaves(runs.args) + tensor_leaves(runs.kwargs)):
        ut_files.save_tensor(directory, "{}.forward.input.{}".format(base, index), tensor)
    for side, values in (("bench", runs.forward_bench), ("device", runs.forward_device)):
        for index, value in enumerate(values):
            ut_files.save_tensor(directory, "{}.forward.output.{}.{}".format(base, side, index), value)
    for index, grad in enumerate(runs.grads):
        ut_files.save_tensor(directory, "{}.backward.input.{}".format(base, index), grad)
    for side, grads in (("bench", runs.backward_bench), ("device", runs.backward_device)):
        for index, grad in grads.items():
            ut_files.save_tensor(directory, "{}.backward.output.{}.{}".format(base, side, index), grad)


# --- the plan of a run (shared with multi_run_ut) ----------------------------------------------------------

@dataclass
class UtPlan:
    """The checked options of one run (:func:`plan_run`); ``error_data_path`` None: save_error_data off;
    ``identity``: the dump's fingerprint, recorded beside a new CSV pair (None: this process writes no CSV)."""

    dump: Dump
    white_list: Tuple[str, ...]
    black_list: Tuple[str, ...]
    filter_same: bool
    seed: int
    device: str
    use_random: bool
    dumped_outputs: bool
    base_dir: str
    result_csv_path: Optional[str]
    error_data_path: Optional[str]
    compare_report: Optional[Any] = None
    memory_budget: int = 0  # bytes one call may take (plan_run sets it; 0 only in hand-made plans: the default)
    identity: Optional[ut_identity.RunIdentity] = None

    def source(self) -> Source:
        """Where the tensors come from (the dump's files, or random data seeded by ``seed``) and the
        memory budget of each call."""
        return Source(self.dump.data_dir, self.seed if self.use_random else None, self.memory_budget or None)

    def error_dir(self, tail: str) -> Optional[str]:
        """``{error_data_path}/ut_error_data{tail}`` (created) when saving error data, else None."""
        return ut_files.error_data_dir(self.error_data_path, tail) if self.error_data_path is not None else None


def plan_run(api_info: str, out_path: str = ".", save_error_data: bool = False, filter_same: bool = False,
             result_csv_path: Optional[str] = None, white_list: Sequence[str] = (), black_list: Sequence[str] = (),
             error_data_path: Optional[str] = None, random_data: Optional[bool] = None, seed: int = 1234,
             dumped_outputs: bool = False, device: str = "cpu", compare_csv: Optional[Any] = None,
             writes_csv: bool = True, memory_budget: Optional[Any] = None, data_dir: Optional[str] = None,
             processes: int = 1) -> UtPlan:
    """Check the options of :func:`run_ut` (same meanings and errors) and open the dump; nothing is
    written but ``out_path`` (created). A ``result_csv_path`` must be a regular file of the same dump
    (``ut_identity``). ``writes_csv=False`` (a torchrun rank other than 0, which writes no CSV):
    ``result_csv_path`` is not read and ``out_path`` is created only for save_error_data.
    ``processes`` (default 1): how many processes run calls at once on this machine, sharing the default
    memory budget."""
    white_list = check_api_list("white_list", white_list)
    black_list = check_api_list("black_list", black_list)
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise ParameterError("seed", seed, "must be an int")
    budget = default_budget(processes) if memory_budget is None else parse_size("memory_budget", memory_budget)
    device = _device(device)
    compare_report = read_compare(compare_csv) if compare_csv is not None and writes_csv else None
    dump = open_dump(api_info, data_dir)
    use_random = (not dump.has_tensors) if random_data is None else bool(random_data)
    if not use_random and not dump.has_tensors:
        raise ParameterError("random_data", random_data, "must be True (or None) for {}: it holds statistics only, "
                             "no tensors to re-run from".format(api_info))
    if use_random and dumped_outputs:
        raise ParameterError("dumped_outputs", dumped_outputs, "needs the dumped tensors; random data has no "
                             "device outputs to judge")
    if use_random and random_data is None and writes_csv:
        logger.info("{} holds statistics only: the APIs run on random inputs within the recorded Max/Min "
                    "(seed {}).".format(api_info, seed))
    identity = ut_identity.of_dump(dump, use_random, bool(dumped_outputs), seed) if writes_csv else None
    if result_csv_path:
        if writes_csv:  # only reads: the files are rewritten under the run's lock (open_files)
            ut_files.check_resumable(result_csv_path, extra_result_columns=(LINK_COLUMN,))
            ut_files.check_identity(result_csv_path, identity)
        base_dir = os.path.dirname(os.path.abspath(result_csv_path))
    elif writes_csv or save_error_data:
        base_dir = csv_files.ensure_out_dir(out_path)
    else:
        base_dir = os.path.realpath(out_path or ".")
    if save_error_data:  # checked writable before any CSV exists (a read-only mount leaves nothing behind)
        error_data_path = ut_files.check_error_data_path(base_dir if error_data_path is None else error_data_path,
                                                         defaulted=error_data_path is None)
    else:
        error_data_path = None
    return UtPlan(dump, white_list, black_list, bool(filter_same), seed, device, use_random, bool(dumped_outputs),
                  base_dir, (result_csv_path or None) if writes_csv else None, error_data_path, compare_report,
                  memory_budget=budget, identity=identity)


def open_files(plan: UtPlan) -> Tuple[ut_files.UtFiles, Set[str]]:
    """The CSV pair of the run (resumed, or new in ``base_dir``) and the APIs it already holds; the
    pair's lock is held until the files are closed (``ut_lock``: a second run on it is refused)."""
    if plan.result_csv_path:
        lock = ut_lock.acquire(plan.result_csv_path)
        try:
            drop_link_column(plan.result_csv_path)  # a linked (finished) run resumes like any other
            return ut_files.resume_pair(plan.result_csv_path, lock)
        except BaseException:
            lock.release()
            raise
    return ut_files.new_pair(plan.base_dir, plan.identity), set()


def check_call(call: ApiCall, source: Source, plan: UtPlan,
               error_dir: Optional[str] = None) -> Tuple[List[Any], List[List[Any]]]:
    """Run and judge one call: ``(result row, details rows)`` as the CSVs hold them; writes the call's
    error data under ``error_dir`` (None: not) when it is error or warning.

    Never raises for a failure of this call (an input the dump holds wrongly, an allocator error, an API
    that raises, a bug while judging): it becomes the call's SKIP row with the reason, and the run goes on.
    Only an interrupt (Ctrl-C) passes."""
    from ptdbg_ascend.precheck.execution import Runs, execute

    try:
        runs = execute(call, source, seed=plan.seed, device=plan.device, dumped_outputs=plan.dumped_outputs)
        forward, backward, fwd_status, bwd_status, message = judge_call(call, runs)
    except Exception as error:  # noqa: BLE001 -- per-call isolation: one call never ends the run
        reason = failure_reason(call, error)
        logger.warning(reason)
        runs = Runs(forward_skip=reason)
        forward, backward, fwd_status, bwd_status, message = judge_call(call, runs)
    if error_dir and (col.ERROR in (fwd_status, bwd_status) or col.WARNING in (fwd_status, bwd_status)):
        try:
            _save_error_data(error_dir, call, runs)
        except Exception as error:  # noqa: BLE001 -- the verdict stands; only its data could not be kept
            problem = "error data not saved ({}: {})".format(type(error).__name__, " ".join(str(error).split()))
            logger.warning("{}: {}".format(call.full_name, problem))
            message = "; ".join(part for part in (message, problem) if part)
    return [call.full_name, fwd_status, bwd_status, message], [j.detail_row() for j in forward + backward]


def failure_reason(call: ApiCall, error: BaseException) -> str:
    """The SKIP reason of a call whose check raised ``error`` (with where it was raised, for a bug report)."""
    import traceback

    lowered = str(error).lower()
    if isinstance(error, MemoryError) or "cpuallocator" in lowered or "out of memory" in lowered \
            or "not enough memory" in lowered:
        what = "ran out of memory"
    elif isinstance(error, RecursionError):
        what = "is nested too deeply to be rebuilt"
    else:
        what = "could not be checked"
    frames = traceback.extract_tb(error.__traceback__)
    where = " (at {}:{})".format(os.path.basename(frames[-1].filename), frames[-1].lineno) if frames else ""
    text = " ".join(str(error).split())
    if len(text) > 200:
        text = text[:197] + "..."
    return "{} {}: {}: {}{}".format(call.full_name, what, type(error).__name__, text, where)


def finish(outcome: RunUtOutcome, files: ut_files.UtFiles, plan: UtPlan) -> None:
    """Counts and failing APIs from the CSVs as written, then the compare link (when asked for)."""
    _tally(outcome, files, {call.full_name: call for call in plan.dump.calls})
    if plan.compare_report is not None:
        link_outcome(outcome, plan.compare_report)


# --- the run ----------------------------------------------------------------------------------------------

def run_ut(api_info: str, out_path: str = ".", save_error_data: bool = False, filter_same: bool = False,
           result_csv_path: Optional[str] = None, white_list: Sequence[str] = (), black_list: Sequence[str] = (),
           error_data_path: Optional[str] = None, random_data: Optional[bool] = None, seed: int = 1234,
           progress: bool = True, dumped_outputs: bool = False, device: str = "cpu",
           compare_csv: Optional[Any] = None, memory_budget: Optional[Any] = None,
           data_dir: Optional[str] = None) -> RunUtOutcome:
    """Pre-check every API call of the dump ``api_info`` (see the module doc).

    Args:
        api_info: the ``dump.json`` (``dump_path/step0/rank0/dump.json``); its ``dump_tensor_data/`` and
            ``stack.json`` are read from beside it.
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

    Files: beside the CSV pair, ``accuracy_checking_run_{ts}.json`` records the dump.json's fingerprint
    (a resume of another dump is refused) and ``.accuracy_checking_result_{ts}.csv.lock`` is locked while
    the run writes (a second run on the same CSV is refused).

    Raises (before anything is written): ParameterError (a list name not in the wrap list, a bad
    result_csv_path: not a regular file, of another dump, missing its run file, in use by another run;
    error_data_path missing or not writable, random_data=False on a dump without tensors, an unknown
    device), FileFormatError (dump.json missing/corrupt/legacy pkl, tensor directory missing).
    RunInterrupted (a KeyboardInterrupt) on Ctrl-C once the CSVs are open: its ``result_csv`` resumes.
    """
    plan = plan_run(api_info, out_path=out_path, save_error_data=save_error_data, filter_same=filter_same,
                    result_csv_path=result_csv_path, white_list=white_list, black_list=black_list,
                    error_data_path=error_data_path, random_data=random_data, seed=seed,
                    dumped_outputs=dumped_outputs, device=device, compare_csv=compare_csv,
                    memory_budget=memory_budget, data_dir=data_dir)
    files, done = open_files(plan)
    outcome = RunUtOutcome(files.result_path, files.details_path, random_data=plan.use_random, apis_resumed=len(done))
    loop_started = time.time()
    try:
        error_dir = plan.error_dir(files.tail)
        outcome.error_data_dir = error_dir
        source = plan.source()
        calls = select_calls(plan.dump, plan.white_list, plan.black_list, plan.filter_same, done)
        logger.info("run_ut: {} API calls to run ({} done before); results in {}".format(
            len(calls), len(done), files.result_path))
        loop_started = time.time()  # the rate counts the API runs, not reading the dump
        for call in _progress(calls, progress):
            files.write_api(*check_call(call, source, plan, error_dir))
            outcome.apis_run += 1
        outcome.seconds = time.time() - loop_started
        finish(outcome, files, plan)  # before close: the Compare Link column is written under the lock
    except KeyboardInterrupt as interrupt:
        raise RunInterrupted(files.result_path) from interrupt
    finally:
        files.close()
    return outcome


def _progress(calls: List[ApiCall], enabled: bool) -> Any:
    if not enabled:
        return calls
    from tqdm import tqdm

    return tqdm(calls, desc="run_ut", unit="API", smoothing=0, dynamic_ncols=True)


def overall_status(forward: str, backward: str) -> str:
    """One status per API: SKIP when nothing was compared, else the worse of forward and backward."""
    statuses = [s for s in (forward, backward) if s not in (col.SPACE, "", col.SKIP)]
    if not statuses:
        return col.SKIP
    for status in (col.ERROR, col.WARNING):
        if status in statuses:
            return status
    return col.PASS


def _tally(outcome: RunUtOutcome, files: ut_files.UtFiles, calls: Dict[str, ApiCall]) -> None:
    """Counts and the failing APIs from the CSVs as written (so a resumed run's summary is complete)."""
    results, details = ut_files.read_results(files)
    worst: Dict[str, Tuple[float, str, str]] = {}
    for row in details:
        if len(row) < len(col.DETAIL_COLUMNS):
            continue
        cells = dict(zip(col.DETAIL_COLUMNS, row))
        if cells[col.STATUS] not in (col.ERROR, col.WARNING):
            continue
        try:
            severity = float(cells[col.SEVERITY])
        except ValueError:
            severity = float("nan")
        api = ut_api_of_row(cells[col.API_NAME])
        rank = -1.0 if math.isnan(severity) else severity
        if api not in worst or rank > worst[api][0]:
            worst[api] = (rank, cells[col.API_NAME], cells[col.MESSAGE])
    for row in results:
        if len(row) < 3:
            continue
        name, forward, backward = row[0], row[1], row[2]
        status = overall_status(forward, backward)
        outcome.counts[status] = outcome.counts.get(status, 0) + 1
        if status == col.SKIP:
            outcome.skipped.append((name, row[3] if len(row) > 3 else ""))
        elif status in (col.ERROR, col.WARNING):
            rank, row_name, message = worst.get(name, (-1.0, "", ""))
            call = calls.get(name)
            outcome.failures.append(FailingApi(name, forward, backward, status,
                                               float("nan") if rank < 0 else rank, row_name, message,
                                               call.code_line if call else None))
    order = {col.ERROR: 0, col.WARNING: 1}
    outcome.failures.sort(key=lambda f: (order[f.status], -(f.severity if not math.isnan(f.severity) else -1.0),
                                         f.name))
