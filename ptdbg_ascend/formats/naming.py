"""The grammar of legacy dump names, shared by the dump side and the compare side.

Call name:   ``{Prefix}_{api}_{n}_{forward|backward}``      e.g. ``Tensor___add___0_forward``
Record name: call name + ``_input.{i}[.{j}...]``, ``_output``, ``_output.{i}[...]`` or ``_stack_info``.

``api`` may itself contain underscores (``__add__``, ``batch_norm``), so names are parsed from the
right: the counter and the direction are always the last two fields of the call name.
"""

from __future__ import annotations

import re
from typing import NamedTuple, Optional, Tuple

PREFIXES: Tuple[str, ...] = ("Tensor", "Torch", "Functional", "NPU", "VF", "Distributed", "Aten")
FORWARD = "forward"
BACKWARD = "backward"
STACK_SUFFIX = "_stack_info"

CALL_NAME = re.compile(
    r"^(?P<prefix>" + "|".join(PREFIXES) + r")_(?P<api>.+)_(?P<index>\d+)_(?P<direction>forward|backward)$"
)
RECORD_NAME = re.compile(
    r"^(?P<call>(?P<prefix>" + "|".join(PREFIXES) + r")_(?P<api>.+)_(?P<index>\d+)_(?P<direction>forward|backward))"
    r"(?:_(?P<side>input|output)(?P<path>(?:\.\d+)*)|(?P<stack>_stack_info))$"
)


class RecordName(NamedTuple):
    """A parsed record name. ``side`` is "input", "output" or "stack"; ``path`` the index path
    (``(0,)`` for ``input.0``, ``()`` for a single ``output``)."""

    call: str
    prefix: str
    api: str
    index: int
    direction: str
    side: str
    path: Tuple[int, ...]


def call_name(prefix: str, api: str, index: int, direction: str) -> str:
    """``call_name("Tensor", "__add__", 0, "forward") == "Tensor___add___0_forward"``."""
    return prefix + "_" + api + "_" + str(index) + "_" + direction


def parse_record_name(name: str) -> Optional[RecordName]:
    """Parse a record name; None when it does not follow the grammar."""
    match = RECORD_NAME.match(name)
    if match is None:
        return None
    if match.group("stack"):
        side, path = "stack", ()
    else:
        side = match.group("side")
        path = tuple(int(part) for part in match.group("path").split(".")[1:])
    return RecordName(
        call=match.group("call"),
        prefix=match.group("prefix"),
        api=match.group("api"),
        index=int(match.group("index")),
        direction=match.group("direction"),
        side=side,
        path=path,
    )


def parse_call_name(name: str) -> Optional[Tuple[str, str, int, str]]:
    """``(prefix, api, index, direction)`` of a call name, or None."""
    match = CALL_NAME.match(name)
    if match is None:
        return None
    return match.group("prefix"), match.group("api"), int(match.group("index")), match.group("direction")


# --- msprobe (dotted) names -------------------------------------------------------------------
# Call:   {Prefix}.{api}.{n}.{forward|backward}                 e.g. Tensor.__add__.0.forward
# Leaf:   call + .input.{i}[.{j}...] | .output.{i}[...] | .kwargs.{key}[...] (file names) ; compare rows
#         use .input.{key}.0 for kwargs. Legacy `_output` (one tensor) is msprobe `output.0`.
DOTTED_RECORD_NAME = re.compile(
    r"^(?P<prefix>" + "|".join(PREFIXES) + r")\.(?P<api>.+?)\.(?P<index>\d+)\.(?P<direction>forward|backward)"
    r"(?:\.(?P<side>input|output)(?P<path>(?:\.\d+)*))?$"
)


def to_dotted(legacy_name: str) -> Optional[str]:
    """Legacy call or record name -> msprobe dotted name; None when it does not follow the grammar.

    ``Tensor___add___0_forward_input.0`` -> ``Tensor.__add__.0.forward.input.0``;
    ``Functional_relu_0_forward_output`` -> ``Functional.relu.0.forward.output.0``;
    ``Tensor___add___0_forward`` -> ``Tensor.__add__.0.forward``.
    """
    call = parse_call_name(legacy_name)
    if call is not None:
        prefix, api, index, direction = call
        return "{}.{}.{}.{}".format(prefix, api, index, direction)
    record = parse_record_name(legacy_name)
    if record is None or record.side == "stack":
        return None
    path = record.path if (record.path or record.side == "input") else (0,)
    return "{}.{}.{}.{}.{}".format(
        record.prefix, record.api, record.index, record.direction,
        ".".join([record.side] + [str(part) for part in path]),
    )


def to_legacy(dotted_name: str, single_output: bool = False) -> Optional[str]:
    """msprobe dotted call or leaf name -> legacy name; None when it does not follow the grammar.

    ``single_output=True`` maps ``...output.0`` to the legacy ``..._output`` (a call that returned one
    tensor); otherwise ``..._output.0``.
    """
    match = DOTTED_RECORD_NAME.match(dotted_name)
    if match is None:
        return None
    base = call_name(match.group("prefix"), match.group("api"), int(match.group("index")), match.group("direction"))
    side = match.group("side")
    if side is None:
        return base
    path = match.group("path")
    if side == "output" and single_output and path == ".0":
        return base + "_output"
    return base + "_" + side + path
