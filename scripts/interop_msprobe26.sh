#!/usr/bin/env bash
# The environment of the msprobe 26.x interop test (test/interop/test_acc_check_interop.py): msprobe
# 26.2.0's `msprobe acc_check -api_info dump.json` (the pre-check that 1.0.4 called run_ut) on dumps
# written by our PrecisionDebugger.
#
# Usage: bash scripts/interop_msprobe26.sh [--setup]     (only builds the environment; run_tests.sh calls it)
# Exit codes: 0 ready; 3 the environment could not be built (no network, package gone): the reason is printed.
#
# The environment is .venv-msprobe26/ (gitignored; MSPROBE26_VENV names another), built once and reused,
# about 170 MB and 20-40 s: a venv with the system site-packages plus a .pth line naming the site-packages
# that hold the test suite's torch (.venv's), so torch, pandas, openpyxl and tqdm are shared, not copied
# (pip must never pull another torch). msprobe is installed --no-deps, then only the modules that
# `msprobe acc_check` imports on its way to the PyTorch check, each found by running it (its Requires-Dist
# also names skl2onnx, wheel and tensorboard's server stack, which this path never imports):
#   protobuf, psutil (msprobe.py's imports), matplotlib (core/common/megatron_utils.py), einops
#   (pytorch/bench_functions), pytz and tensorboard + absl-py (pytorch/monitor: torch.utils.tensorboard).
# No adaptation to NumPy 2 or pandas 3 is needed: 26.2.0 runs on this machine's numpy 2.x and pandas 3.x.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
if [ "${1:-}" = "--setup" ]; then shift; fi
VENV="${MSPROBE26_VENV:-$ROOT/.venv-msprobe26}"
PYTHON="${PYTHON:-python3}"
SPEC="mindstudio-probe==26.2.0"
NO_DEPS=(protobuf psutil einops pytz tensorboard absl-py)
# With their dependencies (none of them asks for torch); already-present ones are left as they are.
WITH_DEPS=(numpy "pandas>=1.3.5" "openpyxl>=3.0.6" pyyaml tqdm matplotlib)
. "$ROOT/scripts/venv_torch.sh"
suite_torch "$ROOT" "$PYTHON"
# The directory holding the suite's torch (empty when MAIN_PYTHON has none: torch is installed then).
TORCH_SITE="$("$MAIN_PYTHON" -c 'import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))' \
    2>/dev/null || true)"
TAG="$SPEC torch==$TORCH_VERSION $TORCH_SITE"
if [ -f "$VENV/.ready" ] && [ "$(cat "$VENV/.ready")" = "$TAG" ]; then
    echo "msprobe 26 environment ready: $VENV"
    exit 0
fi
echo "Building $VENV ($SPEC, torch $TORCH_VERSION)..."
if [ -e "$VENV" ]; then
    # A half-built or outdated venv is rebuilt; anything else at that path is not ours to delete.
    if [ ! -f "$VENV/pyvenv.cfg" ]; then
        echo "$VENV exists and is not a venv: refusing to replace it (set MSPROBE26_VENV to another path)."
        exit 3
    fi
    rm -rf "$VENV"
fi
LOG="$ROOT/bench/out/interop_msprobe26/venv_build.log"
mkdir -p "$(dirname "$LOG")"
if ! "$PYTHON" -m venv --system-site-packages "$VENV" > "$LOG" 2>&1; then
    echo "Cannot create $VENV: see $LOG."
    exit 3
fi
SITE="$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
if [ -n "$TORCH_SITE" ]; then
    # Appended after the venv's own site-packages: the venv's packages win, torch comes from there.
    echo "$TORCH_SITE" > "$SITE/ptdbg-torch-site.pth"
fi
if ! { "$VENV/bin/pip" install -q --no-deps "$SPEC" \
        && "$VENV/bin/pip" install -q --no-deps "${NO_DEPS[@]}" \
        && "$VENV/bin/pip" install -q "${WITH_DEPS[@]}"; } >> "$LOG" 2>&1; then
    echo "Cannot build the msprobe 26 environment $VENV: see $LOG. Last lines:"
    tail -5 "$LOG" || true
    exit 3
fi
ensure_pinned_torch "$VENV" "$LOG" || exit 3  # only where MAIN_PYTHON has no torch to share
VENV_TORCH="$("$VENV/bin/python" -c 'import torch; print(torch.__version__.split("+")[0])' 2>/dev/null || true)"
if [ "$VENV_TORCH" != "$TORCH_VERSION" ]; then
    echo "The msprobe 26 environment $VENV does not use torch $TORCH_VERSION; refusing to use it."
    exit 3
fi
# The import chain of `msprobe acc_check` for a PyTorch dump, checked once here so that a missing module
# shows at setup, not as a test failure.
if ! "$VENV/bin/python" -c "import msprobe.msprobe, msprobe.pytorch.api_accuracy_checker.acc_check.acc_check" \
        >> "$LOG" 2>&1; then
    echo "msprobe 26 does not import in $VENV: see $LOG. Last lines:"
    tail -5 "$LOG" || true
    exit 3
fi
echo "$TAG" > "$VENV/.ready"
echo "msprobe 26 environment ready: $VENV"
