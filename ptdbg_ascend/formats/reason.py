"""The advisor's typed reason: which decision it took about a compare, and the evidence that decision rests on.

:func:`ptdbg_ascend.comparison.advisor.classify` makes a :class:`Reason` from the rows; the advisor's prose is
rendered from it, and the finding file (:mod:`ptdbg_ascend.formats.finding`, version 3) stores it as data, so a
later run reads the decision and its numbers instead of parsing the prose. Plain data only (names, dtypes,
numbers): torch-free, and equal when two compares decided alike.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Dict, Optional, Tuple



# The finding's ``kind``: the call's inputs still match and its output does not ("cause"), the failing tensor
# carries a difference made earlier ("propagation"), or an input differs that no dumped API produced ("input").
CAUSE, PROPAGATION, INPUT = "cause", "propagation", "input"
KINDS = (CAUSE, PROPAGATION, INPUT)
ONE_SIDED_SHOWN = 8  # the calls present in one run only that a reason names
FP16_MAX = 65504.0  # float16's largest finite value: a tensor reaching it is a float16 overflow (fp16_overflow)


class Decision(str, enum.Enum):
    """What the advisor concluded. The first eleven name a suspect for the first failing row; the last three
    are what it says when no row failed."""

    # The failing tensor is an output (``kind`` "cause", except where it points elsewhere, see below).
    LOWER_PRECISION = "lower_precision"  # the call computes in a lower float dtype on NPU than on bench
    REDUCED_PRECISION = "reduced_precision"  # the call computes below its dtype's precision (TF32/HF32-like)
    AMPLIFIED = "amplified"  # the call only amplifies an earlier reduced-precision call's error: that call
    BACKWARD = "backward"  # a backward call's gradients differ beyond what reaches it
    COMPUTES_DIFFERENTLY = "computes_differently"  # its inputs are within their precision, its output is not
    # The failing tensor is an input that already differs.
    NPU_ONLY = "npu_only"  # traced back through calls present on NPU only (propagation)
    REDUCED_UPSTREAM = "reduced_upstream"  # an earlier call computes below its dtype's precision (cause)
    CHANGED_BETWEEN = "changed_between"  # its producer's output matched: changed in between (propagation)
    PRODUCED_BY = "produced_by"  # its producer's output differs too (propagation, suspect: the producer)
    GAP = "gap"  # every dumped call before it matched: code between two dumped calls (input)
    MODEL_INPUT = "model_input"  # no dumped call before it: data, seeds, weights (input)
    # No row failed.
    REDUCED_WARNING = "reduced_warning"  # but a call computes below its dtype's precision (a warning finding)
    INCOMPLETE = "incomplete"  # but too much was left uncompared to call it a pass
    NOTHING_FAILED = "nothing_failed"  # every compared tensor reached the accuracy


# The finding's ``kind`` of each decision that names a suspect.
KIND_OF: Dict[Decision, str] = {
    Decision.LOWER_PRECISION: CAUSE, Decision.REDUCED_PRECISION: CAUSE, Decision.AMPLIFIED: CAUSE,
    Decision.BACKWARD: CAUSE, Decision.COMPUTES_DIFFERENTLY: CAUSE, Decision.NPU_ONLY: PROPAGATION,
    Decision.REDUCED_UPSTREAM: CAUSE, Decision.CHANGED_BETWEEN: PROPAGATION, Decision.PRODUCED_BY: PROPAGATION,
    Decision.GAP: INPUT, Decision.MODEL_INPUT: INPUT, Decision.REDUCED_WARNING: CAUSE,
}


@dataclass(frozen=True)
class ReducedPrecision:
    """A call computing below its dtype's precision: the call, the CSV line of its output row, the relative
    error that output shows, the call's dtype and the label of the reduced mode (``"TF32/HF32-like"``,
    ``"bfloat16-like"``)."""

    call: str
    line: int
    relative_error: float
    dtype: str
    label: str


@dataclass(frozen=True)
class Carried:
    """The allowance numbers of a failing output explained by its inputs: the inputs' error (relative to their
    spread when ``spread`` is True: the call subtracts or normalises), and the output's relative error."""

    input_error: float
    output_error: float
    spread: bool


@dataclass(frozen=True)
class Mismatch:
    """The first paired call before the failure whose dtypes differ: its NPU call, both dtypes, and whether it
    computes in a lower float precision on NPU than on bench (preferred when there are several)."""

    call: str
    npu_dtype: str
    bench_dtype: str
    lower: bool

    def text(self) -> str:
        return f"{self.call} (NPU {self.npu_dtype}, bench {self.bench_dtype})"


@dataclass(frozen=True)
class Reason:
    """The advisor's decision and its evidence. Defaults: empty (None, ``()``, False).

    ``decision``: :class:`Decision`. ``suspect``: the call named (None when nothing failed). ``record``/``line``:
    the first failing row's NPU record and CSV line (header = line 1; a warning: the reduced call's output row).
    ``failing_call``: that row's call (it differs from ``suspect`` when the answer was traced elsewhere).
    ``related``/``related_line``: the call the answer rests on besides them: the producer of the failing input
    and its CSV line (``produced_by``, ``changed_between``), the previous dumped call (``gap``). ``via``: the calls
    present on NPU only that the trace went through, nearest first (``npu_only``). ``npu_precision``/
    ``bench_precision``: the failing call's float dtypes (``lower_precision``). ``reduced``: the call computing
    below its dtype's precision. ``carried``: the allowance numbers (``amplified``). ``mismatch``: the first dtype
    difference before the failure (or in the run, when nothing failed). ``one_sided``: calls present in one run
    only before the failure, casts first (at most :data:`ONE_SIDED_SHOWN`). ``unjudged``: inputs of the failing
    call that could not be judged (at most 3). ``nondeterministic``: a small error of a possibly
    non-deterministic API on bit-identical inputs. ``fp16_overflow``: a float16 tensor of the failing call reaches
    inf/nan or 65504. ``statistics_only``: only statistics were compared. ``incomplete``: part of the run was not
    compared (:meth:`~ptdbg_ascend.comparison.outcome.Counts.coverage_problems`)."""

    decision: Decision
    suspect: Optional[str] = None
    record: Optional[str] = None
    line: Optional[int] = None
    failing_call: Optional[str] = None
    related: Optional[str] = None
    related_line: Optional[int] = None
    via: Tuple[str, ...] = ()
    npu_precision: Optional[str] = None
    bench_precision: Optional[str] = None
    reduced: Optional[ReducedPrecision] = None
    carried: Optional[Carried] = None
    mismatch: Optional[Mismatch] = None
    one_sided: Tuple[str, ...] = ()
    unjudged: Tuple[str, ...] = ()
    nondeterministic: bool = False
    fp16_overflow: bool = False
    statistics_only: bool = False
    incomplete: bool = False

    @property
    def kind(self) -> Optional[str]:
        """The finding's kind ("cause", "propagation", "input"); None when no suspect is named."""
        return KIND_OF.get(self.decision)

