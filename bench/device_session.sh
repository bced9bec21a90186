#!/usr/bin/env bash
# The accelerator checks in one run, for a session lent a GPU. Every step is bounded, and the
# whole run ends inside BUDGET seconds (default 585: run it with the device tool's timeout_s=600; the device
# machine allows 10 minutes per command and 15 in all, start-up included). The steps, most wanted first:
#
#   1. bench/device_stream_check.py   tensor files, statistics and overflow flags of calls made on a side
#                                     stream behind 50 ms of device work hold the call's values (PASS/FAIL)
#   2. bench/device_bench.py --quick  the issue's table: large model (statistics rows), then small (every row)
#   2b. bench/device_kernels.py       host us per tensor of the statistics launches: legacy 3, debugger 7, one
#                                     torch.compile'd fused kernel, and the Triton batch (statistics/fused_triton:
#                                     the whole mix in two launches and one read-back), each against eager's numbers
#   2c. PTDBG_BENCH_FUSED=off device_bench.py   the large model's statistics rows on the per-tensor device path:
#                                     against 2., what the fused queue (statistics/fused_batch, the default) saves
#   3. with BASELINE: device_bench.py --baseline (the large model's statistics rows, both trees, one machine),
#      then bench/device_ab.py (bench_dump's reference model: the same files, step times)
#   4. bench/device_bench.py --profile  where the large model's dumped steps spend host time (cProfile)
#   5. bench/device_tf32.py           what the advisor answers for CPU float32 against CUDA with TF32 off / on
#
# Steps 4 and 5 run only in the time left. msprobe's rows need msprobe 1.0.4, which the device image lacks:
# put its wheel and openpyxl's (mindstudio_probe-1.0.4, openpyxl, et_xmlfile; `pip download --no-deps`) in
# .whl/ (ignored through .git/info/exclude, named in the device tool's `carry`); they are installed into
# /tmp/site here, without their other requirements (the image has them, numpy 2 aside: see device_bench.py).
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
budget="${BUDGET:-585}"
status=0

run() {  # run NAME SECONDS ARGS...: one step, bounded by SECONDS and by the time left, its output printed and kept
    local name=$1 seconds=$2 left=$((budget - SECONDS))
    shift 2
    if [ "$left" -lt "$seconds" ]; then seconds=$left; fi
    if [ "$seconds" -lt 20 ]; then
        echo "=== $name: skipped, ${left}s left of ${budget}s"
        return
    fi
    echo "=== $name (limit ${seconds}s, at ${SECONDS}s): $python $*"
    timeout "$seconds" "$python" "$@" > "$out/$name.txt" 2>&1
    local rc=$?
    grep -v -- "-\[INFO\]" "$out/$name.txt" | grep -v "\[INFO\]" | tail -n 70
    echo "=== $name: exit $rc"
    [ "$rc" -eq 0 ] || status=1
}

if [ -d .whl ]; then
    "$python" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        && export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
fi
"$python" -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(),
torch.cuda.get_device_name(0) if torch.cuda.is_available() else '')"
run stream_check 60 bench/device_stream_check.py
# BENCH_ARGS: more device_bench.py options (a CPU smoke run: BENCH_ARGS="--vocab 2000 --configs plain,legacy_stats").
run bench_large 150 bench/device_bench.py --quick --sizes large ${BENCH_ARGS:-}
run kernels 75 bench/device_kernels.py
PTDBG_BENCH_FUSED=off run unfused_large 110 bench/device_bench.py --quick --sizes large \
    --configs legacy_stats,debugger_stats ${BENCH_ARGS:-}
if [ $# -ge 1 ]; then  # the large model's statistics rows, this tree against BASELINE on this machine
    run ab_large 110 bench/device_bench.py --quick --sizes large --configs legacy_stats,debugger_stats \
        --baseline "$1" ${BENCH_ARGS:-}
fi
run bench_small 200 bench/device_bench.py --quick --sizes small ${BENCH_ARGS:-}
if [ $# -ge 1 ]; then
    run device_ab 130 bench/device_ab.py --baseline "$1" --steps 3
fi
run profile_large 90 bench/device_bench.py --quick --sizes large --configs debugger_stats,legacy_stats --profile \
    ${BENCH_ARGS:-}
run tf32 90 bench/device_tf32.py
exit $status
