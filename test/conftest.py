"""Shared test setup. Feature-specific fixtures live in each test package's own conftest."""

import os
import sys

# Keep torch from spinning all cores in a 2-core CI box while several processes run.
os.environ.setdefault("OMP_NUM_THREADS", "1")

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)
