"""Which dumped calls the pre-check runs at all, known without running them, and the callable behind a call's
name: :func:`static_skip_reason` (APIs the pre-check never runs, ``admission``; random APIs; outputs of
uninitialised memory; in-place ops that change a view), :func:`resolve` (``Functional.linear`` ->
``torch.nn.functional.linear``..., a dump wrapper of this tool looked through). Imports torch only when it
looks a callable up."""

from __future__ import annotations

import re
from typing import Any, Callable, Optional

from ptdbg_ascend.dump.interception import original_of
from ptdbg_ascend.precheck import admission

# Random by nature: the two runs draw different numbers (msprobe compares dropout only by its zero share).
_RANDOM_EXACT = frozenset((
    "rand", "rand_like", "randn", "randn_like", "randint", "randint_like", "randperm", "normal", "normal_",
    "bernoulli", "bernoulli_", "multinomial", "uniform_", "exponential_", "geometric_", "log_normal_", "cauchy_",
    "random_", "poisson", "rrelu", "rrelu_", "gumbel_softmax", "native_dropout", "fused_dropout",
    "npu_dropout", "npu_dropout_with_add_softmax", "npu_dropout_do_mask", "npu_dropout_gen_mask",
))
_RANDOM_PATTERN = re.compile(r"dropout")
# Uninitialised memory: any two runs differ.
_UNINITIALISED = frozenset(("empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided"))
# In-place ops that change a tensor's view or metadata (msprobe's not_detach_set and their kin): re-run on
# a copy they do not act on the tensor the user held, and their backward needs the original view chain.
_VIEW_INPLACE = frozenset(("resize_", "resize_as_", "set_", "transpose_", "t_", "squeeze_", "unsqueeze_",
                           "as_strided_", "swapdims_", "swapaxes_", "detach_"))


class Unrunnable(Exception):
    """The call cannot be re-run here (the message is the SKIP reason)."""


def static_skip_reason(prefix: str, api: str) -> Optional[str]:
    """The SKIP reason of a call known without running it, None when it can be run."""
    refused = admission.refusal(prefix, api)
    if refused:
        return refused
    base = api.split(".")[0]
    if base in _RANDOM_EXACT or _RANDOM_PATTERN.search(base):
        return f"Random API {prefix}.{api}: two runs draw different numbers, it is not compared."
    if base in _UNINITIALISED:
        return f"{prefix}.{api} returns uninitialised memory: nothing to compare."
    if base in _VIEW_INPLACE:
        return ("In-place op {}.{} changes a tensor's view/metadata: a re-run on a copy does not reproduce it."
                .format(prefix, api))
    return None


def resolve(prefix: str, api: str) -> Callable[..., Any]:
    """The callable behind ``prefix.api``; Unrunnable with the reason when this process has none or the
    pre-check does not run it (``admission``)."""
    refused = admission.refusal(prefix, api)
    if refused:
        raise Unrunnable(refused)
    return lookup(prefix, api)


def lookup(prefix: str, api: str) -> Callable[..., Any]:
    """:func:`resolve` for a call already admitted (execute asks ``static_skip_reason`` first)."""
    import torch
    import torch.nn.functional

    function: Any = None
    if prefix == "Functional":
        function = getattr(torch.nn.functional, api, None)
    elif prefix == "Tensor":
        function = getattr(torch.Tensor, api, None)
    elif prefix == "Torch":
        function = getattr(torch, api, None)
        if function is None:
            function = getattr(torch._C._VariableFunctions, api, None)
    elif prefix == "VF":
        function = getattr(torch._VF, api, None)
    elif prefix == "NPU":
        from ptdbg_ascend.device import torch_npu_module

        module = torch_npu_module()
        if module is None:
            raise Unrunnable(f"NPU.{api} needs torch_npu, which is not installed here: it cannot run on the CPU.")
        function = getattr(module, api, None)
    if function is None or not callable(function):
        raise Unrunnable(f"{prefix}.{api} does not exist in this torch ({torch.__version__}): it cannot be re-run.")
    return original_of(function)
