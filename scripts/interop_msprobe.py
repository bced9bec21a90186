"""Interop with the real msprobe 1.0.4 (run by ``scripts/interop_msprobe.sh`` with the msprobe venv's python).

(a) Two tensor-task dumps written by OUR PrecisionDebugger (a model and a slightly perturbed copy) are
    compared by msprobe's own compare CLI and by ours: both must accept them and find the same rows
    with the same Cosine and the same "Accuracy Reached or Not".
(b) Two dumps written by msprobe's PrecisionDebugger are compared by OUR compare (``npu_path`` /
    ``bench_path`` / ``stack_path``, msprobe's compare.json keys): the rows must be the ones msprobe's
    compare finds, with the same Cosine.

Each dump runs in its own process (both tools patch torch). Prints a JSON summary on the last line and
exits 0 only when every check passes.

Usage: python scripts/interop_msprobe.py OUT_DIR
"""

from __future__ import annotations

import glob
import json
import math
import os
import subprocess
import sys
import textwrap

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

# The same tiny training step for both tools; TOOL selects the debugger, PERTURB the bench model.
DUMP_SCRIPT = textwrap.dedent('''
    import sys, json, torch
    tool, dump_path, perturb = sys.argv[1], sys.argv[2], float(sys.argv[3])
    config = {"task": "tensor", "dump_path": dump_path, "rank": [], "step": [0], "level": "L1", "seed": 1234,
              "is_deterministic": False, "tensor": {"scope": [], "list": [], "data_mode": ["all"],
              "backward_input": [], "file_format": "npy"}}
    config_path = dump_path + ".config.json"
    with open(config_path, "w") as handle:
        json.dump(config, handle)
    if tool == "msprobe":
        import numpy
        if not hasattr(numpy, "unicode_"):   # msprobe 1.0.4 predates NumPy 2
            numpy.unicode_ = numpy.str_
        from msprobe.pytorch import PrecisionDebugger
    else:
        from ptdbg_ascend import PrecisionDebugger
    debugger = PrecisionDebugger(config_path=config_path)

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 4, 3)
            self.fc = torch.nn.Linear(64, 5)
        def forward(self, x):
            x = torch.relu(self.conv(x))
            x = torch.nn.functional.leaky_relu(x, 0.1)
            return self.fc(x.flatten(1))

    torch.manual_seed(0)
    model = Net()
    with torch.no_grad():
        # the bench differs from the fc layer on (a fixed pattern, so both tools see the same bench)
        model.fc.weight.add_(perturb * torch.randn(model.fc.weight.shape, generator=torch.Generator().manual_seed(2)))
    x = torch.randn(2, 3, 6, 6, generator=torch.Generator().manual_seed(1))
    debugger.start()
    loss = model(x).sum()
    loss.backward()
    debugger.stop()
    debugger.step()
''')


def run(command, **kwargs):
    result = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, **kwargs)
    if result.returncode != 0:
        sys.stdout.write(result.stdout.decode(errors="replace")[-4000:])
        raise SystemExit(f"FAILED: {' '.join(command)}")
    return result.stdout.decode(errors="replace")


def dump(tool, out, name, perturb):
    dump_path = os.path.join(out, name)
    script = os.path.join(out, "dump_model.py")
    with open(script, "w") as handle:
        handle.write(DUMP_SCRIPT)
    run([sys.executable, script, tool, dump_path, str(perturb)], cwd=out)
    return os.path.join(dump_path, "step0", "rank")


def msprobe_compare(npu_dir, bench_dir, out):
    """msprobe's own compare CLI (tensor mode, stack mode); returns {row name: (cosine, accuracy)}."""
    import pandas

    os.makedirs(out, exist_ok=True)
    compare_json = os.path.join(out, "compare.json")
    with open(compare_json, "w") as handle:
        json.dump({"npu_path": os.path.join(npu_dir, "dump.json"), "bench_path": os.path.join(bench_dir, "dump.json"),
                   "stack_path": os.path.join(npu_dir, "stack.json"), "is_print_compare_log": False}, handle)
    code = ("import sys, numpy\nif not hasattr(numpy, 'unicode_'): numpy.unicode_ = numpy.str_\n"
            "from msprobe.msprobe import main\nsys.argv = ['msprobe'] + sys.argv[1:]\nsys.exit(main())")
    run([sys.executable, "-c", code, "-f", "pytorch", "compare", "-i", compare_json, "-o", out, "-s"])
    reports = glob.glob(os.path.join(out, "compare_result_*.xlsx"))
    if len(reports) != 1:
        raise SystemExit(f"FAILED: msprobe wrote {len(reports)} compare_result xlsx files in {out}")
    table = pandas.read_excel(reports[0])
    rows = {}
    for _, row in table.iterrows():
        if str(row["NPU Dtype"]).startswith("torch.") and row["NPU Dtype"] != "torch.Size":
            rows[row["NPU Name"]] = (_number(row["Cosine"]), _verdict(row["Accuracy Reached or Not"]))
    return rows


def our_compare(npu_dir, bench_dir, out):
    """Our compare, given msprobe's compare.json keys; returns {dotted row name: (cosine, accuracy)}."""
    import pandas

    from ptdbg_ascend import compare
    from ptdbg_ascend.formats.naming import to_dotted

    os.makedirs(out, exist_ok=True)
    compare({"npu_path": os.path.join(npu_dir, "dump.json"), "bench_path": os.path.join(bench_dir, "dump.json"),
                       "stack_path": os.path.join(npu_dir, "stack.json"), "is_print_compare_log": False},
                      out, stack_mode=True, auto_analyze=False)
    reports = glob.glob(os.path.join(out, "compare_result_*.csv"))
    if len(reports) != 1:
        raise SystemExit(f"FAILED: our compare wrote {len(reports)} compare_result csv files in {out}")
    table = pandas.read_csv(reports[0])
    return {to_dotted(row["NPU Name"]): (_number(row["Cosine"]), _verdict(row["Accuracy Reached or Not"]))
            for _, row in table.iterrows()}


# An unjudged row (0-d tensors: Cosine "unsupported"): msprobe leaves the cell empty (None), ours "Nan".
_NOT_JUDGED = ("nan", "None", "Nan", "")


def _verdict(value):
    text = str(value)
    return "not judged" if text in _NOT_JUDGED else text


def _number(value):
    try:
        return float(value)
    except (TypeError, ValueError):
        return str(value)


def same_rows(label, theirs, ours, check_accuracy=True):
    problems = []
    if set(theirs) != set(ours):
        problems.append("{}: rows only in msprobe's compare: {}; only in ours: {}".format(
            label, sorted(set(theirs) - set(ours)), sorted(set(ours) - set(theirs))))
    for name in sorted(set(theirs) & set(ours)):
        (cos_a, acc_a), (cos_b, acc_b) = theirs[name], ours[name]
        numbers = isinstance(cos_a, float) and isinstance(cos_b, float)
        if numbers and not (math.isclose(cos_a, cos_b, rel_tol=1e-5, abs_tol=1e-6) or (math.isnan(cos_a) and math.isnan(cos_b))):
            problems.append(f"{label}: {name} Cosine msprobe {cos_a} ours {cos_b}")
        if check_accuracy and acc_a != acc_b:
            problems.append(f"{label}: {name} Accuracy msprobe {acc_a} ours {acc_b}")
    return problems


def main(out):
    out = os.path.abspath(out)
    os.makedirs(out, exist_ok=True)
    summary = {"msprobe_version": _msprobe_version()}
    # (a) our dumps, msprobe's compare
    ours_npu = dump("ptdbg", out, "ours_npu", 0.0)
    ours_bench = dump("ptdbg", out, "ours_bench", 0.5)
    theirs_on_ours = msprobe_compare(ours_npu, ours_bench, os.path.join(out, "a_msprobe_compare"))
    ours_on_ours = our_compare(ours_npu, ours_bench, os.path.join(out, "a_our_compare"))
    problems = same_rows("(a)", theirs_on_ours, ours_on_ours)
    if not any(acc == "No" for _, acc in theirs_on_ours.values()):
        problems.append("(a): the perturbed bench should give at least one 'No' row")
    summary["a_rows"] = len(theirs_on_ours)
    summary["a_not_reached"] = sorted(name for name, (_, acc) in theirs_on_ours.items() if acc == "No")
    # (b) msprobe's dumps, our compare
    their_npu = dump("msprobe", out, "msprobe_npu", 0.0)
    their_bench = dump("msprobe", out, "msprobe_bench", 0.5)
    theirs_on_theirs = msprobe_compare(their_npu, their_bench, os.path.join(out, "b_msprobe_compare"))
    ours_on_theirs = our_compare(their_npu, their_bench, os.path.join(out, "b_our_compare"))
    problems += same_rows("(b)", theirs_on_theirs, ours_on_theirs)
    summary["b_rows"] = len(ours_on_theirs)
    # the two tools dumped the same computation: the same calls
    with open(os.path.join(ours_npu, "dump.json")) as handle:
        our_names = list(json.load(handle)["data"])
    with open(os.path.join(their_npu, "dump.json")) as handle:
        their_names = list(json.load(handle)["data"])
    if our_names != their_names:
        problems.append(f"dump.json entries differ: ours {our_names} msprobe {their_names}")
    summary["entries"] = len(our_names)
    summary["problems"] = problems
    print(json.dumps(summary))
    return 1 if problems else 0


def _msprobe_version():
    try:
        from importlib import metadata
        return metadata.version("mindstudio-probe")
    except Exception:  # noqa: BLE001 - informational only
        return "unknown"


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    sys.exit(main(sys.argv[1]))
