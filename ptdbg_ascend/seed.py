"""seed_all (placeholder until the dump engine lands)."""
from ptdbg_ascend.errors import NotYetAvailableError


def seed_all(seed=1234, mode=False, rm_dropout=False):
    raise NotYetAvailableError("seed_all is not built yet.")
