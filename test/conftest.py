"""Shared test setup. Feature-specific fixtures live in each test package's own conftest."""

import os
import sys

# Keep torch from spinning all cores in a 2-core CI box while several processes run.
os.environ.setdefault("OMP_NUM_THREADS", "1")

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

# Test packages whose conftest imports torch at collection time (or, for scenarios, whose training
# subprocesses need it). Under an interpreter without torch
# (the Python 3.8 torch-free run) they are left out instead of failing collection; the torch-free tests
# elsewhere are marked `torchfree` and still run.
TORCH_ONLY_PACKAGES = ["dump", "overflow", "acl", "debugger", "interop", "scenarios"]
try:
    import importlib.util as _importlib_util

    _HAS_TORCH = _importlib_util.find_spec("torch") is not None
except (ImportError, ValueError):
    _HAS_TORCH = False
collect_ignore = [] if _HAS_TORCH else list(TORCH_ONLY_PACKAGES)
