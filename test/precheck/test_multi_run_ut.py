"""multi_run_ut on the reference model's dumps (conftest ``model_dumps``): the merged CSVs equal one
run_ut's, a SIGKILL of the whole run resumes to the same CSVs, a worker that dies is retried once and
then reported, torchrun with two ranks merges on rank 0, bad options are refused before anything is
written."""

from __future__ import annotations

import csv
import hashlib
import json
import os
import re
import signal
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

from ptdbg_ascend.cli import main as ptdbg  # noqa: E402
from ptdbg_ascend.errors import ParameterError, WorkerProcessError  # noqa: E402
from ptdbg_ascend.precheck.multi_run_ut import multi_run_ut  # noqa: E402
from ptdbg_ascend.precheck.run_ut import run_ut  # noqa: E402

# a few APIs of every kind in the model (forward only, forward + backward, several calls each)
SHORT_LIST = ["linear", "layer_norm", "gelu", "softmax", "matmul", "__add__"]


def read_bytes(path):
    with open(path, "rb") as handle:
        return handle.read()


def read_csv(path):
    with open(path, encoding="utf-8-sig", newline="") as handle:
        return list(csv.reader(handle))


def assert_same_csvs(outcome, reference):
    """Byte for byte, the names apart from the timestamp."""
    assert os.path.basename(outcome.result_csv).startswith("accuracy_checking_result_")
    assert os.path.basename(outcome.details_csv).startswith("accuracy_checking_details_")
    assert read_bytes(outcome.result_csv) == read_bytes(reference.result_csv)
    assert read_bytes(outcome.details_csv) == read_bytes(reference.details_csv)


@pytest.fixture(scope="module")
def single_clean(model_dumps, tmp_path_factory):
    """One run_ut of the whole clean dump in this process: the reference of the merged runs."""
    return run_ut(model_dumps["clean"], str(tmp_path_factory.mktemp("single")), progress=False)


def test_merged_csvs_equal_a_single_run_ut(model_dumps, single_clean, tmp_path):
    outcome = multi_run_ut(model_dumps["clean"], n=2, out_path=str(tmp_path), progress=False)
    print(outcome.summary())
    assert_same_csvs(outcome, single_clean)
    assert len(read_csv(outcome.result_csv)) == 1 + 190  # every API call of the reference model's step
    assert outcome.counts == single_clean.counts and outcome.apis_run == 190
    assert outcome.workers == 2 and outcome.start_method == "forkserver"
    # peak RSS: the parent and both workers report theirs (KiB; a torch process is well above 50 MiB)
    assert len(outcome.peak_rss_parent_kib) == 1 and outcome.peak_rss_parent_kib[0] > 50 * 1024
    assert len(outcome.peak_rss_workers_kib) == 2 and min(outcome.peak_rss_workers_kib) > 50 * 1024
    assert re.search(r"\n  2 workers \(forkserver, ready after \d+\.\d s\); peak RSS: parent \d+ MiB, one worker "
                     r"\d+ MiB", outcome.summary())
    tail = os.path.basename(outcome.result_csv)[len("accuracy_checking_result_"):]
    # the pair, the run file (the dump's fingerprint) and the hidden lock file
    assert sorted(os.listdir(str(tmp_path))) == sorted([os.path.basename(outcome.result_csv),
                                                        os.path.basename(outcome.details_csv),
                                                        "accuracy_checking_run_" + tail[:-len(".csv")] + ".jsonl",
                                                        ".accuracy_checking_result_" + tail + ".lock"])


def test_failures_found_in_workers_are_named(model_dumps, tmp_path):
    # dumped_outputs judges the dump's own gelu (computed through bfloat16): no patch needed in the workers
    outcome = multi_run_ut(model_dumps["planted"], n=2, out_path=str(tmp_path), progress=False,
                           dumped_outputs=True, white_list=["gelu", "linear"])
    assert [(f.name, f.forward, f.backward) for f in outcome.failures] == [("Functional.gelu.0", "error", "error")]
    assert outcome.counts == {"pass": 5, "error": 1}
    assert outcome.failures[0].code_line.endswith("torch.nn.functional.gelu(self.ff1(self.ln2(x))))")


# --- resume after a SIGKILL of the whole run ------------------------------------------------------------

KILL_ALL = """
import os, signal, time
from ptdbg_ascend.precheck import execution
real = execution.execute
def execute(call, *args, **kwargs):
    if call.full_name == {target!r}:
        time.sleep(0.5)  # let the parent commit what has arrived, then kill parent, workers, fork server
        os.killpg(os.getpgid(0), signal.SIGKILL)
    return real(call, *args, **kwargs)
execution.execute = execute
"""


def test_resume_after_sigkill_of_the_whole_run_gives_the_uninterrupted_csvs(model_dumps, tmp_path, child_env):
    whole = run_ut(model_dumps["clean"], str(tmp_path / "whole"), progress=False, white_list=SHORT_LIST)
    total = len(read_csv(whole.result_csv)) - 1
    (tmp_path / "kill_all.py").write_text(KILL_ALL.format(target="Functional.linear.3"))
    env = dict(child_env, PYTHONPATH=str(tmp_path) + os.pathsep + child_env["PYTHONPATH"],
               OMP_NUM_THREADS=str(torch.get_num_threads()))  # the thread count of the reference run
    out = tmp_path / "killed"
    process = subprocess.run([sys.executable, "-m", "ptdbg_ascend.cli", "multi-run-ut", "-api_info",
                              model_dumps["clean"], "-o", str(out), "-n", "2", "--no-progress",
                              "--preload", "kill_all", "-white_list"] + SHORT_LIST,
                             env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60,
                             start_new_session=True)  # its own process group: the kill spares pytest
    assert process.returncode == -signal.SIGKILL, process.stdout.decode(errors="replace")
    result = [str(out / name) for name in os.listdir(str(out)) if name.startswith("accuracy_checking_result_")][0]
    written = read_csv(result)[1:]
    names = [row[0] for row in read_csv(whole.result_csv)[1:]]
    assert 1 <= len(written) <= names.index("Functional.linear.3")  # a prefix in dump order, linear.3 not in it
    assert written == read_csv(whole.result_csv)[1:1 + len(written)]
    resumed = multi_run_ut(model_dumps["clean"], n=2, progress=False, result_csv_path=result, white_list=SHORT_LIST)
    assert resumed.apis_resumed == len(written) and resumed.apis_run == total - len(written)
    assert_same_csvs(resumed, whole)
    assert len(os.listdir(str(out))) == 4  # appended to the pair (+ run file, lock file), no new one


# --- a worker that dies -----------------------------------------------------------------------------------

CRASH = """
import os, signal
from ptdbg_ascend.precheck import execution
real = execution.execute
def execute(call, *args, **kwargs):
    if call.full_name == "Functional.gelu.0" and {condition}:
        os.kill(os.getpid(), signal.SIGKILL)  # this worker only
    return real(call, *args, **kwargs)
execution.execute = execute
"""


def test_worker_killed_once_is_retried_and_the_csvs_are_complete(model_dumps, tmp_path, monkeypatch):
    marker = tmp_path / "killed_once"
    condition = "not os.path.exists({0!r}) and open({0!r}, 'w')".format(str(marker))
    (tmp_path / "crash_once.py").write_text(CRASH.format(condition=condition))
    monkeypatch.syspath_prepend(str(tmp_path))  # the workers get this process's sys.path
    whole = run_ut(model_dumps["clean"], str(tmp_path / "whole"), progress=False, white_list=SHORT_LIST)
    outcome = multi_run_ut(model_dumps["clean"], n=2, out_path=str(tmp_path / "multi"), progress=False,
                           white_list=SHORT_LIST, preload=["crash_once"])
    assert marker.exists()
    assert outcome.retried == [("Functional.gelu.0", "killed by SIGKILL")] and outcome.crashed == []
    assert_same_csvs(outcome, whole)
    assert "retried Functional.gelu.0: its worker died (killed by SIGKILL)" in outcome.summary()


def test_api_that_always_kills_its_worker_becomes_an_error_row(model_dumps, tmp_path, monkeypatch):
    (tmp_path / "crash_always.py").write_text(CRASH.format(condition="True"))
    monkeypatch.syspath_prepend(str(tmp_path))
    whole = run_ut(model_dumps["clean"], str(tmp_path / "whole"), progress=False, white_list=SHORT_LIST)
    outcome = multi_run_ut(model_dumps["clean"], n=2, out_path=str(tmp_path / "multi"), progress=False,
                           white_list=SHORT_LIST, preload=["crash_always"])
    assert outcome.crashed == [("Functional.gelu.0", "killed by SIGKILL")]
    message = ("not judged: the worker process running it died 2 times (killed by SIGKILL); re-run it alone "
               "(run_ut -white_list Functional.gelu) to see why")
    expected = [row if row[0] != "Functional.gelu.0" else ["Functional.gelu.0", "error", "error", message]
                for row in read_csv(whole.result_csv)]
    assert read_csv(outcome.result_csv) == expected  # every other API's row is there, in dump order
    details = read_csv(outcome.details_csv)
    gelu = [row for row in details if row[0].startswith("Functional.gelu.0.")]
    assert [(row[0], row[21], row[22]) for row in gelu] == [("Functional.gelu.0.forward.output.0", "error", message)]
    others = [row for row in read_csv(whole.details_csv) if not row[0].startswith("Functional.gelu.0.")]
    assert [row for row in details if not row[0].startswith("Functional.gelu.0.")] == others
    assert [(f.name, f.status) for f in outcome.failures] == [("Functional.gelu.0", "error")]
    assert outcome.failed


def test_worker_that_cannot_start_is_a_clear_error_and_leaves_no_csv(model_dumps, tmp_path, monkeypatch):
    (tmp_path / "broken_setup.py").write_text("raise RuntimeError('no such custom op library')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    out = tmp_path / "out"
    with pytest.raises(WorkerProcessError, match=r"worker \d failed while starting \(importing --preload "
                                                 r"broken_setup\): RuntimeError: no such custom op library"):
        multi_run_ut(model_dumps["clean"], n=2, out_path=str(out), progress=False, preload=["broken_setup"])
    assert os.listdir(str(out)) == []  # the fresh pair is removed: nothing half-written


def test_exception_inside_one_call_is_its_skip_row_and_the_run_goes_on(model_dumps, tmp_path, monkeypatch):
    """Per-call isolation: an error raised while checking one call (here planted in the runner itself, as a
    bug would be) becomes that call's SKIP row naming the error and where it was raised; every other row is
    exactly run_ut's."""
    (tmp_path / "raise_gelu.py").write_text(CRASH.replace("os.kill(os.getpid(), signal.SIGKILL)",
                                                          "raise KeyError('bug')").format(condition="True"))
    monkeypatch.syspath_prepend(str(tmp_path))
    whole = run_ut(model_dumps["clean"], str(tmp_path / "whole"), progress=False, white_list=SHORT_LIST)
    outcome = multi_run_ut(model_dumps["clean"], n=1, out_path=str(tmp_path / "multi"), progress=False,
                           white_list=SHORT_LIST, preload=["raise_gelu"])
    expected, got = read_csv(whole.result_csv), read_csv(outcome.result_csv)
    gelu = [row[0] for row in expected].index("Functional.gelu.0")
    assert got[:gelu] + got[gelu + 1:] == expected[:gelu] + expected[gelu + 1:]
    assert got[gelu][:3] == ["Functional.gelu.0", "SKIP", "SKIP"]
    assert re.match(r"Functional\.gelu\.0 could not be checked: KeyError: 'bug' \(at raise_gelu\.py:\d+\)$",
                    got[gelu][3]), got[gelu][3]
    assert ("Functional.gelu.0", got[gelu][3]) in outcome.skipped


# --- torchrun ---------------------------------------------------------------------------------------------

def test_torchrun_two_ranks_rank0_writes_the_merged_csvs(model_dumps, single_clean, tmp_path, child_env):
    env = dict(child_env, OMP_NUM_THREADS=str(torch.get_num_threads()))  # torchrun would set 1
    out = tmp_path / "cluster"
    process = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                              "-m", "ptdbg_ascend.cli", "multi-run-ut", "-api_info", model_dumps["clean"],
                              "-o", str(out), "-n", "1", "--no-progress"],
                             env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=80, cwd=str(tmp_path))
    text = process.stdout.decode(errors="replace")
    assert process.returncode == 0, text
    assert "multi_run_ut rank 1/2: 95 API calls run by 1 worker; rank 0 writes the CSVs." in text  # 190 / 2
    assert re.search(r"1 worker \(forkserver, ready after \d+\.\d s\) on each of 2 ranks", text)
    names = sorted(name for name in os.listdir(str(out)) if name.endswith(".csv"))
    assert len(names) == 2  # rank 0's pair only
    assert len(os.listdir(str(out))) == 4  # with rank 0's run file and lock file
    run_file = [name for name in os.listdir(str(out)) if name.startswith("accuracy_checking_run_")][0]
    with open(str(out / run_file), encoding="utf-8") as handle:
        recorded = json.loads(handle.readline())["dump"]
    assert recorded["sha256"] == hashlib.sha256(read_bytes(model_dumps["clean"])).hexdigest()
    result, details = (str(out / name) for name in names[::-1])  # result sorts after details
    assert read_bytes(result) == read_bytes(single_clean.result_csv)
    assert read_bytes(details) == read_bytes(single_clean.details_csv)


# --- bad options --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("options, parameter", [
    ({"n": 0}, "n"), ({"n": 65}, "n"), ({"start_method": "fork"}, "start_method"),
    ({"preload": ["no_such_module_here"]}, "preload"), ({"devices": []}, "devices"),
    ({"threads_per_worker": 0}, "threads_per_worker"), ({"white_list": ["no_such_api"]}, "white_list"),
])
def test_bad_options_are_refused_before_anything_is_written(model_dumps, tmp_path, options, parameter):
    out = tmp_path / "out"
    with pytest.raises(ParameterError, match=f"Invalid {parameter}="):
        multi_run_ut(model_dumps["clean"], out_path=str(out), progress=False, **options)
    assert not out.exists()


def test_cli_msprobe_spellings(model_dumps, tmp_path, capsys):
    code = ptdbg(["multi-run-ut", "-api_info", model_dumps["clean"], "--num_splits", "2", "-o", str(tmp_path),
                  "--no-progress", "-white_list", "gelu", "conv2d"])
    printed = capsys.readouterr().out
    assert code == 0, printed
    assert "multi_run_ut: 2 APIs: 2 pass, 0 warning, 0 error, 0 SKIP" in printed
    assert ptdbg(["multi-run-ut", "-api_info", model_dumps["clean"], "-n", "0", "-o", str(tmp_path / "x")]) == 2
    assert "Invalid n=0: must be an int from 1 to 64" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()
