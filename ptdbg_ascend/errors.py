"""One exception tree for the whole tool.

Every public error derives from :class:`PtdbgError`. Lower layers (json, numpy, OS) raise their own
exceptions; the public entry points map them to the most specific class below, so a user can catch
``PtdbgError`` and always get a message that names the parameter, file or API involved.
"""

from __future__ import annotations

from typing import Any, Optional

from ptdbg_ascend.terminal import excerpt


VALUE_SHOWN = 500  # characters of an invalid value a ParameterError quotes (terminal.excerpt)


class PtdbgError(Exception):
    """Base class of every error this tool raises on purpose."""


class ParameterError(PtdbgError, TypeError, ValueError):
    """An argument has the wrong type or value. Fired at the call that received it.

    Derives from both TypeError and ValueError so that code written against either the original
    tool (ValueError / CompareException) or plain Python conventions (TypeError) keeps catching it.
    """

    def __init__(self, parameter: str, value: Any, allowed: str, hint: Optional[str] = None) -> None:
        self.parameter = parameter
        self.value = value
        self.allowed = allowed
        # the value may come from a file (a list of a billion shared items, a 5000-digit int): quoted in part
        message = f"Invalid {parameter}={excerpt(value, VALUE_SHOWN)}: {allowed}."
        if hint:
            message += " " + hint
        super().__init__(message)


class CallOrderError(PtdbgError, RuntimeError):
    """A function was called when the tool is not in a state to honour it (e.g. set_backward_input
    before set_dump_switch in acl mode)."""


class DumpPathError(PtdbgError, ValueError):
    """A dump or output path cannot be used (a file where a directory is needed, a symlink,
    unwritable, special characters)."""


class DumpWriteError(PtdbgError, OSError):
    """Writing dump data failed (disk full, permission lost). Training stops rather than losing data."""


class FileFormatError(PtdbgError, ValueError):
    """A file that the tool reads is missing, truncated or corrupt. The message names the path (and
    the line, for line-oriented files)."""


class CompareError(PtdbgError, ValueError):
    """Two dumps cannot be compared as asked (files do not fit together, ranks do not line up)."""


class OverflowLimitReached(PtdbgError, ValueError, RuntimeError):
    """The overflow check saw its ``overflow_nums``-th overflowing call: training stops here, and the
    dump of the overflows is complete on disk. Raised by both front-ends (``register_hook(model,
    overflow_check)`` and ``PrecisionDebugger(task="overflow_check")``).

    A ValueError, as the original tool's stop (legacy scripts catch ``ValueError``), and a RuntimeError,
    as this tool's earlier msprobe-side class (scripts written against it catch ``RuntimeError``).

    Presented as ``builtins.ValueError``: an uncaught stop ends the traceback with the user guide's line
    ``ValueError: [overflow N times]: dump file is saved in '....pkl'.``, which scripts grep logs for.
    Python prints ``module.name`` of the class unless the module is ``builtins`` (``__name__`` on 3.8-3.10,
    ``__qualname__`` from 3.11 and in the traceback module), so the three are set below; ``except
    OverflowLimitReached`` and ``isinstance`` still tell it from a plain ValueError (``type(error) is not
    ValueError``). Pickling goes through :func:`_overflow_limit_reached`, since a class named
    ``builtins.ValueError`` cannot be pickled by reference."""

    def __reduce__(self) -> Any:
        return _overflow_limit_reached, self.args, self.__dict__ or None


def _overflow_limit_reached(*args: Any) -> OverflowLimitReached:
    """Rebuilds an unpickled :class:`OverflowLimitReached` (its class name cannot be looked up)."""
    return OverflowLimitReached(*args)


# The user guide's last line of an overflow stop (see the class's docstring); __name__ cannot be set in the body.
OverflowLimitReached.__module__ = "builtins"
OverflowLimitReached.__name__ = "ValueError"
OverflowLimitReached.__qualname__ = "ValueError"


class DeviceUnavailableError(PtdbgError, RuntimeError):
    """The requested feature needs hardware or a package that is not present (ACL dump needs an
    Ascend NPU with torch_npu)."""


class WorkerProcessError(PtdbgError, RuntimeError):
    """A worker process of a parallel run (``multi_run_ut``) could not start or raised an unexpected
    error; the message names the worker, the API it ran and the cause. What was already written stays
    (the run resumes)."""


class ClusterJoinError(PtdbgError, RuntimeError):
    """The ranks of a distributed pre-check (``RANK``/``WORLD_SIZE`` from the environment) did not all
    join within ``cluster_timeout``, or their rendezvous address cannot be used. The message names the
    variables and their values (a stale ``RANK``/``WORLD_SIZE`` in the shell is the usual cause)."""


class RunInterrupted(KeyboardInterrupt):
    """Ctrl-C (SIGINT) stopped ``run_ut``/``multi_run_ut`` after its result CSV was opened. A
    KeyboardInterrupt, so Python and callers stop as they always did on Ctrl-C (deliberately not a
    PtdbgError: ``except Exception`` must not swallow it); ``result_csv`` is the CSV to resume with
    (``result_csv_path=`` / ``-csv_path``): it holds every API finished before the interrupt."""

    def __init__(self, result_csv: str) -> None:
        self.result_csv = result_csv
        super().__init__(f"interrupted: resume with -csv_path {result_csv}")
