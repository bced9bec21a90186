"""Interop: the real msprobe 26.x ``acc_check`` accepts the dump.json of our ``PrecisionDebugger``.

msprobe 26.2.0 (``.venv-msprobe26``, built by ``scripts/interop_msprobe26.sh --setup``) renamed 1.0.4's
``run_ut`` to ``msprobe acc_check -api_info dump.json -o OUT`` and, before anything else, reads the
dump's top-level ``"framework"`` key to pick the PyTorch or the MindSpore checker
(``msprobe/core/acc_check/acc_check_cli.py``, ``_detect_framework_from_api_info``): without it,
``ValueError: Key "framework" not found in <dump.json>``. Our dump.json carries ``"framework": "pytorch"``
(formats/dump_json.py) for that reason; :func:`test_acc_check_refuses_dump_without_framework` shows
the refusal on the same dump with only that key removed, through msprobe's own ``msprobe`` command.

A small real model (Linear, GELU, LayerNorm, Linear, cross_entropy, one backward) is dumped with
``PrecisionDebugger(task="tensor", level="L1")``, clean and with a planted inaccurate gelu (float32
computed through bfloat16). Like 1.0.4's ``run_ut``, 26.2.0's ``acc_check`` does not run on a CPU-only
machine as shipped (no ``torch_npu``: device ``"cuda"``, ``torch.cuda.set_device`` first, inputs moved
``.to("cuda")``), so ``ACC_CHECK_LAUNCHER``, in this test only, shims exactly: ``torch.cuda.set_device``
-> a no-op, and ``current_device = "cpu"`` in ``acc_check.py`` and ``acc_check_utils.py``; then it calls
``msprobe.msprobe.main`` (what the ``msprobe`` command runs), framework detection included.

Opt-in (about 30 s on 2 CPU cores): ``PTDBG_INTEROP=1``; skips with the reason when the msprobe 26
venv is not ready (no network, install failure: the build log's last line).
"""

from __future__ import annotations

import csv
import glob
import json
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
VENV = os.environ.get("MSPROBE26_VENV") or os.path.join(REPO, ".venv-msprobe26")
MSPROBE_PYTHON = os.path.join(VENV, "bin", "python")
BUILD_LOG = os.path.join(REPO, "bench", "out", "interop_msprobe26", "venv_build.log")


def _not_ready_reason() -> str:
    reason = f"the msprobe 26 venv ({VENV}) is not ready: bash scripts/interop_msprobe26.sh --setup"
    if os.path.isfile(BUILD_LOG):
        with open(BUILD_LOG, encoding="utf-8", errors="replace") as handle:
            lines = [line.strip() for line in handle if line.strip()]
        if lines:
            reason += "; its last build said: " + lines[-1][:300]
    return reason


pytestmark = [
    pytest.mark.skipif(os.environ.get("PTDBG_INTEROP") != "1",
                       reason="interop with msprobe 26.x acc_check is opt-in: set PTDBG_INTEROP=1 (about 30 s)"),
    pytest.mark.skipif(not os.path.isfile(os.path.join(VENV, ".ready")), reason=_not_ready_reason()),
]

MODEL_SCRIPT = """
import sys
import torch
_REAL_GELU = torch.nn.functional.gelu
def planted_gelu(input, approximate="none"):  # float32 through bfloat16: about 3 significant digits
    if input.dtype == torch.float32:
        return _REAL_GELU(input.to(torch.bfloat16), approximate=approximate).to(torch.float32)
    return _REAL_GELU(input, approximate=approximate)
if __name__ == "__main__":
    if sys.argv[2] == "planted":  # before the debugger wraps the APIs: the dump records the planted outputs
        torch.nn.functional.gelu = planted_gelu
    from ptdbg_ascend import PrecisionDebugger
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.GELU(), torch.nn.LayerNorm(32),
                                torch.nn.Linear(32, 5))
    x, target = torch.randn(6, 8), torch.tensor([0, 1, 2, 3, 4, 0])
    debugger = PrecisionDebugger(dump_path=sys.argv[1], task="tensor", level="L1")
    debugger.start()
    torch.nn.functional.cross_entropy(model(x), target).backward()
    debugger.stop()
    debugger.step()
"""

ACC_CHECK_LAUNCHER = """
import sys
import torch
if sys.argv[1] == "planted":  # before msprobe is imported: it keeps torch's original functions at import
    sys.path.insert(0, sys.argv[2])
    from dump_model import planted_gelu
    torch.nn.functional.gelu = planted_gelu
torch.cuda.set_device = lambda device: None  # acc_check_command selects "cuda:0" first
import msprobe.pytorch.api_accuracy_checker.acc_check.acc_check as acc_check
import msprobe.pytorch.api_accuracy_checker.acc_check.acc_check_utils as acc_check_utils
acc_check.current_device = "cpu"  # the "device" run on the CPU, in the dumped dtypes
acc_check_utils.current_device = "cpu"
from msprobe.msprobe import main
sys.argv = ["msprobe"] + sys.argv[3:]
main()
"""

# msprobe 26.2.0's PyTorch API list has no torch.ones_like (the gradient autograd seeds backward() with):
# acc_check_utils.exec_api finds no original function for it and indexes None (line 129), so the row is
# a SKIP with Python's message. The only row that is not a pass on the clean model.
ONES_LIKE = "Torch.ones_like.0"
ONES_LIKE_SKIP = ("SKIP", "SKIP", "'NoneType' object is not subscriptable")


def _env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([REPO] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


def _csv(directory: str, stem: str) -> list:
    paths = glob.glob(os.path.join(directory, stem + "*.csv"))
    assert len(paths) == 1, (directory, stem, paths)
    with open(paths[0], encoding="utf-8-sig", newline="") as handle:
        return list(csv.reader(handle))


def _results(directory: str) -> dict:
    """API -> (forward, backward, message) of acc_check's result CSV."""
    header, *rows = _csv(directory, "accuracy_checking_result_")
    assert header == ["API name", "Forward Test Success", "Backward Test Success", "Message"]
    return {row[0]: tuple(row[1:3]) + (row[3] if len(row) > 3 else "",) for row in rows}


@pytest.fixture(scope="module")
def dumps(tmp_path_factory) -> dict:
    """``{"root", "scripts", "clean", "planted"}``: the model script's folder and the two dump.json paths."""
    root = tmp_path_factory.mktemp("acc_check_interop")
    scripts = root / "scripts"
    scripts.mkdir()
    (scripts / "dump_model.py").write_text(MODEL_SCRIPT, encoding="utf-8")
    found = {"root": str(root), "scripts": str(scripts)}
    for name in ("clean", "planted"):
        done = subprocess.run([sys.executable, str(scripts / "dump_model.py"), str(root / name), name],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=_env(), timeout=180)
        assert done.returncode == 0, done.stdout.decode(errors="replace")[-3000:]
        found[name] = str(root / name / "step0" / "rank" / "dump.json")
    return found


def _acc_check(dumps: dict, name: str, api_info: str, out: str) -> subprocess.CompletedProcess:
    return subprocess.run([MSPROBE_PYTHON, "-c", ACC_CHECK_LAUNCHER, name, dumps["scripts"],
                           "acc_check", "-api_info", api_info, "-o", out],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=_env(), cwd=dumps["root"],
                          timeout=300)


def _acc_check_ok(dumps: dict, name: str) -> str:
    """Run msprobe 26's acc_check on our dump ``name``, assert it completed; its output directory."""
    out = os.path.join(dumps["root"], "theirs_" + name)
    done = _acc_check(dumps, name, dumps[name], out)
    output = done.stdout.decode(errors="replace")
    assert done.returncode == 0 and "Successfully completed acc_check" in output, output[-3000:]
    return out


def _forward_calls(dump_json: str) -> set:
    with open(dump_json, encoding="utf-8") as handle:
        document = json.load(handle)
    assert document["framework"] == "pytorch"
    return {key[:-len(".forward")] for key in document["data"] if key.endswith(".forward")}


def test_acc_check_accepts_our_dump(dumps):
    out = _acc_check_ok(dumps, "clean")
    results = _results(out)
    # one row per forward call of our dump: every call was read, none refused
    assert set(results) == _forward_calls(dumps["clean"])
    assert {"Functional.linear.0", "Functional.gelu.0", "Functional.layer_norm.0", "Functional.linear.1",
            "Functional.cross_entropy.0"} <= set(results)
    assert results[ONES_LIKE] == ONES_LIKE_SKIP
    assert {api: verdict for api, verdict in results.items() if verdict[:2] != ("pass", "pass")} == \
        {ONES_LIKE: ONES_LIKE_SKIP}
    # the details: msprobe compared our saved tensors against its float64 bench
    header, *rows = _csv(out, "accuracy_checking_details_")
    details = {row[0]: dict(zip(header, row)) for row in rows}
    gelu = details["Functional.gelu.0.forward.output.0"]
    assert (gelu["Bench Dtype"], gelu["DEVICE Dtype"], gelu["Shape"], gelu["Status"]) == \
        ("torch.float64", "torch.float32", "(6, 32)", "pass")
    assert float(gelu["余弦相似度"]) == pytest.approx(1.0)


def test_acc_check_finds_planted_gelu_in_our_dump(dumps):
    results = _results(_acc_check_ok(dumps, "planted"))
    # forward: the planted gelu and nothing else (each API runs on its own dumped inputs). Its backward
    # is not pinned: the bfloat16 round trip barely moves this small model's gelu gradient.
    assert {api: verdict[0] for api, verdict in results.items() if verdict[0] != "pass"} == \
        {"Functional.gelu.0": "error", ONES_LIKE: "SKIP"}
    assert {api for api, verdict in results.items() if verdict[1] not in ("pass", "SKIP")} <= {"Functional.gelu.0"}


def test_acc_check_refuses_dump_without_framework(dumps):
    """The same dump less its "framework" key, through msprobe's own ``msprobe`` command (refused before
    any device is chosen, so no shim): msprobe 26 needs the key we write."""
    with open(dumps["clean"], encoding="utf-8") as handle:
        document = json.load(handle)
    del document["framework"]
    # next to dump.json: acc_check reads the tensors from dump_tensor_data beside the file it is given
    stripped = os.path.join(os.path.dirname(dumps["clean"]), "dump_no_framework.json")
    with open(stripped, "w", encoding="utf-8") as handle:
        json.dump(document, handle)
    out = os.path.join(dumps["root"], "theirs_no_framework")
    done = subprocess.run([os.path.join(VENV, "bin", "msprobe"), "acc_check", "-api_info", stripped, "-o", out],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=_env(), cwd=dumps["root"],
                          timeout=300)
    output = done.stdout.decode(errors="replace")
    assert done.returncode != 0, output[-3000:]
    assert f'ValueError: Key "framework" not found in {stripped}' in output, output[-3000:]
    assert not glob.glob(os.path.join(out, "*.csv"))
