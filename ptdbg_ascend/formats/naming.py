"""The grammar of dump names, legacy and msprobe, shared by the dump side, the compare and the pre-check.

Legacy (``_``-joined)
  Call name:   ``{Prefix}_{api}_{n}_{forward|backward}``      e.g. ``Tensor___add___0_forward``
  Record name: call name + ``_input.{i}[.{j}...]``, ``_output``, ``_output.{i}[...]`` or ``_stack_info``.
  API name:    ``{Prefix}_{api}`` (a call name without counter and direction), e.g. ``Functional_rms_norm``.

msprobe (``.``-joined)
  Call name:   ``{Prefix}.{api}.{n}.{forward|backward}``      e.g. ``Tensor.__add__.0.forward``
  Leaf name:   call name + ``.input.{i}[...]``, ``.output.{i}[...]`` or ``.kwargs.{key}[...]``.
  run_ut API:  ``{Prefix}.{api}.{n}`` (a call name without direction); its rows ``{...}.{direction}.output.{i}``.

``api`` may itself contain underscores (``__add__``, ``batch_norm``) and dots (``linalg.inv``, Aten overloads
``add.Tensor``), so names are parsed from the right: the counter and the direction are always the last two fields
of the call name.

Two strengths, by function name:
  ``parse_*``  strict: the prefix is one of PREFIXES (the names this tool writes for torch APIs).
  ``split_*``  tolerant: any prefix (module dumps ``Module_Conv2d_0_forward``, custom prefixes), for readers that
               must not drop what another tool wrote.

A counter or index of more than :data:`MAX_NUMBER_DIGITS` digits puts a name outside the grammar (every parser
returns None, ``split_call_name`` its "outside the grammar" value): no run makes 10**18 calls, and ``int()`` of
a 5000-digit one raises (Python's 4300-digit limit), which must not cost a report its other records.
:func:`long_number` says why such a name was refused.
"""

from __future__ import annotations

import re
from typing import NamedTuple, Optional, Tuple

PREFIXES: Tuple[str, ...] = ("Tensor", "Torch", "Functional", "NPU", "VF", "Distributed", "Aten")
FORWARD = "forward"
BACKWARD = "backward"
STACK_SUFFIX = "_stack_info"
MAX_NUMBER_DIGITS = 18  # a call counter or argument index has at most this many digits (see above)
_LONG_NUMBER = re.compile(r"\d{%d,}" % (MAX_NUMBER_DIGITS + 1))


def _numbers_fit(index: str, path: Optional[str] = None) -> bool:
    """Whether a matched counter (and index path ``.0.12``) has at most MAX_NUMBER_DIGITS digits each."""
    return len(index) <= MAX_NUMBER_DIGITS and (not path or _LONG_NUMBER.search(path) is None)


def long_number(name: str) -> Optional[int]:
    """The number of digits of the first number in ``name`` longer than a counter or index can be (None when
    there is none): why :func:`parse_record_name` and the others refused it."""
    match = _LONG_NUMBER.search(name)
    return len(match.group()) if match else None


def number_problem(name: object) -> str:
    """What a message about a name outside the grammar adds when a number in it is too long to be a counter or
    an index: ``": it holds a number of 5000 digits (a call counter or index has at most 18)"``; else ""."""
    digits = long_number(name) if isinstance(name, str) else None
    if digits is None:
        return ""
    return f": it holds a number of {digits} digits (a call counter or index has at most {MAX_NUMBER_DIGITS})"

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
    if match is None or not _numbers_fit(match.group("index"), match.group("path")):
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
    if match is None or not _numbers_fit(match.group("index")):
        return None
    return match.group("prefix"), match.group("api"), int(match.group("index")), match.group("direction")


_CALL_NAME_WITHOUT_DIRECTION = re.compile(r"^(?P<prefix>" + "|".join(PREFIXES) + r")_(?P<api>.+)_(?P<index>\d+)$")


def to_dotted_without_direction(name: str) -> Optional[str]:
    """A legacy call name cut before its direction -> the dotted run_ut API name, counter as written
    (``Tensor_permute_1`` -> ``Tensor.permute.1``); None when it does not follow the grammar."""
    match = _CALL_NAME_WITHOUT_DIRECTION.match(name)
    if match is None:
        return None
    return f"{match.group('prefix')}.{match.group('api')}.{match.group('index')}"


# --- tolerant legacy names (any prefix) --------------------------------------------------------------
_ANY_CALL_NAME = re.compile(r"^(?P<api>.+)_(?P<index>\d+)_(?P<direction>forward|backward)$")
_ANY_RECORD_NAME = re.compile(
    r"^(?P<call>.+_(?P<index>\d+)_(?:forward|backward))(?:_(?P<side>input|output)(?P<path>(?:\.\d+)*)"
    r"|(?P<stack>_stack_info))$"
)
# the call a record name starts with, when the name may be cut short (the torn last line of a pkl)
_LEADING_CALL_NAME = re.compile(r"^(?P<call>.+?_\d+_(?:forward|backward))", re.DOTALL)


class CallName(NamedTuple):
    """A call name split by ``split_call_name``."""

    api: str  # e.g. "Functional_linear" (the API name: prefix and API, without counter and direction)
    index: int
    direction: str


def split_call_name(name: str) -> CallName:
    """``Functional_linear_3_forward`` -> ("Functional_linear", 3, "forward"), any prefix; a name outside the
    grammar is its own API with index -1 and direction "forward"."""
    match = _ANY_CALL_NAME.match(name)
    if match is None or not _numbers_fit(match.group("index")):
        return CallName(name, -1, FORWARD)
    return CallName(match.group("api"), int(match.group("index")), match.group("direction"))


def api_of(call_name: str) -> str:
    """The API of a call name without prefix, counter and direction (``Functional_max_pool2d_0_forward`` ->
    ``max_pool2d``); a name outside the grammar loses what precedes its first ``_``."""
    return split_call_name(call_name).api.split("_", 1)[-1]


def split_record_name(name: str) -> Optional[Tuple[str, str]]:
    """``(call name, side)`` of a record name with any prefix, ``side`` "input", "output" or "stack"
    (``Module_Conv2d_0_forward_input.0`` -> ``("Module_Conv2d_0_forward", "input")``); None outside the grammar."""
    match = _ANY_RECORD_NAME.match(name)
    if match is None or not _numbers_fit(match.group("index"), match.group("path")):
        return None
    return match.group("call"), "stack" if match.group("stack") else match.group("side")


def leading_call_name(text: str) -> Optional[str]:
    """The call name a record name starts with, for a name that may be cut short: ``Torch_add_0_forward_inp``
    -> ``Torch_add_0_forward`` (the shortest such prefix, any prefix); None when no call name is complete."""
    match = _LEADING_CALL_NAME.match(text)
    return match.group("call") if match else None


# An API name as users write it in an api_mapping: a prefix word, "_", the API; never a whole call name.
_API_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9]*_[A-Za-z0-9_.]+\Z")
_CALL_SUFFIX = re.compile(r"_\d+_(forward|backward)\Z")


def is_api_name(text: str) -> bool:
    """``Functional_rms_norm`` (any prefix word, so ``rms_norm`` passes too) is an API name;
    ``Functional_rms_norm_0_forward`` (a call name) and ``relu`` (no ``_``) are not."""
    return bool(_API_NAME.match(text)) and not _CALL_SUFFIX.search(text)


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
        return f"{prefix}.{api}.{index}.{direction}"
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
    if match is None or not _numbers_fit(match.group("index"), match.group("path")):
        return None
    base = call_name(match.group("prefix"), match.group("api"), int(match.group("index")), match.group("direction"))
    side = match.group("side")
    if side is None:
        return base
    path = match.group("path")
    if side == "output" and single_output and path == ".0":
        return base + "_output"
    return base + "_" + side + path


# --- module names (levels L0 and mix) ---------------------------------------------------------------
# msprobe: Module.{path}.{Class}.{forward|backward}.{n}, ``path`` the dotted ``named_modules`` path (never empty:
# the root is not hooked). Legacy grammar, as ``to_legacy`` maps API names (the prefix's dot becomes ``_``, the
# counter and direction move to the end): Module_{path}.{Class}_{n}_{direction}, the original tool's
# ``Module_{Class}_{n}_forward`` with the path that tells two instances of a class apart.
MODULE_PREFIX = "Module"
# A name part: anything but a dot and control characters (ModuleDict keys may hold other characters).
_MODULE_PART = r"[^.\x00-\x1f\x7f]+"
DOTTED_MODULE_CALL = re.compile(
    r"^Module\.(?P<module>{0}(?:\.{0})+)\.(?P<direction>forward|backward)\.(?P<index>\d{{1,18}})\Z".format(_MODULE_PART))


class ModuleCall(NamedTuple):
    """A dotted module call name split by :func:`parse_module_call`: ``module`` is ``{path}.{Class}``."""

    module: str
    direction: str
    index: int


def parse_module_call(name: str) -> Optional[ModuleCall]:
    """``Module.layers.1.mlp.GPTNeoXMLP.forward.0`` -> ``("layers.1.mlp.GPTNeoXMLP", "forward", 0)``; None for
    any other name (API calls, leaf names, a counter of more than 18 digits, which no run reaches)."""
    match = DOTTED_MODULE_CALL.match(name) if isinstance(name, str) else None
    if match is None:
        return None
    return ModuleCall(match.group("module"), match.group("direction"), int(match.group("index")))


def module_to_legacy(dotted_name: str) -> Optional[str]:
    """A dotted module call name -> its legacy-grammar call name (None for any other name):
    ``Module.layers.1.mlp.GPTNeoXMLP.forward.0`` -> ``Module_layers.1.mlp.GPTNeoXMLP_0_forward``, whose
    records are ``..._forward_input.0``, ``..._forward_output``, as an API call's."""
    parsed = parse_module_call(dotted_name)
    if parsed is None:
        return None
    return call_name(MODULE_PREFIX, parsed.module, parsed.index, parsed.direction)


class DottedCall(NamedTuple):
    """A dotted call name split by ``parse_dotted_call_name``; ``index`` is the counter as written."""

    prefix: str
    api: str
    index: str
    direction: str


def parse_dotted_call_name(name: str) -> Optional[DottedCall]:
    """``Functional.linear.0.forward`` -> ``("Functional", "linear", "0", "forward")``; an Aten name with an
    overload (``Aten.add.Tensor.0.forward``) keeps ``add.Tensor`` as the API. None for a leaf name, a
    ``Module.`` entry or any other shape."""
    match = DOTTED_RECORD_NAME.match(name)
    if match is None or match.group("side") is not None or not _numbers_fit(match.group("index")):
        return None
    return DottedCall(match.group("prefix"), match.group("api"), match.group("index"), match.group("direction"))


# --- run_ut API names (``Functional.gelu.0``) of compare and run_ut rows ------------------------------
# A compare row in msprobe's naming: any side word (kwargs/parameters too) and anything after it.
_DOTTED_ROW_NAME = re.compile(r"^(?P<call>(?:" + "|".join(PREFIXES) + r")\.(?P<api>.+?)\.(?P<index>\d+))"
                              r"\.(?P<direction>forward|backward)\.(?P<side>input|output|kwargs|parameters)(?:\..*)?$")
# a run_ut details row: {run_ut API}.{direction}.output.{i}
_UT_ROW_NAME = re.compile(r"^(?P<api>.+)\.(forward|backward)\.output\.\d+$")


def ut_api_of_record(name: str) -> Optional[Tuple[str, str, str]]:
    """``(run_ut API name, direction, side)`` of a compare row name, legacy or dotted; None for other
    names (stack rows, modules). ``Functional_gelu_0_forward_output`` and
    ``Functional.gelu.0.forward.output.0`` -> ``("Functional.gelu.0", "forward", "output")``; a dotted
    ``kwargs``/``parameters`` row is an ``input``."""
    record = parse_record_name(name)
    if record is not None:
        if record.side == "stack":
            return None
        return f"{record.prefix}.{record.api}.{record.index}", record.direction, record.side
    match = _DOTTED_ROW_NAME.match(name)
    if match is None:
        return None
    side = "output" if match.group("side") == "output" else "input"  # kwargs/parameters are inputs too
    return match.group("call"), match.group("direction"), side


def ut_api_of_call(name: str) -> Optional[Tuple[str, str]]:
    """``(run_ut API name, direction)`` of a call name: ``Functional_gelu_0_forward`` or
    ``Functional.gelu.0.forward`` -> ``("Functional.gelu.0", "forward")``; None otherwise."""
    parsed = parse_call_name(name)
    if parsed is not None:
        prefix, api, index, direction = parsed
        return f"{prefix}.{api}.{index}", direction
    dotted = parse_dotted_call_name(name)
    if dotted is None:
        return None
    return f"{dotted.prefix}.{dotted.api}.{dotted.index}", dotted.direction


def ut_api_of_row(name: str) -> str:
    """``Functional.linear.0.forward.output.1`` -> ``Functional.linear.0``; any other name is returned as is."""
    match = _UT_ROW_NAME.match(name)
    return match.group("api") if match else name


def parse_ut_row_name(name: str) -> Optional[Tuple[str, str, str]]:
    """``Functional.linear.0.forward.output.0`` -> ``("linear", "Functional.linear.0", "forward")``
    (API key, run_ut API name, direction); ``Torch.linalg.inv.0.backward.output.1`` ->
    ``("linalg.inv", "Torch.linalg.inv.0", "backward")``; None for any other shape (as msprobe: 6 or 7
    dot-separated parts, the third from the end a direction; the prefix is not checked)."""
    parts = name.split(".")
    if len(parts) not in (6, 7) or parts[-3] not in (FORWARD, BACKWARD):
        return None
    return ".".join(parts[1:-4]), ".".join(parts[:-3]), parts[-3]
