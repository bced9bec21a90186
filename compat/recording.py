"""Old name of the legacy call log, which lives in the core (``ptdbg_ascend/call_log.py``) so that the
core never imports ``compat``. ``ptdbg_ascend.compat.recording`` *is* that module (the same object, not a
copy), so old imports, and tests that patch its globals, keep working."""

import sys

from ptdbg_ascend import call_log as _call_log

# Importing this module hands back the core module: the import system returns sys.modules[__name__].
sys.modules[__name__] = _call_log
