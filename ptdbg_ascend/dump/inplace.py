"""Which API calls change their arguments in place: decided once per API, finished per call.

An in-place call is recorded in two halves (see ``observers.py``): its inputs in ``before_forward``,
as they go in, and its outputs in ``on_forward``, after the call. Otherwise the recorded input of
``x.add_(1)`` would be its output, and a compare would blame the input of a buggy in-place API.

Per API, from its name (:func:`inplace_rule`, when the wrapper is made):

* every ``Distributed`` collective (they write their results into their arguments);
* a name ending with one ``_`` (``add_``, ``relu_``, ``index_put_``), dunders excepted;
* the augmented-assignment dunders (``__iadd__``, ``__imul__``...) and ``__setitem__``.

Per call, for the other APIs (:func:`inplace_call`, only while an observer records the call): a
keyword ``out=`` that is not None, ``inplace=True``, or a true positional ``inplace`` argument
(``F.relu(x, True)``, ``F.dropout(x, p, training, True)``), whose position is read once from the
function's own parameter list.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable, Dict, Tuple

# inplace_rule results: every call is in place; or only calls with out=/inplace= keywords. A rule
# >= 0 also checks the positional argument at that index (the function's ``inplace`` parameter).
ALWAYS = -2
KEYWORDS = -1

# __i{op}__ is the in-place form of the binary operator __{op}__.
_AUGMENTED = frozenset(f"__i{op}__" for op in (
    "add", "sub", "mul", "div", "truediv", "floordiv", "mod", "pow", "matmul",
    "and", "or", "xor", "lshift", "rshift"))


def inplace_rule(prefix: str, api: str, original: Callable[..., Any]) -> int:
    """How to tell whether a call of ``{prefix}.{api}`` (the unwrapped ``original``) changes its
    arguments: :data:`ALWAYS`, :data:`KEYWORDS`, or the index of a positional ``inplace`` parameter."""
    if prefix == "Distributed":
        return ALWAYS
    if api.startswith("__") and api.endswith("__"):
        return ALWAYS if api in _AUGMENTED or api == "__setitem__" else KEYWORDS
    if api.endswith("_"):
        return ALWAYS
    return _inplace_position(original)


def inplace_call(rule: int, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> bool:
    """Whether this call changes its arguments in place (``rule`` from :func:`inplace_rule`)."""
    if rule == ALWAYS:
        return True
    if kwargs and (kwargs.get("out") is not None or _true(kwargs.get("inplace"))):
        return True
    return 0 <= rule < len(args) and _true(args[rule])


def _true(value: Any) -> bool:
    # A flag, never a tensor's truth value (that would sync a device, or raise for several elements).
    return (value is True or type(value) is int) and bool(value)


def _inplace_position(original: Callable[..., Any]) -> int:
    """The index of the positional ``inplace`` parameter of a Python function (the functionals);
    :data:`KEYWORDS` for builtins and functions without one."""
    try:
        code = inspect.unwrap(original).__code__
    except (AttributeError, ValueError):  # a builtin (most torch APIs): no Python parameter list
        return KEYWORDS
    names = code.co_varnames[:code.co_argcount]
    return names.index("inplace") if "inplace" in names else KEYWORDS
