#!/usr/bin/env bash
# Opt-in environment for the Triton interpreter tests of the fused statistics kernel
# (test/dump/test_fused_statistics.py, ptdbg_ascend/statistics/fused_triton.py) and of the queue that runs it
# in a dump (test/dump/test_fused_batch.py, ptdbg_ascend/statistics/fused_batch.py). Not part of
# scripts/run_tests.sh: CI stays fast and works offline; without triton that test skips with its reason.
#
# Usage: bash scripts/triton_venv.sh --setup   build .venv-triton/ (gitignored by .venv*/), once
#        bash scripts/triton_venv.sh --test    run the fused statistics and queue tests in it with TRITON_INTERPRET=1
#                                             (builds the venv first when it is missing)
# Exit codes: 0 done / tests pass; 1 a test failed; 3 the environment could not be built (reason printed).
#
# Cost: triton from the package index is ~290 MB to download and ~1 GB installed (its bundled LLVM/ptxas);
# torch==2.13.0 comes from the local CPU wheel (/opt/wheels, fast): ~2 GB of disk in all, under a minute here.
# The torch spec is pinned on purpose: any other spec would let pip pull a multi-GB CUDA build. The
# interpreter needs no GPU. The build log goes to bench/out/triton_venv_build.log.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
VENV="${TRITON_VENV:-$ROOT/.venv-triton}"
PYTHON="${PYTHON:-python3}"
TORCH_SPEC="torch==2.13.0"
MARK="$TORCH_SPEC numpy pytest triton"
LOG="$ROOT/bench/out/triton_venv_build.log"  # bench/out/ is gitignored

setup() {
    mkdir -p "$(dirname "$LOG")"
    if [ -f "$VENV/.ready" ] && [ "$(cat "$VENV/.ready")" = "$MARK" ]; then
        return 0
    fi
    echo "Building $VENV ($MARK; triton is ~290 MB from the package index)..."
    rm -rf "$VENV"
    if ! { "$PYTHON" -m venv "$VENV" \
            && "$VENV/bin/pip" install -q "$TORCH_SPEC" numpy pytest triton \
            && "$VENV/bin/pip" install -q --no-deps -e "$ROOT"; } > "$LOG" 2>&1; then
        echo "Cannot build the triton environment $VENV: see $LOG. Last lines:"
        tail -5 "$LOG" || true
        return 3
    fi
    # pip must not have replaced the pinned CPU torch (a dependency asking for another one would).
    if ! "$VENV/bin/python" -c "import torch, sys; sys.exit(0 if torch.__version__.startswith('2.13.0') else 1)"; then
        echo "$VENV has torch $("$VENV/bin/python" -c 'import torch; print(torch.__version__)'), not $TORCH_SPEC."
        return 3
    fi
    echo "$MARK" > "$VENV/.ready"
    echo "Built $VENV: $("$VENV/bin/python" -c \
        'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)')"
}

case "${1:-}" in
    --setup)
        setup || exit 3
        ;;
    --test)
        setup || exit 3
        shift
        # The test sets TRITON_INTERPRET=1 itself before importing triton; set here too for any other import.
        TRITON_INTERPRET=1 PYTHONPATH="$ROOT" "$VENV/bin/python" -m pytest -q -p no:cacheprovider \
            test/dump/test_fused_statistics.py test/dump/test_fused_batch.py "$@" || exit 1
        ;;
    *)
        echo "usage: bash scripts/triton_venv.sh --setup | --test [pytest arguments]"
        exit 2
        ;;
esac
