"""The advisor's finding: what compare concluded about the first failing row, and its file.

``compare()`` writes the advisor's prose to ``advisor_{tail}.txt`` (for people; its text is the legacy
tool's) and, when a row failed, the same answer as data to ``compare_finding_{tail}.json`` beside
``compare_result_{tail}.csv`` (for a later run or another tool: ``run_ut``'s link to the compare reads
it, never the prose). A compare where nothing failed has no finding and writes no JSON: its CSV says so.

The file is one JSON object: ``{"format": "ptdbg_ascend.finding", "version": 4, ...}`` and the fields of
:class:`Finding` under their names (``record``, ``line``, ``kind``, ``call``, ``api``, ``user_line``,
``dtype_mismatch``, ``one_sided``, ``level``, ``precision``, ``reason``, ``rerun``). Version 4 added ``rerun``: the
suspect re-run from the NPU's own dumped inputs (:class:`Rerun`: ``{"verdict": "reproduced" | "not_reproduced" |
"not_run", "ratio": float or null, "reason": str}``, null when compare ran without it or nothing failed). Version 3 added ``reason``:
the advisor's decision and its evidence (:class:`~ptdbg_ascend.formats.reason.Reason` as an object, its nested
``reduced``, ``carried`` and ``mismatch`` as objects or null; null for a finding made without the advisor).
Version 2 and 3 files are still read: they lack ``rerun`` (it is None), a version 2 file ``reason`` too; version 2
had added ``level`` and ``precision`` (a call computing below its dtype's precision), so a version 1 file is refused
like any other version. :func:`decode` checks the format name, the
version and every field's type before anything is used, so a file of another format, version or tool is a
FileFormatError naming it.

Torch-free; no file access here (the writer and the reader open the file; the reader reads at most
:data:`MAX_BYTES`).
"""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any, Callable, Dict, NamedTuple, Optional, Tuple

from ptdbg_ascend.errors import FileFormatError
# CAUSE, PROPAGATION, INPUT: the finding's kinds, named here for its readers
from ptdbg_ascend.formats.reason import CAUSE, INPUT, KINDS, PROPAGATION, Carried, Decision, Mismatch, Reason, \
    ReducedPrecision  # noqa: F401
from ptdbg_ascend.terminal import excerpt

FORMAT = "ptdbg_ascend.finding"
VERSION = 4
READ_VERSIONS = (2, 3, 4)  # a version 2 file has no ``reason``, versions 2 and 3 no ``rerun``
# The most bytes a finding file may hold: a few names, and one per call present in one run only before the
# failure (about 50 bytes each: a million such calls fit). A bigger file is refused before it is read.
MAX_BYTES = 64 << 20
STEM = "compare_finding_"  # + the tail of compare_result_{tail}.csv + ".json"
EXTENSION = ".json"

# ``level``: "error" (a row failed; the default) or "warning" (nothing failed, but a call computes below its
# dtype's precision: the compare still passes).
ERROR, WARNING = "error", "warning"
LEVELS = (ERROR, WARNING)
# ``rerun.verdict``: the NPU's output is further from the float64 re-run of its own dumped inputs than its dtype's
# standard allows ("reproduced": the API is inaccurate there), within it ("not_reproduced": the difference came in
# through the inputs or something not dumped), or the suspect was not re-run ("not_run", the reason says why).
REPRODUCED, NOT_REPRODUCED, NOT_RUN = "reproduced", "not_reproduced", "not_run"
VERDICTS = (REPRODUCED, NOT_REPRODUCED, NOT_RUN)


class Rerun(NamedTuple):
    """The suspect call re-run on this machine from the NPU's own dumped inputs
    (:mod:`ptdbg_ascend.comparison.rerun`). ``verdict``: one of :data:`VERDICTS`. ``ratio``: the NPU output's
    error against the float64 re-run over what its dtype's standard allows (> 1: reproduced; the pre-check's
    severity, :mod:`ptdbg_ascend.precheck.judge`); None when not run or not finite. ``reason``: the sentence
    behind the verdict (what was compared, or why nothing ran)."""

    verdict: str
    ratio: Optional[float]
    reason: str


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
    output carries the error of a reduced mode). ``reason``: the decision behind this answer and its evidence
    (:class:`~ptdbg_ascend.formats.reason.Reason`); None (default) when read from a version 2 file or made
    without the advisor. ``rerun``: the suspect re-run from the NPU's own inputs (:class:`Rerun`); None
    (default) when compare ran without it (``rerun=False``), at level ``"warning"`` (nothing failed) or the file
    is of version 2 or 3."""

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
    reason: Optional[Reason] = None
    rerun: Optional[Rerun] = None


# field -> (allowed types, may be null); bool is refused for ``line`` below (json's true is an int to Python)
_FIELDS: Dict[str, Tuple[type, bool]] = {
    "record": (str, False), "line": (int, False), "kind": (str, False), "call": (str, False), "api": (str, False),
    "user_line": (str, True), "dtype_mismatch": (str, True), "one_sided": (list, False),
    "level": (str, False), "precision": (str, True),
}
_REASON_FIELDS: Dict[str, Tuple[type, bool]] = {
    "decision": (str, False), "suspect": (str, True), "record": (str, True), "line": (int, True),
    "failing_call": (str, True), "related": (str, True), "related_line": (int, True), "via": (list, False),
    "npu_precision": (str, True), "bench_precision": (str, True), "reduced": (dict, True), "carried": (dict, True),
    "mismatch": (dict, True), "one_sided": (list, False), "unjudged": (list, False),
    "nondeterministic": (bool, False), "fp16_overflow": (bool, False), "statistics_only": (bool, False),
    "incomplete": (bool, False),
}
_REDUCED_FIELDS: Dict[str, Tuple[type, bool]] = {
    "call": (str, False), "line": (int, False), "relative_error": (float, False), "dtype": (str, False),
    "label": (str, False),
}
_CARRIED_FIELDS: Dict[str, Tuple[type, bool]] = {
    "input_error": (float, False), "output_error": (float, False), "spread": (bool, False),
}
_RERUN_FIELDS: Dict[str, Tuple[type, bool]] = {
    "verdict": (str, False), "ratio": (float, True), "reason": (str, False),
}
_MISMATCH_FIELDS: Dict[str, Tuple[type, bool]] = {
    "call": (str, False), "npu_dtype": (str, False), "bench_dtype": (str, False), "lower": (bool, False),
}


def file_name(tail: str) -> str:
    """``compare_finding_{tail}.json``: the finding of ``compare_result_{tail}.csv``."""
    return STEM + tail + EXTENSION


def encode(finding: Finding) -> str:
    """The text of a finding file (one JSON object, keys sorted, a newline at the end)."""
    record: Dict[str, Any] = {"format": FORMAT, "version": VERSION}
    record.update(finding._asdict())
    record["one_sided"] = list(finding.one_sided)
    if finding.reason is not None:
        record["reason"] = dataclasses.asdict(finding.reason)
        record["reason"]["decision"] = finding.reason.decision.value
    record["rerun"] = None if finding.rerun is None else finding.rerun._asdict()
    return json.dumps(record, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def decode(value: Any, path: str) -> Finding:
    """The :class:`Finding` a parsed finding file holds. ``path`` names the file in the messages.

    Raises FileFormatError naming ``path`` when ``value`` is not a finding of format ``FORMAT`` and a version
    of ``READ_VERSIONS`` (another format or version, a missing field, a field of the wrong type, an unknown
    kind, level, decision or re-run verdict, a negative or non-finite re-run ratio). A version 2 file gives a
    Finding without ``reason``; a version 2 or 3 file one without ``rerun``."""
    version = value.get("version") if isinstance(value, dict) else None
    known = type(version) is int and version in READ_VERSIONS  # 2.0 or true is no version
    shown = version if known else VERSION

    def refuse(problem: str) -> FileFormatError:
        return FileFormatError("{} is not a compare finding of format {!r} version {}: {}. Re-run compare to "
                               "write it again.".format(path, FORMAT, shown, problem))

    if not isinstance(value, dict):
        raise refuse(f"it holds a JSON {type(value).__name__}, not an object")
    if value.get("format") != FORMAT or not known:
        raise refuse(f"it says format {excerpt(value.get('format'))} version {excerpt(version)}")
    fields = _checked(value, _FIELDS, refuse, "")
    if fields["kind"] not in KINDS:
        raise refuse(f"the kind {excerpt(fields['kind'])} is none of {', '.join(KINDS)}")
    if fields["level"] not in LEVELS:
        raise refuse(f"the level {excerpt(fields['level'])} is none of {', '.join(LEVELS)}")
    fields["one_sided"] = _names(fields["one_sided"], "one_sided", refuse)
    if version >= 3:
        reason = _checked(value, {"reason": (dict, True)}, refuse, "")["reason"]
        fields["reason"] = None if reason is None else _reason(reason, refuse)
    if version >= 4:
        rerun = _checked(value, {"rerun": (dict, True)}, refuse, "")["rerun"]
        fields["rerun"] = None if rerun is None else _rerun(rerun, refuse)
    return Finding(**fields)


def _rerun(value: Dict[str, Any], refuse: Callable[[str], FileFormatError]) -> Rerun:
    fields = _checked(value, _RERUN_FIELDS, refuse, "rerun.")
    if fields["verdict"] not in VERDICTS:
        raise refuse(f"the re-run verdict {excerpt(fields['verdict'])} is none of {', '.join(VERDICTS)}")
    ratio = fields["ratio"]
    if ratio is not None and not (math.isfinite(ratio) and ratio >= 0):  # json reads NaN and Infinity
        raise refuse(f"the re-run ratio {excerpt(ratio)} is not a finite number >= 0")
    return Rerun(**fields)


def _reason(value: Dict[str, Any], refuse: Callable[[str], FileFormatError]) -> Reason:
    fields = _checked(value, _REASON_FIELDS, refuse, "reason.")
    decisions = [decision.value for decision in Decision]
    if fields["decision"] not in decisions:
        raise refuse(f"the decision {excerpt(fields['decision'])} is none of {', '.join(decisions)}")
    fields["decision"] = Decision(fields["decision"])
    for name in ("via", "one_sided", "unjudged"):
        fields[name] = _names(fields[name], "reason." + name, refuse)
    for name, kind, table in (("reduced", ReducedPrecision, _REDUCED_FIELDS), ("carried", Carried, _CARRIED_FIELDS),
                              ("mismatch", Mismatch, _MISMATCH_FIELDS)):
        if fields[name] is not None:
            fields[name] = kind(**_checked(fields[name], table, refuse, f"reason.{name}."))
    return Reason(**fields)


def _checked(value: Dict[str, Any], table: Dict[str, Tuple[type, bool]], refuse: Callable[[str], FileFormatError],
             prefix: str) -> Dict[str, Any]:
    """The fields of ``table`` in ``value``, each present and of its type (an int is a float too; a JSON true is
    no int); ``prefix`` places a nested object's fields in the messages."""
    fields: Dict[str, Any] = {}
    for name, (kind, nullable) in table.items():
        if name not in value:
            raise refuse(f"the field {prefix + name!r} is missing")
        field = value[name]
        allowed = (int, float) if kind is float else kind
        if (field is None and not nullable) or (field is not None and (
                not isinstance(field, allowed) or (isinstance(field, bool) and kind is not bool))):
            raise refuse("the field {!r} is {}, not a {}{}".format(prefix + name, excerpt(field), kind.__name__,
                                                                   " or null" if nullable else ""))
        fields[name] = float(field) if kind is float and field is not None else field
    return fields


def _names(value: list, name: str, refuse: Callable[[str], FileFormatError]) -> Tuple[str, ...]:
    if not all(isinstance(item, str) for item in value):
        raise refuse(f"the field {name!r} holds something else than names")
    return tuple(value)
