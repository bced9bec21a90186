"""Pre-bound references: torch functions kept by the user's code before the wrappers were installed.

A model built before ``register_hook`` / ``PrecisionDebugger.start`` (the documented order) may hold a
wrapped API's original function itself: transformers' ``GELUActivation`` stores
``nn.functional.gelu`` in ``__init__``, a modeling file does ``from torch.nn.functional import gelu``.
Calls through such a reference never reach the wrapper, so they were not recorded at all.

:func:`rebind` replaces those references by the wrapper, found by identity (``is``) against the originals
the wrappers replaced, so the calls are recorded under the same names and counters as a reference taken
after the wrappers were installed. It looks, boundedly, at:

* the ``__dict__`` of the model and of each of its submodules (``self.act = nn.functional.gelu``);
* the globals of the Python modules defining those submodules' classes (``from torch import relu`` in a
  modeling file), and of ``__main__`` (the training script);

never at torch's, torch_npu's or this tool's own modules (their internal calls stay unrecorded, as in the
original tool), nor inside closures, ``functools.partial`` objects, lists or class attributes: a call
through those remains a gap, which the advisor names as one (the code between two dumped calls).

Every replacement is a patch of the session (``session.patches``), so :func:`~ptdbg_ascend.dump.interception.uninstall`
puts the original back. The walk runs once per ``register_hook`` / ``start`` (never on the call path):
a model whose references are already wrappers is left as it is.
"""

from __future__ import annotations

import sys
from typing import Any, Dict, List, Optional, Tuple

# Python modules whose globals are never rebound: the library's own internals.
_LIBRARY_PREFIXES = ("torch", "torch_npu", "ptdbg_ascend", "builtins", "functools", "typing")


def wrappers_by_original(session: Any) -> Dict[int, Tuple[Any, Any]]:
    """``{id(original): (original, wrapper)}`` for every API the session wraps now. An original wrapped in
    two namespaces (``torch.conv2d is torch.nn.functional.conv2d``) maps to its ``Functional`` wrapper: a
    model's stored reference most likely came from ``nn.functional``."""
    import torch.nn.functional as functional

    found: Dict[int, Tuple[Any, Any]] = {}
    for target, api, original, own in session.patches:
        current = target.__dict__.get(api) if own else getattr(target, api, None)
        if getattr(current, "__ptdbg_original__", None) is not original:
            continue  # one of our own rebinding patches, or replaced by someone else since
        if id(original) not in found or target is functional:
            found[id(original)] = (original, current)
    return found


def rebind(session: Any, model: Optional[Any] = None) -> int:
    """Replace pre-bound originals of wrapped APIs by their wrappers in ``model`` (an ``nn.Module``; default
    None: only ``__main__``'s globals), its submodules, the Python modules defining their classes and
    ``__main__``. Returns how many references were replaced (0 when nothing is wrapped)."""
    wrappers = wrappers_by_original(session)
    if not wrappers:
        return 0
    replaced = 0
    python_modules: Dict[str, Any] = {}
    if model is not None:
        for module in model.modules():
            replaced += _rebind_namespace(session, module, vars(module), wrappers)
            for klass in type(module).__mro__:
                python_modules.setdefault(klass.__module__, sys.modules.get(klass.__module__))
    python_modules.setdefault("__main__", sys.modules.get("__main__"))
    for name, python_module in python_modules.items():
        if python_module is None or _is_library(name):
            continue
        replaced += _rebind_namespace(session, python_module, vars(python_module), wrappers)
    return replaced


def _is_library(module_name: str) -> bool:
    return any(module_name == prefix or module_name.startswith(prefix + ".") for prefix in _LIBRARY_PREFIXES)


def _rebind_namespace(session: Any, target: Any, namespace: Dict[str, Any],
                      wrappers: Dict[int, Tuple[Any, Any]]) -> int:
    found: List[Tuple[str, Any, Any]] = []
    for name, value in list(namespace.items()):
        entry = wrappers.get(id(value))
        if entry is not None and entry[0] is value:
            found.append((name, value, entry[1]))
    for name, original, wrapper in found:
        # Into __dict__ directly: nn.Module.__setattr__ would do the same for a plain function, and a
        # Python module's globals are its __dict__. uninstall() restores it with setattr.
        session.patches.append((target, name, original, True))
        namespace[name] = wrapper
    return len(found)

