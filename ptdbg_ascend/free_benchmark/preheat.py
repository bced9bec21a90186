"""free_benchmark's preheating (``if_preheat: true``): the first steps calibrate each API's standard.

As 1.0.4: step 0 only counts each API's calls; steps 1 to ``preheat_step - 1`` check at most ``max_sample``
calls of each API a step, and also run each sampled call on the CPU in float32 (the reference). Where the
original output agrees with the reference (so the API is accurate) but its perturbed run lies beyond the
standard (so the API is merely sensitive to its inputs), that API and dtype's standard is raised to twice the error
seen (1.0.4's step factor, room for the next steps' inputs): a sensitive but accurate API stops being reported. Where the original disagrees with the reference, the
standard stays. Nothing is written during preheating; from step ``preheat_step`` every selected call is checked
against the calibrated standards.

Simpler than 1.0.4's (which started from a standard of 2.05 and halved or doubled it from step to step): the
standard only ever rises from the dtype's, to what an accurate run of that API showed. At ``fuzz_stage:
"backward"`` the preheating steps are sampled and not reported, and the standards stay the dtype's.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Dict, List, Optional, Tuple

from ptdbg_ascend.config import DebuggerConfig


MARGIN = 2.0


class Preheat:
    """The calibrated standards and the sampling of the preheating steps."""

    def __init__(self, config: DebuggerConfig) -> None:
        self.preheat_step = config.preheat_step
        self.max_sample = config.max_sample
        self.standards: Dict[Tuple[str, str], float] = {}
        self._calls: Counter = Counter()
        self._step: Optional[int] = None

    def learning(self, step: int) -> bool:
        """Whether ``step`` is a preheating step (nothing is reported then)."""
        return step < self.preheat_step

    def checks(self, call: Any, step: int) -> bool:
        """Whether the call is perturbed at ``step``: never at step 0, a sample of each API until the
        preheating ends, every call after."""
        if step >= self.preheat_step:
            return True
        if step != self._step:
            self._step = step
            self._calls.clear()
        api = f"{call.prefix}.{call.api}"
        self._calls[api] += 1
        return step > 0 and self._calls[api] <= self.max_sample

    def threshold(self, api: str, dtype: str, default: float) -> float:
        return max(default, self.standards.get((api, dtype), 0.0))

    def learn(self, api: str, args: Tuple[Any, ...], kwargs: Dict[str, Any], function: Any,
              errors: List[Tuple[Optional[int], Any, float, float]]) -> None:
        """Calibrate from one sampled call: ``errors`` holds ``(index, original output, error, standard)``."""
        if all(error <= allowed for _, _, error, allowed in errors):
            return
        import torch

        from ptdbg_ascend.free_benchmark import judge
        from ptdbg_ascend.free_benchmark.perturb import NotPerturbed, dtype_name, perturbed_inputs

        try:
            reference_args, reference_kwargs = perturbed_inputs("to_cpu", args, kwargs)
            with torch.no_grad():
                reference = function(*reference_args, **reference_kwargs)
        except (NotPerturbed, Exception):  # no reference: the standard stays
            return
        for index, output, error, allowed in errors:
            expected = reference if index is None else reference[index]
            dtype = dtype_name(output)
            standard = judge.threshold(dtype, "improve_precision")
            if judge.max_relative_error(output, expected, judge.small_value(expected)) <= standard:
                key = (api, dtype)
                self.standards[key] = max(self.standards.get(key, 0.0), MARGIN * error)
