"""msprobe 1.0.4 ``dump.json`` reader (+ ``stack.json``, tensors as ``.pt`` in ``dump_tensor_data/``).

Names are mapped to the legacy grammar so that a dump.json dump pairs with a legacy pkl dump:
``Functional.conv2d.0.forward`` -> ``Functional_conv2d_0_forward``; ``input_args[i]`` -> ``_input.{i}``;
``input_kwargs`` tensors continue the input numbering after the positional ones (as the dump engine
records kwargs); ``output[i]`` -> ``_output.{i}``, a forward call's lone ``output.0`` -> ``_output``. Only tensor
leaves become records (legacy dumps filter scalars by default); null/{} leaves consume their index.
"""

from __future__ import annotations

import re
from typing import Any, Dict, List, Optional, Tuple

from ptdbg_ascend.comparison.records import CallRecord, Frame, TensorRecord, as_number, as_shape, data_file
from ptdbg_ascend.errors import FileFormatError
from ptdbg_ascend.jsonfile import load_json
from ptdbg_ascend.log import logger
from ptdbg_ascend.formats.naming import to_legacy

STACK_LINE = re.compile(r"^File (?P<file>.*), line (?P<line>\d+), in (?P<func>[^,]*),\s*\n?\s*(?P<code>.*)$", re.S)


def _load_json(path: str, what: str) -> Any:
    return load_json(path, what, " (incomplete after a crash?)")


def read(path: str, data_dir: Optional[str] = None, stack_path: Optional[str] = None) -> List[CallRecord]:
    """Read a dump.json; tensors are ``{data_dir}/{data_name}`` (None = summary only)."""
    dump = _load_json(path, "dump file")
    if not isinstance(dump, dict) or not isinstance(dump.get("data"), dict):
        raise FileFormatError("Dump file {} has no \"data\" object: not an msprobe dump.json.".format(path))
    if dump.get("task") in ("overflow_check", "free_benchmark"):
        raise FileFormatError("Dump file {} is a {} dump; compare is not required for it.".format(path, dump["task"]))
    stacks = read_stacks(stack_path) if stack_path else {}
    calls = []
    for dotted, entry in dump["data"].items():
        call = to_legacy(dotted)
        if call is None or not isinstance(entry, dict):
            logger.warning("Skipped entry {!r} of {}: not an API call name.".format(dotted, path))
            continue
        try:
            records = _entry_records(call, entry, data_dir, path, dotted)
        except RecursionError:
            logger.warning("Skipped entry {!r} of {}: its arguments are nested too deeply.".format(dotted, path))
            continue
        calls.append(CallRecord(name=call, records=tuple(records), stack=stacks.get(dotted, ())))
    return calls


def _entry_records(call: str, entry: Dict[str, Any], data_dir: Optional[str], path: str,
                   dotted: str) -> List[TensorRecord]:
    records: List[TensorRecord] = []
    inputs = entry.get("input_args", entry.get("input", [])) or []
    if not isinstance(inputs, list):
        logger.warning("Entry {!r} of {}: input_args is not a list ({}); its positional inputs are skipped."
                       .format(dotted, path, type(inputs).__name__))
        inputs = []
    inputs = list(inputs)
    kwargs = entry.get("input_kwargs") or {}
    if isinstance(kwargs, dict):
        inputs.extend(kwargs.values())
    else:
        logger.warning("Entry {!r} of {}: input_kwargs is not an object ({}); skipped."
                       .format(dotted, path, type(kwargs).__name__))
    for index, value in enumerate(inputs):
        _leaves(call + "_input." + str(index), "input", value, data_dir, records, path)
    outputs = entry.get("output") or []
    if not isinstance(outputs, list):
        outputs = [outputs]
    # Only a forward call's lone output is legacy `_output`; gradients are always numbered (`_output.0`).
    if call.endswith("_forward") and len(outputs) == 1 and _is_tensor(outputs[0]):
        _leaves(call + "_output", "output", outputs[0], data_dir, records, path)
    else:
        for index, value in enumerate(outputs):
            _leaves(call + "_output." + str(index), "output", value, data_dir, records, path)
    return records


def _is_tensor(value: Any) -> bool:
    return isinstance(value, dict) and value.get("type") == "torch.Tensor"


def _leaves(name: str, side: str, value: Any, data_dir: Optional[str], out: List[TensorRecord], path: str) -> None:
    if isinstance(value, list):
        for index, item in enumerate(value):
            _leaves(name + "." + str(index), side, item, data_dir, out, path)
        return
    if not _is_tensor(value):
        return
    try:
        shape = as_shape(value.get("shape"))
    except ValueError as error:
        logger.warning("Skipped tensor {} of {}: {}.".format(name, path, error))
        return
    data_name = value.get("data_name")
    data_path = problem = None
    if data_dir and data_name not in (None, ""):
        data_path, problem = data_file(data_dir, data_name, "tensor's data_name holds a")
        if problem is not None:
            logger.warning("Tensor {} of {}: {}".format(name, path, problem))
    out.append(TensorRecord(
        name=name, side=side, dtype=str(value.get("dtype")), shape=shape,
        statistics=tuple(as_number(value.get(key)) for key in ("Max", "Min", "Mean", "Norm")),
        data_path=data_path, data_root=data_dir, data_problem=problem,
    ))


def read_stacks(path: str) -> Dict[str, Tuple[Frame, ...]]:
    """stack.json: call name -> its frames (msprobe's "File F, line N, in FUNC, \\n CODE" lines parsed)."""
    stacks = _load_json(path, "stack file")
    if not isinstance(stacks, dict):
        raise FileFormatError("Stack file {} is not a JSON object of call name -> stack lines.".format(path))
    result = {}
    for call, lines in stacks.items():
        frames = []
        for line in lines if isinstance(lines, list) else []:
            match = STACK_LINE.match(str(line))
            if match:
                frames.append((match.group("file"), match.group("line"), match.group("func").strip(),
                               match.group("code").strip() or None))
        result[call] = tuple(frames)
    return result
