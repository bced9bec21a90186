"""The advisor's suspect, proven by re-execution: the suspect call re-run on this machine from the **NPU's own
dumped inputs**, in float64, and compared with the output the NPU wrote into the dump.

It is the pre-check's ``run-ut --dumped-outputs`` for one call, through the pre-check's own machinery: its
allowlist (``precheck/admission``, ``api_lookup.static_skip_reason``: nothing of the dump chooses what runs),
its argument rebuilding as data (``call_values``; a legacy pkl call through ``rerun_legacy``), its memory budget
(``call_budget``: a call estimated over it is not run) and its precision standard per dtype (``judge``). The
NPU's output is judged against the float64 re-run of its inputs:

- ``reproduced``: the NPU's output is further from the float64 re-run than its dtype's standard allows (the
  ratio, the judge's severity, is >= 1): the API itself is inaccurate there, a proven cause;
- ``not_reproduced``: its output is what its inputs give (ratio < 1): the difference came in through the
  inputs or through something not dumped, a proven propagation;
- ``not_run``, with the reason: not allowlisted, arguments not recorded, over the memory budget, a statistics
  dump, an NPU-only API without torch_npu, the time bound, a re-run that raises.

A CPU run in the NPU's dtypes (the pre-check's device run) then says whether a CPU kernel in that dtype is as far
off (the API is inaccurate in that dtype on any device) or within it (the NPU's kernel is): in the reason only;
the verdict rests on the NPU's output against float64.

In-process and bounded in time: :data:`RERUN_SECONDS` (30 s) is measured around the float64 re-run, which past it
is ``not_run`` (one torch call is not interrupted; the memory budget bounds its size before it starts); the
CPU run in the NPU's dtypes is made only while the float64 re-run took under a third of the bound.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import math
import time
from typing import Any, Optional, Sequence, Tuple

from ptdbg_ascend.comparison.answer_text import Advice
from ptdbg_ascend.comparison.inputs import CompareInputs
from ptdbg_ascend.comparison.rows import CompareRow
from ptdbg_ascend.formats.finding import ERROR, NOT_REPRODUCED, NOT_RUN, REPRODUCED, Finding, Rerun
from ptdbg_ascend.formats.layout import is_dump_json
from ptdbg_ascend.formats.naming import BACKWARD, MODULE_PREFIX, parse_call_name
from ptdbg_ascend.log import logger

RERUN_SECONDS = 30.0  # the bound of one suspect's re-run, measured around its float64 run
LINE_HEAD = "Re-run: "
SUSPECT_LINE = "Suspect API: "  # the body line the Re-run line follows


def attach(advice: Advice, finding: Optional[Finding], rows: Sequence[CompareRow], inputs: CompareInputs,
           enabled: bool) -> Tuple[Advice, Optional[Finding]]:
    """``(advice, finding)`` with the suspect's re-run (:func:`rerun_suspect`): in ``finding.rerun`` and as the
    ``Re-run:`` line after the ``Suspect API:`` line. Unchanged when ``enabled`` is False or no row failed (a pass,
    a warning-level finding included: nothing to prove)."""
    if not enabled or finding is None or finding.level != ERROR:
        return advice, finding
    rerun = rerun_suspect(finding.call, inputs, rows)
    finding = finding._replace(rerun=rerun)
    body = list(advice.body)
    after = next((i + 1 for i, line in enumerate(body) if line.startswith(SUSPECT_LINE)), len(body))
    body.insert(after, rerun_line(rerun))
    return advice._replace(body=tuple(body), finding=finding), finding


def rerun_line(rerun: Rerun) -> str:
    """The advisor's ``Re-run:`` line: ``Re-run: reproduced. {reason}``, ``Re-run: not reproduced. {reason}`` or
    ``Re-run: not run: {reason}.``"""
    if rerun.verdict == NOT_RUN:
        return f"{LINE_HEAD}not run: {rerun.reason.rstrip('.')}."
    return "{}{}. {}".format(LINE_HEAD, "reproduced" if rerun.verdict == REPRODUCED else "not reproduced",
                             rerun.reason)


def rerun_suspect(suspect: str, inputs: CompareInputs, rows: Sequence[CompareRow]) -> Rerun:
    """Re-run the call ``suspect`` (a compare call name, ``Functional_gelu_0_forward``) from the NPU dump of
    ``inputs`` (see the module doc); ``rows`` hold the NPU's call records (a legacy pkl call is rebuilt from
    them). Never raises for the call: what stops it is a ``not_run`` with the reason."""
    started = time.monotonic()
    try:
        rerun = _rerun(suspect, inputs, rows)
    except Exception as error:  # noqa: BLE001 -- the re-run adds evidence; it never costs the compare its reports
        rerun = _not_run(f"the re-run could not be made: {_short(error)}")
    logger.info("Re-run of {} ({:.2f} s): {}".format(suspect, time.monotonic() - started, rerun_line(rerun)))
    return rerun


def _not_run(reason: str) -> Rerun:
    return Rerun(NOT_RUN, None, reason)


def _short(error: BaseException, limit: int = 200) -> str:
    text = " ".join(str(error).split())
    return f"{type(error).__name__}: {text[:limit - 3] + '...' if len(text) > limit else text}"


def _rerun(suspect: str, inputs: CompareInputs, rows: Sequence[CompareRow]) -> Rerun:
    parsed = parse_call_name(suspect)
    if parsed is None:
        if suspect.startswith(MODULE_PREFIX + "_"):
            return _not_run(f"{suspect} is a module call: only API calls are re-run (a dump at level \"mix\" "
                            "records the APIs inside it)")
        return _not_run(f"{suspect} is not an API call this tool names: only API calls are re-run")
    prefix, api, index, direction = parsed
    if inputs.npu_data_dir is None:
        return _not_run("the dump holds statistics only (no tensor files)" if is_dump_json(inputs.npu_dump) else
                        "the NPU dump's tensor files were not given (npu_dump_data_dir): statistics only")
    if importlib.util.find_spec("torch") is None:
        return _not_run("torch is not installed here")
    from ptdbg_ascend.precheck import admission
    from ptdbg_ascend.precheck.api_lookup import static_skip_reason

    refused = admission.refusal(prefix, api)
    if refused:
        return _not_run(f"not allowlisted: {refused}")
    skipped = static_skip_reason(prefix, api)  # random APIs, uninitialised memory, in-place view changes
    if skipped:
        return _not_run(skipped)
    if prefix == "NPU":
        from ptdbg_ascend.device import torch_npu_module

        if torch_npu_module() is None:
            return _not_run(f"{prefix}.{api} is an NPU-only API and torch_npu is not installed here")
    call, problem = _dumped_call(suspect, inputs, rows, (prefix, api, index, direction))
    if problem:
        return _not_run(problem)
    return _measured(call, suspect, direction, inputs.npu_data_dir)


def _dumped_call(suspect: str, inputs: CompareInputs, rows: Sequence[CompareRow],
                 parsed: Tuple[str, str, int, str]) -> Tuple[Any, Optional[str]]:
    """``(the pre-check's DumpedCall of the suspect, None)``, or ``(None, why there is none)``."""
    prefix, api, index, direction = parsed
    if is_dump_json(inputs.npu_dump):
        from ptdbg_ascend.errors import FileFormatError
        from ptdbg_ascend.precheck.api_inputs import open_dump

        try:
            dump = open_dump(inputs.npu_dump, inputs.npu_data_dir)
        except FileFormatError as error:
            return None, str(error)
        full_name = f"{prefix}.{api}.{index}"
        call = next((c for c in dump.calls if c.full_name == full_name), None)
        if call is None:
            return None, f"the dump holds no forward entry of {full_name}"
        if call.problem:
            return None, call.problem
        # A forward suspect needs no gradients: its backward is not run.
        return (call if direction == BACKWARD else dataclasses.replace(call, backward=None)), None
    if direction == BACKWARD:
        return None, "a legacy dump's backward call is not re-run (its forward inputs are another call's records)"
    from ptdbg_ascend.comparison.rerun_legacy import NotRebuilt, dumped_call

    record = next((row.pair.npu_call for row in rows if row.pair.npu_call is not None
                   and row.pair.npu_call.name == suspect), None)
    if record is None:
        return None, f"the NPU dump holds no call {suspect}"
    try:
        return dumped_call(record, prefix, api, index), None
    except NotRebuilt as error:
        return None, str(error)


def _measured(call: Any, suspect: str, direction: str, data_dir: str) -> Rerun:
    """The float64 re-run of ``call`` against the NPU's dumped outputs (the verdict), then, time permitting, the
    CPU run in the NPU's dtypes (for the reason)."""
    from ptdbg_ascend.precheck.call_values import Source
    from ptdbg_ascend.precheck.execution import execute

    source = Source(data_dir)  # the pre-check's default memory budget: a quarter of the memory available
    started = time.monotonic()
    runs = execute(call, source, dumped_outputs=True)
    took = time.monotonic() - started
    if took > RERUN_SECONDS:
        return _not_run(f"the re-run took {took:.3g} s, over its bound of {RERUN_SECONDS:g} s")
    skipped = runs.forward_skip or (runs.backward_skip if direction == BACKWARD else None)
    if skipped:
        return _not_run(skipped)
    npu = _worst(call, runs, direction)
    if npu is None:
        return _not_run("no output of it could be judged against the float64 re-run")
    if not math.isfinite(npu.severity):
        return _not_run(f"its re-run does not give an output of the NPU's kind: {npu.message}")
    cpu: Any = None
    if took < RERUN_SECONDS / 3:
        cpu_runs = execute(call, source, dumped_outputs=False)
        skipped = cpu_runs.forward_skip or (cpu_runs.backward_skip if direction == BACKWARD else None)
        cpu = skipped or _worst(call, cpu_runs, direction)
    return _verdict(suspect, npu, cpu)


def _worst(call: Any, runs: Any, direction: str) -> Any:
    """The judgement (``precheck/judge``) of the output furthest from the float64 re-run, None when none could
    be judged: the forward outputs, or for a backward suspect the gradients w.r.t. its inputs."""
    from ptdbg_ascend.precheck.judge import SKIP, judge_output

    if direction == BACKWARD:
        pairs = [(f"{call.full_name}.backward.output.{i}", runs.backward_bench[i], runs.backward_device.get(i))
                 for i in sorted(runs.backward_bench)]
    else:
        pairs = [(f"{call.full_name}.forward.output.{i}", bench, device)
                 for i, (bench, device) in enumerate(zip(runs.forward_bench, runs.forward_device))]
    judged = [judge_output(name, call.api_key, bench, device, runs.computed_in) for name, bench, device in pairs
              if device is not None]
    judged = [j for j in judged if j.status != SKIP and not math.isnan(j.severity)]
    return max(judged, key=lambda j: j.severity) if judged else None


def _verdict(suspect: str, npu: Any, cpu: Any) -> Rerun:
    """The verdict from the NPU's judgement; ``cpu``: the CPU run's judgement in the NPU's dtypes, the reason it
    could not be made (a str), or None (not made: the time bound)."""
    dtype = _dtype_word(npu)
    ratio = float(npu.severity)
    position = npu.name.rsplit(".", 1)[-1]
    if ".backward.output." in npu.name:  # a backward entry's output i: the gradient w.r.t. its input i
        subject = f"{suspect}'s gradient w.r.t. input {position}"
    else:
        subject = f"{suspect}'s output" + ("" if position == "0" else " " + position)
    if ratio < 1:
        return Rerun(NOT_REPRODUCED, ratio, "{} is what its dumped inputs give ({} what {} allows): the difference "
                     "came in through its inputs or through something not dumped.".format(subject, _times(ratio),
                                                                                            dtype))
    reason = ("{} is {} further from the float64 re-run of its own inputs than {} allows: the API is inaccurate "
              "here.".format(subject, _times(ratio), dtype))
    if isinstance(cpu, str):
        reason += f" No CPU run in {dtype} could be made ({cpu.rstrip('.')})."
    elif cpu is not None and math.isfinite(cpu.severity):
        if cpu.severity >= 1:
            reason += (" A CPU run in {} is as far off ({}): the API is inaccurate in {} on any device, not only on "
                       "the NPU.".format(dtype, _times(cpu.severity), dtype))
        else:
            reason += f" A CPU run in {dtype} is within it ({_times(cpu.severity)}): the NPU's kernel is off."
    return Rerun(REPRODUCED, ratio, reason)


def _dtype_word(judgement: Any) -> str:
    """The dtype whose standard judged the output: ``bfloat16`` (autocast's, when the call computed in it)."""
    text = judgement.device_dtype
    if judgement.message.startswith("Computed in "):
        text = judgement.message[len("Computed in "):].split(" ", 1)[0]
    return text.replace("torch.", "")


def _times(ratio: float) -> str:
    """``37.2x``, ``0.31x``, ``1200x``: the ratio to its allowance, to 3 significant digits."""
    return f"{ratio:.0f}x" if ratio >= 1000 else f"{ratio:.3g}x"

