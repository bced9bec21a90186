"""Which dump a ``run_ut`` result CSV belongs to: ``accuracy_checking_run_{tail}.json`` beside the CSV pair.

A new result/details pair gets this small file (same ``{tail}`` as the CSVs, whose columns stay msprobe
1.0.4's): the fingerprint of the ``dump.json`` it checks (its size and the SHA-256 of its bytes) and how
the APIs were run (dumped tensors or random data; re-run or the dump's own outputs). A resume
(``result_csv_path``) reads it back and refuses a CSV of another dump or run the other way: appending
another dump's rows to it would mix two runs in one report without a trace.

What identifies "the same run" is the dump.json's bytes, not its path (a dump that was moved or copied
resumes) and not the seed (it changes random numbers, not what a row means); the path, the seed, the
time and the tool version are recorded for the messages only. A pair without this file (written before
it existed, or moved without it) is refused: nothing shows which dump its rows came from.

The file says what it is: ``{"format": "ptdbg_ascend run_ut run", "version": 1, ...}``; :func:`read` checks
both before any other field is used, so a file of another format or version is a FileFormatError naming it.
"""

from __future__ import annotations

import errno
import json
import os
import stat
import time
from dataclasses import dataclass
from typing import Any, Dict

from ptdbg_ascend.errors import FileFormatError, ParameterError
from ptdbg_ascend.formats.json_numbers import HOOKS
from ptdbg_ascend.terminal import excerpt
from ptdbg_ascend.version import __version__
from ptdbg_ascend.fs.writes import replace_text_file

RUN_STEM = "accuracy_checking_run_"
FORMAT = "ptdbg_ascend run_ut run"
VERSION = 1
MAX_BYTES = 64 * 1024  # the file holds a few hundred bytes; anything bigger is not ours
_RESTART = "Start a new run (without -csv_path / result_csv_path) instead."


@dataclass(frozen=True)
class RunIdentity:
    """The dump a run checks (``dump_size`` bytes with SHA-256 ``dump_sha256``; ``dump_path`` is where
    it was, for messages) and how its APIs run (``inputs``: "dumped tensors" / "random data";
    ``outputs``: "re-run outputs" / "dumped outputs"). ``seed`` is recorded, not compared."""

    dump_path: str
    dump_size: int
    dump_sha256: str
    inputs: str
    outputs: str
    seed: int = 0

    def describe(self) -> str:
        """``/p/dump.json (1234 bytes, sha256 ab12cd34ef56...)``."""
        return "{} ({} bytes, sha256 {}...)".format(self.dump_path, self.dump_size, self.dump_sha256[:16])

    def to_json(self) -> Dict[str, Any]:
        return {"format": FORMAT, "version": VERSION, "ptdbg_ascend": __version__,
                "created": time.strftime("%Y-%m-%d %H:%M:%S"),
                "dump": {"path": self.dump_path, "size": self.dump_size, "sha256": self.dump_sha256},
                "inputs": self.inputs, "outputs": self.outputs, "seed": self.seed}


def of_dump(dump: Any, random_data: bool, dumped_outputs: bool, seed: int = 0) -> RunIdentity:
    """The identity of a run of ``dump`` (an ``api_inputs.Dump``: its size and SHA-256 are those of the
    bytes it was parsed from, so the file is read once and what is fingerprinted is what was checked)."""
    return RunIdentity(os.path.abspath(dump.path), dump.size, dump.sha256,
                       "random data" if random_data else "dumped tensors",
                       "dumped outputs" if dumped_outputs else "re-run outputs", seed)


def path_of(result_csv_path: str, result_stem: str) -> str:
    """``accuracy_checking_run_{tail}.json`` beside ``accuracy_checking_result_{tail}.csv``."""
    directory, name = os.path.split(result_csv_path)
    return os.path.join(directory, RUN_STEM + name[len(result_stem):-len(".csv")] + ".json")


def write(path: str, identity: RunIdentity) -> None:
    """Write the identity file ``path`` (atomically, never through a link)."""
    text = json.dumps(identity.to_json(), indent=1, sort_keys=True) + "\n"
    replace_text_file(path, [text], "the run_ut run file")


def read(path: str, result_csv_path: str) -> RunIdentity:
    """The identity recorded in ``path`` (the run file of ``result_csv_path``).

    Raises ParameterError naming ``result_csv_path`` when the file is missing; FileFormatError naming
    the file when it is not a regular file or not a run file of this format."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        raise ParameterError("result_csv_path", result_csv_path, "must be a run_ut result CSV with its run file "
                             "{} beside it".format(os.path.basename(path)),
                             "{} is missing: the CSVs were written before ptdbg_ascend recorded which dump.json a run "
                             "checks, or were moved without it, so nothing shows which dump their rows came from. {}"
                             .format(path, _RESTART)) from None
    except OSError as error:
        raise FileFormatError("Cannot read the run file {}: {}. {}".format(path, error, _RESTART)) from None
    if not stat.S_ISREG(info.st_mode):
        raise FileFormatError("The run file {} is {}, not a regular file; it is not read. {}".format(
            path, "a symlink" if stat.S_ISLNK(info.st_mode) else "not a file", _RESTART))
    if info.st_size > MAX_BYTES:
        raise FileFormatError("The run file {} holds {} bytes: not a run_ut run file (a few hundred bytes). {}"
                              .format(path, info.st_size, _RESTART))
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_NONBLOCK", 0))
        try:
            data = os.read(descriptor, MAX_BYTES + 1)
        finally:
            os.close(descriptor)
        record = json.loads(data.decode("utf-8"), **HOOKS)  # 1e400 is OutOfRange, not inf
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise FileFormatError("The run file {} is a symlink; it is not read. {}".format(path, _RESTART)) from None
        raise FileFormatError("Cannot read the run file {}: {}. {}".format(path, error, _RESTART)) from None
    except (UnicodeDecodeError, ValueError, RecursionError) as error:
        raise FileFormatError("The run file {} is not valid JSON ({}). {}".format(path, error, _RESTART)) from None
    try:
        if record["format"] != FORMAT or record["version"] != VERSION:
            raise ValueError("format {!r} version {!r}".format(record["format"], record["version"]))
        dump = record["dump"]
        identity = RunIdentity(str(dump["path"]), _whole(dump["size"], "its dump size", "a number of bytes", 0),
                               str(dump["sha256"]), str(record["inputs"]), str(record["outputs"]),
                               _whole(record.get("seed", 0), "its seed", "an integer", None))
    except (KeyError, TypeError, ValueError) as error:
        raise FileFormatError("The run file {} is not a run_ut run file of format {!r} version {} ({}: {}). {}"
                              .format(path, FORMAT, VERSION, type(error).__name__, error, _RESTART)) from None
    return identity


def _whole(value: Any, what: str, kind: str, least: Any) -> int:
    """``value`` when it is an int (not a bool) of at least ``least`` (None: any); else ValueError saying
    ``"{what} {value} is not {kind}"``. int() would read 12.5 as 12 and true as 1, and fail on 1e400."""
    if type(value) is not int or (least is not None and value < least):
        raise ValueError("{} {} is not {}".format(what, excerpt(value, 80), kind))
    return value


def check(path: str, result_csv_path: str, current: RunIdentity) -> None:
    """Refuse to resume ``result_csv_path`` (whose run file is ``path``) with a run that is not the one
    it records: another dump.json (by content), or the same dump run another way. ParameterError naming
    ``result_csv_path``, both dumps and what to do."""
    recorded = read(path, result_csv_path)
    if (recorded.dump_size, recorded.dump_sha256) != (current.dump_size, current.dump_sha256):
        raise ParameterError("result_csv_path", result_csv_path, "must be a run of the same dump.json",
                             "Its rows were checked from {} (recorded in {}), but this run reads {}: another dump. "
                             "Resume with -api_info {}, or start a new run (without -csv_path) for this dump."
                             .format(recorded.describe(), os.path.basename(path), current.describe(),
                                     recorded.dump_path))
    for before, now, option in ((recorded.inputs, current.inputs, "random_data (--random-data)"),
                                (recorded.outputs, current.outputs, "dumped_outputs (--dumped-outputs)")):
        if before != now:
            raise ParameterError("result_csv_path", result_csv_path, "must be resumed the way it was started",
                                 "Its APIs were checked with {}, this run would use {}: pass the same {} as the first "
                                 "run, or start a new run (without -csv_path).".format(before, now, option))
