"""compare / compare_distributed (placeholder until the compare feature lands)."""
from ptdbg_ascend.errors import NotYetAvailableError


def _missing(*args, **kwargs):
    raise NotYetAvailableError("compare / compare_distributed are not built yet.")


compare = compare_distributed = _missing
