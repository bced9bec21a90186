"""A PrecisionDebugger run killed at random points keeps its finished records: dump.json is rewritten
periodically (atomic replace) with the entries whose ``.pt`` files are all on disk.

The bound checked: with the writer's ``max_delay`` set to ``DELAY`` in the killed runs, every record of
a step printed more than ``2 * DELAY + SLACK`` seconds before the kill is in dump.json (one ``DELAY``
for the ``.pt`` backlog, one for the interval between rewrites; ``SLACK`` for a loaded 2-core machine and
the rewrite itself). With the default ``max_delay`` of 1 s that is about the last 2 s.
"""

from __future__ import annotations

import json
import os
import random
import textwrap
import time

import torch
from dump_json_names import data_names
from zygote import Zygote

DELAY = 0.2  # background.DEFAULT_MAX_DELAY in the killed runs (seconds)
SLACK = 0.6

# Forks one training process per trial, so each trial pays neither Python's nor torch's start-up.
ZYGOTE = textwrap.dedent('''
    import os, sys, time
    import torch
    torch.set_num_threads(1)
    from ptdbg_ascend import PrecisionDebugger
    from ptdbg_ascend.dump.session import get_session
    from ptdbg_ascend.sinks import background
    background.DEFAULT_MAX_DELAY = float(sys.argv[1])
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.ReLU(), torch.nn.Linear(32, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, foreach=False)

    def child(out):
        # The child says its pid itself: a parent's line could interleave with the child's log.
        print("PID {}".format(os.getpid()), flush=True)
        session = get_session()
        session.pid, session.in_forked_child = os.getpid(), False  # this child is the training process
        debugger = PrecisionDebugger(task="tensor", level="L1", dump_path=out)
        debugger.start()  # one window for the whole run: only the periodic rewrite puts it on disk
        for k in range(100000):
            loss = model(torch.randn(8, 32)).pow(2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            print("STEP {} {!r}".format(k, time.monotonic()), flush=True)
            time.sleep(0.01)

    for line in sys.stdin:
        pid = os.fork()
        if pid == 0:
            try:
                child(line.strip())
            finally:
                os._exit(0)
        os.waitpid(pid, 0)
        print("DONE", flush=True)
''')


def _step_records(step):
    """Names every step ``step`` writes (hand-derived: two linear layers, SGD without foreach updates
    the 4 parameters with ``Tensor.add_``; the last update is the step's last record)."""
    return [f"Functional.linear.{2 * step}.forward", f"Functional.linear.{2 * step + 1}.forward",
            f"Functional.linear.{2 * step}.backward", f"Tensor.add_.{4 * step + 3}.forward"]



def check_killed_dump(rank_dir, load=True):
    """The files a killed run left: dump.json (when present) parses and every tensor file it names exists
    and loads with ``weights_only=True``; stack.json and construct.json (when present) parse; every
    ``.pt`` final name loads (never partial); leftovers are only ``.*.tmp`` files and the lock and space
    reserve of the killed writer (``.ptdbg.lock``, ``.ptdbg.reserve``). Returns dump.json's
    ``data`` ({} when there is no dump.json yet). ``load`` False: only that the files exist (a quick poll)."""
    tensor_dir = os.path.join(rank_dir, "dump_tensor_data")
    names = sorted(os.listdir(rank_dir))
    for name in names:
        assert name in ("dump.json", "stack.json", "construct.json", "dump_tensor_data", ".ptdbg.lock",
                        ".ptdbg.reserve") or (
            name.startswith(".") and name.endswith(".tmp")), name
    for name in ("stack.json", "construct.json"):
        if name in names:
            with open(os.path.join(rank_dir, name), encoding="utf-8") as handle:
                assert isinstance(json.load(handle), dict)
    dump = None
    if "dump.json" in names:  # read before listing the files: a live run may add both meanwhile
        with open(os.path.join(rank_dir, "dump.json"), encoding="utf-8") as handle:
            dump = json.load(handle)
    files = set()
    if os.path.isdir(tensor_dir):
        for name in os.listdir(tensor_dir):
            if name.startswith(".") and name.endswith(".tmp"):
                continue
            assert name.endswith(".pt"), name
            files.add(name)
            if load:
                torch.load(os.path.join(tensor_dir, name), weights_only=True)  # a final name is never partial
    if dump is None:
        return {}
    assert list(dump) == ["task", "level", "framework", "dump_data_dir", "data"] and dump["task"] == "tensor"
    for entry_name, entry in dump["data"].items():
        for data_name in data_names(entry):
            assert data_name in files, f"{entry_name} names {data_name}, which is not on disk"
            assert not load or isinstance(torch.load(os.path.join(tensor_dir, data_name), weights_only=True), torch.Tensor)
    return dump["data"]


def test_sigkill_at_random_points_keeps_the_finished_records(tmp_path):
    script = tmp_path / "zygote.py"
    script.write_text(ZYGOTE)
    chooser = random.Random(2024)
    checked = 0
    referenced = 0
    with Zygote(str(script), str(DELAY)) as zygote:
        for trial in range(8):
            out = tmp_path / f"trial{trial}"
            pid = zygote.start(str(out))
            run_for = chooser.uniform(0.2, 2.5)  # seconds after the first step
            printed = {}
            first = None
            for step, when in zygote.steps():
                printed[step] = when
                first = first if first is not None else when
                if time.monotonic() - first >= run_for:
                    break
            time.sleep(chooser.uniform(0, 0.02))  # anywhere in a step
            killed_at = time.monotonic()
            zygote.kill(pid)
            data = check_killed_dump(str(out / "step0" / "rank"))
            referenced += sum(1 for entry in data.values() for _ in data_names(entry))
            for step, when in printed.items():
                if when < killed_at - 2 * DELAY - SLACK:
                    missing = [name for name in _step_records(step) if name not in data]
                    assert not missing, (trial, step, killed_at - when, missing)
                    checked += 1
        assert checked >= 40 and referenced >= 200, (checked, referenced)  # the checks above did bite


def test_dump_json_never_names_a_file_not_on_disk_while_the_run_goes_on(tmp_path):
    """A reader polling a live run (the state a kill at that instant leaves): every dump.json it finds
    names only files already on disk, and it grows while the run goes on."""
    script = tmp_path / "zygote.py"
    script.write_text(ZYGOTE)
    out = tmp_path / "live"
    with Zygote(str(script), str(DELAY)) as zygote:
        pid = zygote.start(str(out))
        rank_dir = str(out / "step0" / "rank")
        sizes = []
        start = time.monotonic()
        # 2.5 s, longer on a loaded machine (up to 20 s) until three different rewrites were seen
        while time.monotonic() < start + 2.5 or (len(set(sizes)) < 3 and time.monotonic() < start + 20):
            if os.path.exists(os.path.join(rank_dir, "dump.json")):
                sizes.append(len(check_killed_dump(rank_dir, load=False)))
            time.sleep(0.05)
        zygote.kill(pid)
        assert len(set(sizes)) >= 3 and sizes == sorted(sizes), sizes  # rewritten, never shrinking
        assert len(check_killed_dump(rank_dir)) >= sizes[-1]  # and what the kill left loads


# -- the writer alone: which entries a periodic rewrite shows, and how often it runs ------------------
def _dump_data(directory):
    with open(os.path.join(directory, "dump.json"), encoding="utf-8") as handle:
        return json.load(handle)["data"]


def test_a_rewrite_shows_only_entries_whose_files_are_on_disk(tmp_path):
    import threading

    from ptdbg_ascend.sinks.background import BackgroundWriter
    from ptdbg_ascend.sinks.msprobe.json_writer import MsprobeJsonWriter

    directory = str(tmp_path / "step0" / "rank")
    background = BackgroundWriter(max_delay=60.0)
    writer = MsprobeJsonWriter(directory, "tensor", "L1", saves_tensors=True, background=background,
                               flush_every=1, max_delay=60.0)
    writer.add_entry("Torch.a.0.forward", {"output": [{"data_name": writer.save_tensor("Torch.a.0.forward.output.0",
                                                                                        torch.ones(2))}]})
    background.flush()  # the rewrite job ran: Torch.a.0 is finished
    gate = threading.Event()
    background.submit(gate.wait)  # the writer thread stops here: files queued after it wait
    name = writer.save_tensor("Torch.b.0.forward.output.0", torch.zeros(3))
    writer.add_entry("Torch.b.0.forward", {"output": [{"data_name": name}]})
    # an extended entry (an in-place collective's output) keeps its finished version meanwhile
    later = writer.save_tensor("Torch.a.0.forward.input.0", torch.ones(1))
    writer.add_entry("Torch.a.0.forward", {"input_args": [{"data_name": later}]})
    # a rewrite now (on this thread) sees Torch.b's file still queued behind the gate
    writer._periodic_rewrite()
    data = _dump_data(directory)
    assert list(data) == ["Torch.a.0.forward"]
    assert data["Torch.a.0.forward"] == {"output": [{"data_name": "Torch.a.0.forward.output.0.pt"}]}
    gate.set()
    background.flush()
    time.sleep(0.5)  # past the cost floor (10x the last rewrite's duration): the next entry queues a rewrite
    writer.add_entry("Torch.c.0.forward", {"output": [{"type": "int", "value": 3}]})
    background.flush()
    data = _dump_data(directory)
    assert list(data) == ["Torch.a.0.forward", "Torch.b.0.forward", "Torch.c.0.forward"]
    assert data["Torch.a.0.forward"]["input_args"] == [{"data_name": "Torch.a.0.forward.input.0.pt"}]
    assert torch.load(os.path.join(directory, "dump_tensor_data", "Torch.b.0.forward.output.0.pt"),
                      weights_only=True).tolist() == [0.0, 0.0, 0.0]
    background.close()


def test_rewrites_come_at_most_once_per_max_delay(tmp_path):
    from ptdbg_ascend.sinks.msprobe.json_writer import MsprobeJsonWriter

    writer = MsprobeJsonWriter(str(tmp_path / "rank"), "statistics", "L1", saves_tensors=False, max_delay=0.25)
    started = time.monotonic()
    index = 0
    while time.monotonic() - started < 1.2:
        writer.add_entry(f"Torch.a.{index}.forward", {})
        index += 1
        time.sleep(0.002)
    assert 3 <= writer.rewrites <= 4, writer.rewrites  # due at 0.25, 0.5, 0.75, 1.0 s (+ each rewrite's time)
    assert len(_dump_data(str(tmp_path / "rank"))) > index - 200  # about the last 0.25 s missing at most


def test_a_slow_rewrite_waits_ten_times_its_duration(tmp_path, monkeypatch):
    from ptdbg_ascend.sinks.msprobe import json_writer as msprobe_json
    from ptdbg_ascend.sinks.msprobe.json_files import write_atomic as real
    writes = []  # (file name, start, end) of every file written

    def slow(path, text):  # a huge dump.json: each rewrite takes >= 30 ms (three files)
        started = time.monotonic()
        time.sleep(0.01)
        real(path, text)
        writes.append((os.path.basename(path), started, time.monotonic()))

    writer = msprobe_json.MsprobeJsonWriter(str(tmp_path / "rank"), "statistics", "L1", saves_tensors=False,
                                            max_delay=0.0, flush_every=1, write_file=slow)
    started = time.monotonic()
    index = 0
    while time.monotonic() - started < 1.0:
        writer.add_entry(f"Torch.a.{index}.forward", {})
        index += 1
        time.sleep(0.002)
    assert [name for name, _, _ in writes] == ["dump.json", "stack.json", "construct.json"] * writer.rewrites
    rewrites = [(writes[k][1], writes[k + 2][2]) for k in range(0, len(writes), 3)]  # (start, end)
    assert 2 <= len(rewrites) <= 4, rewrites  # every entry due (flush_every=1, max_delay=0): only the floor holds them
    for (start, end), (next_start, _) in zip(rewrites, rewrites[1:]):
        assert next_start - end >= 10 * (end - start), rewrites
