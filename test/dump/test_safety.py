"""Nothing lost, nothing let in: path checks, no writes through links, one writer per dump, a full
disk, a run killed at random points."""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest
import torch
import tmpfs
from zygote import Zygote

from ptdbg_ascend import PrecisionDebugger, acc_cmp_dump, register_hook, set_dump_path, set_dump_switch
from ptdbg_ascend.config import load_config
from ptdbg_ascend.errors import DumpPathError, DumpWriteError, ParameterError
from ptdbg_ascend.readers.legacy_pkl import read_lines

TAG = "all_v1.0"


def _setup(tmp_path, model, **hook):
    set_dump_path(str(tmp_path / "dump_path" / "npu_dump.pkl"), dump_tag="all")
    register_hook(model, acc_cmp_dump, **hook)
    return tmp_path / "dump_path" / TAG / "rank0"


# -- 5. paths checked at the call ------------------------------------------------------------------
@pytest.mark.parametrize("bad, words", [
    ("dump\x00path", "NUL"),
    ("dump/" + "a" * 256, "component of 256 bytes"),
    ("/" + "/".join(["b" * 200] * 25), "at most 4096 bytes"),
    (b"dump_path", "path"),
    (5, "path"),
])
def test_bad_paths_fail_at_the_call_naming_the_parameter(dump_session, bad, words):
    with pytest.raises(ParameterError, match="fpath.*" + words):
        set_dump_path(bad)
    with pytest.raises(ParameterError, match="dump_path"):
        load_config(None, dump_path=bad)
    with pytest.raises(ParameterError, match="dump_path"):
        PrecisionDebugger(dump_path=bad)


# -- 1. no writes through links --------------------------------------------------------------------
def _target(tmp_path):
    target = tmp_path / "elsewhere"
    target.mkdir()
    (target / "keep.txt").write_text("untouched")
    return target


def _untouched(target):
    assert sorted(os.listdir(str(target))) == ["keep.txt"]
    assert (target / "keep.txt").read_text() == "untouched"


@pytest.mark.parametrize("place", ["tag", "rank", "npy"])
def test_a_symlinked_directory_is_refused_and_its_target_untouched(tmp_path, dump_session, model, train, place):
    rank_dir = _setup(tmp_path, model)
    target = _target(tmp_path)
    link = {"tag": rank_dir.parent, "rank": rank_dir, "npy": rank_dir / "npu_dump"}[place]
    link.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(str(target), str(link))
    set_dump_switch("ON")
    with pytest.raises(DumpPathError, match=f"{link}.*symlink"):
        train(model)  # rank known only at the first record (CPU, no RANK): the error comes there
    set_dump_switch("OFF")
    _untouched(target)


def test_a_symlinked_rank_dir_fails_at_on_when_the_rank_is_known(tmp_path, dump_session, model):
    rank_dir = _setup(tmp_path, model, rank=0)
    target = _target(tmp_path)
    rank_dir.parent.mkdir(parents=True)
    os.symlink(str(target), str(rank_dir))
    with pytest.raises(DumpPathError, match=f"{rank_dir}.*symlink"):
        set_dump_switch("ON")
    _untouched(target)


def test_a_symlinked_pkl_is_refused_and_its_target_untouched(tmp_path, dump_session, model, train):
    rank_dir = _setup(tmp_path, model)
    target = _target(tmp_path)
    rank_dir.mkdir(parents=True)
    os.symlink(str(target / "keep.txt"), str(rank_dir / "npu_dump.pkl"))
    set_dump_switch("ON")
    with pytest.raises(DumpPathError, match="npu_dump.pkl.*symlink"):
        train(model)
    set_dump_switch("OFF")
    _untouched(target)


def test_msprobe_links_are_refused_or_never_followed(tmp_path, dump_session):
    target = _target(tmp_path)
    net = torch.nn.Linear(3, 2)
    dump_path = tmp_path / "dump"
    rank_dir = dump_path / "step0" / "rank"
    rank_dir.mkdir(parents=True)
    # the old fixed temporary name and the final name: replaced by rename, the link is never written through
    os.symlink(str(target / "keep.txt"), str(rank_dir / "dump.json.tmp"))
    os.symlink(str(target / "keep.txt"), str(rank_dir / "dump.json"))
    debugger = PrecisionDebugger(task="tensor", dump_path=str(dump_path), step=[0, 1])
    debugger.start()
    net(torch.ones(1, 3))
    debugger.stop()
    _untouched(target)
    assert not os.path.islink(str(rank_dir / "dump.json"))
    assert "Functional.linear.0.forward" in json.loads((rank_dir / "dump.json").read_text())["data"]
    assert not [name for name in os.listdir(str(rank_dir)) if name.endswith(".tmp") and name != "dump.json.tmp"]
    # a symlinked step directory: a clear error at start()
    debugger.step()
    os.symlink(str(target), str(dump_path / "step1"))
    with pytest.raises(DumpPathError, match="step1.*symlink"):
        debugger.start()
    _untouched(target)


# -- 2. one writer per dump ------------------------------------------------------------------------
def _foreign_lock(directory, pid):
    directory.mkdir(parents=True, exist_ok=True)
    (directory / ".ptdbg.lock").write_text(f"{pid} {socket.gethostname()}\n")


def test_a_live_lock_stops_the_window_at_on_naming_the_holder(tmp_path, dump_session, model, train):
    rank_dir = _setup(tmp_path, model, rank=0)
    _foreign_lock(rank_dir, os.getppid())  # a live process that is not this one
    with pytest.raises(DumpPathError, match=fr"{rank_dir}.*pid {os.getppid()}"):
        set_dump_switch("ON")
    assert (rank_dir / ".ptdbg.lock").read_text().startswith(str(os.getppid()))


def test_a_stale_lock_is_taken_over_with_a_warning(tmp_path, dump_session, model, train, capsys):
    rank_dir = _setup(tmp_path, model)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    _foreign_lock(rank_dir, dead.pid)
    set_dump_switch("ON")
    train(model, steps=1)
    assert (rank_dir / ".ptdbg.lock").read_text().split()[0] == str(os.getpid())
    set_dump_switch("OFF")
    assert sorted(os.listdir(str(rank_dir))) == ["npu_dump", "npu_dump.pkl"]  # released at OFF
    assert f"[WARNING]Taking over the stale dump lock {rank_dir / '.ptdbg.lock'}" in capsys.readouterr().out


def test_msprobe_start_refuses_a_live_lock(tmp_path, dump_session):
    dump_path = tmp_path / "dump"
    _foreign_lock(dump_path / "step0" / "rank", os.getppid())
    debugger = PrecisionDebugger(task="statistics", dump_path=str(dump_path))
    with pytest.raises(DumpPathError, match=fr"rank.*pid {os.getppid()}"):
        debugger.start()


def test_env_rank_gives_its_rank_directory(tmp_path, dump_session, model, train, monkeypatch):
    monkeypatch.setenv("RANK", "1")
    rank_dir = _setup(tmp_path, model)
    set_dump_switch("ON")
    assert (rank_dir.parent / "rank1" / ".ptdbg.lock").exists()  # known now: the lock is taken at ON
    train(model, steps=1)
    set_dump_switch("OFF")
    assert os.listdir(str(rank_dir.parent)) == ["rank1"]
    assert not (rank_dir.parent / "rank1" / ".ptdbg.lock").exists()


TWO_WRITERS = textwrap.dedent('''
    import os, sys, torch
    from ptdbg_ascend import *
    from ptdbg_ascend.errors import DumpPathError
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Linear(3, 2))
    set_dump_path(os.path.join(sys.argv[1], "npu_dump.pkl"), dump_tag="run")
    register_hook(model, acc_cmp_dump)
    set_dump_switch("ON")
    try:
        model(torch.ones(2, 4)).sum().backward()
    except DumpPathError as error:
        print("REFUSED", error, flush=True)
        sys.exit(3)
    print("WRITING", flush=True)
    sys.stdin.readline()
    model(torch.ones(2, 4)).sum().backward()
    set_dump_switch("OFF")
''')


def test_a_second_process_on_the_same_path_is_refused_and_the_first_loses_nothing(tmp_path):
    script = tmp_path / "two.py"
    script.write_text(TWO_WRITERS)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env.pop("RANK", None)
    env.pop("LOCAL_RANK", None)
    command = [sys.executable, str(script), str(tmp_path / "out")]
    first = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
    for line in first.stdout:  # the tool's log goes to stdout too
        if "WRITING" in line:
            break
    second = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)
    assert second.returncode == 3, second.stderr
    rank_dir = tmp_path / "out" / "run_v1.0" / "rank0"
    assert "REFUSED" in second.stdout and str(rank_dir) in second.stdout
    assert f"pid {first.pid}" in second.stdout
    out, _ = first.communicate("go\n", timeout=120)
    assert first.returncode == 0
    with open(str(rank_dir / "npu_dump.pkl"), encoding="utf-8") as handle:
        names = [json.loads(line)[0] for line in handle]
    # both calls of the first process, once each
    for counter in (0, 1, 2, 3):
        assert names.count(f"Functional_linear_{counter}_forward_output") == 1
    assert sorted(os.listdir(str(rank_dir))) == ["npu_dump", "npu_dump.pkl"]


# -- 4. disk full ----------------------------------------------------------------------------------
@pytest.fixture
def small_disk(tmp_path):
    mount = tmp_path / "small"
    mount.mkdir()
    yield tmpfs.mount(mount, "size=2m")
    tmpfs.unmount(mount)


def _parsed(line):
    try:
        return json.loads(line)
    except ValueError:  # (UnicodeDecodeError too)
        return None


def _check_pkl_and_npy(rank_dir, stem="npu_dump", killed=False):
    """Every pkl line whole and parsed, every npy a line names loads with its shape, every ``*.npy``
    loads (a final name is never partial). After a kill, the last line may be cut and temporary ``.*.tmp``
    files may remain (never taken for npy); otherwise nothing but whole lines and npy files."""
    pkl = rank_dir / (stem + ".pkl")
    whole, _, cut = pkl.read_bytes().rpartition(b"\n")
    if killed:
        # A SIGKILL stops a write at a page boundary (the kernel checks for a fatal signal between pages),
        # so the last line may be cut anywhere: only the last, and the reader skips it.
        assert cut == b"" or cut.startswith(b'["') or b'["'.startswith(cut), cut[:80]
    else:
        assert cut == b"", cut[:80]
    records = [json.loads(line) for line in whole.decode("utf-8").splitlines()]
    # The reader takes every whole line, and the last one too when only its newline was cut off.
    last = _parsed(cut)
    readable = records + ([last] if last is not None else [])
    if readable:
        assert [value for _, value in read_lines(str(pkl))] == readable
    npy_dir = rank_dir / stem
    for record in records:
        if not record[0].endswith("_stack_info") and npy_dir.exists():
            array = np.load(str(npy_dir / (record[0] + ".npy")), allow_pickle=False)
            assert list(array.shape) == ([] if record[4] == "[]" else record[4])
    if npy_dir.exists():
        for name in os.listdir(str(npy_dir)):
            if killed and name.startswith(".") and name.endswith(".tmp"):
                continue
            assert name.endswith(".npy"), name  # no temporary file left behind
            np.load(str(npy_dir / name), allow_pickle=False)
    return records


@pytest.mark.parametrize("summary_only", [False, True])
def test_a_full_disk_stops_the_dump_and_leaves_only_whole_lines(small_disk, dump_session, summary_only):
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64))
    set_dump_path(str(small_disk / "npu_dump.pkl"), dump_tag="all")
    register_hook(net, acc_cmp_dump)
    # leave a little room only: statistics lines fill it too
    filler = small_disk / "filler"
    filler.write_bytes(b"\0" * (2 * 1024 * 1024 - (300 * 1024 if not summary_only else 24 * 1024)))
    set_dump_switch("ON", summary_only=summary_only)
    failures = 0
    for _ in range(200):  # the user catches the error and carries on
        try:
            net(torch.randn(32, 64)).sum().backward()
        except DumpWriteError as error:
            failures += 1
            assert "npu_dump" in str(error)
    try:
        set_dump_switch("OFF")
    except DumpWriteError:
        failures += 1
    assert failures >= 1
    rank_dir = small_disk / TAG / "rank0"
    before = _check_pkl_and_npy(rank_dir)
    assert before
    # a new ON after freeing space appends whole records again
    filler.unlink()
    set_dump_switch("ON", summary_only=summary_only)
    net(torch.randn(32, 64)).sum().backward()
    set_dump_switch("OFF")
    after = _check_pkl_and_npy(rank_dir)
    assert len(after) > len(before) and after[: len(before)] == before


# -- 3. a run killed at random points --------------------------------------------------------------
ZYGOTE = textwrap.dedent('''
    import os, sys, time
    import torch
    torch.set_num_threads(1)
    from ptdbg_ascend import acc_cmp_dump, register_hook, set_dump_path, set_dump_switch
    from ptdbg_ascend.dump.session import get_session
    from ptdbg_ascend.sinks import background
    background.DEFAULT_MAX_DELAY = float(sys.argv[2])
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    register_hook(model, acc_cmp_dump)  # wrapping once here keeps each trial short

    def child(out):
        # The child says its own pid: a line the parent printed could interleave with the child's log.
        print("PID {}".format(os.getpid()), flush=True)
        session = get_session()
        session.pid, session.in_forked_child = os.getpid(), False  # this child is the training process
        set_dump_path(os.path.join(out, "npu_dump.pkl"), dump_tag="run")
        set_dump_switch("ON")
        for k in range(100000):
            loss = model(torch.randn(16, 64)).pow(2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            print("STEP {} {!r}".format(k, time.monotonic()), flush=True)
            time.sleep(0.005)

    for line in sys.stdin:
        out = line.strip()
        pid = os.fork()
        if pid == 0:
            try:
                child(out)
            finally:
                os._exit(0)
        os.waitpid(pid, 0)
        print("DONE", flush=True)
''')


def test_sigkill_at_random_points_loses_at_most_the_bound(tmp_path):
    bound = 0.1  # the writer's max_delay in the killed runs (seconds of queued jobs)
    slack = 0.1  # scheduling on a loaded machine, the job in progress
    script = tmp_path / "zygote.py"
    script.write_text(ZYGOTE)
    chooser = random.Random(1234)
    checked = 0
    with Zygote(str(script), str(tmp_path), str(bound)) as zygote:
        for trial in range(20):
            out = tmp_path / f"trial{trial}"
            pid = zygote.start(str(out))
            last = chooser.randint(0, 40)
            printed = {}
            for step, when in zygote.steps():
                printed[step] = when
                if step >= last:
                    break
            time.sleep(chooser.uniform(0, 0.012))
            killed_at = time.monotonic()
            zygote.kill(pid)
            rank_dir = out / "run_v1.0" / "rank0"
            records = _check_pkl_and_npy(rank_dir, killed=True)
            names = {record[0] for record in records}
            for step, when in printed.items():
                if when < killed_at - bound - slack:
                    # the optimizer's last update is the step's last record
                    assert f"Tensor_add__{4 * step + 3}_forward_output" in names, (trial, step)
                    checked += 1
        assert checked >= 20, checked  # the check above did bite


# -- 4. a slow disk: the writer's backlog is bounded in time, not only in bytes ---------------------------------
# The disk takes SLOW_DISK_RATE bytes a second (os.write sleeps for what it writes: a real disk under dirty-page
# throttling does the same to a writer), far less than training makes: the npy backlog fills. Its bound in time
# (background.DEFAULT_MAX_DELAY, 1 s by default) must hold all the same: every step that finished more than about
# that long before the kill has its records in the pkl.
SLOW_DISK_RATE = 20e6
SLOW_DISK = textwrap.dedent('''
    import os, sys, time
    import torch
    torch.set_num_threads(1)
    real_write = os.write

    def slow_write(descriptor, data):
        if len(data) >= 65536:
            time.sleep(len(data) / float(sys.argv[2]))
        return real_write(descriptor, data)

    os.write = slow_write
    from ptdbg_ascend import acc_cmp_dump, register_hook, set_dump_path, set_dump_switch
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.ReLU(), torch.nn.Linear(512, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, foreach=False)
    register_hook(model, acc_cmp_dump)
    set_dump_path(os.path.join(sys.argv[1], "npu_dump.pkl"), dump_tag="run")
    set_dump_switch("ON")
    x = torch.randn(256, 512)
    for k in range(100000):
        loss = model(x).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        print("STEP {} {!r}".format(k, time.monotonic()), flush=True)
''')


def test_a_slow_disk_loses_at_most_about_a_second_of_finished_steps(tmp_path):
    bound, slack = 1.0, 0.8  # the default max_delay; a loaded 2-core machine, the job being written
    script = tmp_path / "train.py"
    script.write_text(SLOW_DISK)
    out = tmp_path / "out"
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env.pop("RANK", None)
    env.pop("LOCAL_RANK", None)
    child = subprocess.Popen([sys.executable, str(script), str(out), str(SLOW_DISK_RATE)], stdout=subprocess.PIPE,
                             text=True, env=env)
    printed = {}

    def read_steps():  # a thread: the run may print nothing for seconds (its writes block it)
        for line in child.stdout:
            if line.startswith("STEP "):
                printed[int(line.split()[1])] = float(line.split()[2])

    reader = threading.Thread(target=read_steps, daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 120
        while not printed:
            assert time.monotonic() < deadline and child.poll() is None, "the run never stepped"
            time.sleep(0.01)
        time.sleep(4.0)  # long past the bound: a backlog of seconds would show
        child.send_signal(signal.SIGKILL)
        killed_at = time.monotonic()
    finally:
        child.kill()
        child.wait()
        reader.join(10)
    records = _check_pkl_and_npy(out / "run_v1.0" / "rank0", killed=True)
    names = {record[0] for record in records}
    on_disk = [step for step in printed if f"Tensor_add__{4 * step + 3}_forward_output" in names]
    late = [step for step, when in printed.items() if when < killed_at - bound - slack and step not in on_disk]
    assert not late, "{} steps finished more than {} s before the kill are not in the pkl (of {} printed; {} on " \
        "disk; the oldest missing finished {:.1f} s before the kill)".format(
            len(late), bound + slack, len(printed), len(on_disk), killed_at - printed[min(late)])
    # the check did bite: steps old enough to be checked (the disk's speed sets the pace: a few steps a second)
    assert len([when for when in printed.values() if when < killed_at - bound - slack]) >= 4, printed
