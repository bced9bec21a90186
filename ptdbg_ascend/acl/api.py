"""ACL implementation of the legacy functions (placeholder until the ACL feature lands)."""
from ptdbg_ascend.errors import NotYetAvailableError


def set_backward_input(backward_input):
    raise NotYetAvailableError("ACL dump (set_backward_input) is not built yet.")
