"""The msprobe 1.0.4 ``dump.json`` / ``stack.json`` codec (``reference/msprobe_1_0_4.md`` §6), torch-free.

- a dump.json document is ``{"task", "level", "framework", "dump_data_dir", "data": {call name: entry}}``;
  :func:`entries` gives its ``data`` object. ``framework`` (always ``"pytorch"`` here) is msprobe 8.x/26.x's
  key, which 26.x's ``acc_check`` reads; 1.0.4 neither writes nor reads it, and the readers accept dumps
  with and without it;
- an entry holds ``input_args`` + ``input_kwargs`` (forward) or ``input`` (backward), and ``output``: lists of
  leaves (``{"type": "torch.Tensor", ...}``, scalars, nested lists); :func:`call_values` names each argument
  and output with the legacy record grammar, so a dump.json dump pairs with a legacy pkl dump:
  ``input_args[i]`` -> ``_input.{i}``, ``input_kwargs`` continue the input numbering after the positional
  ones (as the dump engine records kwargs), ``output[i]`` -> ``_output.{i}``, a forward call's lone
  ``output`` -> ``_output``;
- ``autocast`` (this tool's own entry key, forward entries only): the ``torch.autocast`` state the call ran in,
  ``{"device_type": "cpu", "dtype": "torch.bfloat16"}``; absent outside autocast. msprobe 1.0.4's compare and
  run_ut look their keys up by name (``read_op``, ``gen_api_params``) and skip it. :func:`autocast_record`
  writes it, :func:`autocast_of` reads it back, :func:`inferred_autocast` guesses it for a dump without it;
- construct.json is ``{call name: enclosing module call or null}`` (levels L0/mix; ``{}`` at L1):
  :func:`parse_construct` keeps the links that name a module call;
- a stack.json line is ``"File {file}, line {n}, in {function}, \\n {code}"``: :func:`stack_line` writes it,
  :func:`parse_stack_line` reads it back.
"""

from __future__ import annotations

import re
from json.encoder import encode_basestring_ascii
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

from ptdbg_ascend.formats.naming import parse_module_call
from ptdbg_ascend.terminal import excerpt

FRAMEWORK = "framework"  # top-level key, after "level" as msprobe 8.x writes it
FRAMEWORK_PYTORCH = "pytorch"
INPUT_ARGS = "input_args"
INPUT_KWARGS = "input_kwargs"
BACKWARD_INPUT = "input"
OUTPUT = "output"
TENSOR_TYPE = "torch.Tensor"
STATISTICS_KEYS = ("Max", "Min", "Mean", "Norm")  # a tensor leaf's statistics, in the legacy pkl's order
# This tool's key of a tensor leaf of a tensor dump that has no data_name: why its file was not saved (out of
# memory while copying it). Compare's row for it says so.
NOT_SAVED = "not_saved"
# A frame as the readers keep it (formats.records.Frame): (file, line, function, code or None).
_Frame = Tuple[str, str, str, Optional[str]]

AUTOCAST = "autocast"
AUTOCAST_DTYPES = ("torch.bfloat16", "torch.float16")  # what torch.autocast computes in
# The calls autocast runs in its lower precision on every device (torch's CPU and CUDA lower-precision lists,
# by their API names in the wrap list): an old dump's autocast state is inferred from these only.
AUTOCAST_MATMUL_APIS = frozenset((
    "linear", "matmul", "mm", "bmm", "addmm", "addbmm", "baddbmm", "addmv", "addr", "mv", "chain_matmul", "prelu",
    "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "conv_tbc",
    "scaled_dot_product_attention", "__matmul__", "__rmatmul__",
))
_FLOAT_DTYPES = frozenset(("torch.float64", "torch.float32", "torch.bfloat16", "torch.float16"))

STACK_LINE = re.compile(r"^File (?P<file>.*), line (?P<line>\d+), in (?P<func>[^,]*),\s*\n?\s*(?P<code>.*)$", re.S)


def document_head(task: str, level: str, dump_data_dir: Optional[str]) -> Dict[str, Any]:
    """The members of a dump.json document before ``data``, in the order msprobe writes them."""
    return {"task": task, "level": level, FRAMEWORK: FRAMEWORK_PYTORCH, "dump_data_dir": dump_data_dir}


def entries(document: Any) -> Optional[Dict[str, Any]]:
    """The ``data`` object (call name -> entry) of a parsed dump.json document; None when it has none
    (the document is not a dump.json)."""
    if not isinstance(document, dict) or not isinstance(document.get("data"), dict):
        return None
    return document["data"]


def is_tensor(value: Any) -> bool:
    """Whether a leaf is a tensor's (``{"type": "torch.Tensor", ...}``)."""
    return isinstance(value, dict) and value.get("type") == TENSOR_TYPE


def new_entry(direction: str) -> Dict[str, Any]:
    """An empty entry of a ``forward`` call (``input_args``, ``input_kwargs``, ``output``) or a backward one
    (``input``, ``output``)."""
    if direction == "forward":
        return {INPUT_ARGS: [], INPUT_KWARGS: {}, OUTPUT: []}
    return {BACKWARD_INPUT: [], OUTPUT: []}


def entry_key(direction: str, side: str) -> str:
    """The entry key of a record's ``side`` ("input"/"output"): ``input_args`` for a forward input."""
    return INPUT_ARGS if (direction == "forward" and side == "input") else side


def call_values(call: str, entry: Dict[str, Any],
                problem: Optional[Callable[[str], None]] = None) -> List[Tuple[str, str, Any]]:
    """``(record name, side, value)`` of each argument and output of ``entry``, in the legacy engine's order:
    inputs (kwargs after the positional ones), then outputs. ``call`` is the legacy call name
    (``Functional_conv2d_0_forward``); a value may be a list, whose items are ``{name}.{i}``.

    A malformed block is skipped: ``problem`` (default None: silently) is told why, e.g. ``"input_args is
    not a list (dict); its positional inputs are skipped"``.
    """
    inputs = entry.get(INPUT_ARGS, entry.get(BACKWARD_INPUT, [])) or []
    if not isinstance(inputs, list):
        if problem is not None:
            problem(f"input_args is not a list ({type(inputs).__name__}); its positional inputs are skipped")
        inputs = []
    inputs = list(inputs)
    kwargs = entry.get(INPUT_KWARGS) or {}
    if isinstance(kwargs, dict):
        inputs.extend(kwargs.values())
    elif problem is not None:
        problem(f"input_kwargs is not an object ({type(kwargs).__name__}); skipped")
    values = [(call + "_input." + str(index), "input", value) for index, value in enumerate(inputs)]
    outputs = entry.get(OUTPUT) or []
    if not isinstance(outputs, list):
        outputs = [outputs]
    # Only a forward call's lone output is legacy `_output`; gradients are always numbered (`_output.0`).
    if call.endswith("_forward") and len(outputs) == 1 and not isinstance(outputs[0], list):
        values.append((call + "_output", "output", outputs[0]))
    else:
        values.extend((call + "_output." + str(index), "output", value) for index, value in enumerate(outputs))
    return values


def autocast_record(device_type: str, dtype: str) -> Dict[str, str]:
    """The ``autocast`` value of an entry: ``device_type`` ``"cpu"``/``"cuda"``/``"npu"``, ``dtype``
    ``"torch.bfloat16"``."""
    return {"device_type": device_type, "dtype": dtype}


def autocast_of(entry: Mapping[str, Any]) -> Optional[Tuple[str, str]]:
    """``(device_type, dtype)`` of a forward entry's ``autocast`` value; None when the entry has none.

    Raises:
        ValueError: the value is not ``{"device_type": str, "dtype": one of AUTOCAST_DTYPES}``; the
            message says what it is.
    """
    value = entry.get(AUTOCAST)
    if value is None:
        return None
    if (not isinstance(value, dict) or not isinstance(value.get("device_type"), str) or not value["device_type"]
            or value.get("dtype") not in AUTOCAST_DTYPES):
        raise ValueError("its \"{}\" value {} is not {{\"device_type\": \"cpu\", \"dtype\": one of {}}}"
                         .format(AUTOCAST, excerpt(value), ", ".join(AUTOCAST_DTYPES)))
    return value["device_type"], value["dtype"]


def inferred_autocast(api: str, entry: Mapping[str, Any]) -> Optional[str]:
    """The autocast dtype a forward entry without an ``autocast`` value (an older dump) was evidently computed
    in, else None: a matmul-class call (:data:`AUTOCAST_MATMUL_APIS`) whose floating output is bfloat16 or
    float16 while a floating input is not of that dtype, which no such call gives outside autocast."""
    if api not in AUTOCAST_MATMUL_APIS:
        return None
    outputs = _float_dtypes(entry.get(OUTPUT))
    if len(set(outputs)) != 1 or outputs[0] not in AUTOCAST_DTYPES:
        return None
    inputs = _float_dtypes(entry.get(INPUT_ARGS)) + _float_dtypes(entry.get(INPUT_KWARGS))
    return outputs[0] if any(dtype != outputs[0] for dtype in inputs) else None


def _float_dtypes(value: Any) -> List[str]:
    """The dtypes of the floating tensor leaves in ``value`` (an entry block), in order."""
    found: List[str] = []
    todo = [value]
    while todo:
        item = todo.pop()
        if isinstance(item, dict) and item.get("type") in (TENSOR_TYPE, "torch.nn.parameter.Parameter"):
            if item.get("dtype") in _FLOAT_DTYPES:
                found.append(item["dtype"])
        elif isinstance(item, dict):
            todo.extend(item.values())
        elif isinstance(item, list):
            todo.extend(item)
    return found


def stack_line(file: str, line: Any, function: str, code: Optional[str]) -> str:
    """One stack.json line: ``"File {file}, line {line}, in {function}, \\n {code}"`` (None code: empty)."""
    return f"File {file}, line {line}, in {function}, \n {'' if code is None else code}"


def stack_line_literal(file: str, line: Any, function: str, code: Optional[str]) -> str:
    """:func:`stack_line` as a JSON string literal, quoted and escaped as ``json.dumps`` writes it (ASCII)."""
    return encode_basestring_ascii(stack_line(file, line, function, code))


def parse_stack_line(text: Any) -> Optional[_Frame]:
    """``(file, line, function, code or None)`` of a stack.json line; None when it is not one."""
    match = STACK_LINE.match(str(text))
    if match is None:
        return None
    return (match.group("file"), match.group("line"), match.group("func").strip(),
            match.group("code").strip() or None)


def parse_construct(document: Any) -> Tuple[Dict[str, Optional[str]], int]:
    """A parsed construct.json (``{call name: enclosing module call or null}``) -> ``(call -> parent module
    call, number of links dropped)``. A link is kept when its key is a str and its value null or a module call
    name (``naming.parse_module_call``); anything else is dropped and counted (the call counts as top level).
    Not a JSON object: no links, none counted."""
    if not isinstance(document, dict):
        return {}, 0
    links: Dict[str, Optional[str]] = {}
    dropped = 0
    for call, parent in document.items():
        if parent is None or (isinstance(parent, str) and parse_module_call(parent) is not None):
            links[call] = parent
        else:
            dropped += 1
    return links, dropped


def parse_stacks(stacks: Dict[str, Any]) -> Dict[str, Tuple[_Frame, ...]]:
    """A parsed stack.json object -> call name -> its frames (lines that are not stack lines are skipped)."""
    result = {}
    for call, lines in stacks.items():
        frames = (parse_stack_line(line) for line in (lines if isinstance(lines, list) else []))
        result[call] = tuple(frame for frame in frames if frame is not None)
    return result
