"""Wrapping the torch APIs listed in ``wrapped_apis.txt``.

Each wrapper, on every call:

1. passes straight through when it runs inside another wrapped API (per thread) or in a forked child
   process (a DataLoader worker must neither count nor write into the parent's files);
2. takes the API's next counter value (every top-level call counts, switch on or off, so names stay
   stable between runs);
3. with no active observer, runs the original: the off fast path, one dict update and two checks;
4. otherwise hands the call to :meth:`DumpSession.dispatch`, with the API's in-place rule
   (``dump/inplace.py``, decided once when the wrapper is made).
"""

from __future__ import annotations

import functools
import os
from typing import Any, Callable, Dict, List, Tuple

from ptdbg_ascend.inside import THREAD_STATE

# The APIs wrapped by default: the original 4.0's list.
WRAPPED_APIS_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "wrapped_apis.txt")
# The optimizers' foreach and fused kernels (torch._foreach_*, torch._fused_adamw_...): wrapped by default too,
# so the optimizer step is recorded on every path torch.optim takes (see the file's header).
OPTIMIZER_APIS_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "wrapped_apis_optimizer.txt")
# The APIs beyond them: wrapped only by opt-in (extra_apis=True).
EXTRA_APIS_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "wrapped_apis_extra.txt")

def read_wrapped_names(path: str = WRAPPED_APIS_FILE) -> Dict[str, List[str]]:
    """``{prefix: [api, ...]}`` from the data file ``path`` (default: the default list, :data:`WRAPPED_APIS_FILE`):
    ``[Prefix]`` headers, one name per line, # comments."""
    names: Dict[str, List[str]] = {}
    current = None
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            if line.startswith("[") and line.endswith("]"):
                current = line[1:-1]
                names.setdefault(current, [])
            elif current is not None:
                names[current].append(line)
    return names


def listed_names(extra_apis: bool = False) -> Dict[str, List[str]]:
    """``{prefix: [api, ...]}`` to wrap: the original 4.0's list and the optimizer kernels
    (``wrapped_apis_optimizer.txt``), plus ours with ``extra_apis`` (default False)."""
    names = read_wrapped_names()
    for path in (OPTIMIZER_APIS_FILE, EXTRA_APIS_FILE) if extra_apis else (OPTIMIZER_APIS_FILE,):
        for prefix, extra in read_wrapped_names(path).items():
            listed = names.setdefault(prefix, [])
            listed.extend(api for api in extra if api not in listed)
    return names


def namespaces() -> List[Tuple[str, List[Any]]]:
    """``(prefix, [objects whose attributes are patched])`` for the namespaces present in this torch."""
    import torch
    import torch.nn.functional

    result: List[Tuple[str, List[Any]]] = [
        ("Tensor", [torch.Tensor]),
        ("Torch", [torch]),
        ("Functional", [torch.nn.functional]),
        ("VF", [torch._VF]),
    ]
    if torch.distributed.is_available():
        import torch.distributed.distributed_c10d as c10d

        result.append(("Distributed", [torch.distributed, c10d]))
    from ptdbg_ascend.device import torch_npu_module

    torch_npu = torch_npu_module()
    if torch_npu is not None:
        result.append(("NPU", [torch_npu]))
    return result


def make_wrapper(session: Any, prefix: str, api: str, original: Callable[..., Any]) -> Callable[..., Any]:
    """The wrapper installed in place of ``original``."""
    from ptdbg_ascend.dump.inplace import inplace_rule

    counters = session.counters
    key = prefix + "_" + api
    thread = THREAD_STATE
    rule = inplace_rule(prefix, api, original)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if getattr(thread, "inside", False) or session.in_forked_child:
            return original(*args, **kwargs)
        index = counters.get(key, 0)
        counters[key] = index + 1
        if not session.observers:
            thread.inside = True
            try:
                return original(*args, **kwargs)
            finally:
                thread.inside = False
        return session.dispatch(prefix, api, index, original, args, kwargs, rule)

    try:
        functools.update_wrapper(wrapper, original)
    except (AttributeError, TypeError):  # some builtins lack __name__/__doc__
        pass
    wrapper.__ptdbg_original__ = original  # type: ignore[attr-defined]
    # torch.compile: dynamo traces the original instead of this body (no graph break, no guard on
    # our counters, so no recompile); see dump/compiled.py.
    wrapper._torchdynamo_inline = original  # type: ignore[attr-defined]
    return wrapper


def original_of(function: Any) -> Any:
    """The function behind a wrapper of :func:`make_wrapper` (through at most 8 wrappers, so a cycle of
    attributes cannot loop); ``function`` itself when it is not one."""
    seen = 0
    while getattr(function, "__ptdbg_original__", None) is not None and seen < 8:
        function = function.__ptdbg_original__
        seen += 1
    return function


def install(session: Any, extra_apis: bool = False) -> int:
    """Wrap every listed API that this torch (and torch_npu) has; returns how many were wrapped.
    The list is ``wrapped_apis.txt`` (the original 4.0's) and ``wrapped_apis_optimizer.txt``, plus
    ``wrapped_apis_extra.txt`` with ``extra_apis``. Names missing from the installed version are skipped silently. Idempotent per API.
    Every patch is remembered in ``session.patches`` so :func:`uninstall` can restore the originals."""
    listed = listed_names(extra_apis)
    count = 0
    for prefix, targets in namespaces():
        for api in listed.get(prefix, []):
            for target in targets:
                current = _lookup(target, api)
                if current is None or not callable(current):
                    continue
                if getattr(current, "__ptdbg_original__", None) is not None:
                    count += 1
                    break
                wrapper = make_wrapper(session, prefix, api, current)
                for same in targets:  # torch.distributed re-exports distributed_c10d: patch both
                    if _lookup(same, api) is current:
                        session.patches.append((same, api, current, same.__dict__.get(api) is current))
                        setattr(same, api, wrapper)
                count += 1
                break
    return count


def uninstall(session: Any) -> int:
    """Put the original functions back (for benchmarks and tests); returns how many were restored."""
    restored = 0
    session.patch_generation += 1
    while session.patches:
        target, api, original, own_attribute = session.patches.pop()
        if own_attribute:
            setattr(target, api, original)
        else:  # the name came from a base class or a module __getattr__: remove our attribute
            try:
                delattr(target, api)
            except AttributeError:
                setattr(target, api, original)
        restored += 1
    return restored


def _lookup(target: Any, api: str) -> Any:
    try:
        return getattr(target, api)
    except (AttributeError, RuntimeError):
        return None
