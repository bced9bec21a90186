"""``from ptdbg_ascend import run_ut, multi_run_ut, api_precision_compare``: the real functions, loaded
on first use; ``import ptdbg_ascend`` (and ``import *``) imports no torch."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

CHECK = """
import sys
import ptdbg_ascend
from ptdbg_ascend import *
assert "torch" not in sys.modules, "import ptdbg_ascend imported torch"
assert "run_ut" not in dir() and "api_precision_compare" not in dir()  # import * keeps the legacy names
from ptdbg_ascend import run_ut, api_precision_compare
print(run_ut.__module__, run_ut.__name__, api_precision_compare.__module__, api_precision_compare.__name__)
print("torch" in sys.modules)
"""


def run_python(code, env):
    return subprocess.run([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, env=env, timeout=60)


def test_precheck_functions_are_exported_lazily(child_env):
    result = run_python(CHECK, child_env)
    assert result.returncode == 0, result.stdout
    assert result.stdout.split() == ["ptdbg_ascend.precheck.run_ut", "run_ut", "ptdbg_ascend.precheck.device_compare",
                                     "api_precision_compare", "False"]


def test_multi_run_ut_is_exported_by_that_name(child_env):
    if importlib.util.find_spec("ptdbg_ascend.precheck.multi_run_ut") is None:
        pytest.skip("ptdbg_ascend/precheck/multi_run_ut.py is not there yet")
    result = run_python("import sys\nfrom ptdbg_ascend import multi_run_ut\n"
                        "print(multi_run_ut.__module__, multi_run_ut.__name__, 'torch' in sys.modules)", child_env)
    assert result.returncode == 0, result.stdout
    assert result.stdout.split()[:2] == ["ptdbg_ascend.precheck.multi_run_ut", "multi_run_ut"]


def test_unknown_attribute_is_still_an_attribute_error():
    import ptdbg_ascend

    with pytest.raises(AttributeError):
        ptdbg_ascend.no_such_name  # noqa: B018
