"""How far a perturbed output lies from the original one, and the standard it is held to (free_benchmark).

The standard is msprobe 1.0.4's, by the original output's dtype: a relative error above 0.004 (bfloat16),
0.002 (float16) or 0.0002 (float32 and the rest) is reported; ``no_change`` allows none (the same inputs must give
the same output). The relative error of an element is ``|a - b| / max(min(|a|, |b|), small)`` over the elements
where ``max(|a|, |b|) > small`` (``small``: the square root of the perturbed dtype's noise, as 1.0.4), and the
call's is the largest: 1.0.4's ``max(a/b, b/a) - 1`` where both are positive. A gradient is judged normwise: its
largest difference over its largest magnitude (:func:`normwise_error`).

Fixed relative to 1.0.4 (which clamped both values to ``small`` from below):

* negative elements count (1.0.4 compared only the positive ones);
* an element small in one run and large in the other counts (1.0.4 missed it when the original was small);
* a sign flip counts (its error is at least 2);
* a gradient is judged normwise: 1.0.4 left out every element below 1e-3, most of a typical gradient, so its
  backward check compared almost nothing; element by element, the small elements of a gradient come from
  cancellation and carry the rounding of the forward's saved low-precision output, a false alarm on every
  stock kernel;
* an inf or NaN in one run only is an error of ``inf``, reported (1.0.4 counted it as equal); where both runs have
  the same inf or a NaN, the element is left out.

It is computed in float64 on the perturbed output's device, in chunks of 2^22 elements (64 MiB per operand).
"""

from __future__ import annotations

import math
from typing import Any

from ptdbg_ascend.free_benchmark.perturb import NOISE, dtype_name

THRESHOLDS = {"bfloat16": 0.004, "float16": 0.002, "float32": 0.0002}
DEFAULT_THRESHOLD = 0.0002
CHUNK = 1 << 22


def threshold(dtype: str, mode: str) -> float:
    """The largest relative error allowed for an output of ``dtype`` (``"bfloat16"``...) in ``mode``."""
    return 0.0 if mode == "no_change" else THRESHOLDS.get(dtype, DEFAULT_THRESHOLD)


def small_value(perturbed: Any) -> float:
    """Below this magnitude in both runs an element of an output is left out (see the module docstring)."""
    return math.sqrt(NOISE.get(dtype_name(perturbed), NOISE["float32"]))


def normwise_error(original: Any, perturbed: Any) -> float:
    """A gradient's error: its largest difference over its largest magnitude (``inf`` for an inf/NaN in one
    run only)."""
    import torch

    with torch.no_grad():
        a = original.detach().to(device=perturbed.device, dtype=torch.float64)
        b = perturbed.detach().to(torch.float64)
        if not bool(torch.isfinite(a).all() and torch.isfinite(b).all()):
            return max_relative_error(original, perturbed, 0.0)
        scale = max(float(a.abs().max()), float(b.abs().max())) if a.numel() else 0.0
        return float((a - b).abs().max()) / scale if scale > 0 else 0.0


def max_relative_error(original: Any, perturbed: Any, small: float) -> float:
    """The largest relative error between two tensors of one shape (``inf`` for an inf/NaN in one run only,
    0.0 for empty tensors). The tensors are only read."""
    import torch

    with torch.no_grad():
        a_all = original.detach().reshape(-1)
        b_all = perturbed.detach().reshape(-1)
        worst = 0.0
        for start in range(0, a_all.numel(), CHUNK):
            a = a_all[start:start + CHUNK].to(device=b_all.device, dtype=torch.float64)
            b = b_all[start:start + CHUNK].to(torch.float64)
            finite_a, finite_b = torch.isfinite(a), torch.isfinite(b)
            if not bool((finite_a & finite_b).all()):
                same = (a == b) | (torch.isnan(a) & torch.isnan(b))
                if bool(((finite_a != finite_b) | (~finite_a & ~finite_b & ~same)).any()):
                    return math.inf
                keep = finite_a & finite_b
                a, b = a[keep], b[keep]
            if a.numel() == 0:
                continue
            magnitude_a, magnitude_b = a.abs(), b.abs()
            denominator = torch.minimum(magnitude_a, magnitude_b).clamp_(min=small)
            error = torch.where(torch.maximum(magnitude_a, magnitude_b) > small, (a - b).abs_() / denominator,
                                torch.zeros((), dtype=torch.float64, device=a.device))
            worst = max(worst, float(error.max()))
        return worst
