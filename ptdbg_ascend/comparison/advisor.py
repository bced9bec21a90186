"""The advisor: name the first API whose accuracy is not reached, tell cause from propagation, and
give advice (the original tool's rules + FP16 overflow and input inconsistency, from MindStudio)."""

from __future__ import annotations

import math
import os
from typing import Dict, NamedTuple, Optional, Sequence

from ptdbg_ascend.comparison import columns as col
from ptdbg_ascend.comparison.matching import RowPair
from ptdbg_ascend.comparison.records import TensorRecord
from ptdbg_ascend.comparison.reports import open_new
from ptdbg_ascend.comparison.verdicts import NO, PASS, UNMATCHED, WARNING, YES
from ptdbg_ascend.log import logger

FP16_MAX = 65504.0
ALL_REACHED = "All data in comparison result meets the accuracy requirements."
FORWARD_INPUT = ("1. Analyze the model to view the input source.\n2. Check whether an inplace API causes the output "
                 "result to overwrite the input result. That is, the fault is actually caused by a computation error."
                 "\n3. The fault may be caused by memory corruption and further analysis is required.")
FORWARD_OUTPUT = "This is a forward API computation error. Check the computation implementation."
BACKWARD_INPUT = "Check whether the forward computation result is affected."
BACKWARD_OUTPUT = "This is a backward API computation error. Check the computation implementation."
UNCERTAIN_APIS = ("conv2d", "conv3d", "matmul", "nll_loss", "layer_norm", "lstm")
UNCERTAIN = ("This torch api may be uncertainty in the calculation, can seed_all(mode=True) to enable "
             "deterministic computing.")
BATCH_NORM = ("Torch API batch_norm input not fixed, the following suggestions may fix it:\n1. If use "
              "torch.nn.functional.batch_norm, you can set parameter training=False.\n2. If use "
              "torch.nn.BatchNormXXX, you can set parameter affine=False.\n3. Use seed_all(mode=True) to enable "
              "deterministic computing.")


class Advice(NamedTuple):
    """``line`` is the CSV line (header = line 1), "NA" when every row passed."""

    line: str
    suspect: str
    advice: str

    def text(self) -> str:
        return "Line: {}\nSuspect Nodes: {}\nExpert Advice: {}\n".format(self.line, self.suspect, self.advice)


def legacy_advice(name: str) -> str:
    """The original tool's advice for a record name (its rule order)."""
    advice = ""
    if "forward_input" in name:
        advice = FORWARD_INPUT
    elif "forward_output" in name:
        advice = FORWARD_OUTPUT
    elif "backward_input" in name:
        advice = BACKWARD_INPUT
    elif "backward_output" in name:
        advice = BACKWARD_OUTPUT
    if "_output" in name and any(api in name for api in UNCERTAIN_APIS):
        advice = UNCERTAIN
    if "Functional_batch_norm" in name and "forward_input.1" in name:
        advice = BATCH_NORM
    return advice


def _fp16_overflow(record: Optional[TensorRecord]) -> bool:
    if record is None or record.dtype != "torch.float16":
        return False
    for value in record.statistics[:2]:
        if value is not None and (math.isinf(value) or math.isnan(value) or abs(value) >= FP16_MAX):
            return True
    return False


def _same_tensor(a: TensorRecord, b: TensorRecord) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and a.statistics[:3] == b.statistics[:3] \
        and all(v is not None for v in a.statistics[:3])


def _producer(pairs: Sequence[RowPair], failing: int, side, call) -> Optional[int]:
    """Index of the latest earlier output row holding the same tensor (by dtype, shape, max/min/mean)
    as the failing input row, on one side."""
    target = side(pairs[failing])
    if target is None:
        return None
    for index in range(failing - 1, -1, -1):
        earlier = side(pairs[index])
        if earlier is not None and earlier.side == "output" and pairs[index].npu_call is not call \
                and _same_tensor(earlier, target):
            return index
    return None


def diagnose(rows: Sequence[Dict[str, object]], pairs: Sequence[RowPair], failing: Optional[int]) -> Advice:
    """The advice for the first failing row (None: all reached)."""
    for row in rows:
        if row.get(col.ACCURACY) == UNMATCHED:
            logger.warning("The tensor name matches but the shape or dtype does not match: {}".format(row[col.NPU_NAME]))
    if failing is None:
        logger.info("All data from api input/output accuracy reached")
        return Advice("NA", "NA", ALL_REACHED)
    name = str(rows[failing][col.NPU_NAME])
    line = failing + 2
    logger.warning("Find {} accuracy not reached, the line is {}".format(name, line))
    parts = [legacy_advice(name)]
    pair = pairs[failing]
    call = pair.npu_call
    if pair.npu is not None and pair.npu.side == "output" and call is not None:
        inputs = [i for i, p in enumerate(pairs) if p.npu_call is call and p.npu is not None and p.npu.side == "input"]
        if all(_matches(rows[i]) for i in inputs):
            parts.append("Cause, not propagation: the inputs of {} still match the bench but its output does not, "
                         "so {} is the suspect.".format(call.name, call.name))
        else:
            parts.append("Some inputs of {} could not be judged, so it cannot be told whether the error starts "
                         "here.".format(call.name))
    elif pair.npu is not None and pair.npu.side == "input":
        producer = _producer(pairs, failing, lambda p: p.npu, call)
        if producer is None:  # the NPU run changed it in place: the bench side still shows who produced it
            producer = _producer(pairs, failing, lambda p: p.bench, call)
        if producer is None:
            parts.append("Propagation or input inconsistency: this input already differs and no earlier dumped API "
                         "produced it. Check what feeds the model (data loading order, shuffle, seed_all, loaded "
                         "weights) or APIs that are not dumped.")
        else:
            parts.append("Propagation: this input already differs; it was produced by {} (line {}, {}). {}".format(
                (pairs[producer].npu_call or pairs[producer].bench_call).name, producer + 2, rows[producer][col.NPU_NAME],
                "Its output still matched, so the value changed in between (an in-place API or an API that "
                "is not dumped)." if _matches(rows[producer]) else "Look upstream from there."))
    if call is not None and any(_fp16_overflow(p.npu) for p in pairs if p.npu_call is call):
        parts.append("FP16 overflow: a float16 tensor of {} reaches inf/nan or the float16 maximum {}. Check loss "
                     "scaling, or compute this API in float32.".format(call.name, FP16_MAX))
    return Advice(str(line), name, "\n".join(p for p in parts if p))


def _matches(row: Dict[str, object]) -> bool:
    """Whether a report row says the two sides agree (full mode: Yes; summary mode: pass)."""
    return row.get(col.ACCURACY, row.get(col.RESULT)) in (YES, PASS)


def write_advice(advice: Advice, output_path: str, stem: str) -> str:
    """Log the advice and write it to ``{output_path}/{stem}.txt`` (0640); returns the path."""
    logger.info("The summary of the expert advice is as follows: ")
    for line in advice.text().splitlines():
        logger.info(line)
    path = os.path.join(output_path, stem + ".txt")
    with open_new(path) as handle:
        handle.write(advice.text())
    logger.info("The advisor summary is saved in: {}".format(path))
    return path


def first_failure(rows: Sequence[Dict[str, object]], full_mode: bool) -> Optional[int]:
    """First row whose Accuracy is No (full mode) or whose Result is warning (summary mode)."""
    column, value = (col.ACCURACY, NO) if full_mode else (col.RESULT, WARNING)
    for index, row in enumerate(rows):
        if row.get(column) == value:
            return index
    return None
