"""Clear ends of a pre-check: Ctrl-C stops with one line naming the CSV to resume (exit 130) and the
resumed run completes without a duplicated row; a torchrun environment whose peers never come gives up
after cluster_timeout naming RANK/WORLD_SIZE; an error_data_path that cannot be written is refused
before any CSV exists."""

from __future__ import annotations

import csv
import os
import re
import signal
import socket
import subprocess
import sys
import time

import pytest
import tmpfs

torch = pytest.importorskip("torch")

from ptdbg_ascend.cli import main as ptdbg  # noqa: E402
from ptdbg_ascend.errors import ParameterError, RunInterrupted  # noqa: E402
from ptdbg_ascend.precheck.multi_run_ut import multi_run_ut  # noqa: E402
from ptdbg_ascend.precheck.run_ut import run_ut  # noqa: E402

LIST = ["linear", "layer_norm", "matmul", "softmax", "__add__", "gelu"]
# every API takes a while in the child (in its workers too, as a --preload module): Ctrl-C lands mid-run
SLOW = """
import time
from ptdbg_ascend.precheck import execution
real = execution.execute
def execute(*args, **kwargs):
    time.sleep(0.15)
    return real(*args, **kwargs)
execution.execute = execute
"""
RUN_SLOWLY = """
import sys
import slow_apis
from ptdbg_ascend.cli import main
sys.exit(main(sys.argv[1:]))
"""


def read_csv(path):
    with open(path, encoding="utf-8-sig", newline="") as handle:
        return list(csv.reader(handle))


def result_csvs(directory):
    return [os.path.join(str(directory), name) for name in os.listdir(str(directory))
            if name.startswith("accuracy_checking_result_")]


def wait_for_rows(directory, count, process, timeout=120):
    """Until the result CSV in ``directory`` holds ``count`` API rows; its path."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        assert process.poll() is None, process.communicate()
        found = result_csvs(directory) if os.path.isdir(str(directory)) else []
        if found and len(read_csv(found[0])) > count:
            return found[0]
        time.sleep(0.02)
    raise AssertionError(f"no {count} rows in time")


def whole_apis_only(result_csv):
    """Every details row belongs to an API with a result row (an interrupted run left whole APIs)."""
    done = {row[0] for row in read_csv(result_csv)[1:]}
    for row in read_csv(result_csv.replace("result", "details"))[1:]:
        assert row[0].rsplit(".", 3)[0] in done, row[0]


@pytest.fixture
def slow_env(child_env, tmp_path):
    (tmp_path / "slow_apis.py").write_text(SLOW)
    (tmp_path / "run_slowly.py").write_text(RUN_SLOWLY)
    return dict(child_env, PYTHONPATH=str(tmp_path) + os.pathsep + child_env["PYTHONPATH"],
                OMP_NUM_THREADS=str(torch.get_num_threads()))  # the thread count of the reference run


# --- Ctrl-C -----------------------------------------------------------------------------------------------

def test_ctrl_c_run_ut_names_the_csv_and_the_resume_completes(model_dumps, tmp_path, slow_env):
    whole = run_ut(model_dumps["clean"], str(tmp_path / "whole"), progress=False, white_list=LIST)
    out = tmp_path / "out"
    process = subprocess.Popen([sys.executable, str(tmp_path / "run_slowly.py"), "run-ut", "-api_info",
                                model_dumps["clean"], "-o", str(out), "--no-progress", "-white_list"] + LIST,
                               env=slow_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    result = wait_for_rows(out, 3, process)
    process.send_signal(signal.SIGINT)
    stdout, stderr = process.communicate(timeout=60)
    assert process.returncode == 130, (stdout, stderr)
    assert stderr.decode() == f"ptdbg run-ut: interrupted: resume with -csv_path {result}\n"
    written = read_csv(result)[1:]
    assert 3 <= len(written) < len(read_csv(whole.result_csv)) - 1  # stopped mid-run
    assert written == read_csv(whole.result_csv)[1:1 + len(written)]
    whole_apis_only(result)
    assert ptdbg(["run-ut", "-api_info", model_dumps["clean"], "-csv_path", result, "--no-progress",
                  "-white_list"] + LIST) == 0
    assert read_csv(result) == read_csv(whole.result_csv)  # no API twice, none missing
    assert read_csv(result.replace("result", "details")) == read_csv(whole.details_csv)


def test_ctrl_c_multi_run_ut_stops_workers_and_resumes(model_dumps, tmp_path, slow_env):
    whole = run_ut(model_dumps["clean"], str(tmp_path / "whole"), progress=False, white_list=LIST)
    out = tmp_path / "out"
    process = subprocess.Popen([sys.executable, "-m", "ptdbg_ascend.cli", "multi-run-ut", "-api_info",
                                model_dumps["clean"], "-o", str(out), "-n", "2", "--no-progress", "--preload",
                                "slow_apis", "-white_list"] + LIST,
                               env=slow_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    result = wait_for_rows(out, 3, process)
    os.killpg(process.pid, signal.SIGINT)  # what Ctrl-C in a terminal does: the whole process group
    stdout, stderr = process.communicate(timeout=60)
    assert process.returncode == 130, (stdout, stderr)
    assert stderr.decode() == f"ptdbg multi-run-ut: interrupted: resume with -csv_path {result}\n"
    deadline = time.time() + 20
    while time.time() < deadline:  # the workers and the fork server end with the parent
        try:
            os.killpg(process.pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        raise AssertionError("processes of the interrupted run are still alive")
    whole_apis_only(result)
    resumed = multi_run_ut(model_dumps["clean"], n=2, progress=False, result_csv_path=result, white_list=LIST)
    assert resumed.apis_resumed >= 3 and resumed.apis_resumed + resumed.apis_run == len(read_csv(whole.result_csv)) - 1
    assert read_csv(result) == read_csv(whole.result_csv)
    assert read_csv(result.replace("result", "details")) == read_csv(whole.details_csv)


def test_ctrl_c_reaches_python_callers_as_a_keyboard_interrupt(model_dumps, tmp_path, monkeypatch):
    from ptdbg_ascend.precheck import execution

    real, calls = execution.execute, []

    def interrupted_at_the_third(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(execution, "execute", interrupted_at_the_third)
    with pytest.raises(KeyboardInterrupt) as caught:
        run_ut(model_dumps["clean"], str(tmp_path), progress=False, white_list=LIST)
    assert isinstance(caught.value, RunInterrupted) and not isinstance(caught.value, Exception)
    assert len(read_csv(caught.value.result_csv)) == 1 + 2
    assert str(caught.value) == "interrupted: resume with -csv_path " + caught.value.result_csv


INTERRUPTIBLE = """
import sys, time
from ptdbg_ascend.compat import migrate
def slow(*args, **kwargs):
    print("started", flush=True)
    time.sleep(60)
migrate.migrate_file = slow
from ptdbg_ascend.cli import main
sys.exit(main(["migrate", "train.py"]))
"""


def test_ctrl_c_in_another_command_is_one_line(tmp_path, child_env):
    script = tmp_path / "interruptible.py"
    script.write_text(INTERRUPTIBLE)
    process = subprocess.Popen([sys.executable, str(script)], env=child_env, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, cwd=str(tmp_path))
    assert process.stdout.readline() == b"started\n"
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 130 and stderr.decode() == "ptdbg migrate: interrupted\n"


# --- peers that never come --------------------------------------------------------------------------------

def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.parametrize("rank", ["0", "1"])
def test_stale_rank_environment_gives_up_after_cluster_timeout(model_dumps, tmp_path, child_env, rank):
    port = free_port()
    env = dict(child_env, RANK=rank, WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    out = tmp_path / "out"
    started = time.time()
    process = subprocess.run([sys.executable, "-m", "ptdbg_ascend.cli", "multi-run-ut", "-api_info",
                              model_dumps["clean"], "-o", str(out), "-n", "1", "--no-progress",
                              "--cluster-timeout", "3"],
                             env=env, capture_output=True, timeout=120)
    elapsed = time.time() - started
    stdout, stderr = process.stdout.decode(), process.stderr.decode()
    assert process.returncode == 2, (stdout, stderr)
    assert elapsed < 40  # torch's own default: 30 minutes
    assert "multi_run_ut: waiting up to 3 s for the 2 ranks of WORLD_SIZE to join (RANK={} WORLD_SIZE=2 " \
           "MASTER_ADDR=127.0.0.1 MASTER_PORT={}, all from the environment).".format(rank, port) in stdout
    assert stderr.count("\n") == 1, stderr  # one line: no C++ trace of torch's retries
    assert stderr.startswith("ptdbg multi-run-ut: error: multi_run_ut: gave up after 3 s waiting for the other ranks: "
                             "this process is RANK={} WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT={}, all from the "
                             "environment.".format(rank, port)), stderr
    assert "a stale RANK/WORLD_SIZE left in the shell is the usual cause" in stderr
    assert "--cluster-timeout" in stderr
    assert not out.exists()  # nothing written


def test_plain_run_ut_ignores_a_stale_rank_environment(model_dumps, tmp_path, child_env):
    env = dict(child_env, RANK="0", WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    process = subprocess.run([sys.executable, "-m", "ptdbg_ascend.cli", "run-ut", "-api_info", model_dumps["clean"],
                              "-o", str(tmp_path), "--no-progress", "-white_list", "softmax"],
                             env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120)
    assert process.returncode == 0 and b"run_ut: 1 APIs: 1 pass" in process.stdout


@pytest.mark.parametrize("value", [0, -1, float("nan"), float("inf"), "300", True])
def test_bad_cluster_timeout_is_refused(model_dumps, tmp_path, value):
    with pytest.raises(ParameterError, match="Invalid cluster_timeout=.*must be a number of seconds > 0"):
        multi_run_ut(model_dumps["clean"], out_path=str(tmp_path / "out"), progress=False, cluster_timeout=value)
    assert not (tmp_path / "out").exists()


# --- error_data_path that cannot be written ------------------------------------------------------------------

@pytest.fixture
def read_only_dir(tmp_path):
    """A read-only tmpfs mount (root ignores permission bits); skipped where mounting is not allowed."""
    path = tmp_path / "read_only"
    path.mkdir()
    yield tmpfs.mount(path, "ro,size=1m")
    tmpfs.unmount(path)


def test_read_only_error_data_path_is_refused_before_any_csv(model_dumps, tmp_path, read_only_dir, capsys):
    out = tmp_path / "out"
    with pytest.raises(ParameterError) as caught:
        run_ut(model_dumps["clean"], str(out), progress=False, save_error_data=True,
               error_data_path=str(read_only_dir), white_list=["softmax"])
    assert str(caught.value) == ("Invalid error_data_path={!r}: must be a directory this process can write "
                                 "(save_error_data writes the failing APIs' data under it). Creating a directory in "
                                 "it failed: Read-only file system.".format(str(read_only_dir)))
    assert not out.exists() or os.listdir(str(out)) == []  # no CSV pair, not even an empty one
    with pytest.raises(ParameterError, match="Invalid error_data_path="):
        multi_run_ut(model_dumps["clean"], n=1, out_path=str(out), progress=False, save_error_data=True,
                     error_data_path=str(read_only_dir), white_list=["softmax"])
    assert not out.exists() or os.listdir(str(out)) == []
    # the default error_data_path is the output directory: a read-only one is named with that said
    assert ptdbg(["run-ut", "-api_info", model_dumps["clean"], "-o", str(read_only_dir), "-save_error_data",
                  "--no-progress"]) == 2
    error = capsys.readouterr().err
    assert error == ("ptdbg run-ut: error: Invalid error_data_path={!r}: must be a directory this process can write "
                     "(save_error_data writes the failing APIs' data under it). Creating a directory in it failed: "
                     "Read-only file system. (error_data_path not given: the output directory is used)\n"
                     .format(str(read_only_dir)))
    assert os.listdir(str(read_only_dir)) == []


# --- a disk that fills during the run -----------------------------------------------------------------------

@pytest.fixture
def small_disk(tmp_path):
    """A 48 KiB tmpfs: the CSVs and run file of the reference model's 190 APIs take about 95 KB."""
    path = tmp_path / "small"
    path.mkdir()
    yield tmpfs.mount(path, "size=48k")
    tmpfs.unmount(path)


@pytest.mark.parametrize("command", ["run-ut", "multi-run-ut"])
def test_a_full_disk_stops_with_one_line_naming_the_file_and_what_was_kept(model_dumps, tmp_path, small_disk,
                                                                           child_env, command):
    """No space left in -o during the run: one line naming the file that could not be written, how many
    APIs the CSVs hold and how to resume; the CSVs end at the last whole API (no torn line); once there is
    space again, -csv_path finishes them as an uninterrupted run would have written them."""
    whole = run_ut(model_dumps["clean"], str(tmp_path / "whole"), progress=False)
    extra = ["-n", "1"] if command == "multi-run-ut" else []
    done = subprocess.run([sys.executable, "-m", "ptdbg_ascend.cli", command, "-api_info", model_dumps["clean"],
                           "-o", str(small_disk), "--no-progress"] + extra, env=child_env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 2, (done.returncode, done.stderr)
    assert done.stderr.count("\n") == 1, done.stderr
    (result,) = result_csvs(small_disk)
    details = result.replace("_result_", "_details_")
    kept = len(read_csv(result)) - 1
    assert 0 < kept < 190
    assert re.match(r"ptdbg {}: error: Cannot write {}: \[Errno 28\] No space left on device\. The result CSV {} holds "
                    r"the {} APIs? finished before it \(their details rows too; nothing of [^ ]+ was kept\)\. Free "
                    r"space \(or fix the cause\), then resume with -csv_path {}\n$".format(
                        command, "({}|{}|{})".format(re.escape(result), re.escape(details),
                                                     re.escape(result[:-len(".csv")].replace("_result_", "_run_")
                                                               + ".jsonl")),
                        re.escape(result), kept, re.escape(result)), done.stderr), done.stderr
    # the files end at a whole API: every line complete, the details rows of exactly the kept APIs
    for path in (result, details):
        with open(path, "rb") as handle:
            assert handle.read().endswith(b"\n"), path
    names = [row[0] for row in read_csv(result)[1:]]
    assert {row[0].split(".forward")[0].split(".backward")[0] for row in read_csv(details)[1:]} <= set(names)
    assert read_csv(result)[1:] == read_csv(whole.result_csv)[1:1 + kept]
    assert read_csv(details) == read_csv(whole.details_csv)[:len(read_csv(details))]
    subprocess.run(["mount", "-o", "remount,size=4m", str(small_disk)], check=True)
    resumed = run_ut(model_dumps["clean"], progress=False, result_csv_path=result)
    assert (resumed.apis_resumed, resumed.apis_run) == (kept, 190 - kept)
    assert read_csv(result) == read_csv(whole.result_csv)
    assert read_csv(details) == read_csv(whole.details_csv)


def test_a_full_disk_before_the_first_api_leaves_no_pair(model_dumps, tmp_path, child_env):
    path = tmp_path / "tiny"
    path.mkdir()
    tmpfs.mount(path, "size=4k")
    try:
        descriptor = os.open(str(path / "filler"), os.O_WRONLY | os.O_CREAT)
        try:  # fill it: not a page left
            while True:
                os.write(descriptor, b"x" * 1024)
        except OSError:
            pass
        finally:
            os.close(descriptor)
        done = subprocess.run([sys.executable, "-m", "ptdbg_ascend.cli", "run-ut", "-api_info", model_dumps["clean"],
                               "-o", str(path), "--no-progress"], env=child_env, capture_output=True, text=True,
                              timeout=300)
        assert done.returncode == 2, done.stderr
        assert done.stderr.count("\n") == 1, done.stderr
        assert done.stderr.startswith("ptdbg run-ut: error: Cannot write ") and "No space left on device" in done.stderr
        assert "Nothing was written: the new CSV pair is removed." in done.stderr, done.stderr
        assert sorted(os.listdir(str(path))) == ["filler"]
    finally:
        tmpfs.unmount(path)
