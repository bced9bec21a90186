"""What an msprobe user types for the pre-check (``run_ut``, ``multi_run_ut``, ``api_precision_compare`` with
underscores, ``-f pytorch`` before the command), on the reference model's real dumps; a multi_run_ut script
without ``if __name__ == "__main__":`` is told so before any worker starts; a dumped ``memory_format``
argument (autograd's ``ones_like``) is null as msprobe writes it, said once at INFO, never "not supported"."""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("torch")

CLI = [sys.executable, "-m", "ptdbg_ascend.cli"]


def run(args, cwd, env, timeout=300):
    return subprocess.run(CLI + args, capture_output=True, text=True, cwd=str(cwd), env=env, timeout=timeout)


def test_underscore_commands_and_framework_option(model_dumps, tmp_path, child_env):
    """``ptdbg -f pytorch run_ut`` (msprobe's spelling) is ``run-ut``; ``multi_run_ut`` and
    ``api_precision_compare`` likewise; the CSVs of the alias equal those of the hyphenated command."""
    dump = model_dumps["planted"]
    plain = run(["run-ut", "-api_info", dump, "-o", str(tmp_path / "plain"), "--no-progress", "-white_list", "gelu",
                 "--dumped-outputs"], tmp_path, child_env)
    alias = run(["-f", "pytorch", "run_ut", "-api_info", dump, "-o", str(tmp_path / "alias"), "--no-progress",
                 "-white_list", "gelu", "--dumped-outputs"], tmp_path, child_env)
    assert plain.returncode == alias.returncode == 1, alias.stderr  # the planted gelu's dumped outputs are an error
    results = [glob.glob(str(tmp_path / side / "accuracy_checking_result_*.csv")) for side in ("plain", "alias")]
    assert len(results[0]) == len(results[1]) == 1
    with open(results[0][0], encoding="utf-8-sig") as first, open(results[1][0], encoding="utf-8-sig") as second:
        assert first.read() == second.read()
    multi = run(["multi_run_ut", "-api_info", dump, "-n", "1", "-o", str(tmp_path / "multi"), "--no-progress",
                 "-white_list", "gelu", "--dumped-outputs"], tmp_path, child_env)
    assert multi.returncode == 1, multi.stderr
    assert "error" in multi.stdout and "gelu" in multi.stdout
    details = glob.glob(str(tmp_path / "plain" / "accuracy_checking_details_*.csv"))[0]
    compared = run(["api_precision_compare", "-npu", details, "-gpu", details, "-o", str(tmp_path / "apc")],
                   tmp_path, child_env)
    assert compared.returncode == 0, compared.stderr  # the same details on both sides: nothing worse than the GPU
    assert glob.glob(str(tmp_path / "apc" / "api_precision_compare_result_*.csv"))
    refused = run(["-f", "mindspore", "run_ut", "-api_info", dump], tmp_path, child_env)
    assert refused.returncode == 2
    assert "argument -f/--framework: 'mindspore' is not supported" in refused.stderr
    assert "the one value allowed is 'pytorch'" in refused.stderr


MULTI_SCRIPT = '''import sys
from ptdbg_ascend import multi_run_ut
{guard}multi_run_ut(sys.argv[1], n=1, out_path=sys.argv[2], progress=False, white_list=["gelu"])
'''


@pytest.mark.parametrize("start_method", ["forkserver", "spawn"])
def test_multi_run_ut_names_the_missing_main_guard(model_dumps, tmp_path, child_env, start_method):
    """The precheck guide's snippet without the guard: the error names the script, its line and the guard,
    and nothing is written (a worker re-running the script would have written CSVs of its own)."""
    script = tmp_path / "check.py"
    script.write_text(MULTI_SCRIPT.format(guard="").replace("progress=False", "progress=False, start_method={!r}"
                                                             .format(start_method)))
    out = tmp_path / "out"
    result = subprocess.run([sys.executable, str(script), model_dumps["planted"], str(out)], capture_output=True,
                            text=True, cwd=str(tmp_path), env=child_env, timeout=300)
    assert result.returncode != 0
    expected = ("WorkerProcessError: multi_run_ut is called by the top-level code of {0} (line 3) without if "
                "__name__ == \"__main__\": its worker processes ({1}) import {0} again".format(script, start_method))
    assert expected in result.stderr, result.stderr[-3000:]
    assert "died while starting" not in result.stderr
    assert not out.exists()


def test_multi_run_ut_with_the_main_guard_runs(model_dumps, tmp_path, child_env):
    script = tmp_path / "check.py"
    script.write_text(MULTI_SCRIPT.format(guard='if __name__ == "__main__":\n    '))
    out = tmp_path / "out"
    result = subprocess.run([sys.executable, str(script), model_dumps["planted"], str(out)], capture_output=True,
                            text=True, cwd=str(tmp_path), env=child_env, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert len(glob.glob(str(out / "accuracy_checking_result_*.csv"))) == 1


def test_guard_detection_reads_the_source(tmp_path):
    """Guarded forms (``and``, reversed operands, nested blocks) pass; an else branch of the guard and
    plain top-level code do not."""
    from ptdbg_ascend.precheck.main_guard import _guarded

    source = tmp_path / "s.py"
    source.write_text("import x\n"                              # 1
                      "if __name__ == '__main__' and x:\n"      # 2
                      "    with open(p) as h:\n"               # 3
                      "        run()\n"                         # 4
                      "else:\n"                                 # 5
                      "    run()\n"                             # 6
                      "if '__main__' == __name__:\n"            # 7
                      "    try:\n"                              # 8
                      "        run()\n"                         # 9
                      "    except E:\n"                         # 10
                      "        run()\n"                         # 11
                      "run()\n")                                # 12
    assert [_guarded(str(source), line) for line in (1, 4, 6, 9, 11, 12)] == [False, True, False, True, True, False]
    source.write_text("def broken(:\n")
    assert _guarded(str(source), 1) is None  # unreadable source: nothing is claimed


def test_memory_format_is_null_as_msprobe_writes_it_and_run_ut_reruns_the_call(model_dumps, tmp_path, child_env):
    """loss.backward() calls ones_like(..., memory_format=torch.preserve_format): recorded as null, as
    msprobe 1.0.4 does (its run_ut passes a recorded value to the API as is, so a string would make the call
    fail there), and our run_ut re-runs the call (None is torch's default)."""
    with open(model_dumps["clean"], encoding="utf-8") as handle:
        data = json.load(handle)["data"]
    formats = [entry["input_kwargs"]["memory_format"] for name, entry in data.items()
               if name.startswith("Torch.ones_like.") and "memory_format" in entry.get("input_kwargs", {})]
    assert formats and all(value is None for value in formats)
    result = run(["run_ut", "-api_info", model_dumps["clean"], "-o", str(tmp_path), "--no-progress",
                  "-white_list", "ones_like"], tmp_path, child_env)
    assert result.returncode == 0, result.stderr
    with open(glob.glob(str(tmp_path / "accuracy_checking_result_*.csv"))[0], encoding="utf-8-sig") as handle:
        rows = handle.read().splitlines()
    assert "Torch.ones_like.0,pass, ," in rows, rows


def test_memory_format_dump_has_no_unsupported_type_warning(tmp_path, child_env):
    """Two backward passes: two ones_like calls with a memory_format, one INFO line naming the first."""
    script = tmp_path / "dump.py"
    script.write_text("import sys, torch\nfrom ptdbg_ascend import PrecisionDebugger\n"
                      "model = torch.nn.Linear(3, 2)\n"
                      "debugger = PrecisionDebugger(dump_path=sys.argv[1], task='statistics', level='L1')\n"
                      "debugger.start()\nx = torch.randn(2, 3)\n"
                      "for _ in range(2):\n    model(x).sum().backward()\n"
                      "debugger.stop()\ndebugger.step()\n")
    result = subprocess.run([sys.executable, str(script), str(tmp_path / "d")], capture_output=True, text=True,
                            env=child_env, timeout=300)
    assert result.returncode == 0, result.stderr
    output = result.stdout + result.stderr
    assert "is not supported" not in output  # msprobe 1.0.4's warning on every run
    assert output.count("memory_format arguments are recorded as null, as msprobe 1.0.4 does (first at "
                        "Torch.ones_like.0.forward.input.memory_format).") == 1
    with open(os.path.join(str(tmp_path / "d"), "step0", "rank", "dump.json"), encoding="utf-8") as handle:
        document = json.load(handle)
    assert document["framework"] == "pytorch"
    kwargs = document["data"]["Torch.ones_like.0.forward"]["input_kwargs"]
    assert "memory_format" in kwargs and kwargs["memory_format"] is None
    assert document["data"]["Torch.ones_like.1.forward"]["input_kwargs"]["memory_format"] is None
