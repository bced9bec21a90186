"""One API call of a pre-check run: run it (``execution``), judge each output (``judge``) and give the
rows the CSVs hold for it. The same function runs in ``run_ut`` and in each ``multi_run_ut`` worker.
"""

from __future__ import annotations

import os
from typing import Any, List, Optional, Tuple

from ptdbg_ascend.log import logger
from ptdbg_ascend.precheck import columns as col
from ptdbg_ascend.precheck import ut_files
from ptdbg_ascend.precheck.api_inputs import DumpedCall
from ptdbg_ascend.precheck.call_values import Source
from ptdbg_ascend.precheck.plan import UtPlan


def check_call(call: DumpedCall, source: Source, plan: UtPlan,
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
            problem = f"error data not saved ({type(error).__name__}: {' '.join(str(error).split())})"
            logger.warning(f"{call.full_name}: {problem}")
            message = "; ".join(part for part in (message, problem) if part)
    return [call.full_name, fwd_status, bwd_status, message], [j.detail_row() for j in forward + backward]


def failure_reason(call: DumpedCall, error: BaseException) -> str:
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
    where = f" (at {os.path.basename(frames[-1].filename)}:{frames[-1].lineno})" if frames else ""
    text = " ".join(str(error).split())
    if len(text) > 200:
        text = text[:197] + "..."
    return f"{call.full_name} {what}: {type(error).__name__}: {text}{where}"


def judge_call(call: DumpedCall, runs: Any) -> Tuple[List[Any], List[Any], str, str, str]:
    """(forward judgements, backward judgements, forward status, backward status, message)."""
    from ptdbg_ascend.precheck.judge import api_status, judge_output, skipped

    forward_name = call.full_name + ".forward.output."
    backward_name = call.full_name + ".backward.output."
    if runs.forward_skip:
        row = skipped(forward_name + "0", call.api_key, runs.forward_skip)
        return [row], [], col.SKIP, col.SKIP, runs.forward_skip
    count = max(len(runs.forward_bench), len(runs.forward_device))
    forward = [judge_output(forward_name + str(i), call.api_key, _at(runs.forward_bench, i),
                            _at(runs.forward_device, i), runs.computed_in) for i in range(count)]
    backward: List[Any] = []
    message = ""
    if runs.backward_skip:
        backward = [skipped(backward_name + "0", call.api_key, runs.backward_skip)]
        message = "backward: " + runs.backward_skip
    else:
        backward = [judge_output(backward_name + str(i), call.api_key, runs.backward_bench[i],
                                 runs.backward_device.get(i), runs.computed_in) for i in sorted(runs.backward_bench)]
    backward_status = api_status(backward)  # SPACE without rows: the call has no backward
    return forward, backward, api_status(forward), backward_status, message


def _at(values: List[Any], index: int) -> Any:
    return values[index] if index < len(values) else None


def _save_error_data(directory: str, call: DumpedCall, runs: Any) -> None:
    from ptdbg_ascend.precheck.call_values import tensor_leaves

    base = call.full_name
    for index, tensor in enumerate(tensor_leaves(runs.args) + tensor_leaves(runs.kwargs)):
        ut_files.save_tensor(directory, f"{base}.forward.input.{index}", tensor)
    for side, values in (("bench", runs.forward_bench), ("device", runs.forward_device)):
        for index, value in enumerate(values):
            ut_files.save_tensor(directory, f"{base}.forward.output.{side}.{index}", value)
    for index, grad in enumerate(runs.grads):
        ut_files.save_tensor(directory, f"{base}.backward.input.{index}", grad)
    for side, grads in (("bench", runs.backward_bench), ("device", runs.backward_device)):
        for index, grad in grads.items():
            ut_files.save_tensor(directory, f"{base}.backward.output.{side}.{index}", grad)
