"""The migration shim, installed as ``ptdbg_ascend.compat``: legacy calls -> msprobe 1.0.4 config."""
