"""Legacy calls -> msprobe 1.0.4 ``config.json``: a pure function over the recorded calls.

``map_calls(calls)`` returns the config dict and the caveats: every place where the new schema cannot
say exactly what the legacy calls said, with the reason. Torch-free and side-effect free, so each row of
the mapping table (doc/migration_guide.md) is tested on its own.

The table (reference msprobe_1_0_4.md §14):

=======================================================  ==============================================
legacy                                                   msprobe 1.0.4 config
=======================================================  ==============================================
seed_all(seed, mode)                                     seed, is_deterministic
set_dump_path(fpath, dump_tag)                           dump_path = directory of fpath; tag dropped
register_hook(m, acc_cmp_dump)                           task tensor (statistics if summary_only), L1
register_hook(m, overflow_check, overflow_nums=N)        task overflow_check, overflow_nums N
register_hook(..., dump_mode="acl", dump_config=f)       level L2, task tensor, acl_config f
set_dump_switch mode all / api_stack                     (no selection; stack.json is always written)
mode list, scope=[names]                                 list: [dotted names]
mode range, scope=[a, b]                                 scope: [a, b] (dotted)
mode api_list, api_list=[x]                              list: [x]
mode stack                                               none: statistics over the scope (caveat)
mode acl, scope=[x]                                      tensor.scope: [x] (L2)
dump_mode=[...]                                          data_mode: [...]
summary_only=True                                        task statistics
filter_switch="ON"; set_overflow_check_switch            none (caveat); task overflow_check
set_backward_input([p.npy])                              tensor.backward_input: [p.pt] (dotted)
=======================================================  ==============================================
"""

from __future__ import annotations

import os
from typing import Any, Dict, List, NamedTuple, Optional, Sequence, Tuple

from ptdbg_ascend.call_log import TRUNCATED, LegacyCall
from ptdbg_ascend.config import DEFAULT_DUMP_PATH, DEFAULT_SEED  # msprobe's defaults (no set_dump_path / seed)
from ptdbg_ascend.formats.naming import PREFIXES, to_dotted, to_dotted_without_direction

DEFAULT_DUMP_TAG = "ptdbg_dump"

# "Tensor_permute_1" (a legacy list item without its direction) -> "Tensor.permute.1"


class Caveat(NamedTuple):
    """Something the new config cannot express exactly: which call/argument, and why."""

    call: str
    reason: str

    def __str__(self) -> str:
        return f"{self.call}: {self.reason}"


class MappingResult(NamedTuple):
    """The msprobe 1.0.4 config dict (ready for json.dump) and the caveats, in call order."""

    config: Dict[str, Any]
    caveats: Tuple[Caveat, ...]


def _describe(call: LegacyCall, *names: str) -> str:
    shown = ", ".join(f"{name}={call.arguments.get(name)!r}" for name in names)
    return f"{call.function}({shown})"


def dotted_selector(item: str) -> Tuple[str, Optional[str]]:
    """A legacy API name used in scope/list -> ``(msprobe name, reason it is not exact or None)``.

    Full call names convert exactly (``Tensor_permute_1_forward`` -> ``Tensor.permute.1.forward``). A
    name without its direction becomes ``Tensor.permute.1``, which msprobe matches as a substring (so it
    also selects ``Tensor.permute.10.*``). Anything else is kept as given.
    """
    dotted = to_dotted(item)
    if dotted is not None:
        return dotted, None
    dotted = to_dotted_without_direction(item)
    if dotted is not None:
        return dotted, ("{!r} has no _forward/_backward: msprobe matches {!r} as a substring, which also "
                        "selects counters that start with the same digits".format(item, dotted))
    return item, f"{item!r} is not a legacy API name; kept unchanged (msprobe matches it as a substring)"


def backward_input_path(path: str) -> str:
    """``dir/Functional_conv2d_1_backward_input.0.npy`` -> ``dir/Functional.conv2d.1.backward.input.0.pt``
    (the file ``ptdbg convert`` writes for that record)."""
    directory, base = os.path.split(path)
    stem = base[:-4] if base.endswith(".npy") else base
    dotted = to_dotted(stem) or stem
    return os.path.join(directory, dotted + ".pt") if directory else dotted + ".pt"


class _Builder:
    """Accumulates the config while the calls are replayed in order (local to one map_calls call)."""

    def __init__(self) -> None:
        self.top: Dict[str, Any] = {
            "task": "statistics", "dump_path": DEFAULT_DUMP_PATH, "rank": [], "step": [], "level": "L1",
            "seed": DEFAULT_SEED, "is_deterministic": False, "enable_dataloader": False, "acl_config": "",
        }
        self.section: Dict[str, Any] = {"scope": [], "list": [], "data_mode": ["all"]}
        self.caveats: List[Caveat] = []
        self.hook: Optional[str] = None
        self.overflow_nums: int = 1
        self.summary_only = False
        self.acl = False
        self.backward_input: List[str] = []
        self.seeded = False
        self.rm_dropout = False
        self.first_switch: Optional[LegacyCall] = None

    def caveat(self, call: str, reason: str) -> None:
        self.caveats.append(Caveat(call, reason))


def _seed_all(builder: _Builder, call: LegacyCall) -> None:
    args = call.arguments
    seed = args.get("seed", DEFAULT_SEED)
    builder.seeded = True
    builder.top["seed"] = seed
    builder.top["is_deterministic"] = bool(args.get("mode", False))
    if seed == 0:
        builder.caveat(_describe(call, "seed"), "msprobe 1.0.4 replaces a seed of 0 by 1234")
    builder.rm_dropout = bool(args.get("rm_dropout", False))


def _set_dump_path(builder: _Builder, call: LegacyCall) -> None:
    fpath = call.arguments.get("fpath")
    tag = call.arguments.get("dump_tag", DEFAULT_DUMP_TAG)
    if fpath is None:
        builder.caveat(_describe(call, "fpath"),
                       "no path: the legacy default is $ASCEND_WORK_PATH/dump_data, resolved at run time; "
                       "exported msprobe's default {!r}".format(DEFAULT_DUMP_PATH))
        builder.top["dump_path"] = DEFAULT_DUMP_PATH
    else:
        fpath = str(fpath)
        builder.top["dump_path"] = (os.path.dirname(fpath) or ".") if fpath.endswith(".pkl") else fpath
    if tag != DEFAULT_DUMP_TAG:
        builder.caveat(_describe(call, "dump_tag"),
                       "msprobe has no dump tag: the dump goes to dump_path/step{N}/rank{R}/; give each run "
                       "its own dump_path (e.g. add the tag to it) to keep runs apart")


def _register_hook(builder: _Builder, call: LegacyCall) -> None:
    args = call.arguments
    builder.hook = args.get("hook")
    if builder.hook == "overflow_check":
        nums = args.get("overflow_nums")
        builder.overflow_nums = 1 if nums is None else nums
    elif args.get("overflow_nums") is not None:
        builder.caveat(_describe(call, "overflow_nums"), "overflow_nums only applies to overflow_check; ignored")
    if args.get("dump_mode", "api") == "acl":
        if builder.hook == "overflow_check":
            builder.caveat(_describe(call, "dump_mode"),
                           "msprobe 1.0.4 has no ACL-level overflow dump; exported an API-level overflow_check")
        else:
            builder.acl = True
            builder.top["acl_config"] = args.get("dump_config") or ""
    if args.get("rank") is not None:
        builder.caveat(_describe(call, "rank"),
                       "register_hook(rank=) names the rank directory; msprobe's rank list selects which ranks "
                       "dump (the directory always comes from torch.distributed), so it is not exported")
    if args.get("extra_apis") is True:
        builder.top["extra_apis"] = True
        builder.caveat(_describe(call, "extra_apis"),
                       "exported as the top-level key extra_apis, an extension that ptdbg_ascend's PrecisionDebugger "
                       "reads; msprobe 1.0.4 does not know it (it dumps its own API list)")


def _switch_on(builder: _Builder, call: LegacyCall) -> None:
    if builder.first_switch is not None:
        if _selection(builder.first_switch) != _selection(call):
            builder.caveat(_describe(call, "mode", "scope", "api_list"),
                           "a later set_dump_switch('ON') selects differently from the first; one config holds "
                           "one selection, the first one is exported")
        return
    builder.first_switch = call
    args = call.arguments
    mode = args.get("mode", "all")
    scope = list(args.get("scope") or [])
    builder.summary_only = bool(args.get("summary_only", False))
    if mode == "list":
        # Full names convert exactly (msprobe's substring match of a full dotted name selects that call).
        builder.section["list"] = _convert_names(builder, call, scope)
    elif mode in ("range", "stack"):
        builder.section["scope"] = _convert_names(builder, call, scope)
        if mode == "stack":
            builder.summary_only = True
            builder.caveat(_describe(call, "mode"),
                           "mode='stack' (stacks only, no tensors) has no 1.0.4 equivalent: exported a statistics "
                           "dump over the same range (stack.json is always written)")
        if len(scope) != 2:
            builder.caveat(_describe(call, "scope"), "a range needs 2 names; msprobe reads [x] as [x, x]")
    elif mode == "api_list":
        items = list(args.get("api_list") or [])
        builder.section["list"] = items
        lowered = [prefix.lower() for prefix in PREFIXES]
        for item in items:
            text = str(item)
            if text != text.lower() or any(prefix in text.lower() for prefix in lowered):
                builder.caveat(_describe(call, "api_list"),
                               "{!r}: legacy api_list matched case-insensitively, msprobe's list is case-sensitive "
                               "(its names are capitalised: Tensor, Torch, Functional, Distributed)".format(item))
    elif mode == "acl":
        builder.acl = True
        builder.section["scope"] = _convert_names(builder, call, scope)
        if len(scope) != 1:
            builder.caveat(_describe(call, "scope"), "an ACL dump needs exactly one API name")
    elif mode not in ("all", "api_stack"):
        builder.caveat(_describe(call, "mode"), "unknown mode; exported a dump of every API")
    _data_mode(builder, call)
    if args.get("filter_switch", "ON") == "ON":
        builder.caveat(_describe(call, "filter_switch"),
                       "filter_switch='ON' has no equivalent: msprobe records every argument (Python scalars, "
                       "int/bool and 0-d tensors too); the float tensors are the same")


def _selection(call: LegacyCall) -> Tuple[Any, ...]:
    args = call.arguments
    return tuple(repr(args.get(name)) for name in ("mode", "scope", "api_list", "filter_switch", "dump_mode",
                                                   "summary_only"))


def _convert_names(builder: _Builder, call: LegacyCall, names: Sequence[str]) -> List[str]:
    converted = []
    for name in names:
        dotted, reason = dotted_selector(str(name))
        converted.append(dotted)
        if reason is not None:
            builder.caveat(_describe(call, "scope"), reason)
    return converted


def _data_mode(builder: _Builder, call: LegacyCall) -> None:
    dump_mode = call.arguments.get("dump_mode")
    if dump_mode is None:
        return
    items = [dump_mode] if isinstance(dump_mode, str) else list(dump_mode)
    builder.section["data_mode"] = items
    directions = {"forward", "backward"} & set(items)
    sides = {"input", "output"} & set(items)
    if "all" not in items and directions and sides:
        builder.caveat(_describe(call, "dump_mode"),
                       "legacy dump_mode combines items with AND ({} inputs/outputs of {} calls only); msprobe "
                       "1.0.4's data_mode uses OR and dumps more".format("/".join(sorted(sides)),
                                                                          "/".join(sorted(directions))))


def _set_overflow_check_switch(builder: _Builder, call: LegacyCall) -> None:
    if call.arguments.get("switch") == "ON" and call.arguments.get("filter_switch", "ON") == "ON":
        builder.caveat(_describe(call, "filter_switch"),
                       "filter_switch has no equivalent; overflow_check looks at every tensor")


def _set_backward_input(builder: _Builder, call: LegacyCall) -> None:
    paths = [str(path) for path in (call.arguments.get("backward_input") or [])]
    builder.backward_input = [backward_input_path(path) for path in paths]
    for path in paths:
        if path.endswith(".npy"):
            builder.caveat(_describe(call, "backward_input"),
                           "{!r}: msprobe loads .pt gradients; run `ptdbg convert` on the dump it comes from to "
                           "get {!r}".format(path, backward_input_path(path)))


_HANDLERS = {
    "seed_all": _seed_all,
    "set_dump_path": _set_dump_path,
    "register_hook": _register_hook,
    "set_overflow_check_switch": _set_overflow_check_switch,
    "set_backward_input": _set_backward_input,
}


def map_calls(calls: Sequence[LegacyCall]) -> MappingResult:
    """Translate legacy calls (oldest first) into an msprobe 1.0.4 config and its caveats.

    The config always has every top-level key of the 1.0.4 schema and exactly one task section
    (``statistics``, ``tensor`` or ``overflow_check``). Windows (set_dump_switch ON/OFF) are not part
    of a config: they become ``start()``/``stop()`` in the script (``ptdbg migrate``).
    """
    builder = _Builder()
    for call in calls:
        if call.function == "set_dump_switch":
            if call.arguments.get("switch") == "ON":
                _switch_on(builder, call)
            continue
        if call.function == TRUNCATED:
            builder.caveat(TRUNCATED, "the script made more different legacy calls than were recorded; the config "
                                      "comes from the first ones")
            continue
        handler = _HANDLERS.get(call.function)
        if handler is not None:
            handler(builder, call)
    if builder.hook is None and builder.first_switch is not None:
        builder.caveat("register_hook", "set_dump_switch was called without register_hook; nothing is dumped "
                                        "by the legacy tool")
    if not builder.seeded:
        builder.caveat("seed_all", "the script never called seed_all; msprobe 1.0.4 seeds every generator with "
                                   "{} when PrecisionDebugger is constructed".format(DEFAULT_SEED))
    config = _finish(builder)
    return MappingResult(config, tuple(builder.caveats))


def _finish(builder: _Builder) -> Dict[str, Any]:
    config = dict(builder.top)
    section = dict(builder.section)
    if builder.hook == "overflow_check":
        config["task"] = "overflow_check"
        section["overflow_nums"] = builder.overflow_nums
        section["check_mode"] = "all"
    elif builder.acl:
        config["task"] = "tensor"
        config["level"] = "L2"
        section["backward_input"] = list(builder.backward_input)
        section["file_format"] = "npy"
    elif builder.summary_only:
        config["task"] = "statistics"
        section["summary_mode"] = "statistics"
    else:
        config["task"] = "tensor"
        section["backward_input"] = []
        section["file_format"] = "npy"
    if config["task"] != "overflow_check" and not builder.rm_dropout:
        builder.caveat("seed_all(rm_dropout=False)", "the legacy run keeps dropout active; msprobe 1.0.4 always sets "
                                                    "the dropout probability to 0 in statistics/tensor tasks")
    if builder.acl and not config["acl_config"]:
        builder.caveat("register_hook(dump_mode='acl')", "an ACL dump needs register_hook(..., dump_mode='acl', "
                                                         "dump_config=...); acl_config is empty")
    if builder.backward_input and not builder.acl:
        builder.caveat("set_backward_input", "only used by an ACL dump (mode='acl'); ignored")
    if config["level"] != "L2":
        config["acl_config"] = ""
    config[config["task"]] = section
    return config
