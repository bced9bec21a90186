"""Legacy ``.pkl`` reader: UTF-8 text, one JSON array per line (never unpickled; lines as ``formats/pkl.py``
reads them). Records are grouped by the call name parsed from each record name (not by "a group ends at an
output line", which merged calls without outputs).

A line that cannot be read is skipped with a warning naming the file, the line and why (not UTF-8: the byte and
where; not JSON; a name outside the grammar, e.g. a counter of 5000 digits); a statistic beyond float64's range
is no value (a warning names it), the record is kept. A record name written twice (no dump writes one twice)
is said in one warning per file naming the names and their lines; the later line is used, in the earlier
one's place, as json does with a repeated key.
"""

from __future__ import annotations

import os
from typing import Dict, Iterator, List, Optional, Tuple, TypeVar

from ptdbg_ascend.formats.records import CallRecord, Frame, TensorRecord, as_shape, data_file, read_statistics
from ptdbg_ascend.errors import FileFormatError
from ptdbg_ascend.formats.naming import number_problem, split_record_name
from ptdbg_ascend.formats.pkl import is_overflow_step, parse_line, record_fields, stack_frames
from ptdbg_ascend import progress
from ptdbg_ascend.log import logger
from ptdbg_ascend.terminal import excerpt

T = TypeVar("T")
PROGRESS_MIN_BYTES = 8 << 20  # a bar from 8 MB (about 40,000 lines, 2 s of a compare) on
PROGRESS_LINES = 4096  # the bar moves every so many lines (an update per line reads the clock per line)
MAX_REPORTED = 5  # repeated record names named in the warning; the rest are counted


def read_lines(path: str) -> List[Tuple[int, list]]:
    """Every readable line of :func:`iter_lines`, as a list."""
    return list(iter_lines(path))


def iter_lines(path: str) -> Iterator[Tuple[int, list]]:
    """``(line number, parsed array)`` for every readable line, read one line at a time (memory: one line,
    whatever the file's length). A corrupt line (a killed run leaves a truncated last one) is skipped with a
    warning naming the file and the line; no line at all is an error. Each line is decoded on its own: a
    kill can cut the last line inside a multi-byte character (a user's code line in a stack line), which
    must spoil that line only, not the file."""
    try:
        handle = open(path, "rb")
    except FileNotFoundError:
        raise FileFormatError(f"Dump file {path} does not exist. Please check the pkl path is valid.") from None
    except OSError as error:
        raise FileFormatError(f"Dump file {path} cannot be read: {error}") from None
    found = False
    bar, shown = _progress(handle, path), 0
    # A corrupt line's warning says whether it was the last one (only blank lines after it): it waits for
    # the next line that is not blank, or the end of the file.
    pending: Optional[Tuple[int, bytes, Optional[UnicodeDecodeError]]] = None
    with handle:
        for number, raw in enumerate(_raw_lines(handle, path), start=1):
            if number % PROGRESS_LINES == 0:
                bar.update(handle.tell() - shown)
                shown = handle.tell()
            if not raw.strip():
                continue
            if pending is not None:
                _warn_corrupt(path, *pending, last=False)
                pending = None
            try:
                value = parse_line(raw.decode("utf-8"))
            except UnicodeDecodeError as error:
                # A kill can cut the last line inside a character ("unexpected end of data"): as corrupt as
                # any cut line. Any other undecodable byte is no writer's (both write ASCII-escaped JSON).
                if error.reason == "unexpected end of data":
                    pending = (number, raw, error)
                else:
                    _warn_corrupt(path, number, raw, error, last=False)
                continue
            if value is None:
                pending = (number, raw, None)
                continue
            found = True
            yield number, value
        bar.update(handle.tell() - shown)
    bar.close()
    if pending is not None:
        _warn_corrupt(path, *pending, last=True)
    if not found:
        raise FileFormatError(f"Dump file {path} holds no records (empty or unreadable).")


def _progress(handle, path: str):
    """A bar over the bytes of a dump file of PROGRESS_MIN_BYTES or more (:func:`ptdbg_ascend.progress.bar`)."""
    try:
        size = os.fstat(handle.fileno()).st_size
    except OSError:
        size = 0
    return progress.bar(size, f"read {os.path.basename(path)}", "B", PROGRESS_MIN_BYTES, unit_scale=True)


def _raw_lines(handle, path: str) -> Iterator[bytes]:
    """The lines of an open binary file without their newline (split on b"\\n" only, as ``bytes.split``)."""
    try:
        for line in handle:
            yield line[:-1] if line.endswith(b"\n") else line
    except OSError as error:
        raise FileFormatError(f"Dump file {path} cannot be read: {error}") from None


def _warn_corrupt(path: str, number: int, raw: bytes, error: Optional[UnicodeDecodeError], last: bool) -> None:
    """The warning of a skipped line: not UTF-8 (the byte and where), else corrupt (a truncated last line:
    was the run killed?). A last line cut inside a character is a truncated line, not a bad byte."""
    if error is not None and not (last and error.reason == "unexpected end of data"):
        logger.warning("Skipped line {} of {}: it is not UTF-8 text (byte 0x{:02x} at byte {} of the line)."
                       .format(number, path, raw[error.start], error.start + 1))
        return
    logger.warning("Skipped corrupt line {} of {}{}.".format(
        number, path, " (truncated last line: was the run killed?)" if last else ""))


def read(path: str, data_dir: Optional[str] = None, overflow_statistics: bool = False) -> List[CallRecord]:
    """Read a legacy pkl; tensors are looked up as ``{data_dir}/{name}.npy`` (None = summary only).

    ``overflow_statistics`` keeps the statistics of overflow records (``dump_step`` > 100), which compare
    drops as the original did; ``parse`` shows them. Default False."""
    records: Dict[str, List[TensorRecord]] = {}
    stacks: Dict[str, Tuple[Frame, ...]] = {}
    seen: Dict[str, Tuple[int, int]] = {}  # record name -> (its line, its index in its call's records)
    repeated: List[Tuple[str, int, int]] = []  # (name, earlier line, later line)
    # One object per distinct side, dtype, shape and stack: a 10^6-line dump repeats a few dozen of each, and
    # a copy per record was a third of its records' memory (measured with tracemalloc).
    shared: Dict[object, object] = {}
    for number, line in iter_lines(path):
        # any "{call}_{n}_{direction}" name, so module dumps (Module_Conv2d_0_forward, custom prefixes) read too
        parsed = split_record_name(line[0])
        if parsed is None:
            logger.warning("Skipped line {} of {}: {} is not a dump record name{}.".format(
                number, path, excerpt(line[0]), number_problem(line[0])))
            continue
        call, side = parsed
        records.setdefault(call, [])
        if side == "stack":
            _note(seen, repeated, line[0], number, -1)
            stacks[call] = _shared(shared, stack_frames(line))
            continue
        record = _record(number, line, path, call, _shared(shared, side), data_dir, overflow_statistics, shared)
        if record is None:
            continue
        earlier = _note(seen, repeated, record.name, number, len(records[call]))
        if earlier is None:
            records[call].append(record)
        else:  # the later line, in the earlier one's place: the call keeps its structure
            records[call][earlier] = record
    if repeated:
        warn_repeated(path, repeated)
    return [CallRecord(name=call, records=tuple(items), stack=stacks.get(call, ())) for call, items in records.items()]


def _shared(shared: Dict[object, object], value: T) -> T:
    """The first value read equal to ``value`` (``value`` itself the first time)."""
    return shared.setdefault(value, value)  # type: ignore[return-value]


def _record(number: int, line: list, path: str, call: str, side: str, data_dir: Optional[str],
            overflow_statistics: bool, shared: Dict[object, object]) -> Optional[TensorRecord]:
    """The record of a tensor line, or None (with a warning naming the line) when it cannot be one."""
    fields = record_fields(line)
    if fields is None:
        logger.warning(f"Skipped line {number} of {path}: a tensor record needs 6 fields.")
        return None
    summary = fields.statistics
    if not overflow_statistics and is_overflow_step(fields.dump_step):
        summary = []
    statistics, beyond = read_statistics(summary, fields.name)
    try:
        shape = as_shape(fields.shape)
    except ValueError as error:
        logger.warning(f"Skipped line {number} of {path}: {error}.")
        return None
    for problem in beyond:
        logger.warning(f"Line {number} of {path}: {problem}.")
    data_path = problem_text = None
    if data_dir:
        data_path, problem_text = data_file(data_dir, fields.name + ".npy", "record's")
        if problem_text is not None:
            logger.warning(f"Line {number} of {path}: {problem_text}")
    return TensorRecord(name=fields.name, side=side, dtype=_shared(shared, fields.dtype),
                        shape=_shared(shared, shape), statistics=statistics,
                        data_path=data_path, data_root=data_dir, data_problem=problem_text)


def _note(seen: Dict[str, Tuple[int, int]], repeated: List[Tuple[str, int, int]], name: str, number: int,
          index: int) -> Optional[int]:
    """Remember that line ``number`` holds ``name`` (at ``index`` of its call's records); when an earlier line
    held it, note the repetition and return the earlier one's index."""
    earlier = seen.get(name)
    if earlier is None:
        seen[name] = (number, index)
        return None
    repeated.append((name, earlier[0], number))
    seen[name] = (number, earlier[1])
    return earlier[1]


def warn_repeated(path: str, repeated: List[Tuple[str, int, int]]) -> None:
    """One warning naming the record names ``path`` repeats (``(name, earlier line, later line)``; the first
    MAX_REPORTED named, the rest counted) and that the later line of each is used."""
    shown = "; ".join(f"{excerpt(name)} (lines {first} and {later})"
                      for name, first, later in repeated[:MAX_REPORTED])
    if len(repeated) > MAX_REPORTED:
        shown += f"; and {len(repeated) - MAX_REPORTED} more"
    logger.warning("The dump file {} repeats {} record name{}: {}. The later line of each is used.".format(
        path, len(repeated), "" if len(repeated) == 1 else "s", shown))
