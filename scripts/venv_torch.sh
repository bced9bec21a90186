# Shared by the interop environment builders (interop_msprobe.sh, interop_msprobe26.sh); sourced, not run.
# An interop venv must use the same torch as the test suite, and pip must never pull another one.

# Sets MAIN_PYTHON (the suite's Python: .venv's when bootstrap.sh made one) and TORCH_VERSION (its torch,
# without the local "+cpu" part; 2.13.0 when it has none). Arguments: the repository root, the fallback Python.
suite_torch() {
    MAIN_PYTHON="$2"
    if [ -x "$1/.venv/bin/python" ]; then MAIN_PYTHON="$1/.venv/bin/python"; fi
    TORCH_VERSION="$("$MAIN_PYTHON" -c 'import torch; print(torch.__version__.split("+")[0])' 2>/dev/null \
        || echo 2.13.0)"
}

# Installs torch==TORCH_VERSION into the venv when it sees no torch (a fresh machine has torch only in
# .venv, which a new venv cannot see; torch==2.13.0 comes from the local CPU wheel). Never an unpinned
# torch. Arguments: the venv, the log file. Returns 3 (after saying why) when the install fails.
ensure_pinned_torch() {
    if ! "$1/bin/python" -c "import torch" >/dev/null 2>&1; then
        if ! "$1/bin/pip" install -q "torch==$TORCH_VERSION" >> "$2" 2>&1; then
            echo "Cannot install torch==$TORCH_VERSION into $1: see $2."
            return 3
        fi
    fi
}
