"""ptdbg_ascend: find the first torch API whose results differ between two training runs.

``from ptdbg_ascend import *`` gives the legacy function API; it imports neither torch nor pandas,
so compare scripts start fast. ``PrecisionDebugger`` (the msprobe-style API) is loaded on first use.
"""

from ptdbg_ascend.legacy import (
    acc_cmp_dump,
    compare,
    compare_distributed,
    overflow_check,
    parse,
    register_hook,
    seed_all,
    set_backward_input,
    set_dump_path,
    set_dump_switch,
    set_overflow_check_switch,
)
from ptdbg_ascend.version import __version__
from ptdbg_ascend import checkout as _checkout

_checkout.install()  # ptdbg_ascend.compat from a checkout that was not pip-installed (checkout.py)

__all__ = [
    "seed_all",
    "set_dump_path",
    "register_hook",
    "acc_cmp_dump",
    "overflow_check",
    "set_dump_switch",
    "set_overflow_check_switch",
    "set_backward_input",
    "compare",
    "compare_distributed",
    "parse",
    "PrecisionDebugger",
]


# The API pre-check (msprobe's run_ut / multi_run_ut / api_precision_compare), loaded on first use like
# PrecisionDebugger: ``from ptdbg_ascend import run_ut`` gives the real function (signature, docstring)
# and ``import ptdbg_ascend`` stays free of torch. Not in __all__: ``import *`` keeps the legacy names.
_PRECHECK = {
    "run_ut": "ptdbg_ascend.precheck.run_ut",
    "multi_run_ut": "ptdbg_ascend.precheck.multi_run_ut",
    "api_precision_compare": "ptdbg_ascend.precheck.device_compare",
}


def __getattr__(name):  # PEP 562: load the msprobe-style front-end only when it is used
    if name in _PRECHECK:
        import importlib

        try:
            module = importlib.import_module(_PRECHECK[name])
        except ModuleNotFoundError as error:
            if error.name != _PRECHECK[name]:
                raise  # a dependency is missing: say which, do not hide it
            raise AttributeError("module 'ptdbg_ascend' has no attribute {!r} ({} is not installed)"
                                 .format(name, _PRECHECK[name])) from None
        return getattr(module, name)
    if name == "PrecisionDebugger":
        from ptdbg_ascend.debugger import PrecisionDebugger

        return PrecisionDebugger
    if name == "GradComparator":  # grad_probe's compare (msprobe 1.0.4: from msprobe import GradComparator)
        from ptdbg_ascend.grad_probe.comparator import GradComparator

        return GradComparator
    if name in ("FlightRecorder", "FlightRecorderTriggered"):  # the last steps in memory (flight/recorder.py)
        from ptdbg_ascend.flight import recorder

        return getattr(recorder, name)
    if name in ("CompareOutcome", "Counts"):  # compare's result types (for annotations)
        from ptdbg_ascend.comparison import outcome

        return getattr(outcome, name)
    if name == "Finding":  # the advisor's answer, in compare's result
        from ptdbg_ascend.formats.finding import Finding

        return Finding
    raise AttributeError(f"module 'ptdbg_ascend' has no attribute {name!r}")
