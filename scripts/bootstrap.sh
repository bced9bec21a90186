#!/usr/bin/env bash
# Prepare .venv for the sample and the tests. Safe to run again (it only adds what is missing).
# - The venv sees system site-packages, so a torch the user already has (CUDA, Ascend) is used as is.
# - Only when no torch imports at all is a CPU build installed: torch==2.13.0 by default
#   (override with PTDBG_TORCH_SPEC, e.g. PTDBG_TORCH_SPEC="torch==2.1.0").
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON_BIN="${PYTHON:-python3}"
VENV="$ROOT/.venv"
if [ ! -x "$VENV/bin/python" ]; then
    "$PYTHON_BIN" -m venv --system-site-packages "$VENV"
fi
VPY="$VENV/bin/python"
if ! "$VPY" -c "import torch" >/dev/null 2>&1; then
    echo "[bootstrap] no torch found: installing ${PTDBG_TORCH_SPEC:-torch==2.13.0} (CPU)"
    "$VPY" -m pip install -q "${PTDBG_TORCH_SPEC:-torch==2.13.0}"
fi
"$VPY" -m pip install -q -e "$ROOT[test,migrate]"
echo "[bootstrap] ready: $VPY ($("$VPY" -c 'import torch, sys; print("python", sys.version.split()[0], "torch", torch.__version__)'))"
