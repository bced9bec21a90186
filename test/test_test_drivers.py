"""The test drivers themselves: a run that dies or hangs must fail its test at once, never hang the suite
(a hung killed-run test once used up a whole CI run)."""

import os
import subprocess
import sys
import textwrap

import pytest

import zygote as zygote_module
from zygote import Zygote

def test_a_line_the_kill_cut_short_still_ends_at_the_zygotes_done(tmp_path):
    script = tmp_path / "zygote.py"
    script.write_text(textwrap.dedent('''
        import os, sys, time
        for line in sys.stdin:
            pid = os.fork()
            if pid == 0:
                print("PID {}".format(os.getpid()), flush=True)
                sys.stdout.write("STEP 0 1.0\\n[INFO] a log line cut by the kill")
                sys.stdout.flush()
                time.sleep(600)
            os.waitpid(pid, 0)
            print("DONE", flush=True)
    '''))
    with Zygote(str(script)) as zygote:
        pid = zygote.start(str(tmp_path / "out"))
        assert next(zygote.steps()) == (0, 1.0)
        zygote.kill(pid)  # returns: the zygote's DONE ended the cut line


# A zygote whose runs print two steps and then die of an exception (as a run hitting a tool error would).
DYING_RUNS = textwrap.dedent('''
    import os, sys
    for line in sys.stdin:
        pid = os.fork()
        if pid == 0:
            try:
                print("PID {}".format(os.getpid()), flush=True)
                print("STEP 0 1.0", flush=True)
                print("STEP 1 2.0", flush=True)
                raise RuntimeError("the run failed")
            finally:
                os._exit(0)
        os.waitpid(pid, 0)
        print("DONE", flush=True)
''')


def test_a_run_that_ends_by_itself_fails_the_test_instead_of_hanging(tmp_path):
    script = tmp_path / "zygote.py"
    script.write_text(DYING_RUNS)
    with Zygote(str(script)) as zygote:
        zygote.start(str(tmp_path / "out"))
        seen = []
        with pytest.raises(AssertionError, match="ended by itself"):
            for step, _ in zygote.steps():
                seen.append(step)
    assert seen == [0, 1]


def test_a_silent_zygote_fails_after_the_line_timeout(tmp_path, monkeypatch):
    script = tmp_path / "zygote.py"
    script.write_text("import sys, time\nsys.stdin.readline()\ntime.sleep(600)\n")
    monkeypatch.setattr(zygote_module, "LINE_TIMEOUT", 1.0)
    with Zygote(str(script)) as zygote:
        with pytest.raises(AssertionError, match="printed nothing for 1 s"):
            zygote.start(str(tmp_path / "out"))
        pid = zygote.process.pid
    assert zygote.process.returncode is not None, pid  # killed with its group on exit


def test_the_watchdog_stops_a_hung_test_with_its_stack_and_kills_its_subprocesses(tmp_path):
    (tmp_path / "conftest.py").write_text(open(zygote_module.__file__.replace("zygote.py", "conftest.py")).read())
    (tmp_path / "test_hang.py").write_text(textwrap.dedent('''
        import subprocess, sys, time
        def test_hangs(tmp_path):
            child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
            (tmp_path.parent / "child.pid").write_text(str(child.pid))
            time.sleep(300)
    '''))
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--basetemp",
                             str(tmp_path / "base"), str(tmp_path / "test_hang.py")],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120,
                            env=dict(os.environ, PTDBG_TEST_TIMEOUT="3"))
    assert result.returncode == 1, result.stdout
    assert "test_hang.py::test_hangs ran past 3 s" in result.stdout, result.stdout  # the node id is rootdir-relative
    assert 'test_hang.py", line 6 in test_hangs' in result.stdout, result.stdout  # the hung line
    pids = list((tmp_path / "base").rglob("child.pid"))
    assert pids, "the hung test never started its child"
    assert not _alive(int(pids[0].read_text())), "the hung test's child survived"


def _alive(pid):
    """Whether ``pid`` runs (a killed orphan may stay a zombie until init reaps it)."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
