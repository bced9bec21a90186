"""The ``ptdbg`` console command and ``ptdbg_ascend.compat`` from a checkout that was not pip-installed
(``ptdbg_ascend/checkout.py``): a child process without the editable install's finder, the checkout on
``sys.path`` only, as ``PYTHONPATH=checkout python -m ptdbg_ascend.cli`` runs it."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.torchfree

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# The child forgets any installation of ptdbg_ascend (the editable install's finder and path hook, an
# installed copy on sys.path), then runs the console command from the checkout.
CHILD = r'''
import os, runpy, sys
repo = sys.argv[1]
sys.meta_path = [f for f in sys.meta_path if "__editable__" not in getattr(f, "__module__", "")]
sys.path_hooks = [h for h in sys.path_hooks if "__editable__" not in getattr(h, "__module__", "")]
sys.path_importer_cache.clear()
sys.path = [repo] + [p for p in sys.path if not os.path.isdir(os.path.join(p, "ptdbg_ascend")) and p not in ("", ".")]
import ptdbg_ascend.compat
print("COMPAT", os.path.dirname(ptdbg_ascend.compat.__file__))
sys.argv = ["ptdbg"] + sys.argv[2:]
runpy.run_module("ptdbg_ascend.cli", run_name="__main__")
'''


def _run(*arguments: str) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    return subprocess.run([sys.executable, "-c", CHILD, REPO] + list(arguments), capture_output=True, text=True,
                          env=env, cwd=os.path.dirname(REPO), timeout=120)


def test_compat_and_the_console_command_work_from_a_checkout_that_was_not_installed():
    result = _run("--help")
    assert result.returncode == 0, result.stderr
    assert "COMPAT " + os.path.join(REPO, "compat") in result.stdout
    assert "export-config" in result.stdout and "migrate" in result.stdout, result.stdout


def test_the_finder_answers_only_for_compat_and_only_where_compat_is(tmp_path):
    from ptdbg_ascend.checkout import CheckoutCompatFinder

    assert CheckoutCompatFinder(REPO).find_spec("ptdbg_ascend.formats") is None
    assert CheckoutCompatFinder(str(tmp_path)).find_spec("ptdbg_ascend.compat") is None
    spec = CheckoutCompatFinder(REPO).find_spec("ptdbg_ascend.compat")
    assert spec.origin == os.path.join(REPO, "compat", "__init__.py")
    assert spec.submodule_search_locations == [os.path.join(REPO, "compat")]
