"""The msprobe 1.0.4 ``dump.json`` / ``stack.json`` codec (``reference/msprobe_1_0_4.md`` §6), torch-free.

- a dump.json document is ``{"task", "level", "dump_data_dir", "data": {call name: entry}}``; :func:`entries`
  gives its ``data`` object;
- an entry holds ``input_args`` + ``input_kwargs`` (forward) or ``input`` (backward), and ``output``: lists of
  leaves (``{"type": "torch.Tensor", ...}``, scalars, nested lists); :func:`call_values` names each argument
  and output with the legacy record grammar, so a dump.json dump pairs with a legacy pkl dump:
  ``input_args[i]`` -> ``_input.{i}``, ``input_kwargs`` continue the input numbering after the positional
  ones (as the dump engine records kwargs), ``output[i]`` -> ``_output.{i}``, a forward call's lone
  ``output`` -> ``_output``;
- a stack.json line is ``"File {file}, line {n}, in {function}, \\n {code}"``: :func:`stack_line` writes it,
  :func:`parse_stack_line` reads it back.
"""

from __future__ import annotations

import re
from typing import Any, Callable, Dict, List, Optional, Tuple

INPUT_ARGS = "input_args"
INPUT_KWARGS = "input_kwargs"
BACKWARD_INPUT = "input"
OUTPUT = "output"
TENSOR_TYPE = "torch.Tensor"
STATISTICS_KEYS = ("Max", "Min", "Mean", "Norm")  # a tensor leaf's statistics, in the legacy pkl's order
# A frame as the readers keep it (comparison.records.Frame): (file, line, function, code or None).
_Frame = Tuple[str, str, str, Optional[str]]

STACK_LINE = re.compile(r"^File (?P<file>.*), line (?P<line>\d+), in (?P<func>[^,]*),\s*\n?\s*(?P<code>.*)$", re.S)


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
            problem("input_args is not a list ({}); its positional inputs are skipped".format(type(inputs).__name__))
        inputs = []
    inputs = list(inputs)
    kwargs = entry.get(INPUT_KWARGS) or {}
    if isinstance(kwargs, dict):
        inputs.extend(kwargs.values())
    elif problem is not None:
        problem("input_kwargs is not an object ({}); skipped".format(type(kwargs).__name__))
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


def stack_line(file: str, line: Any, function: str, code: Optional[str]) -> str:
    """One stack.json line: ``"File {file}, line {line}, in {function}, \\n {code}"`` (None code: empty)."""
    return "File {}, line {}, in {}, \n {}".format(file, line, function, "" if code is None else code)


def parse_stack_line(text: Any) -> Optional[_Frame]:
    """``(file, line, function, code or None)`` of a stack.json line; None when it is not one."""
    match = STACK_LINE.match(str(text))
    if match is None:
        return None
    return (match.group("file"), match.group("line"), match.group("func").strip(),
            match.group("code").strip() or None)


def parse_stacks(stacks: Dict[str, Any]) -> Dict[str, Tuple[_Frame, ...]]:
    """A parsed stack.json object -> call name -> its frames (lines that are not stack lines are skipped)."""
    result = {}
    for call, lines in stacks.items():
        frames = (parse_stack_line(line) for line in (lines if isinstance(lines, list) else []))
        result[call] = tuple(frame for frame in frames if frame is not None)
    return result
