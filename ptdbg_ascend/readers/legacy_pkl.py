"""Legacy ``.pkl`` reader: UTF-8 text, one JSON array per line (never unpickled; lines as ``formats/pkl.py``
reads them). Records are grouped by the call name parsed from each record name (not by "a group ends at an
output line", which merged calls without outputs).
"""

from __future__ import annotations

from typing import Dict, List, Optional, Tuple

from ptdbg_ascend.comparison.records import CallRecord, Frame, TensorRecord, as_number, as_shape, data_file
from ptdbg_ascend.errors import FileFormatError
from ptdbg_ascend.formats.naming import split_record_name
from ptdbg_ascend.formats.pkl import is_overflow_step, parse_line, record_fields, stack_frames
from ptdbg_ascend.log import logger


def read_lines(path: str) -> List[Tuple[int, list]]:
    """``(line number, parsed array)`` for every readable line. A corrupt line (a killed run leaves a
    truncated last one) is skipped with a warning naming the file and the line; no line at all is an error.
    Each line is decoded on its own: a kill can cut the last line inside a multi-byte character (a user's
    code line in a stack line), which must spoil that line only, not the file."""
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except FileNotFoundError:
        raise FileFormatError("Dump file {} does not exist. Please check the pkl path is valid.".format(path)) from None
    except OSError as error:
        raise FileFormatError("Dump file {} cannot be read: {}".format(path, error)) from None
    lines = data.split(b"\n")
    parsed = []
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        try:
            value = parse_line(raw.decode("utf-8"))
        except UnicodeDecodeError:  # a line cut inside a character: as corrupt as any other cut line
            value = None
        if value is None:
            last = all(not rest.strip() for rest in lines[number:])
            logger.warning("Skipped corrupt line {} of {}{}.".format(
                number, path, " (truncated last line: was the run killed?)" if last else ""))
            continue
        parsed.append((number, value))
    if not parsed:
        raise FileFormatError("Dump file {} holds no records (empty or unreadable).".format(path))
    return parsed


def read(path: str, data_dir: Optional[str] = None, overflow_statistics: bool = False) -> List[CallRecord]:
    """Read a legacy pkl; tensors are looked up as ``{data_dir}/{name}.npy`` (None = summary only).

    ``overflow_statistics`` keeps the statistics of overflow records (``dump_step`` > 100), which compare
    drops as the original did; ``parse`` shows them. Default False."""
    records: Dict[str, List[TensorRecord]] = {}
    stacks: Dict[str, Tuple[Frame, ...]] = {}
    for number, line in read_lines(path):
        # any "{call}_{n}_{direction}" name, so module dumps (Module_Conv2d_0_forward, custom prefixes) read too
        parsed = split_record_name(line[0])
        if parsed is None:
            logger.warning("Skipped line {} of {}: {!r} is not a dump record name.".format(number, path, line[0]))
            continue
        call, side = parsed
        records.setdefault(call, [])
        if side == "stack":
            stacks[call] = stack_frames(line)
            continue
        fields = record_fields(line)
        if fields is None:
            logger.warning("Skipped line {} of {}: a tensor record needs 6 fields.".format(number, path))
            continue
        summary = fields.statistics
        if not overflow_statistics and is_overflow_step(fields.dump_step):
            summary = []
        statistics = tuple(as_number(summary[i]) if i < len(summary) else None for i in range(4))
        try:
            shape = as_shape(fields.shape)
        except ValueError as error:
            logger.warning("Skipped line {} of {}: {}.".format(number, path, error))
            continue
        name = fields.name
        data_path = problem = None
        if data_dir:
            data_path, problem = data_file(data_dir, name + ".npy", "record's")
            if problem is not None:
                logger.warning("Line {} of {}: {}".format(number, path, problem))
        records[call].append(TensorRecord(
            name=name, side=side, dtype=fields.dtype, shape=shape,
            statistics=statistics, data_path=data_path, data_root=data_dir, data_problem=problem,
        ))
    return [CallRecord(name=call, records=tuple(items), stack=stacks.get(call, ())) for call, items in records.items()]
