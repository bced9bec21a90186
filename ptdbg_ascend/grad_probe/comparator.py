"""grad_probe's compare (:class:`GradComparator`): per step and parameter, the share of gradient signs two runs agree on,
written as msprobe 1.0.4 writes it (``similarities.csv``, ``similarities_picture/``), and the answer 1.0.4 only
describes, said: the first step whose similarity is below ``similarity`` (0.97) at the first step compared, or drops
by more than ``drop`` (0.03) from the step before, and the parameters that drop there first.

Both dumps may come from another machine: every name read becomes a file name only after it matched
:data:`PARAM_NAME` (1.0.4's own pattern), shapes are parsed as ints, and a direction file is read only as the
``.npy`` its shape allows (``directions.load_signs``).
"""

from __future__ import annotations

import csv
import io
import os
import re
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

from ptdbg_ascend.errors import CompareError, FileFormatError
from ptdbg_ascend.fs.writes import own_dir, own_dirs, replace_text_file
from ptdbg_ascend.grad_probe import pictures
from ptdbg_ascend.grad_probe.directions import SUFFIX, load_signs, matching_signs
from ptdbg_ascend.grad_probe.monitor import summary_file_name
from ptdbg_ascend.log import logger

PARAM_NAME = re.compile(r"^[A-Za-z0-9_.]+$")  # msprobe 1.0.4's PARAM_VALID_PATTERN
_SHAPE = re.compile(r"^\[(\d+(?:, \d+)*)?\]$")
SUMMARY = "summary"
MAX_SUMMARY_BYTES = 256 * 1024 * 1024  # a grad_summary CSV of millions of parameters stays far below
DEFAULT_SIMILARITY, DEFAULT_DROP = 0.97, 0.03


class GradCompareResult(NamedTuple):
    """What one rank's compare found. ``similarities``: name (and ``"summary"``) -> one value per step of ``steps``;
    ``first_step``: the first step that fails the rule (None: none does); ``first_parameters``: ``(name, similarity,
    the step before's or None)`` of the series that fail there, the largest drop first; ``answer``: the sentence said."""

    output_dir: str
    steps: List[int]
    similarities: Dict[str, List[float]]
    first_step: Optional[int]
    first_parameters: List[Tuple[str, float, Optional[float]]]
    answer: str


class GradComparator:
    """msprobe 1.0.4's ``GradComparator``: :meth:`compare` one rank directory pair, :meth:`compare_distributed` the
    ``rank{N}`` directories of two dump paths."""

    @classmethod
    def compare_distributed(cls, path1: str, path2: str, output_dir: str, similarity: float = DEFAULT_SIMILARITY,
                            drop: float = DEFAULT_DROP) -> Dict[int, GradCompareResult]:
        """Compare ``{path1}/rank{N}`` with ``{path2}/rank{N}`` for every rank both hold, into
        ``{output_dir}/rank{N}``. Raises :class:`CompareError` when no rank is in both."""
        ranks = _matched(path1, path2, "rank")
        if not ranks:
            raise CompareError(f"No rank{{N}} directory is in both {path1} and {path2}: dump both runs with task "
                               "grad_probe and the same config.")
        return {rank: cls.compare(os.path.join(path1, f"rank{rank}"), os.path.join(path2, f"rank{rank}"),
                                  os.path.join(output_dir, f"rank{rank}"), similarity, drop) for rank in ranks}

    @classmethod
    def compare(cls, path1: str, path2: str, output_dir: str, similarity: float = DEFAULT_SIMILARITY,
                drop: float = DEFAULT_DROP) -> GradCompareResult:
        """Compare two rank directories (``grad_summary_{N}.csv`` + ``step{N}/``) into ``output_dir`` (created).
        Raises :class:`CompareError` when no step is in both, :class:`FileFormatError` naming a hostile file."""
        steps = [step for step in _matched(path1, path2, "step")
                 if os.path.isfile(os.path.join(path1, summary_file_name(step)))]
        if not steps:
            raise CompareError(f"No step{{N}} directory with its grad_summary CSV is in both {path1} and {path2}: "
                               "the directions are dumped at grad_level L1 or L2.")
        similarities = _similarities(path1, path2, steps)
        if not os.path.isdir(output_dir):
            own_dirs(output_dir, 1)
        _write_csv(os.path.join(output_dir, "similarities.csv"), steps, similarities)
        picture_dir = os.path.join(output_dir, "similarities_picture")
        if not os.path.isdir(picture_dir):
            own_dir(picture_dir)
        for name, values in similarities.items():
            pictures.save_picture(os.path.join(picture_dir, f"{name}_similarities"), f"{name}_similarities", steps,
                                  values, similarity)
        if not pictures.has_matplotlib():
            logger.info(f"The pictures in {picture_dir} are SVG (matplotlib is not installed: pip install matplotlib "
                        "for msprobe's PNG files).")
        first_step, first = first_divergence(steps, similarities, similarity, drop)
        answer = answer_text(path1, path2, steps, similarities, first_step, first, similarity, drop)
        (logger.warning if first_step is not None else logger.info)(answer)
        return GradCompareResult(output_dir, steps, similarities, first_step, first, answer)


def first_divergence(steps: Sequence[int], similarities: Dict[str, List[float]], similarity: float,
                     drop: float) -> Tuple[Optional[int], List[Tuple[str, float, Optional[float]]]]:
    """The first step where a series is below ``similarity`` at the first step compared or drops by more than ``drop``
    from the step before, and the series that fail there (``(name, value, previous)``, the largest drop first)."""
    for index, step in enumerate(steps):
        failing = []
        for name, values in similarities.items():
            previous = values[index - 1] if index else None
            if (previous is None and values[index] < similarity) or \
                    (previous is not None and previous - values[index] > drop):
                failing.append((name, values[index], previous))
        if failing:
            failing.sort(key=lambda item: (item[0] == SUMMARY, -((item[2] or 1.0) - item[1])))
            return step, failing
    return None, []


def answer_text(path1: str, path2: str, steps: Sequence[int], similarities: Dict[str, List[float]],
                first_step: Optional[int], first: List[Tuple[str, float, Optional[float]]], similarity: float,
                drop: float) -> str:
    """The sentence :meth:`GradComparator.compare` says."""
    summary = similarities[SUMMARY]
    if first_step is None:
        lowest = min(range(len(steps)), key=summary.__getitem__)
        return ("grad_probe: the gradients of {} and {} agree over steps {}-{}: no similarity below {} nor a drop of "
                "more than {} (the lowest, {:.4f}, at step {}).".format(path1, path2, steps[0], steps[-1], similarity,
                                                                        drop, summary[lowest], steps[lowest]))
    parameters = [item for item in first if item[0] != SUMMARY]
    shown = ", ".join("{} {:.4f}{}".format(name, value, "" if previous is None else f" (from {previous:.4f})")
                      for name, value, previous in parameters[:5])
    more = f" and {len(parameters) - 5} more" if len(parameters) > 5 else ""
    index = list(steps).index(first_step)
    return ("grad_probe: the gradients of {} and {} first diverge at step {} (all parameters: {:.4f}{}); the "
            "parameters that drop first: {}{}.".format(path1, path2, first_step, summary[index],
                                                        f", from {summary[index - 1]:.4f}" if index else "",
                                                        shown or "none alone", more))


# -- reading -------------------------------------------------------------------------------------------
def _matched(path1: str, path2: str, prefix: str) -> List[int]:
    """The N of every ``{prefix}{N}`` directory both paths hold, sorted."""
    found = []
    for path in (path1, path2):
        if not os.path.isdir(path):
            raise CompareError(f"{path} is not a directory (a grad_probe dump_path or one of its rank directories).")
    for name in os.listdir(path1):
        number = name[len(prefix):]
        if name.startswith(prefix) and number.isdigit() and len(number) < 12 \
                and os.path.isdir(os.path.join(path2, name)) and not os.path.islink(os.path.join(path1, name)):
            found.append(int(number))
    return sorted(found)


def read_summary(path: str) -> List[Tuple[str, Tuple[int, ...]]]:
    """``(param_name, shape)`` of each row of a grad_summary CSV; :class:`FileFormatError` naming ``path`` for a file
    that is not one (no ``param_name``/``shape`` columns, a name outside :data:`PARAM_NAME`, a shape not ints)."""
    if os.path.getsize(path) > MAX_SUMMARY_BYTES:
        raise FileFormatError(f"{path} is larger than a grad_summary CSV can be ({MAX_SUMMARY_BYTES} bytes).")
    # utf-8-sig: msprobe 1.0.4 writes its CSVs with a byte-order mark
    with open(path, newline="", encoding="utf-8-sig", errors="replace") as handle:
        rows = list(csv.reader(handle))
    if not rows or not rows[0] or rows[0][0] != "param_name" or rows[0][-1] != "shape":
        raise FileFormatError(f"{path} is not a grad_summary CSV: its header must start with param_name and end with "
                              "shape.")
    result = []
    for number, row in enumerate(rows[1:], 2):
        match = _SHAPE.match(row[-1]) if row else None
        if not row or PARAM_NAME.match(row[0]) is None or row[0] in (".", "..") or match is None:
            raise FileFormatError(f"{path}, line {number}: not a grad_summary row (a parameter name of "
                                  f"[A-Za-z0-9_.] and a shape such as [16, 8]).")
        result.append((row[0], tuple(int(item) for item in match.group(1).split(", ")) if match.group(1) else ()))
    return result


def _similarities(path1: str, path2: str, steps: List[int]) -> Dict[str, List[float]]:
    similarities: Dict[str, List[float]] = {}
    for step in steps:
        other = dict(read_summary(os.path.join(path2, summary_file_name(step)))) \
            if os.path.isfile(os.path.join(path2, summary_file_name(step))) else None
        same_total, elements_total = 0, 0
        for name, shape in read_summary(os.path.join(path1, summary_file_name(step))):
            if other is not None and name in other and other[name] != shape:
                raise CompareError(f"{name} has shape {list(shape)} in {path1} and {list(other[name])} in {path2} at "
                                   f"step {step}: the two runs are of different models.")
            elements = 1
            for size in shape:
                elements *= size
            first = load_signs(os.path.join(path1, f"step{step}", name + SUFFIX), elements)
            second = load_signs(os.path.join(path2, f"step{step}", name + SUFFIX), elements)
            same = matching_signs(first, second, elements)
            same_total, elements_total = same_total + same, elements_total + elements
            similarities.setdefault(name, []).append(same / elements if elements else 0.0)
        similarities.setdefault(SUMMARY, []).append(same_total / elements_total if elements_total else 0.0)
    lengths = {len(values) for values in similarities.values()}
    if lengths != {len(steps)}:
        raise CompareError(f"The parameters of {path1} differ between its steps: compare dumps of one model.")
    return similarities


def _write_csv(path: str, steps: List[int], similarities: Dict[str, List[float]]) -> None:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")  # (names are PARAM_NAME-checked: no cell can be a formula)
    writer.writerow(["step"] + [str(step) for step in steps])
    for name, values in similarities.items():
        writer.writerow([name] + values)
    replace_text_file(path, [buffer.getvalue()], "the grad_probe similarities")
