"""Overflow-check implementation of the legacy functions (placeholder until the overflow feature lands)."""
from ptdbg_ascend.errors import NotYetAvailableError


def _missing(*args, **kwargs):
    raise NotYetAvailableError("Overflow checking (overflow_check, set_overflow_check_switch) is not built yet.")


register_overflow_check = set_overflow_check_switch = _missing
