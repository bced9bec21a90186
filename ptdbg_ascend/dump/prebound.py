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


# The last map built, with the patch list, its length and the session's patch_generation it was built from:
# PrecisionDebugger.start() runs every step, and walking a thousand patches took ~1 ms of each. The list
# is only appended to (install, rebind) and emptied by uninstall (which counts a generation), so the same
# three mean the same patches.
_LAST_MAP: List[Any] = [None, -1, -1, {}]


def wrappers_by_original(session: Any) -> Dict[int, Tuple[Any, ...]]:
    """``{id(original): (original, wrapper, namespace, name, own attribute)}`` for every API the session
    wraps now. An original wrapped in two namespaces (``torch.conv2d is torch.nn.functional.conv2d``) maps
    to its ``Functional`` wrapper: a model's stored reference most likely came from ``nn.functional``.
    Built again only when the session's patches have changed since the last call."""
    patches = session.patches
    generation = session.patch_generation
    if _LAST_MAP[0] is patches and _LAST_MAP[1] == len(patches) and _LAST_MAP[2] == generation:
        return _LAST_MAP[3]
    found = _build_map(patches)
    _LAST_MAP[:] = [patches, len(patches), generation, found]
    return found


def _build_map(patches: List[Any]) -> Dict[int, Tuple[Any, ...]]:
    import torch.nn.functional as functional

    found: Dict[int, Tuple[Any, ...]] = {}
    for target, api, original, own in patches:
        current = target.__dict__.get(api) if own else getattr(target, api, None)
        if getattr(current, "__ptdbg_original__", None) is not original:
            continue  # one of our own rebinding patches, or replaced by someone else since
        if id(original) not in found or target is functional:
            found[id(original)] = (original, current, target, api, own)
    return found


def _still_installed(entry: Tuple[Any, ...]) -> bool:
    """Whether the wrapper of a (possibly cached) map entry is still where it was installed: a map built at
    an earlier start() must not bind a reference to a wrapper someone has replaced since."""
    _, wrapper, target, api, own = entry
    return (target.__dict__.get(api) if own else getattr(target, api, None)) is wrapper


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
                      wrappers: Dict[int, Tuple[Any, ...]]) -> int:
    found: List[Tuple[str, Any, Any]] = []
    for name, value in list(namespace.items()):
        entry = wrappers.get(id(value))
        if entry is not None and entry[0] is value and _still_installed(entry):
            found.append((name, value, entry[1]))
    for name, original, wrapper in found:
        # Into __dict__ directly: nn.Module.__setattr__ would do the same for a plain function, and a
        # Python module's globals are its __dict__. uninstall() restores it with setattr.
        session.patches.append((target, name, original, True))
        namespace[name] = wrapper
    return len(found)

