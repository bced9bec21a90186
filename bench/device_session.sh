#!/usr/bin/env bash
# The accelerator checks of issue 20 in one run, for a session lent a GPU (about 8 minutes on an H100/H200,
# at most 580 s by the limits below: run it with timeout_s=600;
# the device machine allows 10 per command and 15 in all, start-up included):
#
#   1. bench/device_stream_check.py   tensor files, statistics and overflow flags of calls made on a side
#                                     stream behind 50 ms of device work hold the call's values (PASS/FAIL)
#   2. bench/device_bench.py --quick  the issue's table: small model (every row), large model (statistics rows)
#   3. bench/device_ab.py             this tree against BASELINE (when given): the same files, step times
#
# Usage:   bash bench/device_session.sh [BASELINE_CHECKOUT]
# Output:  printed, and kept under $OUT (the device tool's folder) or bench/out/device_session/.
# A baseline must travel with the working tree: e.g. `mkdir -p baseline && git archive b131b55 | tar -x -C
# baseline`, then pass `baseline` here (untracked, not ignored: it is copied to the device machine).
# Against b131b55, on a device, the statistics rows' files are expected to differ in the last digits: the
# deferred device statistics since then reduce with vector_norm and float32-accumulating sums (the same
# numbers to float32 rounding); the tensor rows' files must hold the same tensors.
set -u
cd "$(dirname "$0")/.."
out="${OUT:-bench/out/device_session}"
mkdir -p "$out"
# The device machines' torch is the plain `python3` (their `python` may not exist); here: PYTHON=.venv/bin/python.
python="${PYTHON:-python3}"
status=0

run() {  # run NAME SECONDS ARGS...: one step, bounded, its output printed and kept
    local name=$1 seconds=$2
    shift 2
    echo "=== $name (limit ${seconds}s): $python $*"
    timeout "$seconds" "$python" "$@" > "$out/$name.txt" 2>&1
    local rc=$?
    grep -v -- "-\[INFO\]" "$out/$name.txt" | tail -n 60
    echo "=== $name: exit $rc"
    [ "$rc" -eq 0 ] || status=1
}

"$python" -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(),
torch.cuda.get_device_name(0) if torch.cuda.is_available() else '')"
run stream_check 80 bench/device_stream_check.py
# BENCH_ARGS: more device_bench.py options (a CPU smoke run: BENCH_ARGS="--vocab 2000 --configs plain,legacy_stats").
run bench_small 190 bench/device_bench.py --quick --sizes small ${BENCH_ARGS:-}
run bench_large 160 bench/device_bench.py --quick --sizes large ${BENCH_ARGS:-}
if [ $# -ge 1 ]; then
    run device_ab 150 bench/device_ab.py --baseline "$1" --steps 3
fi
exit $status
