"""Memory and time of reading a large compare CSV for ``run_ut --compare`` (``compare_link.read_compare``).

    .venv/bin/python bench/bench_compare_link.py [--rows 1000000] [--workdir DIR] [--keep]

Generates ``compare_result_20240101000000.csv`` with the columns ``compare()`` writes (29, no stack text)
and ``--rows`` rows (4 per call: two inputs, the output, the backward output; every row passes but one
output at three quarters of the file, the first failure), with its finding file beside it, then reads it
in a fresh interpreter and prints the peak RSS of that process (``ru_maxrss``), the same interpreter's
RSS after the imports alone, and the seconds the read took. ``--calls`` (default: all) restricts the
calls the read keeps links for, as ``run_ut`` does with the calls of its dump.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HEADER = ["NPU Name", "Bench Name", "NPU Tensor Dtype", "Bench Tensor Dtype", "NPU Tensor Shape", "Bench Tensor Shape",
          "Cosine", "MaxAbsErr", "MaxRelativeErr", "One Thousandth Err Ratio", "Five Thousandths Err Ratio",
          "NPU max", "NPU min", "NPU mean", "NPU l2norm", "Bench max", "Bench min", "Bench mean", "Bench l2norm",
          "Accuracy Reached or Not", "Err_message", "NPU_Stack_Info", "Result", "Accumulated Relative Err",
          "Euclidean Relative Distance", "KL Divergence", "Allowed Rtol", "Rtol To Pass", "Greatest Diff Index"]
SIDES = ("forward_input.0", "forward_input.1", "forward_output", "backward_output.0")

READ = r"""
import json, resource, sys, time
from ptdbg_ascend.precheck import compare_link
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
calls = json.loads(sys.argv[2])
started = time.time()
report = (compare_link.read_compare(sys.argv[1]) if calls is None
          else compare_link.read_compare(sys.argv[1], calls=set(calls)))
seconds = time.time() - started
print(json.dumps({"imports_kib": before, "peak_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                  "seconds": seconds, "anchor": report.anchor, "calls_kept": len({call for call, _ in report.rows})}))
"""


def generate(path: str, rows: int) -> str:
    """The compare CSV of ``rows`` rows (and its finding file); returns the name of its first failure."""
    failing = (rows * 3 // 4) // 4 * 4 + 2  # an output row
    with open(path, "w", encoding="utf-8-sig", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(HEADER)
        for index in range(rows):
            name = f"Functional_linear_{index // 4}_{SIDES[index % 4]}"
            result = "error" if index == failing else "pass"
            message = "Relative error 2.70e-03 > 1.0e-03 allowed for float32" if index == failing else ""
            writer.writerow([name, name, "torch.float32", "torch.float32", "[64, 128]", "[64, 128]",
                             "0.999999999000", "0.000001234000", "0.000004560000", "1.000000000000",
                             "1.000000000000", "3.2415766716", "-2.7044990062", "0.0073977398", "27.0256067989",
                             "3.2415766716", "-2.7044990062", "0.0073977398", "27.0256067989",
                             "No" if index == failing else "Yes", message, "", result, "0.000001", "0.000002",
                             "0.0", "0.001", "0.0000012", "(0, 0)"])
    suspect = f"Functional_linear_{failing // 4}_forward"
    finding = {"format": "ptdbg_ascend.finding", "version": 2, "record": "Functional_linear_{}_{}".format(
        failing // 4, SIDES[failing % 4]), "line": failing + 2, "kind": "cause", "call": suspect,
        "api": "Functional_linear", "user_line": None, "dtype_mismatch": None, "one_sided": [], "level": "error",
        "precision": None}
    with open(os.path.join(os.path.dirname(path), "compare_finding_20240101000000.json"), "w") as handle:
        json.dump(finding, handle)
    return suspect


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1000000)
    parser.add_argument("--calls", type=int, default=None, help="keep links for the first N calls only")
    parser.add_argument("--workdir", default=None)
    parser.add_argument("--keep", action="store_true", help="keep the generated CSV")
    args = parser.parse_args()
    workdir = args.workdir or tempfile.mkdtemp(prefix="bench_compare_link_")
    os.makedirs(workdir, exist_ok=True)
    path = os.path.join(workdir, "compare_result_20240101000000.csv")
    suspect = generate(path, args.rows)
    calls = None if args.calls is None else [f"Functional.linear.{i}" for i in range(args.calls)]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([REPO] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    done = subprocess.run([sys.executable, "-c", READ, path, json.dumps(calls)], capture_output=True, text=True,
                          env=env)
    if done.returncode != 0:
        raise SystemExit(done.stderr)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    print("compare CSV: {} rows, {:.0f} MB; suspect {} (read: {})".format(
        args.rows, os.path.getsize(path) / 1e6, suspect, result["anchor"]))
    print("read_compare: peak RSS {:.0f} MiB (imports alone {:.0f} MiB), {:.1f} s, links kept for {} calls".format(
        result["peak_kib"] / 1024.0, result["imports_kib"] / 1024.0, result["seconds"], result["calls_kept"]))
    if not args.keep:
        os.remove(path)


if __name__ == "__main__":
    main()
