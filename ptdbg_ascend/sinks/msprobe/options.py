"""What the msprobe sink (``sink.MsprobeSink``) is told of its run: :class:`MsprobeSinkOptions`, built by the
front-end (``msprobe/recording.sink_options``) from the validated configuration. The sink reads these few
values and nothing else of the configuration, and the overflow check comes in as functions, so that sinks/
depends on neither the configuration's schema nor the overflow feature."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, FrozenSet, Optional, Tuple

# ``policy(dump, stop_message)``: ``dump(item, k)`` writes overflow number k and returns where it went,
# ``stop_message(count, where)`` says why training stops.
PolicyFactory = Callable[[Callable[[Any, int], str], Callable[[int, str], str]], Any]


@dataclass(frozen=True)
class OverflowCheck:
    """Task ``overflow_check``: a call is written only when its data overflow.

    Args:
        limit: the ``overflow_nums`` at which training stops (named in the stop message).
        policy: builds the overflow policy of ``limit`` (``overflow/policy.OverflowPolicy``: ``check``,
            ``flush``, ``count``, ``stopped``) from the sink's ``dump`` and ``stop_message``.
        flag: ``flag(values)``, the overflow flag of everything an entry holds (``overflow/detection``).
    """

    limit: int
    policy: PolicyFactory
    flag: Callable[[Any], Any]


@dataclass(frozen=True)
class MsprobeSinkOptions:
    """What the msprobe sink writes.

    Args:
        blocks: the ``(direction, side)`` blocks dumped ("forward"/"backward" x "input"/"output"), from the
            configuration's ``data_mode``.
        md5: whether tensors are summarised by their md5 (task statistics, summary_mode md5). Default False.
        overflow: the overflow check of task ``overflow_check``. Default None: every selected call is written.
    """

    blocks: FrozenSet[Tuple[str, str]]
    md5: bool = False
    overflow: Optional[OverflowCheck] = None

    def wanted(self, direction: str, side: str) -> bool:
        """Whether the ``direction`` x ``side`` block of an entry is dumped."""
        return (direction, side) in self.blocks
