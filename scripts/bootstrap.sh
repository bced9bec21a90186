#!/usr/bin/env bash
# Prepare .venv for the sample and the tests. Safe to run again (it only adds what is missing).
# - The venv sees system site-packages, so a torch the user already has (CUDA, Ascend) is used as is:
#   it is never reinstalled or upgraded.
# - Only when no torch imports at all is the CPU build installed: torch==2.13.0+cpu (about 200 MB), from a
#   wheel pip finds with its own configuration (find-links / a local index) or else from PyTorch's CPU index
#   https://download.pytorch.org/whl/cpu. A plain "torch==2.13.0" from PyPI would be the CUDA build on
#   Linux (several GB). macOS has no "+cpu" build: there plain torch==2.13.0 is the CPU one.
#   Override with PTDBG_TORCH_SPEC (e.g. PTDBG_TORCH_SPEC="torch==2.1.0+cpu") and
#   PTDBG_TORCH_INDEX (the extra index; empty: none).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON_BIN="${PYTHON:-python3}"
VENV="$ROOT/.venv"
if [ ! -x "$VENV/bin/python" ]; then
    echo "[bootstrap] creating $VENV (with the system site-packages, so an installed torch is reused)"
    "$PYTHON_BIN" -m venv --system-site-packages "$VENV"
fi
VPY="$VENV/bin/python"
if ! "$VPY" -c "import torch" >/dev/null 2>&1; then
    if [ "$(uname -s)" = Darwin ]; then DEFAULT_SPEC="torch==2.13.0"; else DEFAULT_SPEC="torch==2.13.0+cpu"; fi
    SPEC="${PTDBG_TORCH_SPEC:-$DEFAULT_SPEC}"
    INDEX="${PTDBG_TORCH_INDEX-https://download.pytorch.org/whl/cpu}"
    echo "[bootstrap] no torch found: installing $SPEC (the CPU build, about 200 MB)"
    # First the indexes and wheel folders pip is configured with (a machine's local mirror): no torch+cpu
    # there on plain PyPI, so this fails fast and the CPU index is asked next.
    if ! "$VPY" -m pip install -q "$SPEC" >/dev/null 2>&1; then
        if [ -z "$INDEX" ]; then
            echo "[bootstrap] pip could not install $SPEC from its configured indexes (PTDBG_TORCH_INDEX is empty)" >&2
            "$VPY" -m pip install -q "$SPEC"
        else
            echo "[bootstrap]   downloading it from $INDEX (this takes a few minutes)"
            "$VPY" -m pip install -q "$SPEC" --extra-index-url "$INDEX"
        fi
    fi
fi
echo "[bootstrap] installing ptdbg_ascend (editable) with its test and migrate extras into $VENV"
"$VPY" -m pip install -q -e "$ROOT[test,migrate]"
echo "[bootstrap] ready: $VPY ($("$VPY" -c 'import torch, sys; print("python", sys.version.split()[0], "torch", torch.__version__)'))"
echo "[bootstrap] to use ptdbg and this Python in your shell: source $VENV/bin/activate"
