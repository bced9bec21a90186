"""Overflow detection: inf/nan (and fp16/bf16 saturation) per API call, with a dump of each overflow."""
