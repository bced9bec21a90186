"""``ptdbg_ascend.compat`` from a checkout that was not pip-installed.

``compat/`` lies at the top of the repository, beside ``ptdbg_ascend/`` (the project's layout); an installation
maps it to ``ptdbg_ascend.compat`` (``setup.py``'s ``package_dir``, also in an editable install). A checkout put
on ``sys.path`` by hand (``PYTHONPATH=checkout python -m ptdbg_ascend.cli``, a bench's baseline checkout) has no
such mapping, so :func:`install` adds a finder at the end of ``sys.meta_path`` that finds ``compat/`` beside the
package. It answers only when every other finder has found no ``ptdbg_ascend.compat``: an installed one always
comes first, and a checkout without ``compat/`` finds nothing here either.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Optional, Sequence

COMPAT = "ptdbg_ascend.compat"
# The repository root of a checkout: the directory that holds ptdbg_ascend/ (and compat/ beside it).
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class CheckoutCompatFinder:
    """A ``sys.meta_path`` finder of ``ptdbg_ascend.compat`` in ``{root}/compat`` (default: this checkout's)."""

    def __init__(self, root: str = _ROOT) -> None:
        self.root = root

    def find_spec(self, fullname: str, path: Optional[Sequence[str]] = None, target: Any = None) -> Any:
        """The spec of ``{root}/compat/__init__.py`` for ``ptdbg_ascend.compat``; None for any other name, or
        when the checkout has no compat/ (its submodules are then found through the package's path)."""
        if fullname != COMPAT:
            return None
        directory = os.path.join(self.root, "compat")
        init = os.path.join(directory, "__init__.py")
        if not os.path.isfile(init):
            return None
        import importlib.util  # only here: a plain import of ptdbg_ascend never gets this far

        return importlib.util.spec_from_file_location(fullname, init, submodule_search_locations=[directory])


def install() -> None:
    """Append the finder of this checkout's compat/ to ``sys.meta_path`` (once per process)."""
    if not any(isinstance(finder, CheckoutCompatFinder) for finder in sys.meta_path):
        sys.meta_path.append(CheckoutCompatFinder())
