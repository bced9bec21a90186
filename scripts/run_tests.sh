#!/usr/bin/env bash
# The test command (README, .ci/run): the whole suite on the current Python, then the torch-free part
# under Python 3.8 when one is installed (the oldest Python we support), plus a 3.8 syntax check of
# every file.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
bash scripts/bootstrap.sh
.venv/bin/python -m pytest -q test "$@"
bash scripts/run_py38_checks.sh
