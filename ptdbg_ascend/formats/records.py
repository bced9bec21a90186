"""The record model, format-neutral and torch-free: what the readers produce from either dump format and what
compare, parse, convert and the pre-check consume (calls, tensor records, stack frames, statistics)."""

from __future__ import annotations

import functools
import importlib.util
import os
import re
from typing import Iterable, List, Mapping, NamedTuple, Optional, Sequence, Tuple

from ptdbg_ascend.formats.json_numbers import OutOfRange
from ptdbg_ascend.formats.naming import BACKWARD, FORWARD, split_call_name
from ptdbg_ascend.terminal import excerpt

# (file, line, function, code), innermost frame first, as the dump wrote it.
Frame = Tuple[str, str, str, Optional[str]]
# max, min, mean, l2norm; None where the dump holds no number ("Nan", [], null).
Statistics = Tuple[Optional[float], Optional[float], Optional[float], Optional[float]]


class TensorRecord(NamedTuple):
    """One dumped tensor (or scalar) of one call, e.g. ``Functional_relu_0_forward_output``."""

    name: str
    side: str  # "input" or "output"
    dtype: str
    shape: Tuple[int, ...]
    statistics: Statistics
    data_path: Optional[str]  # where its .npy/.pt lives; None in a summary-only dump
    # The directory the user gave: ``data_path`` is read only if its real path lies inside it.
    data_root: Optional[str] = None
    # Why the record has no file to read although a data directory was given (its name is not a plain
    # file name...): the row says so and nothing is opened.
    data_problem: Optional[str] = None


class CallRecord(NamedTuple):
    """One API or module call: its legacy call name, its tensor records in dump order and its stack.

    ``module`` (default None: an API call) is a module call's name as dump.json writes it
    (``Module.layers.1.mlp.GPTNeoXMLP.forward.0``; its ``name`` is ``Module_layers.1.mlp.GPTNeoXMLP_0_forward``):
    module calls pair only with module calls. ``parent`` (default None: at top level, or not known) is the
    module call it ran inside, dotted, from the dump's construct.json (levels L0 and mix)."""

    name: str
    records: Tuple[TensorRecord, ...]
    stack: Tuple[Frame, ...]
    module: Optional[str] = None
    parent: Optional[str] = None


def _frames_text(frames: Iterable[Frame]) -> str:
    lines = []
    for file, line, func, code in frames:
        lines.append(f'File "{file}", line {line}, in {func}')
        if code:
            lines.append("    " + str(code))
    return "\n".join(lines)


def format_stack(frames: Tuple[Frame, ...]) -> str:
    """The stack as text, outermost frame first (the way Python prints a traceback)."""
    return _frames_text(reversed(frames))


# Frames of torch itself (and of torch_npu, functorch, msprobe and this tool) are not the user's code. They
# are told by location, never by a folder's name: a user's files under /opt/torch/.venv/.../transformers/ or
# ~/torch/project/ are the user's. A frame is a library's when its file lies in
# - that package's directory as installed here (found without importing it: comparing must not load torch), or
# - a directory of that name right under site-packages/dist-packages: where pip puts it on the machine that
#   dumped (which may not be this one);
# Python's frozen bootstrap modules are no one's code either.
_LIBRARY_PACKAGES = ("torch", "torch_npu", "functorch", "msprobe", "ptdbg_ascend")
_INSTALLED_LIBRARY = re.compile(rf"[/\\](site|dist)-packages[/\\]({'|'.join(_LIBRARY_PACKAGES)})[/\\]|^<frozen ")


@functools.lru_cache(maxsize=1)
def _library_dirs() -> Tuple[str, ...]:
    """The installed directories of the library packages here, each ending in a separator (plain and real
    path); computed once per process."""
    dirs = {os.path.dirname(os.path.dirname(os.path.abspath(__file__)))}  # this tool's package directory
    for name in _LIBRARY_PACKAGES:
        try:
            spec = importlib.util.find_spec(name)  # a top-level name: located, not imported
        except (ImportError, ValueError):  # a broken or half-imported installation: no directory to add
            spec = None
        if spec is not None and spec.submodule_search_locations:
            dirs.update(spec.submodule_search_locations)
    found = set()
    for directory in dirs:
        for form in (os.path.abspath(directory), os.path.realpath(directory)):
            found.add(os.path.normcase(form).rstrip("/\\") + os.sep)
    return tuple(sorted(found))


@functools.lru_cache(maxsize=8192)
def is_library_file(file: str) -> bool:
    """Whether a stack frame's file belongs to torch, torch_npu, functorch, msprobe or this tool (by location,
    see above); a user's file in any folder named ``torch`` does not."""
    if _INSTALLED_LIBRARY.search(file):
        return True
    if not os.path.isabs(file):
        return False
    return os.path.normcase(os.path.normpath(file)).startswith(_library_dirs())


def user_frames(frames: Tuple[Frame, ...]) -> Tuple[Frame, ...]:
    """The frames outside torch and this tool, innermost first (all frames if none is outside)."""
    kept = tuple(frame for frame in frames if not is_library_file(frame[0]))
    return kept or frames


def user_stack_text(frames: Tuple[Frame, ...]) -> str:
    """The report's stack cell: the user's frames, innermost (the line that called the API) first."""
    return _frames_text(user_frames(frames))


def user_line(frames: Tuple[Frame, ...]) -> Optional[str]:
    """``file:line  code`` of the innermost user frame (None without a stack)."""
    kept = user_frames(frames)
    if not kept:
        return None
    file, line, _func, code = kept[0]
    # normpath: a script run as ``python ../sample/train.py`` records ``…/npu/../sample/train.py``
    return f"{os.path.normpath(file) if file else file}:{line}  {code or ''}".rstrip()


def call_user_line(call: CallRecord, calls: Mapping[str, CallRecord]) -> Optional[str]:
    """The user's line of ``call`` (``file:line  code``, None without a stack). A backward call's own stack
    ends in ``loss.backward()`` for every backward call, so it takes the stack of its forward call (same API
    and counter, ``..._forward``) from ``calls`` (call name -> record, one dump's) when that has one."""
    name = split_call_name(call.name)
    if name.direction == BACKWARD and name.index >= 0:
        forward = calls.get(f"{name.api}_{name.index}_{FORWARD}")
        if forward is not None and forward.stack:
            return user_line(forward.stack)
    return user_line(call.stack)


def as_number(value: object) -> Optional[float]:
    """A statistic as float; None for the legacy placeholders ("Nan", [], null, strings) and for a number
    beyond float64's range (an ``OutOfRange`` from the reader's parser, or a huge int built by a caller),
    which no tensor has: :func:`read_statistics` says which ones were."""
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, int):
        try:
            return float(value)
        except OverflowError:
            return None
    if isinstance(value, float):
        return value
    return None


STATISTIC_NAMES = ("max", "min", "mean", "norm")  # the legacy order of a record's statistics


def read_statistics(values: Sequence[object], record: str,
                    names: Sequence[str] = STATISTIC_NAMES) -> Tuple[Statistics, List[str]]:
    """The four statistics of the record ``record`` (:func:`as_number` of each of ``values``, missing ones
    None) and one sentence for each that was a number beyond float64's range, read as no value: ``"the max
    of X is 1e400, beyond float64's range: read as no value (Nan in the report)"``. ``names``: what to call
    each statistic (default max, min, mean, norm; a dump.json says Max, Min, Mean, Norm)."""
    found = [values[index] if index < len(values) else None for index in range(4)]
    statistics = tuple(as_number(value) for value in found)
    beyond = ["the {} of {} is {}, beyond float64's range: read as no value (Nan in the report)".format(
        names[index], record, value if isinstance(value, OutOfRange) else excerpt(value))
        for index, value in enumerate(found)
        if isinstance(value, OutOfRange) or (type(value) is int and statistics[index] is None)]
    return statistics, beyond  # type: ignore[return-value]


_MAX_SIZE = 2 ** 63 - 1  # torch sizes are int64


def as_shape(value: object) -> Tuple[int, ...]:
    """Shape as a tuple; legacy Python scalars carry the string "[]" (and a missing shape is ``()``).

    :raises ValueError: a list whose items are not integers from 0 to 2**63 - 1 (``["x"]``, ``[1.5]``,
        ``[-1]``, a 400-digit size).
    """
    if isinstance(value, (list, tuple)):
        if not all(isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= _MAX_SIZE for v in value):
            raise ValueError(f"shape {_short(value)} is not a list of non-negative integers (below 2**63)")
        return tuple(value)
    return ()


def _short(value: object, limit: int = 80) -> str:
    return excerpt(value, limit)


# A tensor file name taken from a dump (a pkl record name + ".npy", a dump.json data_name): one plain
# name inside the data directory, never a path.
_FILE_NAME = re.compile(r"\A[A-Za-z0-9_][A-Za-z0-9_.+\-]*\Z")


def file_name_problem(name: object) -> Optional[str]:
    """Why ``name`` (from a dump file) cannot be a tensor file name inside the data directory; None when
    it can: a str of letters, digits, ``_ . + -``, not starting with a dot, without ``..``."""
    if not isinstance(name, str):
        return f"file name {_short(name)} is not a string"
    if not _FILE_NAME.match(name) or ".." in name or len(name) > 255:
        return f"file name {_short(name)} is not a plain file name inside the data directory"
    return None


def data_file(data_dir: str, file_name: object, field: str) -> Tuple[Optional[str], Optional[str]]:
    """``(path, None)`` of a record's tensor file inside ``data_dir``, or ``(None, problem)`` when
    ``file_name`` (from a dump file; ``field`` names where it came from, e.g. "record's", "tensor's
    data_name holds a") cannot be one (:func:`file_name_problem`): the row message, nothing is read."""
    problem = file_name_problem(file_name)
    if problem is None:
        return os.path.join(data_dir, file_name), None
    return None, f"Not compared: the {field} {problem}; nothing was read."
