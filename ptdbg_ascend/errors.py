"""One exception tree for the whole tool.

Every public error derives from :class:`PtdbgError`. Lower layers (json, numpy, OS) raise their own
exceptions; the public entry points map them to the most specific class below, so a user can catch
``PtdbgError`` and always get a message that names the parameter, file or API involved.
"""

from __future__ import annotations

from typing import Any, Optional


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
        message = "Invalid {}={!r}: {}.".format(parameter, value, allowed)
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


class DeviceUnavailableError(PtdbgError, RuntimeError):
    """The requested feature needs hardware or a package that is not present (ACL dump needs an
    Ascend NPU with torch_npu)."""


class NotYetAvailableError(PtdbgError, NotImplementedError):
    """A documented function whose feature is not built yet."""
