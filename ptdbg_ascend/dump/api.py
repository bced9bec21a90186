"""Dump-side implementation of the legacy functions (placeholder until the dump engine lands)."""
from ptdbg_ascend.errors import NotYetAvailableError


def _missing(*args, **kwargs):
    raise NotYetAvailableError("The dump engine (set_dump_path / register_hook / set_dump_switch) is not built yet.")


set_dump_path = register_dump = set_dump_switch = _missing
