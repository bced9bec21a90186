"""The advisor's finding: what compare concluded about the first failing row, and its file.

``compare()`` writes the advisor's prose to ``advisor_{tail}.txt`` (for people; its text is the legacy
tool's) and, when a row failed, the same answer as data to ``compare_finding_{tail}.json`` beside
``compare_result_{tail}.csv`` (for a later run or another tool: ``run_ut``'s link to the compare reads
it, never the prose). A compare where nothing failed has no finding and writes no JSON: its CSV says so.

The file is one JSON object: ``{"format": "ptdbg_ascend.finding", "version": 2, ...}`` and the fields of
:class:`Finding` under their names (``record``, ``line``, ``kind``, ``call``, ``api``, ``user_line``,
``dtype_mismatch``, ``one_sided``, ``level``, ``precision``). Version 2 added ``level`` and ``precision``
(a call computing below its dtype's precision); a version 1 file is refused like any other version.
:func:`decode` checks the format name, the version and every field's type before anything is used, so a
file of another format, version or tool is a FileFormatError naming it.

Torch-free; no file access here (the writer and the reader open the file; the reader reads at most
:data:`MAX_BYTES`).
"""

from __future__ import annotations

import json
from typing import Any, Dict, NamedTuple, Optional, Tuple

from ptdbg_ascend.errors import FileFormatError
from ptdbg_ascend.terminal import excerpt

FORMAT = "ptdbg_ascend.finding"
VERSION = 2
# The most bytes a finding file may hold: a few names, and one per call present in one run only before the
# failure (about 50 bytes each: a million such calls fit). A bigger file is refused before it is read.
MAX_BYTES = 64 << 20
STEM = "compare_finding_"  # + the tail of compare_result_{tail}.csv + ".json"
EXTENSION = ".json"

CAUSE, PROPAGATION, INPUT = "cause", "propagation", "input"
KINDS = (CAUSE, PROPAGATION, INPUT)
# ``level``: "error" (a row failed; the default) or "warning" (nothing failed, but a call computes below its
# dtype's precision: the compare still passes).
ERROR, WARNING = "error", "warning"
LEVELS = (ERROR, WARNING)


class Finding(NamedTuple):
    """The advisor's answer for the first failing row.

    ``record``/``line``: the first failing row (NPU record name, CSV line). ``kind``: "cause" (the call's
    inputs still match, its output does not), "propagation" (the failing tensor is an input that already
    differs, or it is the consequence of an earlier lower-precision call), or "input" (an input that
    differs and that no dumped API produced: data, weights, an API that is not dumped). ``call``/``api``:
    the suspect call (for a propagation, where the difference was traced to) and its API without counter
    and direction. ``user_line``: ``file:line  code`` of the user's own code that called it.
    ``dtype_mismatch``: the first call before the failure whose float precision differs between the runs.
    ``one_sided``: calls before the failure present in one run only (casts, extra calls). ``level``:
    ``"error"`` (default: ``record`` failed) or ``"warning"`` (nothing failed; ``record`` is the suspect's
    output that shows the reduced precision). ``precision``: None (default), or how the suspect computes
    below its dtype's precision, e.g. ``"TF32/HF32-like"`` (then ``kind`` is "cause": its inputs match, its
    output carries the error of a reduced mode)."""

    record: str
    line: int
    kind: str
    call: str
    api: str
    user_line: Optional[str]
    dtype_mismatch: Optional[str]
    one_sided: Tuple[str, ...]
    level: str = ERROR
    precision: Optional[str] = None


# field -> (allowed types, may be null); bool is refused for ``line`` below (json's true is an int to Python)
_FIELDS: Dict[str, Tuple[type, bool]] = {
    "record": (str, False), "line": (int, False), "kind": (str, False), "call": (str, False), "api": (str, False),
    "user_line": (str, True), "dtype_mismatch": (str, True), "one_sided": (list, False),
    "level": (str, False), "precision": (str, True),
}


def file_name(tail: str) -> str:
    """``compare_finding_{tail}.json``: the finding of ``compare_result_{tail}.csv``."""
    return STEM + tail + EXTENSION


def encode(finding: Finding) -> str:
    """The text of a finding file (one JSON object, keys sorted, a newline at the end)."""
    record: Dict[str, Any] = {"format": FORMAT, "version": VERSION}
    record.update(finding._asdict())
    record["one_sided"] = list(finding.one_sided)
    return json.dumps(record, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def decode(value: Any, path: str) -> Finding:
    """The :class:`Finding` a parsed finding file holds. ``path`` names the file in the messages.

    Raises FileFormatError naming ``path`` when ``value`` is not a finding of format ``FORMAT`` version
    ``VERSION`` (another format or version, a missing field, a field of the wrong type, an unknown kind)."""
    def refuse(problem: str) -> FileFormatError:
        return FileFormatError("{} is not a compare finding of format {!r} version {}: {}. Re-run compare to "
                               "write it again.".format(path, FORMAT, VERSION, problem))

    if not isinstance(value, dict):
        raise refuse("it holds a JSON {}, not an object".format(type(value).__name__))
    if value.get("format") != FORMAT or value.get("version") != VERSION:
        raise refuse("it says format {} version {}".format(excerpt(value.get("format")), excerpt(value.get("version"))))
    fields: Dict[str, Any] = {}
    for name, (kind, nullable) in _FIELDS.items():
        if name not in value:
            raise refuse("the field {!r} is missing".format(name))
        field = value[name]
        if (field is None and not nullable) or (field is not None and (not isinstance(field, kind)
                                                                       or isinstance(field, bool))):
            raise refuse("the field {!r} is {}, not a {}{}".format(name, excerpt(field), kind.__name__,
                                                                   " or null" if nullable else ""))
        fields[name] = field
    if fields["kind"] not in KINDS:
        raise refuse("the kind {} is none of {}".format(excerpt(fields["kind"]), ", ".join(KINDS)))
    if fields["level"] not in LEVELS:
        raise refuse("the level {} is none of {}".format(excerpt(fields["level"]), ", ".join(LEVELS)))
    if not all(isinstance(name, str) for name in fields["one_sided"]):
        raise refuse("the field 'one_sided' holds something else than names")
    fields["one_sided"] = tuple(fields["one_sided"])
    return Finding(**fields)
