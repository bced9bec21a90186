"""Which dump a ``run_ut`` result CSV belongs to, and which rows: ``accuracy_checking_run_{tail}.jsonl``
beside the CSV pair.

A new result/details pair gets this small file (same ``{tail}`` as the CSVs, whose columns stay msprobe
1.0.4's). Its first line is the run's identity: the fingerprint of the ``dump.json`` it checks (its size
and the SHA-256 of its bytes), how the APIs were run (dumped tensors or random data; re-run or the dump's
own outputs), the pair it was written for (its tail) and a random nonce. Then, one line per API
committed to the CSVs, appended right after the API's result row: its name and a **chain** digest,
``chain_k = sha256(chain_{k-1} + "\\n" + the API's rows)`` starting from ``chain_0 = sha256(first line)``.

A resume (``result_csv_path``) reads it back and refuses, before anything is written:

- a run file of another pair (its tail is not the CSV's: copied from another run),
- a run of another dump.json, or of the same dump run the other way,
- CSVs whose rows are not the ones the run file records (:func:`verify_rows`): the rows of another run
  under this run file, rows appended from elsewhere, or a first line edited to name another dump (the
  chain starts from the first line's bytes, so every link breaks). Appending another dump's rows to a
  run's CSVs would mix two runs in one report without a trace.

The API whose rows are the last in the CSVs but whose line is not in the run file yet (the run was
killed between the two writes) is run again. What identifies "the same run" is the dump.json's bytes,
not its path (a dump that was moved or copied resumes) and not the seed (it changes random numbers, not
what a row means); the path, the seed, the time and the tool version are recorded for the messages only.
A pair without this file (written before it existed, or moved without it; a version 1
``accuracy_checking_run_{tail}.json`` only records the dump) is refused: nothing shows which run its
rows came from. Not promised: someone who recomputes every chain by hand can forge a run file (there
is no secret key); the chain covers the CSVs' rows, not the dump's tensor files.

The first line says what it is: ``{"format": "ptdbg_ascend run_ut run", "version": 2, ...}``; :func:`read`
checks both before any other field is used, so a file of another format or version is a FileFormatError
naming it.
"""

from __future__ import annotations

import csv
import errno
import hashlib
import io
import json
import os
import secrets
import stat
import time
from dataclasses import dataclass
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

from ptdbg_ascend import csv_cells
from ptdbg_ascend.errors import FileFormatError, ParameterError
from ptdbg_ascend.formats.json_numbers import HOOKS
from ptdbg_ascend.formats.naming import ut_api_of_row
from ptdbg_ascend.terminal import excerpt
from ptdbg_ascend.version import __version__
from ptdbg_ascend.fs.writes import replace_text_file

RUN_STEM = "accuracy_checking_run_"
EXTENSION = ".jsonl"
VERSION_1_EXTENSION = ".json"  # a version 1 run file: the dump only, no record of the rows
FORMAT = "ptdbg_ascend run_ut run"
VERSION = 2
MAX_LINE = 64 * 1024  # the first line holds a few hundred bytes, an API's line ~100 plus its name
RESULT_WIDTH = 4  # msprobe 1.0.4's result columns: what the chain covers (a Compare Link cell is derived)
_RESTART = "Start a new run (without -csv_path / result_csv_path) instead."
_OWN_RUN_FILE = "must be resumed with the run file written with it"


@dataclass(frozen=True)
class RunIdentity:
    """The dump a run checks (``dump_size`` bytes with SHA-256 ``dump_sha256``; ``dump_path`` is where
    it was, for messages) and how its APIs run (``inputs``: "dumped tensors" / "random data";
    ``outputs``: "re-run outputs" / "dumped outputs"). ``seed`` is recorded, not compared. ``pair``:
    the tail of the CSV pair the run file was written for ("" until it is written)."""

    dump_path: str
    dump_size: int
    dump_sha256: str
    inputs: str
    outputs: str
    seed: int = 0
    pair: str = ""

    def describe(self) -> str:
        """``/p/dump.json (1234 bytes, sha256 ab12cd34ef56...)``."""
        return f"{self.dump_path} ({self.dump_size} bytes, sha256 {self.dump_sha256[:16]}...)"

    def to_json(self, pair: str, nonce: str) -> Dict[str, Any]:
        return {"format": FORMAT, "version": VERSION, "ptdbg_ascend": __version__,
                "created": time.strftime("%Y-%m-%d %H:%M:%S"),
                "dump": {"path": self.dump_path, "size": self.dump_size, "sha256": self.dump_sha256},
                "inputs": self.inputs, "outputs": self.outputs, "seed": self.seed, "pair": pair, "nonce": nonce}


def of_dump(dump: Any, random_data: bool, dumped_outputs: bool, seed: int = 0) -> RunIdentity:
    """The identity of a run of ``dump`` (an ``api_inputs.Dump``: its size and SHA-256 are those of the
    bytes it was parsed from, so the file is read once and what is fingerprinted is what was checked)."""
    return RunIdentity(os.path.abspath(dump.path), dump.size, dump.sha256,
                       "random data" if random_data else "dumped tensors",
                       "dumped outputs" if dumped_outputs else "re-run outputs", seed)


def tail_of(result_csv_path: str, result_stem: str) -> str:
    """``{tail}`` of ``accuracy_checking_result_{tail}.csv``."""
    return os.path.basename(result_csv_path)[len(result_stem):-len(".csv")]


def path_of(result_csv_path: str, result_stem: str) -> str:
    """``accuracy_checking_run_{tail}.jsonl`` beside ``accuracy_checking_result_{tail}.csv``."""
    return os.path.join(os.path.dirname(result_csv_path), RUN_STEM + tail_of(result_csv_path, result_stem) + EXTENSION)


# --- the chain of committed APIs ------------------------------------------------------------------------

def _canonical(result_row: Sequence[Any], detail_rows: Sequence[Sequence[Any]]) -> bytes:
    """An API's rows as the text they stand for (as a resume reads them back), one JSON array."""
    return json.dumps([list(result_row[:RESULT_WIDTH]), [list(row) for row in detail_rows]], ensure_ascii=False,
                      separators=(",", ":")).encode("utf-8")


def _link(previous: str, result_row: Sequence[Any], detail_rows: Sequence[Sequence[Any]]) -> str:
    return hashlib.sha256(previous.encode("ascii") + b"\n" + _canonical(result_row, detail_rows)).hexdigest()


def as_read_back(rows_text: str) -> List[List[str]]:
    """The rows of a CSV text as a resume reads them (``csv_cells.restore_row``): what the chain covers, so
    a value written as a float and read back as text links the same."""
    return [csv_cells.restore_row(row) for row in csv.reader(io.StringIO(rows_text))]


class RowChain:
    """The chain of the APIs a run file records: ``value`` after the last of its ``count`` APIs. The file
    itself is appended by ``ut_files.UtFiles`` with the CSVs' rows, as one commit."""

    def __init__(self, value: str, count: int) -> None:
        self.value, self.count = value, count

    def line(self, api: str, result_row: Sequence[Any], detail_rows: Sequence[Sequence[Any]]) -> Tuple[str, str]:
        """``(the run file line of one more API, the chain after it)``; the cells as read back
        (:func:`as_read_back`). Nothing changes until :meth:`accept`: the line may not get written."""
        value = _link(self.value, result_row, detail_rows)
        return json.dumps({"api": api, "chain": value}) + "\n", value

    def accept(self, value: str) -> None:
        """The line of :meth:`line` was written: ``value`` is the chain now."""
        self.value, self.count = value, self.count + 1


def write(path: str, identity: Optional[RunIdentity], pair: str, entries: Sequence[str] = ()) -> RowChain:
    """Write the run file ``path`` of the pair ``pair`` (atomically, never through a link): a new one (a
    fresh nonce) for ``identity``, or, with ``entries`` (the first line and the API lines a resume keeps,
    :func:`verify_rows`), those lines again. Returns the chain it ends with. DumpWriteError naming it."""
    if entries:
        lines = list(entries)
    else:
        lines = [json.dumps(identity.to_json(pair, secrets.token_hex(16)), sort_keys=True) + "\n"]
    replace_text_file(path, lines, "the run_ut run file")
    chain = hashlib.sha256(lines[0].rstrip("\n").encode("utf-8")).hexdigest()
    for line in lines[1:]:
        chain = json.loads(line)["chain"]
    return RowChain(chain, len(lines) - 1)


# --- reading it back ------------------------------------------------------------------------------------

def _missing(path: str, result_csv_path: str) -> ParameterError:
    old = path[:-len(EXTENSION)] + VERSION_1_EXTENSION
    if os.path.lexists(old):
        hint = ("Beside it is {}, a run file of version 1 (written by an earlier ptdbg_ascend): it records the "
                "dump but not the rows, so nothing shows the CSVs are that run's. {}".format(old, _RESTART))
    else:
        hint = ("{} is missing: the CSVs were written before ptdbg_ascend recorded which dump.json a run checks, "
                "or were moved without it, so nothing shows which dump their rows came from. {}".format(path, _RESTART))
    return ParameterError("result_csv_path", result_csv_path, "must be a run_ut result CSV with its run file "
                          "{} beside it".format(os.path.basename(path)), hint)


def _lines(path: str, result_csv_path: str) -> Iterator[str]:
    """The lines of the run file ``path`` (regular, not a link, each at most MAX_LINE), read as they come;
    the last one without its newline when it was cut."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        raise _missing(path, result_csv_path) from None
    except OSError as error:
        raise FileFormatError(f"Cannot read the run file {path}: {error}. {_RESTART}") from None
    if not stat.S_ISREG(info.st_mode):
        raise FileFormatError("The run file {} is {}, not a regular file; it is not read. {}".format(
            path, "a symlink" if stat.S_ISLNK(info.st_mode) else "not a file", _RESTART))
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_NONBLOCK", 0))
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise FileFormatError(f"The run file {path} is a symlink; it is not read. {_RESTART}") from None
        raise FileFormatError(f"Cannot read the run file {path}: {error}. {_RESTART}") from None
    with os.fdopen(descriptor, "rb") as handle:
        number = 0
        while True:
            try:
                data = handle.readline(MAX_LINE + 1)
            except OSError as error:
                raise FileFormatError(f"Cannot read the run file {path}: {error}. {_RESTART}") from None
            if not data:
                return
            number += 1
            if len(data) > MAX_LINE:
                raise FileFormatError("The run file {}, line {}: longer than {} bytes, not a run_ut run file. {}"
                                      .format(path, number, MAX_LINE, _RESTART))
            try:  # a torn last line (no newline) is given as it is: the caller decides what it means
                yield data.decode("utf-8")
            except UnicodeDecodeError as error:
                raise FileFormatError(f"The run file {path}, line {number}: not UTF-8 ({error}). {_RESTART}") from None


def _head(path: str, first: Optional[str]) -> RunIdentity:
    """The identity of a run file's first line."""
    if first is None:
        raise FileFormatError(f"The run file {path} is empty. {_RESTART}")
    try:
        record = json.loads(first, **HOOKS)  # 1e400 is OutOfRange, not inf
        if record["format"] != FORMAT or record["version"] != VERSION:
            raise ValueError(f"format {record['format']!r} version {record['version']!r}")
        dump = record["dump"]
        identity = RunIdentity(str(dump["path"]), _whole(dump["size"], "its dump size", "a number of bytes", 0),
                               str(dump["sha256"]), str(record["inputs"]), str(record["outputs"]),
                               _whole(record.get("seed", 0), "its seed", "an integer", None), str(record["pair"]))
        if not isinstance(record["nonce"], str):
            raise TypeError("the nonce is not a string")
    except (KeyError, TypeError, ValueError, RecursionError) as error:
        if isinstance(error, json.JSONDecodeError):
            raise FileFormatError(f"The run file {path} is not valid JSON ({error}). {_RESTART}") from None
        raise FileFormatError("The run file {} is not a run_ut run file of format {!r} version {} ({}: {}). {}"
                              .format(path, FORMAT, VERSION, type(error).__name__, error, _RESTART)) from None
    return identity


def _whole(value: Any, what: str, kind: str, least: Any) -> int:
    """``value`` when it is an int (not a bool) of at least ``least`` (None: any); else ValueError saying
    ``"{what} {value} is not {kind}"``. int() would read 12.5 as 12 and true as 1, and fail on 1e400."""
    if type(value) is not int or (least is not None and value < least):
        raise ValueError(f"{what} {excerpt(value, 80)} is not {kind}")
    return value


def read(path: str, result_csv_path: str) -> RunIdentity:
    """The identity recorded in ``path`` (the run file of ``result_csv_path``; its first line only).

    Raises ParameterError naming ``result_csv_path`` when the file is missing; FileFormatError naming
    the file when it is not a regular file or not a run file of this format."""
    lines = _lines(path, result_csv_path)
    return _head(path, next(lines, None))


def check(path: str, result_csv_path: str, current: RunIdentity, result_stem: str) -> None:
    """Refuse to resume ``result_csv_path`` (whose run file is ``path``) with a run that is not the one
    it records: a run file written for another pair, another dump.json (by content), or the same dump run
    another way. ParameterError naming ``result_csv_path``, what is wrong and what to do. (The rows are
    checked under the run's lock: :func:`verify_rows`.)"""
    recorded = read(path, result_csv_path)
    tail = tail_of(result_csv_path, result_stem)
    if recorded.pair != tail:
        raise ParameterError("result_csv_path", result_csv_path, _OWN_RUN_FILE,
                             "Its run file {} was written for {}{}.csv, not for this CSV (copied from another "
                             "run?), so nothing shows which run its rows came from. {}".format(
                                 path, result_stem, recorded.pair, _RESTART))
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


def verify_rows(path: str, result_csv_path: str, results: Sequence[Sequence[str]],
                details: Sequence[Sequence[str]]) -> Tuple[int, List[str]]:
    """Check the rows a resume read (``results``, ``details``: cells as read back) against the run file
    ``path``: the k-th result row, with its details rows, must be the k-th API the run file records
    (name and chain). Returns ``(APIs kept, the run file's lines to keep)``: every row when each is
    recorded; without the last API when only its line is missing (killed between the two writes: it is run
    again). The run file may record more APIs than the CSVs hold (CSVs restored from an earlier copy):
    the rows there are checked, the rest is forgotten.

    Raises ParameterError naming ``result_csv_path`` when a row is not the one recorded, or several are
    not recorded at all: the CSVs hold rows of another run. FileFormatError for a corrupt run file."""
    by_api: Dict[str, List[Sequence[str]]] = {}
    for row in details:
        by_api.setdefault(ut_api_of_row(row[0]), []).append(row)
    lines = _lines(path, result_csv_path)
    first = next(lines, None)
    _head(path, first)
    kept = [first]
    chain = hashlib.sha256(first.rstrip("\n").encode("utf-8")).hexdigest()
    for number, row in enumerate(results, 1):
        line = next(lines, None)
        if line is not None and not line.endswith("\n"):
            line = None  # cut while it was appended: the API it was to record counts as not recorded
        if line is None:
            if number == len(results):  # its rows were written, its line was not: the run stopped in between
                return number - 1, kept
            raise ParameterError("result_csv_path", result_csv_path, _OWN_RUN_FILE,
                                 "APIs {} to {} of the result CSV ({}...) are not recorded in its run file {}: they "
                                 "were not written by the run it records (rows of another run appended?). {}".format(
                                     number, len(results), row[0], path, _RESTART))
        chain = _link(chain, row, by_api.get(row[0], ()))
        try:
            entry = json.loads(line)
            recorded = (entry["api"], entry["chain"])
        except (ValueError, KeyError, TypeError, RecursionError):
            raise FileFormatError("The run file {}, line {}: not an API record of a run_ut run file. {}".format(
                path, number + 1, _RESTART)) from None
        if recorded != (row[0], chain):
            raise ParameterError("result_csv_path", result_csv_path, _OWN_RUN_FILE,
                                 "API {} ({}) of the result CSV is not the one its run file records ({}): the CSVs "
                                 "hold rows of another run, or the run file {} was edited. {}".format(
                                     number, row[0], f"another API, {recorded[0]}" if recorded[0] != row[0]
                                     else "its rows differ", path, _RESTART))
        kept.append(line)
    return len(results), kept
