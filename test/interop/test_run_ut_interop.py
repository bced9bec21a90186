"""Interop: the real msprobe 1.0.4 ``run_ut`` and ours on the same dump.json reach the same verdicts.

The reference model of the pre-check tests (``test/precheck/precheck_model.py``: transformer block + CNN,
one AdamW step) is dumped with our ``PrecisionDebugger`` twice, clean and with the planted inaccurate gelu
(float32 computed through bfloat16). Both dumps go through our ``run_ut`` and through msprobe 1.0.4's
``run_ut`` (``.venv-msprobe``, built by ``scripts/interop_msprobe.sh --setup``); per API the forward and
backward verdicts of the two result CSVs must be equal, except for the differences listed in
``EXPECTED_DIFFERENCES``, each tied to one of our decisions.

1.0.4's ``run_ut`` does not run on a CPU-only machine as shipped: with no ``torch_npu`` it takes the
device to be ``"cuda"``, calls ``torch.cuda.set_device("cuda:0")`` first (on a CPU-only torch:
``AttributeError: module 'torch._C' has no attribute '_cuda_setDevice'``, which it turns into
``NotImplementedError``), and moves every device-side input ``.to("cuda")`` (with only the first shim
below, every API is SKIP "Torch not compiled with CUDA enabled"). The launcher ``MSPROBE_LAUNCHER``,
in this test only (nothing in the package, nothing in msprobe's files), shims exactly:

1. ``np.unicode_ = np.str_`` (removed in NumPy 2.0; 1.0.4 names it at import; as scripts/interop_msprobe.sh);
2. ``torch.cuda.set_device`` -> a no-op;
3. ``msprobe...run_ut.run_ut.current_device = "cpu"``: the "device" run happens on the CPU, in the dumped
   dtypes, as ours does. msprobe's comparison code (compare.py, algorithm.py) runs unchanged.

For the planted dump, ``torch.nn.functional.gelu`` is replaced before msprobe is imported (msprobe takes
its functional ops from ``torch.nn.functional`` at import), as precheck_model.py did before dumping.

Opt-in (the two msprobe runs take about a minute on 2 CPU cores): ``PTDBG_INTEROP=1``; skips when the
msprobe venv is absent (build it with ``bash scripts/interop_msprobe.sh --setup``).
"""

from __future__ import annotations

import csv
import glob
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
PRECHECK_TESTS = os.path.join(REPO, "test", "precheck")
MODEL_SCRIPT = os.path.join(PRECHECK_TESTS, "precheck_model.py")
MSPROBE_PYTHON = os.path.join(REPO, ".venv-msprobe", "bin", "python")

pytestmark = [
    pytest.mark.skipif(os.environ.get("PTDBG_INTEROP") != "1",
                       reason="interop with msprobe 1.0.4 run_ut is opt-in: set PTDBG_INTEROP=1 (about a minute)"),
    pytest.mark.skipif(not os.path.isfile(MSPROBE_PYTHON),
                       reason="the msprobe 1.0.4 venv (.venv-msprobe) is absent: bash scripts/interop_msprobe.sh --setup"),
]

MSPROBE_LAUNCHER = """
import sys
import numpy as np
if not hasattr(np, "unicode_"):  # shim 1: removed in NumPy 2.0, named by 1.0.4 at import
    np.unicode_ = np.str_
import torch
if sys.argv[1] == "planted":  # before msprobe is imported: it copies torch.nn.functional's ops at import
    sys.path.insert(0, sys.argv[2])
    from precheck_model import planted_gelu
    torch.nn.functional.gelu = planted_gelu
del sys.argv[1:3]
torch.cuda.set_device = lambda device: None  # shim 2: run_ut_command selects "cuda:0" first
import msprobe.pytorch.api_accuracy_checker.run_ut.run_ut as msprobe_run_ut
msprobe_run_ut.current_device = "cpu"  # shim 3: the device run on the CPU (1.0.4: "cuda" without torch_npu)
msprobe_run_ut._run_ut()
"""

# API -> (ours (forward, backward), msprobe 1.0.4 (forward, backward), why), the same in both dumps.
EXPECTED_DIFFERENCES = {
    # execution.static_skip_reason (the issue: "random ones like dropout ... are SKIP with the reason"):
    # two runs of dropout draw different masks, so we do not compare it. 1.0.4 compares dropout by the
    # share of zeros only, and passes any tensor under 100 elements unconditionally
    # (Comparator._compare_dropout); the attention map here has 2*5*5 = 50.
    "Functional.dropout.0": (("SKIP", "SKIP"), ("pass", "pass"), "random API: SKIP (ours) vs zero-share check"),
    # execution.py (module doc, "Backward"): we run the backward of a multi-output API with the gradients
    # of all its tensor outputs (torch.autograd.grad). 1.0.4 runs backward only for a single output or an
    # API with a grad_index in torch_ut_setting.json; chunk returns 3 tensors, so its backward is a SKIP
    # details row "Multiple backward is not supported." and a blank backward verdict.
    "Tensor.chunk.0": (("pass", "pass"), ("pass", " "), "multi-output backward: run (ours) vs not supported"),
}
# In the details CSV only (no verdict changes), besides the rows of the APIs above:
# - 1.0.4 writes a SKIP row "Bench output is None, skip this test." for every tensor input without a
#   gradient (e.g. the image of conv2d, batch_norm's running stats); we write rows only for inputs that
#   have one (the dump's backward block numbers them the same way).
# - conv1d/conv2d: 1.0.4 keeps their float32 bench in float32 (run_ut_utils.hf_32_standard_api), we
#   promote it to float64 like every other API; so their Bench Dtype and metrics differ.
# - SMALL_TENSOR_COSINE (judge.py): rows whose values all lie in the small-value domain have a blank
#   cosine in ours; 1.0.4 writes the cosine (1.0 on this model, so the verdict is the same) or leaves
#   it blank where it has none (an all-zero tensor).
DETAILS_ONLY_ROWS = {"Functional.dropout.0.forward.output.0", "Tensor.chunk.0.backward.output.0"}
BENCH_DTYPE_DIFFERS = ("Functional.conv2d.",)


def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([REPO, PRECHECK_TESTS] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


def _read(directory, stem):
    paths = glob.glob(os.path.join(directory, stem + "*.csv"))
    assert len(paths) == 1, (directory, stem, paths)
    with open(paths[0], encoding="utf-8-sig", newline="") as handle:
        rows = list(csv.reader(handle))
    return rows[0], rows[1:]


def _verdicts(directory):
    """API -> (forward, backward) of a result CSV, lower-cased as both tools write pass/error/warning."""
    _, rows = _read(directory, "accuracy_checking_result_")
    verdicts = {}
    for row in rows:
        assert row[0] not in verdicts, row[0]
        verdicts[row[0]] = tuple(v if v in ("SKIP", " ") else v.lower() for v in row[1:3])
    return verdicts


def _details(directory):
    header, rows = _read(directory, "accuracy_checking_details_")
    return header, {row[0]: dict(zip(header, row)) for row in rows}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """``{"clean": (ours_dir, theirs_dir), "planted": ...}``: both run_uts on both dumps."""
    root = tmp_path_factory.mktemp("run_ut_interop")
    env = _env()
    dumps = {}
    makers = {name: subprocess.Popen([sys.executable, MODEL_SCRIPT, str(root / name), "tensor"]
                                     + (["--planted"] if name == "planted" else []),
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
              for name in ("clean", "planted")}
    for name, process in makers.items():
        output = process.communicate(timeout=180)[0].decode(errors="replace")
        assert process.returncode == 0, output[-3000:]
        dumps[name] = str(root / name / "step0" / "rank" / "dump.json")
    theirs = {name: subprocess.Popen([MSPROBE_PYTHON, "-c", MSPROBE_LAUNCHER, name, PRECHECK_TESTS,
                                      "-api_info", dumps[name], "-o", str(root / ("theirs_" + name))],
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, cwd=str(root))
              for name in dumps}
    ours = {}
    for name, dump in dumps.items():  # ours meanwhile, in a subprocess too (the planted gelu in place)
        script = ("import sys, torch\n"
                  "if sys.argv[1] == 'planted':\n"
                  "    from precheck_model import planted_gelu\n"
                  "    torch.nn.functional.gelu = planted_gelu\n"
                  "from ptdbg_ascend.precheck.run_ut import run_ut\n"
                  "run_ut(sys.argv[2], sys.argv[3], progress=False)\n")
        done = subprocess.run([sys.executable, "-c", script, name, dump, str(root / ("ours_" + name))],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, timeout=300)
        assert done.returncode == 0, done.stdout.decode(errors="replace")[-3000:]
        ours[name] = str(root / ("ours_" + name))
    for name, process in theirs.items():
        output = process.communicate(timeout=600)[0].decode(errors="replace")
        assert process.returncode == 0 and "Successfully completed run_ut" in output, output[-3000:]
    return {name: (ours[name], str(root / ("theirs_" + name))) for name in dumps}


def _assert_same_verdicts(ours_dir, theirs_dir):
    ours, theirs = _verdicts(ours_dir), _verdicts(theirs_dir)
    assert ours.keys() == theirs.keys()
    assert len(ours) == 190  # every forward call of the dump but the Distributed ones (none here)
    differences = {api: (ours[api], theirs[api]) for api in ours if ours[api] != theirs[api]}
    assert differences == {api: (o, t) for api, (o, t, _) in EXPECTED_DIFFERENCES.items()}
    return ours


def test_clean_dump_same_verdict_per_api(runs):
    ours = _assert_same_verdicts(*runs["clean"])
    # 1.0.4 agrees: no false alarm on the clean model (its only non-pass would be ours: dropout SKIP)
    assert {api for api, (f, b) in ours.items() if f != "pass" or b not in ("pass", " ")} == {"Functional.dropout.0"}


def test_planted_dump_same_verdict_per_api(runs):
    ours = _assert_same_verdicts(*runs["planted"])
    errors = {api: v for api, v in ours.items() if "error" in v}
    assert errors == {"Functional.gelu.0": ("error", "error")}
    assert _verdicts(runs["planted"][1])["Functional.gelu.0"] == ("error", "error")


@pytest.mark.parametrize("dump", ["clean", "planted"])
def test_details_rows_agree(runs, dump):
    """Row by row: the same Status wherever both write a row; the same metrics (ULP, benchmark, dual
    ratios) to 1e-9 relative, but for the rows and columns the comment above DETAILS_ONLY_ROWS names."""
    header, ours = _details(runs[dump][0])
    theirs_header, theirs = _details(runs[dump][1])
    assert header[:len(theirs_header)] == theirs_header  # ours appends Standard, Severity
    only_theirs = set(theirs) - set(ours)
    assert only_theirs and all(theirs[name]["Status"] == "SKIP"
                               and theirs[name]["Message"].startswith("Bench output is None") for name in only_theirs)
    assert set(ours) - set(theirs) == {"Functional.dropout.0.forward.output.0"}
    compared = 0
    for name in set(ours) & set(theirs):
        if name in DETAILS_ONLY_ROWS:
            continue
        assert ours[name]["Status"].lower() == theirs[name]["Status"].lower(), name
        if name.startswith(BENCH_DTYPE_DIFFERS):
            assert (ours[name]["Bench Dtype"], theirs[name]["Bench Dtype"]) == ("torch.float64", "torch.float32")
            continue
        for title in theirs_header[1:21]:
            mine, other = ours[name][title].strip(), theirs[name][title].strip()
            if title == "余弦相似度" and "SMALL_TENSOR_COSINE" in ours[name]["Message"]:
                assert mine == "" and (other == "" or float(other) == pytest.approx(1.0)), (name, other)
                continue
            if mine == other:
                continue
            assert float(mine) == pytest.approx(float(other), rel=1e-9, abs=1e-12), (name, title, mine, other)
        compared += 1
    assert compared > 200
    gelu = ours["Functional.gelu.0.forward.output.0"]
    if dump == "planted":  # the planted gelu's numbers, the same in both tools
        assert float(gelu["双千指标"]) == pytest.approx(float(theirs["Functional.gelu.0.forward.output.0"]["双千指标"]))
        assert float(gelu["双千指标"]) < 0.999
