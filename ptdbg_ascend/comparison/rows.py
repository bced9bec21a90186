"""The typed result of a comparison: one :class:`CompareRow` per CSV row. Numbers stay numbers here;
text is made only where the csv/xlsx are written (``reports.py``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple

from ptdbg_ascend.comparison.matching import RowPair
from ptdbg_ascend.comparison.metrics import Metrics
from ptdbg_ascend.formats.records import CallRecord, TensorRecord
from ptdbg_ascend.comparison.tolerances import Tolerance
from ptdbg_ascend.comparison.verdicts import ERROR, NOT_COMPARED, PASSING, RESULT_UNMATCHED, Judgement


@dataclass(frozen=True)
class CompareRow:
    """One compared tensor (or a tensor present on one side only).

    ``metrics`` and ``accuracy`` (the legacy column) exist in full mode only; ``judgement`` is the robust
    verdict (``judgement.grade`` is the Result column); ``tolerance`` what the row was allowed (None for
    a one-sided row); ``messages`` the Err_message parts.
    """

    pair: RowPair
    judgement: Judgement
    tolerance: Optional[Tolerance] = None
    metrics: Optional[Metrics] = None
    accuracy: Optional[str] = None
    messages: Tuple[str, ...] = ()

    @property
    def npu(self) -> Optional[TensorRecord]:
        return self.pair.npu

    @property
    def bench(self) -> Optional[TensorRecord]:
        return self.pair.bench

    @property
    def call(self) -> Optional[CallRecord]:
        """The NPU call of the row, or the bench call of a bench-only row."""
        return self.pair.npu_call or self.pair.bench_call

    @property
    def name(self) -> str:
        """The NPU record name (the bench one for a bench-only row)."""
        record = self.pair.npu or self.pair.bench
        return record.name if record is not None else ""

    @property
    def side(self) -> str:
        record = self.pair.npu or self.pair.bench
        return record.side if record is not None else ""

    @property
    def result(self) -> str:
        return self.judgement.grade

    @property
    def failed(self) -> bool:
        return self.judgement.grade == ERROR

    @property
    def passed(self) -> bool:
        return self.judgement.grade in PASSING

    @property
    def one_sided(self) -> bool:
        return self.pair.npu is None or self.pair.bench is None

    @property
    def compared(self) -> bool:
        """Both sides present and judged (pass, warning or error)."""
        return not self.one_sided and self.judgement.grade not in (NOT_COMPARED, RESULT_UNMATCHED)

    @property
    def message(self) -> str:
        return " ".join(part for part in self.messages if part)
