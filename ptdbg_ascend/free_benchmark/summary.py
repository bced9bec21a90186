"""What a free_benchmark window checked, reported and left alone, said at ``stop()``: never a quiet pass.

A window that checked no call says why (every call skipped, with the reasons), and a float32 model under
``improve_precision`` is told that the mode has nothing to raise there and which mode probes it.
"""

from __future__ import annotations

from collections import Counter
from typing import Dict, List

MAX_REASONS = 6


class Summary:
    """Counts per API (``Functional.softmax``): calls checked, reported, and the skips with their reasons."""

    def __init__(self) -> None:
        self.checked: Counter = Counter()
        self.reported: Counter = Counter()
        self.skipped: Dict[str, Counter] = {}
        self._said: set = set()  # the skip reasons said in an earlier window (each is said once per run)

    def check(self, api: str) -> None:
        self.checked[api] += 1

    def report(self, api: str) -> None:
        self.reported[api] += 1

    def skip(self, api: str, reason: str) -> None:
        self.skipped.setdefault(reason, Counter())[api] += 1

    def clear(self) -> None:
        self.checked.clear()
        self.reported.clear()
        self.skipped.clear()

    def lines(self, step: int, mode: str, csv_path: str) -> List[str]:
        """The summary of the window at ``step``: what was checked and reported, then why calls were not (each
        reason once per run: a later window names only the new ones)."""
        calls, apis = sum(self.checked.values()), len(self.checked)
        reported = sum(self.reported.values())
        if calls:
            head = "free_benchmark ({}) at step {}: {} call(s) of {} API(s) checked, {} beyond the standard".format(
                mode, step, calls, apis, reported)
            head += f": {csv_path} ({', '.join(sorted(self.reported))})." if reported else "."
        else:
            head = f"free_benchmark ({mode}) at step {step}: NO call was checked, so nothing is known to be stable."
        lines = [head]
        ordered = sorted(((reason, apis) for reason, apis in self.skipped.items() if reason not in self._said),
                         key=lambda item: -sum(item[1].values()))
        self._said.update(self.skipped)
        for reason, apis_of in ordered[:MAX_REASONS]:
            names = ", ".join(name for name, _ in apis_of.most_common(4)) + (", ..." if len(apis_of) > 4 else "")
            lines.append(f"  not perturbed ({sum(apis_of.values())} call(s): {names}): {reason}")
        if len(ordered) > MAX_REASONS:
            lines.append(f"  and {len(ordered) - MAX_REASONS} more reason(s).")
        if not calls and mode == "improve_precision" and any("nothing to raise" in why for why in self.skipped):
            lines.append("  improve_precision raises float16/bfloat16 inputs to float32; on float32 inputs it has "
                         "nothing to compare. To probe a float32 model, use pert_mode add_noise or bit_noise.")
        return lines
