"""How much memory the tool lets one file or one call take, and sizes in words.

A dump from someone else may declare a tensor of a terabyte in a few hundred bytes. Readers and the
pre-check compute the bytes a tensor will take from what the file declares (shape, dtype, strides, zip
member sizes) *before* allocating it, and refuse beyond a budget:

- :func:`available_memory`: the memory this process can still take: the smallest of the system's
  ``MemAvailable``, the container's cgroup limit minus its usage, and the address-space limit
  (``ulimit -v`` / ``prlimit --as``) minus what this process already maps. A container's limit is what
  matters there, and ``/proc/meminfo`` does not show it.
- :func:`default_budget`: a quarter of that, shared by the processes that load at once (default 1),
  never below :data:`MIN_BUDGET`.
- :func:`parse_size` / :func:`format_size`: ``"8G"``, ``"512M"``, ``"1.5GiB"``, bytes as an int.
- :func:`is_out_of_memory`: whether an error is an allocation that failed (numpy's, torch's on any device), and
  :func:`out_of_memory_reason`, how the dump writers say it.

Torch-free: the compare side uses it too.
"""

from __future__ import annotations

import os
import re
from typing import Any, List, Optional

from ptdbg_ascend.errors import ParameterError

GIB = 1024 ** 3
MIN_BUDGET = 256 * 1024 ** 2  # below this no real model's call fits: a budget is a guard, not a straitjacket
SHARE = 4  # default budget: 1/SHARE of the memory available (room for the process, the other copies, the OS)
_UNITS = {"": 1, "b": 1, "k": 1024, "m": 1024 ** 2, "g": 1024 ** 3, "t": 1024 ** 4}
_SIZE = re.compile(r"^\s*(?P<number>\d+(\.\d+)?)\s*(?P<unit>[kmgt]?)(i?b)?\s*$", re.IGNORECASE)


def _proc_kib(path: str, field: str) -> Optional[int]:
    """The ``{field}: N kB`` line of a /proc file as bytes; None where there is none."""
    try:
        with open(path, encoding="ascii") as handle:
            for line in handle:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _physical_memory() -> Optional[int]:
    try:
        return int(os.sysconf("SC_PHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (AttributeError, ValueError, OSError):
        return None


def _read_int(path: str) -> Optional[int]:
    try:
        with open(path, encoding="ascii") as handle:
            text = handle.read().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None  # "max": no limit


def _cgroup_room() -> Optional[int]:
    """The cgroup's memory limit minus its usage (v2, then v1); None without a limit."""
    for limit_file, usage_file in (("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
                                   ("/sys/fs/cgroup/memory/memory.limit_in_bytes",
                                    "/sys/fs/cgroup/memory/memory.usage_in_bytes")):
        limit = _read_int(limit_file)
        if limit is None or limit >= 2 ** 60:  # v1 writes a huge number for "no limit"
            continue
        usage = _read_int(usage_file) or 0
        return max(0, limit - usage)
    return None


def _address_space_room() -> Optional[int]:
    """RLIMIT_AS minus this process's mapped size; None without a limit."""
    try:
        import resource
    except ImportError:  # not on POSIX
        return None
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft == resource.RLIM_INFINITY or soft < 0:
        return None
    return max(0, soft - (_proc_kib("/proc/self/status", "VmSize") or 0))


def available_memory() -> Optional[int]:
    """Bytes this process can still take (see the module doc); None when nothing tells."""
    candidates: List[int] = [value for value in (_proc_kib("/proc/meminfo", "MemAvailable") or _physical_memory(), _cgroup_room(),
                                                 _address_space_room()) if value is not None]
    return min(candidates) if candidates else None


def default_budget(processes: int = 1) -> int:
    """The default memory budget of one call (pre-check) or one tensor (readers): a quarter of
    :func:`available_memory`, shared by ``processes`` loading at once (default 1), at least
    :data:`MIN_BUDGET`; 4 GiB when the memory available cannot be read."""
    available = available_memory()
    if available is None:
        return 4 * GIB
    return max(MIN_BUDGET, available // SHARE // max(1, processes))


def parse_size(parameter: str, value: Any) -> int:
    """``value`` as bytes: an int, or a string such as ``"8G"``, ``"512MiB"``, ``"1.5g"`` (binary units).
    ParameterError naming ``parameter`` otherwise (zero and negative sizes included)."""
    if isinstance(value, bool):
        raise ParameterError(parameter, value, "must be a size in bytes (an int) or a string like \"8G\", \"512M\"")
    if isinstance(value, int):
        size = value
    elif isinstance(value, str) and _SIZE.match(value):
        match = _SIZE.match(value)
        size = int(float(match.group("number")) * _UNITS[match.group("unit").lower()])
    else:
        raise ParameterError(parameter, value, "must be a size in bytes (an int) or a string like \"8G\", \"512M\"")
    if size <= 0:
        raise ParameterError(parameter, value, "must be a positive size")
    return size


def format_size(size: int) -> str:
    """``17179869184`` -> ``"16.0 GiB"``; ``1536`` -> ``"1.5 KiB"``."""
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.0f} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"  # not reached


# How allocators word a failed allocation: torch's CPU allocator ("DefaultCPUAllocator: can't allocate memory"),
# its device ones ("CUDA out of memory", "NPU out of memory"), the C library's ENOMEM text.
_OUT_OF_MEMORY_WORDS = ("out of memory", "can't allocate memory", "cannot allocate memory")


def is_out_of_memory(error: BaseException) -> bool:
    """Whether ``error`` is a failed allocation: a MemoryError (numpy), torch's ``OutOfMemoryError`` (CUDA,
    NPU), or a RuntimeError in the words of an allocator that could not allocate."""
    if isinstance(error, MemoryError) or type(error).__name__ == "OutOfMemoryError":
        return True
    if not isinstance(error, RuntimeError):
        return False
    text = str(error).lower()
    return any(words in text for words in _OUT_OF_MEMORY_WORDS)


REASON_LENGTH = 300  # characters of the error kept in a reason (an allocator's message fits)


def out_of_memory_reason(error: BaseException) -> str:
    """"out of memory while copying the tensor ({type}: {message})", the message cut at REASON_LENGTH: why a
    dump writer saved no file for a tensor."""
    text = " ".join(str(error).split())
    if len(text) > REASON_LENGTH:
        text = text[:REASON_LENGTH - 3] + "..."
    return f"out of memory while copying the tensor ({type(error).__name__}: {text})"
