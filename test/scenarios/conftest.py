"""Fixtures of the scenario tests: ``scenario(name)`` gives both dumps of a scenario (each side dumped once
per module by its own process, since the dump wraps torch globally; two at a time, ahead of the tests),
``run_compare`` compares two dumps.

The helpers live in ``scenario_support.py``. Nothing here imports torch (the package is still listed in
``TORCH_ONLY_PACKAGES`` of test/conftest.py: the training subprocesses need it).
"""

from __future__ import annotations

import os
import sys
from typing import Dict

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.append(HERE)  # for scenario_support (appended: never shadows another module)

from scenario_support import Dumps, Runner  # noqa: E402


@pytest.fixture(scope="module")
def scenario(request, tmp_path_factory):
    """``scenario(name)`` -> :class:`Dumps`. Every scenario the module's selected tests name with
    ``@uses(...)`` is dumped once, two processes at a time, in test order and ahead of the test."""
    planned = []
    for item in request.session.items:
        if item.module is request.module:
            planned += [name for name in getattr(getattr(item, "function", None), "scenarios", ()) if name not in planned]
    runner = Runner(str(tmp_path_factory.mktemp("scenarios")), planned)
    cache: Dict[str, Dumps] = {}

    def get(name: str) -> Dumps:
        if name not in cache:
            cache[name] = runner.dumps(name)
        return cache[name]

    yield get
    runner.close()


@pytest.fixture
def run_compare(tmp_path):
    """``run_compare(dumps_or_param)`` -> the ``CompareOutcome`` of ``ptdbg_ascend.compare`` with
    stack_mode=True, into a fresh directory (the report names carry a one-second timestamp)."""
    counter = [0]

    def run(dumps, **kwargs):
        from ptdbg_ascend import compare

        counter[0] += 1
        out = tmp_path / f"compare{counter[0]}"
        out.mkdir()
        param = dumps.param() if isinstance(dumps, Dumps) else dumps
        outcome = compare(param, str(out), stack_mode=True, **kwargs)
        assert outcome is not None, "ptdbg_ascend.compare returned None instead of the CompareOutcome"
        return outcome

    return run
