"""Which dumped API calls the pre-check may run: an allowlist, by construction.

A ``dump.json`` names the calls to re-run, and it may come from anyone. An API is admitted only when

1. it is in a wrap list of this package (``dump/wrapped_apis.txt`` + ``dump/wrapped_apis_extra.txt``; the
   NPU names run only where torch_npu is installed), so a name that is merely reachable in torch
   (``Torch.load``, ``Torch._import_dotted_name``, ``Tensor.__reduce_ex__``) is never run; and
2. it falls in none of the refused categories of ``dump/precheck_refused.txt``: APIs whose effect reaches
   beyond their return value (file or network I/O, (de)serialisation, imports, global or RNG state,
   storage sharing, threads, distributed, device state, profiling, autograd hooks, special methods).

:func:`refusal` gives the SKIP reason of a call that is not admitted; the runner asks it before any tensor
of the call is read.
"""

from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass
from typing import Dict, FrozenSet, List, Optional, Pattern, Tuple

from ptdbg_ascend.errors import FileFormatError

REFUSED_FILE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "dump",
                            "precheck_refused.txt")
_HEADER = re.compile(r"^\[(?P<name>\w+)\]\s*(?P<description>.*)$")
_SET_OF = {"name": "names", "prefix": "prefixes"}


@dataclass(frozen=True)
class Category:
    """One kind of effect the pre-check never runs: names (bare, or ``Prefix.name``), name patterns
    (``re.search`` on the bare name) and whole namespaces."""

    name: str
    description: str
    names: FrozenSet[str] = frozenset()
    patterns: Tuple[Pattern[str], ...] = ()
    prefixes: FrozenSet[str] = frozenset()

    def holds(self, prefix: str, api: str) -> bool:
        """Whether ``prefix.api`` falls in this category."""
        return (prefix in self.prefixes or api in self.names or f"{prefix}.{api}" in self.names
                or any(pattern.search(api) for pattern in self.patterns))


def read_categories(path: str = REFUSED_FILE) -> Tuple[Category, ...]:
    """The categories of the data file ``path`` (format in its header). FileFormatError naming the file
    and line for anything else: the file decides what is safe to run, so it is never half-read."""
    parsed: List[Dict[str, object]] = []
    with open(path, encoding="utf-8") as handle:
        for number, raw in enumerate(handle, 1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            header = _HEADER.match(line)
            if header:
                parsed.append({"name": header.group("name"), "description": header.group("description"),
                               "names": set(), "patterns": [], "prefixes": set()})
                continue
            key, _, value = line.partition(":")
            value = value.strip()
            if not parsed or key not in ("name", "pattern", "prefix") or not value:
                raise FileFormatError("{}, line {}: expected [category], name:, pattern: or prefix:, got {!r}"
                                      .format(path, number, line))
            current = parsed[-1]
            if key == "pattern":
                try:
                    current["patterns"].append(re.compile(value))  # type: ignore[union-attr]
                except re.error as error:
                    raise FileFormatError(f"{path}, line {number}: bad pattern {value!r}: {error}") from None
            else:
                current[_SET_OF[key]].update(value.split())  # type: ignore[union-attr]
    return tuple(Category(str(c["name"]), str(c["description"]), frozenset(c["names"]),  # type: ignore[arg-type]
                          tuple(c["patterns"]), frozenset(c["prefixes"]))  # type: ignore[arg-type]
                 for c in parsed)


@functools.lru_cache(None)
def categories() -> Tuple[Category, ...]:
    """The refused categories of ``dump/precheck_refused.txt`` (read once)."""
    return read_categories()


@functools.lru_cache(None)
def wrap_list() -> Dict[str, FrozenSet[str]]:
    """``{prefix: names}`` of both wrap lists (the default and the opt-in extras)."""
    from ptdbg_ascend.dump.interception import listed_names

    return {prefix: frozenset(apis) for prefix, apis in listed_names(extra_apis=True).items()}


def category_of(prefix: str, api: str) -> Optional[Category]:
    """The first refused category ``prefix.api`` falls in, None when it falls in none."""
    for category in categories():
        if category.holds(prefix, api):
            return category
    return None


def refusal(prefix: str, api: str) -> Optional[str]:
    """Why the pre-check does not run ``prefix.api`` (the SKIP reason), None when it is admitted."""
    if api not in wrap_list().get(prefix, frozenset()):
        return ("{}.{} is not an API of the wrap list: the pre-check runs only the APIs ptdbg_ascend wraps "
                "(dump/wrapped_apis.txt, wrapped_apis_extra.txt).".format(prefix, api))
    category = category_of(prefix, api)
    if category is not None:
        return f"{prefix}.{api} is never re-run from a dump: it {category.description} (category {category.name})."
    return None


def admitted() -> List[Tuple[str, str]]:
    """Every ``(prefix, api)`` the pre-check may run (the NPU names need torch_npu besides)."""
    return sorted((prefix, api) for prefix, apis in wrap_list().items() for api in apis
                  if category_of(prefix, api) is None)
