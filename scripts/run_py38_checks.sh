#!/usr/bin/env bash
# Python 3.8 checks: byte-compile every source file, then run the tests marked `torchfree`.
# Skipped (with a message) when no Python 3.8 interpreter can be found.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PY38=""
for candidate in "${PYTHON38:-}" python3.8 "$HOME"/.pyenv/versions/3.8*/bin/python; do
    if [ -n "$candidate" ] && "$candidate" -c 'import sys; assert sys.version_info[:2] == (3, 8)' >/dev/null 2>&1; then
        PY38="$candidate"; break
    fi
done
if [ -z "$PY38" ]; then
    echo "[py38] no Python 3.8 interpreter found: 3.8 checks skipped"
    exit 0
fi
"$PY38" -m compileall -q ptdbg_ascend compat test bench sample scripts >/dev/null
echo "[py38] every file byte-compiles under $("$PY38" --version)"
if [ ! -x .venv38/bin/python ]; then
    "$PY38" -m venv .venv38
fi
.venv38/bin/python -m pip install -q "numpy" "pandas" "openpyxl" "tqdm" "pytest" "libcst" >/dev/null
.venv38/bin/python -m pip install -q --no-deps -e . >/dev/null
.venv38/bin/python -m pytest -q -m torchfree test -p no:cacheprovider
