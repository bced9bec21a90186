"""One writer per dump directory, raced: two real processes call ``PrecisionDebugger.start()`` on one
step/rank directory at the same instant, many rounds, with and without a stale ``.ptdbg.lock`` (a dead
pid) there. In every round exactly one starts, the other gets a DumpPathError naming the holder, and the
winner's dump.json holds every entry it recorded.

Each process tells itself apart by its values: worker ``w`` calls ``torch.relu`` on a tensor full of
``w + 1``, ``w + 2`` times, so the entries and their ``Max`` say whose dump.json it is."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
import time

import pytest

from ptdbg_ascend.fs.locks import DumpLock
from ptdbg_ascend.errors import DumpPathError

WORKER = textwrap.dedent('''
    import os, sys, time
    import torch
    torch.set_num_threads(1)
    from ptdbg_ascend import PrecisionDebugger
    from ptdbg_ascend.errors import DumpPathError
    worker = int(sys.argv[1])
    values = torch.full((3,), float(worker + 1))  # made here: torch.full is a wrapped API too
    print("READY", flush=True)
    debugger = None
    for line in sys.stdin:
        words = line.split()
        if words[0] == "go":  # go {dump_path} {monotonic deadline}
            debugger = PrecisionDebugger(task="statistics", level="L1", dump_path=words[1])
            deadline = float(words[2])
            while time.monotonic() < deadline:  # both processes leave this loop at the same instant
                pass
            try:
                debugger.start()
            except DumpPathError as error:
                print("REFUSED " + str(error).replace("\\n", " "), flush=True)
                debugger = None
                continue
            for _ in range(worker + 2):
                torch.relu(values)
            print("STARTED", flush=True)
        elif words[0] == "stop":
            if debugger is not None:
                debugger.stop()
                debugger.step()  # the counters start at 0 again: the next round's names are this one's
                debugger = None
            print("STOPPED", flush=True)
''')

ROUNDS = 24

# The lock alone, raced many rounds: each worker walks the same directories in step with the other, on
# deadlines of the shared monotonic clock, and says for each whether it took the lock.
LOCK_WORKER = textwrap.dedent('''
    import sys, time
    from ptdbg_ascend.errors import DumpPathError
    from ptdbg_ascend.fs.locks import DumpLock
    base, period, directories = float(sys.argv[1]), float(sys.argv[2]), sys.argv[3:]
    for k, directory in enumerate(directories):
        while time.monotonic() < base + k * period:
            pass
        lock = DumpLock(directory)
        try:
            lock.acquire()
        except DumpPathError:
            print("REFUSED", k, flush=True)
            continue
        took = time.monotonic()
        while time.monotonic() < base + (k + 0.5) * period:  # held while the other one tries
            pass
        released = time.monotonic()
        lock.release()
        print("TOOK", k, repr(took), repr(released), flush=True)
''')


def _dead_pid():
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def _reply(process):
    for line in process.stdout:
        if line.startswith(("READY", "STARTED", "REFUSED", "STOPPED")):
            return line.strip()
    raise AssertionError("the worker ended")


@pytest.mark.parametrize("stale", [True, False])
def test_two_processes_taking_one_lock_at_once_never_both_get_it(tmp_path, stale):
    rounds, period = 300, 0.02
    directories = []
    dead = _dead_pid()
    for k in range(rounds):
        directory = tmp_path / f"rank{k}"
        directory.mkdir()
        if stale:
            (directory / ".ptdbg.lock").write_text(f"{dead} {socket.gethostname()}\n")
        directories.append(str(directory))
    script = tmp_path / "lock_worker.py"
    script.write_text(LOCK_WORKER)
    base = time.monotonic() + 3.0  # both have imported by then
    workers = [subprocess.Popen([sys.executable, str(script), repr(base), str(period)] + directories,
                                stdout=subprocess.PIPE, text=True) for _ in range(2)]
    outputs = [worker.communicate(timeout=120)[0] for worker in workers]
    assert [worker.returncode for worker in workers] == [0, 0], outputs
    # {round: (took, released)} of each worker. Both may take it one after the other (one ran late, after the
    # other's release); never at the same time.
    held = [{int(words[1]): (float(words[2]), float(words[3])) for words in map(str.split, output.splitlines())
             if words[0] == "TOOK"} for output in outputs]
    both = sorted(k for k in set(held[0]) & set(held[1])
                  if held[0][k][0] < held[1][k][1] and held[1][k][0] < held[0][k][1])
    neither = sorted(set(range(rounds)) - set(held[0]) - set(held[1]))
    assert not both and not neither, f"both held the lock at once in rounds {both}; neither in {neither}"
    refused = sum(output.count("REFUSED") for output in outputs)
    assert refused >= rounds // 2, refused  # the two did meet: one was turned away in most rounds
    assert all(not os.path.exists(os.path.join(directory, ".ptdbg.lock")) for directory in directories)


def test_two_processes_starting_at_once_never_both_write(tmp_path):
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env.pop("RANK", None)
    env.pop("LOCAL_RANK", None)
    workers = [subprocess.Popen([sys.executable, str(script), str(w)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                text=True, env=env) for w in range(2)]
    outcomes = []
    try:
        for worker in workers:
            assert _reply(worker) == "READY"
        for round_ in range(ROUNDS):
            dump_path = tmp_path / f"round{round_}"
            rank_dir = dump_path / "step0" / "rank"
            stale = round_ % 2 == 0
            if stale:  # a killed run's lock: its pid is gone
                rank_dir.mkdir(parents=True)
                (rank_dir / ".ptdbg.lock").write_text(f"{_dead_pid()} {socket.gethostname()}\n")
            deadline = time.monotonic() + 0.3
            for worker in workers:
                worker.stdin.write(f"go {dump_path} {deadline!r}\n")
                worker.stdin.flush()
            replies = [_reply(worker) for worker in workers]
            for worker in workers:  # the winner holds its window until both have tried
                worker.stdin.write("stop\n")
                worker.stdin.flush()
            assert [_reply(worker) for worker in workers] == ["STOPPED", "STOPPED"]
            started = [w for w, reply in enumerate(replies) if reply == "STARTED"]
            with open(str(rank_dir / "dump.json"), encoding="utf-8") as handle:
                data = json.load(handle)["data"]
            outcomes.append((round_, stale, replies, sorted(data)))
            assert len(started) == 1, outcomes[-1]
            winner, loser = started[0], 1 - started[0]
            assert replies[loser].startswith(f"REFUSED Another process writes to {rank_dir}"), replies
            assert f"held by pid {workers[winner].pid} on host" in replies[loser], replies
            # every entry of the winner, none of the loser's
            assert sorted(data) == [f"Torch.relu.{k}.forward" for k in range(winner + 2)], outcomes[-1]
            assert {entry["output"][0]["Max"] for entry in data.values()} == {float(winner + 1)}
            assert sorted(os.listdir(str(rank_dir))) == ["construct.json", "dump.json", "stack.json"]  # released
    finally:
        for worker in workers:
            worker.kill()
            worker.wait()


@pytest.mark.parametrize("what", ["directory", "fifo"])
def test_a_lock_that_is_not_a_file_is_a_clear_error_naming_it(tmp_path, what):
    rank_dir = tmp_path / "rank0"
    rank_dir.mkdir()
    lock_path = rank_dir / ".ptdbg.lock"
    if what == "directory":
        lock_path.mkdir()
    else:
        os.mkfifo(str(lock_path))
    with pytest.raises(DumpPathError, match=f"{lock_path} is not a regular file"):
        DumpLock(str(rank_dir)).acquire()
    with pytest.raises(DumpPathError, match=f"{lock_path} is not a regular file"):
        DumpLock(str(rank_dir)).holder()
