"""Overflow detection: inf/nan (and fp16/bf16 saturation) per API call, with a dump of each overflow
(``observer``: the legacy check's observer; ``policy``: when a call is dumped and training stops; ``detection``:
what an overflow is)."""
