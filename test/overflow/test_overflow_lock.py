"""Overflow dumps take the rank directory's lock, as dump windows do: two real processes overflow-dumping
into the same rank directory; the second gets a DumpPathError naming the first."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

OVERFLOWING_SCRIPT = textwrap.dedent('''
    import sys, torch
    from ptdbg_ascend import *
    from ptdbg_ascend.errors import DumpPathError

    set_dump_path(sys.argv[1])
    register_hook(torch.nn.Identity(), overflow_check, overflow_nums=-1, rank=0)
    try:
        torch.exp(torch.full((2,), 1000.0))  # inf: dumped into rank0
        print("RESULT dumped", flush=True)
    except DumpPathError as error:
        print("RESULT refused:", error, flush=True)
        sys.exit(0)
    sys.stdin.readline()  # hold the rank directory until the test says go
    torch.exp(torch.full((2,), 1000.0))  # a second overflow, still this process's directory
    print("RESULT dumped again", flush=True)
''')


def _start(script, out_dir):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env.pop("ASCEND_WORK_PATH", None)
    return subprocess.Popen([sys.executable, str(script), str(out_dir)], env=env, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _results(text):
    """The script's own lines (the tool's log lines go to stdout too)."""
    return [line[len("RESULT "):] for line in text.splitlines() if line.startswith("RESULT ")]


def _next_result(process):
    for line in process.stdout:
        if line.startswith("RESULT "):
            return line[len("RESULT "):].strip()
    return None


def test_a_second_process_overflow_dumping_into_the_same_rank_dir_is_refused(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(OVERFLOWING_SCRIPT)
    out_dir = tmp_path / "out"
    first = _start(script, out_dir)
    try:
        assert _next_result(first) == "dumped"
        rank_dir = out_dir / "ptdbg_dump_v1.0" / "rank0"
        with open(str(rank_dir / ".ptdbg.lock"), encoding="utf-8") as handle:
            assert handle.read().split()[0] == str(first.pid)
        second = _start(script, out_dir)
        out, err = second.communicate(timeout=120)
        assert second.returncode == 0, err
        assert len(_results(out)) == 1, out
        refusal = _results(out)[0]
        assert refusal.startswith(f"refused: Another process writes to {rank_dir}")
        assert f"held by pid {first.pid} on host" in refusal
        out, err = first.communicate("go\n", timeout=120)
        assert first.returncode == 0, err
        assert _results(out) == ["dumped again"]
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    pkls = sorted(name for name in os.listdir(str(rank_dir)) if name.endswith(".pkl"))
    # only the first process's two overflows; the lock is gone with the process's exit
    assert len(pkls) == 2 and all(name.startswith("Overflow_info_") for name in pkls)
    assert pkls[0].endswith("_1.pkl") and pkls[1].endswith("_2.pkl")
    assert not (rank_dir / ".ptdbg.lock").exists()
