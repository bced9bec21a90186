"""The API calls of an msprobe-format dump (``dump.json`` + ``dump_tensor_data/*.pt`` + ``stack.json``), as
the pre-check re-runs them.

:func:`open_dump` reads and checks the dump.json once (a legacy ``.pkl`` dump is refused: it lacks the
non-tensor keyword arguments a re-run needs), pairs every ``X.n.forward`` entry with its ``X.n.backward``
entry into a :class:`DumpedCall`, and reads the user's code lines from ``stack.json``. The dump may come
from anyone, so:

- ``api_info`` must be a regular file (a FIFO would block the run before it starts);
- tensors are read only from the ``dump_tensor_data/`` beside the dump.json or a directory the user names
  (``data_dir``); the ``dump_data_dir`` recorded inside the dump is never followed;
- an entry nested deeper than any real call is kept only as a name with the reason it is not run
  (:attr:`DumpedCall.problem`): nothing recurses into it later, nor sends it to a worker.

The values of a call are rebuilt when it runs (``call_values``).
"""

from __future__ import annotations

import hashlib
import os
import stat
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Tuple

from ptdbg_ascend.formats.records import Frame, user_line
from ptdbg_ascend.errors import FileFormatError, ParameterError
from ptdbg_ascend.formats.dump_json import autocast_of, inferred_autocast
from ptdbg_ascend.formats.layout import PKL_SUFFIX, stack_file, tensor_dir_beside
from ptdbg_ascend.formats.naming import parse_dotted_call_name
from ptdbg_ascend.precheck.arguments import MAX_DEPTH
from ptdbg_ascend.precheck.call_values import TENSOR_TYPES
from ptdbg_ascend.readers.msprobe_json import load_entries, read_stacks

# an entry holds input_args -> an argument -> its items: deeper than this, no real call is
ENTRY_DEPTH = MAX_DEPTH + 3
LEGACY_HINT = ("A legacy pkl+npy dump does not record the non-tensor arguments (keyword arguments, ints, dtypes) "
               "a re-run needs. Dump the run with PrecisionDebugger(task=\"tensor\", level=\"L1\") (or "
               "task=\"statistics\" for random data), or convert the dump with `ptdbg convert SOURCE TARGET` and "
               "check that the converted dump.json holds the arguments, then pass its dump.json.")


@dataclass
class DumpedCall:
    """One API call as dump.json holds it (the live call is ``dump/observers.ApiCall``): ``full_name``
    ``Functional.linear.0`` (msprobe's run_ut key), ``prefix`` ``Functional``, ``api`` ``linear``,
    ``forward``/``backward`` the dump.json entries (backward None when the dump has none), ``stack`` the
    forward call's frames (innermost first); ``problem``: why the entry is not run at all (None: it may be;
    its entries are then empty); ``autocast``: ``(device_type, dtype)`` of
    the ``torch.autocast`` the call ran in (``("", dtype)`` when inferred for a dump that does not record it,
    :func:`~ptdbg_ascend.formats.dump_json.inferred_autocast`), None outside autocast."""

    full_name: str
    prefix: str
    api: str
    forward: Mapping[str, Any]
    backward: Optional[Mapping[str, Any]] = None
    stack: Tuple[Frame, ...] = ()
    problem: Optional[str] = None
    autocast: Optional[Tuple[str, str]] = None

    @property
    def api_key(self) -> str:
        """``Functional.linear``: the standard lookup key of the judge."""
        return self.prefix + "." + self.api

    @property
    def code_line(self) -> Optional[str]:
        """``file:line  code`` of the user's line that made the call (None without stack.json)."""
        return user_line(self.stack) if self.stack else None


@dataclass
class Dump:
    """An opened dump: its calls in dump order, where tensors are read from, how inputs are made."""

    path: str
    task: str
    data_dir: Optional[str]
    calls: List[DumpedCall] = field(default_factory=list)
    has_tensors: bool = False
    size: int = 0  # bytes of the dump.json as parsed
    sha256: str = ""  # of those bytes: which dump a run's CSVs belong to (ut_identity)


def open_dump(api_info: str, data_dir: Optional[str] = None) -> Dump:
    """Read the dump.json ``api_info`` and pair its forward/backward entries. ``data_dir`` (default None:
    the ``dump_tensor_data/`` beside the dump.json): the directory its tensor files are read from.

    Raises:
        ParameterError: ``api_info`` is not a path string, or ``data_dir`` is given and not a directory.
        FileFormatError: the file is missing, not a regular file, not JSON, a legacy pkl dump, not an
            msprobe dump.json, holds no API call, or names tensor files whose directory is missing.
    """
    if not isinstance(api_info, str) or not api_info:
        raise ParameterError("api_info", api_info, "must be the path of a dump.json written by PrecisionDebugger "
                                                   "(dump_path/step0/rank/dump.json; rank{R} under torch.distributed)")
    _check_regular(api_info)
    if api_info.endswith(PKL_SUFFIX) or _looks_like_pkl(api_info):
        raise FileFormatError(f"{api_info} is a legacy pkl dump; the pre-check needs a dump.json. {LEGACY_HINT}")
    digest = hashlib.sha256()
    read: List[int] = []

    def fingerprint(data: bytes) -> None:  # of the bytes parsed: the file is read once
        digest.update(data)
        read.append(len(data))

    dump = load_entries(api_info, on_bytes=fingerprint,
                        not_a_dump="The dump file {} has no \"data\" object: not a dump.json written by "
                                   "PrecisionDebugger or msprobe.")
    task = str(dump.task)
    forwards: Dict[str, Tuple[str, str, Mapping[str, Any]]] = {}
    backwards: Dict[str, Mapping[str, Any]] = {}
    has_tensors = False
    for dotted, entry in dump.entries.items():
        parsed = parse_dotted_call_name(dotted)
        if parsed is None or not isinstance(entry, dict):
            continue  # module entries (L0/mix) and anything else that is not an API call
        prefix, api, counter, direction = parsed
        full_name = f"{prefix}.{api}.{counter}"
        if _deeper_than(entry, ENTRY_DEPTH):
            entry = {_TOO_DEEP: True}
        has_tensors = has_tensors or _names_a_file(entry)
        if direction == "forward":
            forwards[full_name] = (prefix, api, entry)
        else:
            backwards[full_name] = entry
    if not forwards:
        raise FileFormatError("The dump file {} holds no forward API call (a level L0 dump of modules only, or "
                              "an empty dump?); the pre-check needs a level L1 (or mix) dump.".format(api_info))
    tensor_dir = _data_dir(api_info, data_dir) if has_tensors else None
    stacks = _stacks(stack_file(os.path.dirname(os.path.abspath(api_info))))
    calls = [_call(full_name, prefix, api, entry, backwards.get(full_name), stacks.get(full_name + ".forward", ()))
             for full_name, (prefix, api, entry) in forwards.items()]
    return Dump(api_info, task, tensor_dir, calls, has_tensors, read[0], digest.hexdigest())


_TOO_DEEP = "__ptdbg_too_deep__"  # stands for an entry nested deeper than ENTRY_DEPTH (its content dropped)


def _call(full_name: str, prefix: str, api: str, forward: Mapping[str, Any], backward: Optional[Mapping[str, Any]],
          stack: Tuple[Frame, ...]) -> DumpedCall:
    if _TOO_DEEP in forward or (backward is not None and _TOO_DEEP in backward):
        problem = ("{}: its dump entry is nested more than {} levels deep; no real call is, it is not run"
                   .format(full_name, ENTRY_DEPTH))
        return DumpedCall(full_name, prefix, api, {}, None, stack, problem)
    try:
        autocast = autocast_of(forward)
    except ValueError as error:
        problem = f"{full_name}: {error}; the autocast state it ran in is unknown, it is not run"
        return DumpedCall(full_name, prefix, api, {}, None, stack, problem)
    if autocast is None:
        dtype = inferred_autocast(api, forward)
        autocast = ("", dtype) if dtype is not None else None
    return DumpedCall(full_name, prefix, api, forward, backward, stack, autocast=autocast)


def _check_regular(path: str) -> None:
    """FileFormatError unless ``path`` is a regular file (a FIFO or a device would block the first read)."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise FileFormatError(f"The dump file {path} does not exist.") from None
    except OSError as error:
        raise FileFormatError(f"The dump file {path} cannot be read: {error.strerror or error}") from None
    if not stat.S_ISREG(mode):
        raise FileFormatError("The dump file {} is not a regular file (a directory, FIFO or device); the pre-check "
                              "reads a dump.json.".format(path))


def _deeper_than(value: Any, limit: int) -> bool:
    """Whether ``value`` nests lists/objects more than ``limit`` levels (walked without recursion)."""
    stack = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            return True
        if isinstance(item, dict):
            stack.extend((child, depth + 1) for child in item.values())
        elif isinstance(item, list):
            stack.extend((child, depth + 1) for child in item)
    return False


def _looks_like_pkl(path: str) -> bool:
    """A legacy pkl is JSON lines starting with ``[``: detected before a JSON parse error hides why."""
    try:
        with open(path, "rb") as handle:  # a regular file (checked first): the read cannot block
            head = handle.read(64).lstrip()
    except OSError:
        return False
    return head.startswith(b"[")


def _names_a_file(value: Any) -> bool:
    """Whether an entry (already known not to be too deep) names a tensor file."""
    if isinstance(value, dict):
        if value.get("type") in TENSOR_TYPES:
            return value.get("data_name") not in (None, "")
        return any(_names_a_file(item) for item in value.values())
    if isinstance(value, list):
        return any(_names_a_file(item) for item in value)
    return False


def _data_dir(api_info: str, data_dir: Optional[str]) -> str:
    """The directory tensor files are read from: ``data_dir`` when given, else ``dump_tensor_data/`` beside
    the dump.json. The ``dump_data_dir`` the dump records is never used: a dump must not choose where the
    tool reads."""
    if data_dir is not None:
        if not isinstance(data_dir, str) or not os.path.isdir(data_dir):
            raise ParameterError("data_dir", data_dir, "must be an existing directory holding the dump's tensor "
                                                       "files (default: dump_tensor_data/ beside the dump.json)")
        return os.path.abspath(data_dir)
    beside = tensor_dir_beside(api_info)
    if os.path.isdir(beside):
        return beside
    raise FileFormatError("The dump file {} names tensor files, but their directory {} is missing. Copy "
                          "dump_tensor_data/ beside "
                          "the dump.json, name the directory with data_dir (--data-dir), or run with random data "
                          "(--random-data).".format(api_info, beside))


def _stacks(path: str) -> Dict[str, Tuple[Frame, ...]]:
    if not os.path.isfile(path):
        return {}
    try:
        return read_stacks(path)
    except FileFormatError:
        return {}  # stack.json only adds the code line to the summary: a torn one does not stop the run


