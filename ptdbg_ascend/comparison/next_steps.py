"""What the advisor says to check next: by what the suspect computes (its API class), by what the dump holds
of a backward call, and, only with evidence, non-determinism. Torch-free."""

from __future__ import annotations

from typing import Optional, Sequence

from ptdbg_ascend.comparison import api_classes
from ptdbg_ascend.comparison.precision import MATMUL_CLASS, Reduced
from ptdbg_ascend.formats.records import CallRecord
from ptdbg_ascend.comparison.rows import CompareRow
from ptdbg_ascend.formats.naming import api_of, split_call_name

# APIs whose CPU/GPU/NPU kernels may be non-deterministic (atomics, algorithm choice): only for these,
# and only for a small error, is seed_all(mode=True) worth suggesting.
UNCERTAIN_APIS = ("conv1d", "conv2d", "conv3d", "conv_transpose", "matmul", "bmm", "addmm", "linear", "nll_loss",
                  "layer_norm", "lstm", "embedding", "scatter_add", "index_add", "interpolate")
REDUCED_HINT = "Check whether the NPU computes it in a reduced mode (HF32: torch.npu.matmul.allow_hf32 / " \
    "torch.npu.conv.allow_hf32; TF32 on CUDA: torch.backends.cuda.matmul.allow_tf32 / torch.backends.cudnn." \
    "allow_tf32): turn the mode off to confirm, or accept the difference."
# What to check next, by what the suspect call computes (api_classes.advice_group).
NEXT_STEP = {
    "matmul": "Check its NPU kernel for this shape and dtype (the accumulation dtype, a fused or transposed "
              "variant); the npy files of this call let you re-run it alone.",
    "elementwise": "Check its NPU kernel (the dtype it computes in inside, an approximation such as a fast gelu or "
                   "an inexact exp); the npy files of this call let you re-run it alone.",
    "layout": "A call that only moves, selects or casts values changed them: check the indices, the target dtype "
              "and any in-place write to its input.",
    "reduction": "Check the dtype it accumulates in and its reduced dimensions; the npy files of this call let "
                 "you re-run it alone.",
    "normalization": "Check its eps, the dtype its mean and variance are computed in, and its weight and bias; "
                     "the npy files of this call let you re-run it alone.",
    "communication": "A collective carries every rank's values: compare the other ranks' dumps at this call to "
                     "find the rank where the difference starts.",
    "optimizer": "Check the optimizer's hyper-parameters on both sides (lr, betas, eps, weight decay, the step "
                 "count) and the dtype of its states.",
    "other": "Check its implementation on NPU (kernel, fused operator, dtype inside); the npy files of this call "
             "let you re-run it alone.",
}


def next_step(call: CallRecord) -> str:
    """What to check in a suspect that computes differently, by its API's class (:data:`NEXT_STEP`)."""
    prefix, _, api = split_call_name(call.name).api.partition("_")
    return NEXT_STEP[api_classes.advice_group(api_classes.api_class(prefix, api))]


def reduced_hint(root: Reduced) -> str:
    """The next step for a call computing below its dtype's precision: the HF32/TF32 switches for a
    convolution or matrix product, the kernel's inner dtype for anything else."""
    if api_of(root.call.name) in MATMUL_CLASS:
        return REDUCED_HINT
    return "Check whether its NPU kernel computes in a lower precision inside (bfloat16 or float16 intermediate " \
        "values): compute it in float32 to confirm, or accept the difference."


def backward_advice(rows: Sequence[CompareRow], call: CallRecord) -> str:
    """Why a backward call's gradients differ, from what the dump holds of its inputs: the gradients arriving
    at it (its own inputs) and its forward call's inputs and outputs."""
    forward_name = call.name[: -len("backward")] + "forward"
    arriving = [r for r in rows if r.pair.npu_call is call and r.side == "input" and not r.one_sided]
    forward = [r for r in rows if r.pair.npu_call is not None and r.pair.npu_call.name == forward_name
               and not r.one_sided]
    forward_outputs = [r for r in forward if r.side == "output"]
    if not arriving:
        return ("Nothing arriving at {} was recorded (no gradient of its outputs is in the dump), so what reaches "
                "it is unknown; {}. Check the gradients reaching it and its forward call's arguments that are not "
                "tensors (a keyword such as label_smoothing or reduction is not in a legacy dump), then the backward "
                "implementation of this API.".format(call.name, _forward_state(forward, forward_outputs)))
    judged = f"The gradients arriving at {call.name}"
    if forward:
        judged += " and its forward inputs"
    text = ("{} are within what their precision explains, but the gradients it computes are not: check the backward "
            "implementation of this API (a custom autograd function, a fused kernel).".format(judged))
    if not forward_outputs or not all(r.compared for r in forward_outputs):
        text += " Its forward output was not compared, so a forward argument that is not a tensor (a keyword such " \
                "as label_smoothing) may differ too."
    return text


def _forward_state(forward: Sequence[CompareRow], outputs: Sequence[CompareRow]) -> str:
    if not forward:
        return "its forward call is not in the dump either"
    if outputs and all(r.compared and r.passed for r in outputs):
        return "its forward call's output matched"
    return "its forward call's output was not compared"


def nondeterminism_evidence(row: CompareRow, inputs: Sequence[CompareRow], mismatch: Optional[object],
                             reduced_label: Optional[str]) -> bool:
    """Whether a small error of a possibly non-deterministic API comes with the evidence that it is one:
    every input of the call (a backward's forward inputs too) bit-identical on both sides, in the same dtype,
    and no dtype difference before it."""
    api_word = api_of(row.pair.npu_call.name)
    needed, allowed = row.judgement.needed_rtol, row.tolerance.rtol if row.tolerance else None
    if not any(api in api_word for api in UNCERTAIN_APIS) or needed is None or allowed is None or \
            needed >= 10 * allowed or mismatch is not None or reduced_label is not None or not inputs:
        return False
    return all(r.metrics is not None and r.metrics.max_abs_err == 0.0 and r.npu.dtype == r.bench.dtype
               for r in inputs)
