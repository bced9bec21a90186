"""parse (placeholder until the compare feature lands)."""
from ptdbg_ascend.errors import NotYetAvailableError


def parse(pkl_file, module_name_prefix):
    raise NotYetAvailableError("parse is not built yet.")
