"""Dump writers: the legacy pkl + npy format, the msprobe dump.json + .pt format, background I/O."""
