"""End-to-end scenario, the way a user porting a model works:

1. dump a "bench" run (float32 everywhere) and a "device" run in which one layer computes in bfloat16
   (standing in for an NPU kernel with lower precision), each in its own process, with the legacy API;
2. compare the two dumps with ``compare(...)``;
3. print the advisor's answer: the first failing tensor, the suspect API (here the planted bfloat16
   ``F.linear``, traced back from the float32 call after it) and the user's code line.

Run: ``python sample/end_to_end.py`` (or ``bash sample/run_sample.sh``); everything goes to
``sample/out/end_to_end/`` (``npu/``, ``gpu/``, ``compare/``), recreated on each run; the other samples
write to their own folders beside it.
"""

from __future__ import annotations

import argparse
import glob
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def run_training(out_dir: str, name: str, planted: bool) -> str:
    """Dump one run in a subprocess (the dump wraps torch globally, so each run gets its own process), in
    ``out_dir/name``: legacy_train.py dumps to ``./dump.pkl``, i.e.
    ``{name}/ptdbg_dump_v1.0/rank0/api_stack_dump.pkl``."""
    run_dir = os.path.join(out_dir, name)
    os.makedirs(run_dir)
    command = [sys.executable, os.path.join(HERE, "legacy_train.py"), "--steps", "1"]
    if planted:
        command.append("--bf16-layer")
    subprocess.run(command, check=True, cwd=run_dir)
    pkls = glob.glob(os.path.join(run_dir, "ptdbg_dump_v*", "rank0", "api_stack_dump.pkl"))
    if len(pkls) != 1:
        raise SystemExit(f"expected one api_stack pkl for {name}, found {pkls}")
    return pkls[0]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join(HERE, "out", "end_to_end"),
                        help="output directory, recreated (default sample/out/end_to_end)")
    args = parser.parse_args()
    out_dir = os.path.abspath(args.out)
    if os.path.isdir(out_dir):
        shutil.rmtree(out_dir)
    os.makedirs(out_dir)

    npu_pkl = run_training(out_dir, "npu", planted=True)
    bench_pkl = run_training(out_dir, "gpu", planted=False)

    from ptdbg_ascend import compare  # torch-free: numpy (and openpyxl for the .xlsx)

    report_dir = os.path.join(out_dir, "compare")
    os.makedirs(report_dir)
    outcome = compare(
        {
            "npu_pkl_path": npu_pkl,
            "bench_pkl_path": bench_pkl,
            "npu_dump_data_dir": npu_pkl[: -len(".pkl")],
            "bench_dump_data_dir": bench_pkl[: -len(".pkl")],
            "is_print_compare_log": False,
        },
        report_dir,
        stack_mode=True,
    )
    reports = sorted(os.listdir(report_dir))
    print("\nReports in {}:\n  {}".format(report_dir, "\n  ".join(reports)))
    with open(outcome.advisor_path, encoding="utf-8") as handle:
        print("\nAdvisor:\n" + handle.read())
    print(f"Outcome: {outcome}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
