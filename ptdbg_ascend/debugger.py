"""PrecisionDebugger, the msprobe 1.0.4-style front-end (placeholder until the migration shim lands)."""
from ptdbg_ascend.errors import NotYetAvailableError


class PrecisionDebugger(object):
    def __init__(self, *args, **kwargs):
        raise NotYetAvailableError("PrecisionDebugger is not built yet.")
