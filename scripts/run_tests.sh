#!/usr/bin/env bash
# The test command (README, .ci/run): the whole suite on the current Python (interop with msprobe
# included), then the torch-free part
# under Python 3.8 when one is installed (the oldest Python we support), plus a 3.8 syntax check of
# every file.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
echo "[tests] the whole suite: about 20-25 min on 2 cores; on first use it also builds .venv-msprobe/"
echo "[tests]   (msprobe 1.0.4 interop), .venv-msprobe26/ (msprobe 26 acc_check) and .venv38/ (Python 3.8, when"
echo "[tests]   one is installed) from the package index:"
echo "[tests]   about 2 GB of disk and network access. Without the interop and 3.8 parts (about 17 min, no network):"
echo "[tests]   PTDBG_INTEROP=0 .venv/bin/python -m pytest -q test"
bash scripts/bootstrap.sh
# PTDBG_INTEROP=1 (default here) also runs the interop checks with the real msprobe 1.0.4 (test/interop,
# test/compat/test_convert_interop.py): they build .venv-msprobe/ from PyPI on first use (~2-3 min).
export PTDBG_INTEROP="${PTDBG_INTEROP:-1}"
if [ "$PTDBG_INTEROP" = 1 ]; then
    echo "[interop] preparing .venv-msprobe/ (msprobe 1.0.4 from the package index; a few minutes the first time)"
fi
if [ "$PTDBG_INTEROP" = 1 ] && ! bash scripts/interop_msprobe.sh --setup; then
    echo "[interop] the msprobe 1.0.4 environment could not be built: the interop tests will skip (reason above)"
fi
# msprobe 26.x acc_check interop (test/interop/test_acc_check_interop.py): .venv-msprobe26/, ~170 MB, ~20-40 s
# the first time (torch shared with .venv, not copied).
if [ "$PTDBG_INTEROP" = 1 ]; then
    echo "[interop] preparing .venv-msprobe26/ (msprobe 26 from the package index; under a minute the first time)"
fi
if [ "$PTDBG_INTEROP" = 1 ] && ! bash scripts/interop_msprobe26.sh --setup; then
    echo "[interop] the msprobe 26 environment could not be built: its acc_check test will skip (reason above)"
fi
echo "[tests] running the suite: .venv/bin/python -m pytest -q test $*"
.venv/bin/python -m pytest -q test "$@"
echo "[py38] the torch-free tests under Python 3.8 (builds .venv38/ on first use)"
bash scripts/run_py38_checks.sh
