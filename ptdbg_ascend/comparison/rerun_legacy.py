"""A legacy pkl dump's call as the pre-check re-runs it (:class:`~ptdbg_ascend.precheck.api_inputs.DumpedCall`),
for the advisor's re-run (``rerun``), or the reason it cannot be one.

A legacy dump records a call's tensors (``..._input.{i}``, ``..._output[.{i}]``, one ``.npy`` each) and, with
``filter_switch="OFF"``, its Python scalars; never its other arguments (keyword arguments, dims, dtypes, a gelu's
``approximate``), and ``filter_switch="ON"`` drops its scalars and 0-d tensors. Re-running a call with arguments
it may not have had would prove nothing, so a legacy call is rebuilt only when its API takes tensors only:

- an operator method of ``Tensor`` that takes its two operands only (``__add__``, ``__matmul__``...), with both
  operands recorded as tensors;
- any other API when torch's operator schemas (``aten::{api}``, the overloads without ``out``) hold an overload
  whose arguments are all tensors and that fits the recorded inputs, and no overload has a non-tensor argument with
  a default (one a caller may pass or leave out unseen: ``approximate``, ``alpha``, ``dtype``); a Python API
  (``torch.nn.functional.relu``) may have none besides ``inplace`` (which changes no value) either.

Everything else is :class:`NotRebuilt`, with the arguments the dump does not record named. The tensors are read by
the pre-check's reader (``call_values.load_tensor``: inside the npy directory, sized before loading, never
unpickled). Imports torch only to read the schemas.
"""

from __future__ import annotations

import inspect
import os
from typing import Any, Dict, List, Optional, Sequence, Tuple

from ptdbg_ascend.formats.naming import parse_record_name
from ptdbg_ascend.formats.records import CallRecord, TensorRecord

# Operator methods of Tensor that take their two operands and nothing else (Python's binary operators).
OPERANDS_ONLY = frozenset("__{}__".format(name) for base in (
    "add", "sub", "mul", "truediv", "div", "floordiv", "mod", "pow", "matmul", "and", "or", "xor")
    for name in (base, "r" + base, "i" + base))
# Non-tensor parameters of a Python API that change no value of its result.
VALUE_NEUTRAL = frozenset(("inplace",))
LEGACY_HINT = "dump it with PrecisionDebugger(task=\"tensor\", level=\"L1\") to have it re-run"


class NotRebuilt(Exception):
    """The legacy call cannot be rebuilt for a re-run (the message says why)."""


def dumped_call(call: CallRecord, prefix: str, api: str, index: int) -> Any:
    """The forward call ``call`` (``prefix.api``, counter ``index``) of a legacy dump as a ``DumpedCall`` whose
    entry names its ``.npy`` files; NotRebuilt (with the reason) unless its API takes tensors only (see the module
    doc) and every input is a tensor with a file."""
    from ptdbg_ascend.precheck.api_inputs import DumpedCall

    inputs = _inputs(call)
    leaves = [_leaf(record) for record in inputs]
    refused = tensors_only_refusal(prefix, api, len(leaves))
    if refused:
        raise NotRebuilt(refused)
    outputs = [_leaf(record) for record in call.records if record.side == "output"]
    if not outputs:
        raise NotRebuilt(f"{call.name}: the dump holds no output of this call")
    entry = {"input_args": leaves, "input_kwargs": {}, "output": outputs}
    return DumpedCall(f"{prefix}.{api}.{index}", prefix, api, entry, None, call.stack)


def _inputs(call: CallRecord) -> List[TensorRecord]:
    """The call's input records in argument order; NotRebuilt for a nested argument (a list of tensors) or a gap
    in the numbering (an argument the dump's filter dropped)."""
    found: Dict[int, TensorRecord] = {}
    for record in call.records:
        if record.side != "input":
            continue
        parsed = parse_record_name(record.name)
        if parsed is None or len(parsed.path) != 1:
            raise NotRebuilt(f"{record.name}: a nested argument (a list or tuple of tensors) is not rebuilt from a "
                             f"legacy dump; {LEGACY_HINT}")
        found[parsed.path[0]] = record
    if sorted(found) != list(range(len(found))):
        missing = min(set(range(max(found) + 1)) - set(found))
        raise NotRebuilt("{}: input {} is not recorded (a Python scalar or a 0-d/empty/integer tensor that the legacy "
                         "dump's filter_switch drops); {}".format(call.name, missing, LEGACY_HINT))
    return [found[position] for position in sorted(found)]


def _leaf(record: TensorRecord) -> Dict[str, Any]:
    """The dump.json leaf of a tensor record (its file by name inside the npy directory)."""
    if not record.dtype.startswith("torch."):
        raise NotRebuilt(f"{record.name} is a Python scalar ({record.dtype}); a legacy dump does not tell which "
                         f"argument it was; {LEGACY_HINT}")
    if record.data_path is None:
        raise NotRebuilt(record.data_problem or f"{record.name}: the dump holds no tensor file for it")
    return {"type": "torch.Tensor", "dtype": record.dtype, "shape": list(record.shape),
            "data_name": os.path.basename(record.data_path)}


def tensors_only_refusal(prefix: str, api: str, recorded: int) -> Optional[str]:
    """Why a legacy call of ``prefix.api`` with ``recorded`` tensor inputs cannot be rebuilt (naming the arguments
    the dump does not record), None when its API takes tensors only and ``recorded`` of them fit it."""
    if api in OPERANDS_ONLY:
        if recorded == 2:
            return None
        return ("{}.{} takes two operands and the dump records {} tensor(s): a Python scalar operand is not "
                "recorded by a legacy dump; {}".format(prefix, api, recorded, LEGACY_HINT))
    overloads = _overloads(api)
    if not overloads:
        return ("{}.{}'s arguments are not known here (no ATen schema of that name): a legacy dump records its "
                "tensors only; {}".format(prefix, api, LEGACY_HINT))
    unseen = _non_tensor_names(overloads, optional_only=True) + _python_parameters(prefix, api, overloads)
    counts = [c for c in (_tensor_counts(o) for o in overloads) if c is not None]
    if not unseen and any(low <= recorded <= high for low, high in counts):
        return None
    if unseen or not counts:
        names = _non_tensor_names(overloads, optional_only=False)
        names += [name for name in unseen if name not in names]
        return ("a legacy pkl dump does not record {}.{}'s non-tensor arguments ({}), so the call cannot be rebuilt "
                "as it ran; {}".format(prefix, api, ", ".join(names), LEGACY_HINT))
    takes = " or ".join(sorted({str(low) if low == high else f"{low} to {high}" for low, high in counts}))
    return ("{}.{} takes {} tensors and the dump records {}: an argument is not recorded (a Python scalar or a "
            "keyword argument, which a legacy dump leaves out); {}".format(prefix, api, takes, recorded, LEGACY_HINT))


def _overloads(api: str) -> List[Any]:
    """The ATen overloads of ``api`` that take a tensor first and write no ``out`` argument."""
    import torch

    try:
        schemas = torch._C._jit_get_schemas_for_operator("aten::" + api)
    except (RuntimeError, AttributeError):  # a torch without the schema registry: nothing is known
        return []
    return [schema for schema in schemas if schema.arguments and _is_tensor(schema.arguments[0])
            and not any(argument.is_out for argument in schema.arguments)]


def _is_tensor(argument: Any) -> bool:
    return str(argument.type) in ("Tensor", "Optional[Tensor]")


def _tensor_counts(schema: Any) -> Optional[Tuple[int, int]]:
    """``(required, all)`` tensor arguments of an overload that takes tensors only; None for any other."""
    if not all(_is_tensor(argument) for argument in schema.arguments):
        return None
    required = sum(1 for argument in schema.arguments if not argument.has_default_value())
    return required, len(schema.arguments)


def _non_tensor_names(overloads: Sequence[Any], optional_only: bool) -> List[str]:
    """The names of the overloads' non-tensor arguments (with a default only, with ``optional_only``) that are a
    tensor in none of them, in schema order."""
    tensors = {argument.name for schema in overloads for argument in schema.arguments if _is_tensor(argument)}
    names: List[str] = []
    for schema in overloads:
        for argument in schema.arguments:
            if _is_tensor(argument) or argument.name in tensors or argument.name in names:
                continue
            if argument.has_default_value() or not optional_only:
                names.append(argument.name)
    return names


def _python_parameters(prefix: str, api: str, overloads: Sequence[Any]) -> List[str]:
    """Parameters of the Python API behind ``prefix.api`` (``torch.nn.functional.relu``'s) that no overload names
    and that may change its result; empty for a built-in without a Python signature."""
    from ptdbg_ascend.precheck.api_lookup import Unrunnable, lookup

    try:
        function = lookup(prefix, api)
        parameters = inspect.signature(function).parameters
    except (Unrunnable, TypeError, ValueError):
        return []
    known = {argument.name for schema in overloads for argument in schema.arguments}
    return [name for name, parameter in parameters.items() if name not in known and name not in VALUE_NEUTRAL
            and parameter.default is not inspect.Parameter.empty]
