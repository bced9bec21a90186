"""What makes the flight recorder write (``recorder.FlightRecorder``), and ``trigger.json``, the file that says why.

* a recorded output with an inf or NaN statistic (:func:`first_nonfinite`, read from the kept entries' texts);
* a non-finite loss, or one above ``loss_spike`` times the median of the recent steps' losses (:class:`LossWatch`);
* an exception leaving the training loop, and SIGTERM (the recorder's).
"""

from __future__ import annotations

import json
import math
import os
import statistics
from collections import deque
from typing import Any, Iterable, List, Optional, Tuple

from ptdbg_ascend.errors import ParameterError
from ptdbg_ascend.formats.dump_json import parse_stack_line
from ptdbg_ascend.formats.records import user_line
from ptdbg_ascend.fs.writes import replace_text_file

TRIGGER_FILE = "trigger.json"
TRIGGER_FORMAT = "ptdbg_ascend.trigger"
TRIGGER_VERSION = 1

# reason values of trigger.json
NONFINITE_OUTPUT = "nonfinite_output"
NONFINITE_LOSS = "nonfinite_loss"
LOSS_SPIKE = "loss_spike"
EXCEPTION = "exception"
SIGTERM = "sigterm"
OTHER_RANK = "other_rank"  # under torch.distributed: another rank fired at this step

# Fewest earlier losses a spike is measured against: one loss is no median to speak of.
MIN_LOSSES_FOR_SPIKE = 2
_STATISTICS = ("Max", "Min", "Mean", "Norm")


class LossWatch:
    """The losses of the recent steps, and whether a new one is a trigger.

    Args:
        loss_spike: a loss above this many times the median of the recent losses fires (None: only a non-finite
            one does). Compared only when the median is positive and at least :data:`MIN_LOSSES_FOR_SPIKE`
            earlier losses are known.
        window: how many earlier (finite) losses the median is taken over.
    """

    def __init__(self, loss_spike: Optional[float], window: int) -> None:
        self.loss_spike = loss_spike
        self._recent: deque = deque(maxlen=window)

    def check(self, loss: Any) -> Optional[Tuple[str, str]]:
        """``(reason, detail)`` when ``loss`` (a number or a one-element tensor; None: not given) fires, else None.
        A finite loss joins the recent ones, a spike included."""
        if loss is None:
            return None
        value = loss_value(loss)
        if not math.isfinite(value):
            return NONFINITE_LOSS, f"the loss is {value!r}"
        recent = self._recent
        fired = None
        if self.loss_spike is not None and len(recent) >= MIN_LOSSES_FOR_SPIKE:
            median = statistics.median(recent)
            if median > 0 and value > self.loss_spike * median:
                fired = LOSS_SPIKE, "the loss {!r} is above {} x {!r}, the median of the {} steps before".format(
                    value, self.loss_spike, median, len(recent))
        recent.append(value)  # a spike too: a loss that stays higher becomes the new normal
        return fired


def loss_value(loss: Any) -> float:
    """``loss`` as a float (a tensor of one element is read: one host sync on a device)."""
    try:
        if hasattr(loss, "detach"):
            loss = loss.detach()
            if loss.numel() != 1:
                raise ValueError
            return float(loss.float().item())
        return float(loss)
    except (TypeError, ValueError, RuntimeError):
        raise ParameterError("loss", loss, "must be a number or a tensor of one element (or None)") from None


def first_nonfinite(entries: Iterable[Tuple[str, str]]) -> Optional[str]:
    """The first record (``{entry}.output.{i}``, as compare names it) among ``entries`` (``(name, member text)``,
    in call order) whose output has an inf or NaN statistic, or None. A text without a bare ``NaN`` or
    ``Infinity`` token is not parsed."""
    for name, text in entries:
        if "NaN" not in text and "Infinity" not in text:
            continue
        try:
            entry = json.loads("{" + text + "}").get(name)
        except ValueError:
            continue
        output = entry.get("output") if isinstance(entry, dict) else None
        found = _nonfinite_path(output, name + ".output")
        if found is not None:
            return found
    return None


def entry_of(record: str) -> str:
    """The entry name of a record :func:`first_nonfinite` gives (``Torch.exp.0.forward.output.0`` ->
    ``Torch.exp.0.forward``)."""
    return record[:record.rindex(".output")]


def user_code_line(stack_lines: List[str]) -> Optional[str]:
    """``file:line  code`` of the innermost frame of the user's code among a call's stack.json lines (None
    without one)."""
    frames = tuple(frame for frame in map(parse_stack_line, stack_lines) if frame is not None)
    return user_line(frames) if frames else None


def _nonfinite_path(value: Any, path: str) -> Optional[str]:
    if isinstance(value, list):
        for index, item in enumerate(value):
            found = _nonfinite_path(item, f"{path}.{index}")
            if found is not None:
                return found
        return None
    if not isinstance(value, dict):
        return None
    if value.get("type") == "torch.Tensor":
        numbers = [value.get(key) for key in _STATISTICS]
        return path if any(type(number) is float and not math.isfinite(number) for number in numbers) else None
    for key, item in value.items():
        found = _nonfinite_path(item, f"{path}.{key}")
        if found is not None:
            return found
    return None


def write_trigger(dump_path: str, step: int, rank: Optional[int], reason: str, first: Optional[str],
                  code_line: Optional[str], detail: str, steps: List[int]) -> str:
    """Write ``{dump_path}/trigger.json`` (replaced atomically); returns its path. ``first``: the first non-finite
    record, ``code_line`` the user's line that made its call; ``steps``: those written."""
    path = os.path.join(dump_path, TRIGGER_FILE)
    document = {"format": TRIGGER_FORMAT, "version": TRIGGER_VERSION, "step": step, "rank": rank, "reason": reason,
                "first_nonfinite": first, "code_line": code_line, "detail": detail, "steps_written": steps}
    replace_text_file(path, [json.dumps(document, indent=1) + "\n"], "the flight recorder's trigger file")
    return path
