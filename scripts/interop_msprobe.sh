#!/usr/bin/env bash
# Interop with the real msprobe 1.0.4 (mindstudio-probe on PyPI), see scripts/interop_msprobe.py:
#   (a) msprobe's compare accepts tensor-task dumps written by our PrecisionDebugger and finds the same
#       rows, Cosine and verdicts as our compare;
#   (b) our compare reads dumps written by msprobe's PrecisionDebugger, with the rows msprobe finds.
#
# Usage: bash scripts/interop_msprobe.sh [OUT_DIR]      (default OUT_DIR: bench/out/interop_msprobe)
#        bash scripts/interop_msprobe.sh --setup        (only build the environment; run_tests.sh does this
#                                                       first, so every interop test finds it)
# Exit codes: 0 all checks pass; 1 a check failed; 3 the msprobe environment could not be built
# (no network, package gone): the reason is printed.
#
# The environment is .venv-msprobe/ (gitignored), built once and reused: a venv with the system
# site-packages (torch 2.13.0, numpy, openpyxl come from there; pip must never pull another torch, so
# msprobe is installed --no-deps and its other dependencies one by one). Two adaptations to this
# machine's newer stack, both outside msprobe's code:
#   * pandas < 3 in the venv: 1.0.4's compare fails under pandas 3's string dtype
#     ("Invalid value '1.0' for dtype 'str'"); 1.0.4 asks for pandas < 2.1, which has no NumPy 2 build,
#     so the newest 2.x is used;
#   * np.unicode_ (removed in NumPy 2.0) is aliased to np.str_ before msprobe is imported.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
SETUP_ONLY=0
if [ "${1:-}" = "--setup" ]; then SETUP_ONLY=1; shift; fi
OUT="${1:-$ROOT/bench/out/interop_msprobe}"
VENV="${MSPROBE_VENV:-$ROOT/.venv-msprobe}"
PYTHON="${PYTHON:-python3}"
SPEC="mindstudio-probe==1.0.4"
# mindstudio-probe 1.0.4 Requires-Dist, less torch (installed below) and with pandas/numpy relaxed as said
# above; plus service_identity for its compare CLI. Already-present packages are left as they are.
DEPS=("pandas<3" numpy einops matplotlib pyopenssl pyyaml rich tqdm openpyxl twisted wheel service_identity)

rm -rf "$OUT"
mkdir -p "$OUT"
LOG="$OUT/venv_build.log"
# The torch the test suite runs with (.venv when bootstrap.sh made one), so both tools see the same torch.
. "$ROOT/scripts/venv_torch.sh"
suite_torch "$ROOT" "$PYTHON"
if [ ! -f "$VENV/.ready" ] || [ "$(cat "$VENV/.ready")" != "$SPEC torch==$TORCH_VERSION" ]; then
    echo "Building $VENV ($SPEC, torch $TORCH_VERSION)..."
    if ! { "$PYTHON" -m venv --system-site-packages "$VENV" \
            && "$VENV/bin/pip" install -q --no-deps "$SPEC" \
            && "$VENV/bin/pip" install -q "${DEPS[@]}"; } > "$LOG" 2>&1; then
        echo "Cannot build the msprobe environment $VENV: see $LOG. Last lines:"
        tail -5 "$LOG" || true
        exit 3
    fi
    ensure_pinned_torch "$VENV" "$LOG" || exit 3
    if ! "$VENV/bin/python" -c "import torch, sys; sys.exit(0 if torch.__version__.split('+')[0] == '$TORCH_VERSION' else 1)"; then
        echo "The msprobe environment $VENV does not use torch $TORCH_VERSION; refusing to run."
        exit 3
    fi
    # Our package too: a fresh machine has it only in .venv (the dumps and our compare run in this venv).
    if ! "$VENV/bin/pip" install -q --no-deps -e "$ROOT" >> "$LOG" 2>&1; then
        echo "Cannot install ptdbg_ascend into $VENV: see $LOG."
        exit 1
    fi
    echo "$SPEC torch==$TORCH_VERSION" > "$VENV/.ready"
fi

if [ "$SETUP_ONLY" = 1 ]; then
    echo "msprobe environment ready: $VENV"
    exit 0
fi
"$VENV/bin/python" scripts/interop_msprobe.py "$OUT"
