"""``parse(pkl_file, module_name_prefix)``: print one call's stack (outermost frame first) and the
statistics of its tensors. Matches whole call names: ``Torch_norm_1_forward`` never matches
``Torch_norm_10_forward``; a prefix without direction (``Torch_norm_1``) matches forward and backward.

Lives in ``comparison`` rather than ``ptdbg_ascend/parse.py``: importing a submodule named ``parse`` would
replace the package's ``parse`` function (what ``from ptdbg_ascend import *`` exports) with the module."""

from __future__ import annotations

import os
from typing import List

from ptdbg_ascend.errors import ParameterError
from ptdbg_ascend.terminal import printable


def _matches(call: str, prefix: str) -> bool:
    return call == prefix or call in (prefix + "_forward", prefix + "_backward")


def parse_lines(pkl_file: str, module_name_prefix: str) -> List[str]:
    """The lines ``parse`` prints (a pkl or a dump.json). Names, dtypes and stack lines come from the
    file: their control characters are escaped (``\\x1b``), so each is one printed line that cannot move
    the cursor or retitle the terminal."""
    from ptdbg_ascend.readers import read_dump
    from ptdbg_ascend.formats.records import format_stack

    if not isinstance(pkl_file, (str, os.PathLike)):
        raise ParameterError("pkl_file", pkl_file, "must be the path (str) of a .pkl dump file")
    if not isinstance(module_name_prefix, str) or not module_name_prefix:
        raise ParameterError("module_name_prefix", module_name_prefix,
                             "The parameter:module_name_prefix is not a string", "e.g. 'Torch_batch_norm_0_forward'")
    from ptdbg_ascend.readers.dump_state import check_dump

    lines: List[str] = []
    calls = read_dump(os.fspath(pkl_file), overflow_statistics=True)
    # A torn dump (still being written, or killed): one warning saying how far it got.
    check_dump("The", os.fspath(pkl_file), None, calls, "parse shows what is there.")
    for call in calls:
        if not _matches(call.name, module_name_prefix):
            continue
        if call.stack:
            lines.append(f"\nTrace back({printable(call.name)}):")
            frames = tuple(tuple(None if part is None else printable(part) for part in frame) for frame in call.stack)
            lines.extend("  " + line for line in format_stack(frames).split("\n"))
        if call.records:
            lines.append("\nStatistic Info:")
        for record in call.records:
            stats = ["Nan" if v is None else v for v in record.statistics]
            lines.append("  [{}][dtype: {}][shape: {}][max: {}][min: {}][mean: {}][l2norm: {}]".format(
                printable(record.name), printable(record.dtype), list(record.shape), *stats))
    if not lines:
        raise ParameterError("module_name_prefix", module_name_prefix, "no call of that name in {}".format(
            os.fspath(pkl_file)), _nearby(module_name_prefix, [call.name for call in calls]))
    return lines


def _nearby(wanted: str, names: List[str], limit: int = 5) -> str:
    """The hint of a name not found: the calls of the same API under any prefix and counter (the guide's
    ``Torch_batch_norm_0_forward`` is ``Functional_batch_norm_0_forward`` when F.batch_norm was called),
    else the closest spellings; or what the dump holds when nothing is close."""
    import difflib

    from ptdbg_ascend.formats.naming import api_of, to_legacy

    legacy = to_legacy(wanted) if "." in wanted else None  # msprobe's dotted name of a call
    if legacy is not None and legacy in names:
        return f"The dump names calls the legacy way: {printable(legacy)}."
    unique = list(dict.fromkeys(names))
    api = api_of(legacy or wanted)
    same_api = [name for name in unique if api_of(name) == api]
    close = same_api or difflib.get_close_matches(legacy or wanted, unique, n=limit, cutoff=0.6)
    if close:
        return f"Nearby names in the dump: {printable(', '.join(close[:limit]))}."
    if not unique:
        return "The dump holds no call."
    return f"The dump holds {len(unique)} calls, e.g. {printable(', '.join(unique[:limit]))}."


def parse(pkl_file: str, module_name_prefix: str) -> None:
    """Print the stack and statistics of the call(s) named ``module_name_prefix`` in ``pkl_file``.
    ParameterError when no call has that name: the message names the nearby names of the dump."""
    for line in parse_lines(pkl_file, module_name_prefix):
        print(line)
