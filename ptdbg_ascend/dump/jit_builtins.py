"""TorchScript must still see a wrapped torch builtin as the builtin operator it wraps.

``torch.jit.script`` resolves a call such as ``torch.where(...)`` by looking the function object up in
its builtin table (``torch.jit._builtins``, keyed by ``id``). A wrapper is a new Python function: the
lookup misses, TorchScript tries to compile the wrapper's source, follows ``__wrapped__`` to the C
builtin and fails ("module, class, method, function ... expected, got builtin_function_or_method").
torch scripts functions of its own at run time — ``torch.func.jvp`` scripts its decompositions on first
use — so without this every ``jvp`` in a process with the dump installed raised, switch on or off.

:func:`prepare` builds torch's table before the wrappers replace the originals (it scans ``dir(torch)``
when first built); :func:`register` maps each wrapper to its original's operator; :func:`forget` drops
those entries when the originals are restored (the ids of freed wrappers may be reused).
"""

from __future__ import annotations

from typing import Any, List, Sequence

_REGISTERED: List[Any] = []  # the wrappers entered (kept alive, so their ids stay theirs)


def _builtins() -> Any:
    try:
        from torch.jit import _builtins

        _builtins._get_builtin_table()
        return _builtins
    except Exception:  # noqa: BLE001 - a torch without TorchScript: nothing to keep consistent
        return None


def prepare() -> None:
    """Build torch's builtin table now (call before the wrappers are installed)."""
    _builtins()


def register(patches: Sequence[Any]) -> int:
    """Enter every installed wrapper whose original is a TorchScript builtin; returns how many.
    ``patches`` are the session's ``(namespace, name, original, own attribute)`` entries."""
    forget()  # a re-install: the previous wrappers are gone from torch
    builtins = _builtins()
    if builtins is None:
        return 0
    count = 0
    for target, api, original, _own in patches:
        operator = builtins._find_builtin(original)
        if operator is None:
            continue
        wrapper = getattr(target, api, None)
        if wrapper is None or getattr(wrapper, "__ptdbg_original__", None) is not original:
            continue
        builtins._register_builtin(wrapper, operator)
        _REGISTERED.append(wrapper)
        count += 1
    return count


def forget() -> None:
    """Remove the wrappers' entries (the originals are back)."""
    builtins = _builtins()
    if builtins is not None:
        table = builtins._get_builtin_table()
        for wrapper in _REGISTERED:
            table.pop(id(wrapper), None)
    del _REGISTERED[:]
