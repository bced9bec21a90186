"""The plan of a pre-check run (``run_ut`` / ``multi_run_ut``): its options checked, the dump opened, and
the calls it runs (white / black lists, filter_same, the APIs a resumed CSV holds).

Nothing here runs an API: :func:`plan_run` reads the dump.json (and the compare to link to) and creates
``out_path`` at most; :func:`select_calls` chooses from the dump's calls in dump order.
"""

from __future__ import annotations

import functools
import json
import os
from dataclasses import dataclass
from typing import Any, FrozenSet, List, Optional, Sequence, Set, Tuple

from ptdbg_ascend.errors import ParameterError
from ptdbg_ascend.log import logger
from ptdbg_ascend.memory import default_budget, parse_size
from ptdbg_ascend.precheck import columns as col
from ptdbg_ascend.precheck import csv_files, ut_files, ut_identity
from ptdbg_ascend.precheck.api_inputs import DumpedCall, Dump, open_dump
from ptdbg_ascend.precheck.call_values import Source
from ptdbg_ascend.precheck.compare_link import CompareReport, read_compare

# statistics that may differ between calls filter_same still takes for identical
_FILTER_IGNORED = frozenset(("Max", "Min", "Max_except_inf_nan", "Min_except_inf_nan", "data_name"))


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


def _listed(call: DumpedCall, names: Sequence[str]) -> bool:
    return call.api in names or call.api_key in names


# --- filter_same ------------------------------------------------------------------------------------------

def _without_extremes(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_extremes(v) for k, v in value.items() if k not in _FILTER_IGNORED}
    if isinstance(value, list):
        return [_without_extremes(v) for v in value]
    return value


def same_call_key(call: DumpedCall) -> str:
    """What two calls must share to be "the same" for filter_same: the API and every recorded input in
    everything but Max/Min (and the tensor file name, which holds the counter)."""
    if call.problem:
        return call.full_name  # not run anyway: never "the same" as another call
    inputs = {"args": call.forward.get("input_args"), "kwargs": call.forward.get("input_kwargs")}
    return call.api_key + json.dumps(_without_extremes(inputs), sort_keys=True, default=str)


def select_calls(dump: Dump, white_list: Sequence[str], black_list: Sequence[str], filter_same: bool,
                 done: Set[str]) -> List[DumpedCall]:
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


# --- the device ------------------------------------------------------------------------------------------

def run_device(device: str) -> str:
    """``device`` as torch names it (``"cuda:0"``), once it is a torch device present on this machine;
    ParameterError naming ``device`` otherwise."""
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


# --- the plan of a run ------------------------------------------------------------------------------------

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
    compare_report: Optional[CompareReport] = None  # the compare the failures link to (compare_csv)
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
    """Check the options of :func:`ptdbg_ascend.precheck.run_ut.run_ut` (same meanings and errors) and open
    the dump; nothing is written but ``out_path`` (created). A ``result_csv_path`` must be a regular file of the same dump
    (``ut_identity``). ``writes_csv=False`` (a torchrun rank other than 0, which writes no CSV):
    ``result_csv_path`` is not read and ``out_path`` is created only for save_error_data.
    ``processes`` (default 1): how many processes run calls at once on this machine, sharing the default
    memory budget."""
    white_list = check_api_list("white_list", white_list)
    black_list = check_api_list("black_list", black_list)
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise ParameterError("seed", seed, "must be an int")
    budget = default_budget(processes) if memory_budget is None else parse_size("memory_budget", memory_budget)
    device = run_device(device)
    dump = open_dump(api_info, data_dir)
    compare_report = None
    if compare_csv is not None and writes_csv:  # streamed: only the rows of this dump's calls are kept
        compare_report = read_compare(compare_csv, calls=frozenset(call.full_name for call in dump.calls))
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
        if writes_csv:  # only reads: the files are rewritten under the run's lock (results.open_results)
            ut_files.check_resumable(result_csv_path, extra_result_columns=(col.LINK_COLUMN,))
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
