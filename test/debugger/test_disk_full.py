"""A PrecisionDebugger dump that fills the disk keeps its finished records usable: dump.json, stack.json
and construct.json are rewritten at the error with every entry whose tensor files are complete (the
space for that rewrite is held back in ``.ptdbg.reserve`` while the window is on), the files of
unfinished entries are removed, and every later record raises the same ``DumpWriteError`` until the
next ``start()``.

Each test mounts a real small tmpfs (root only) and fills it with a real dump of a small model; the
same training run dumped to an ordinary directory is the reference: the entries a full disk keeps are
exactly a prefix of the reference's, with the same values and the same tensors.
"""

from __future__ import annotations

import copy
import json
import os
import re
import threading
import traceback

import pytest
import torch
from dump_json_names import data_names
import tmpfs

from ptdbg_ascend import PrecisionDebugger
from ptdbg_ascend.comparison.api import compare
from ptdbg_ascend.comparison.parse_call import parse
from ptdbg_ascend.statistics import planner
from ptdbg_ascend.errors import DumpWriteError
from ptdbg_ascend.sinks.background import BackgroundWriter
from ptdbg_ascend.sinks.msprobe.json_writer import MsprobeJsonWriter

STEPS = 30
FILES = ["construct.json", "dump.json", "dump_tensor_data", "stack.json"]  # a rank directory after stop()


@pytest.fixture
def small_disk(tmp_path):
    """``mount(megabytes)``: a fresh tmpfs of that size (unmounted at the end)."""
    mounts = []

    def mount(megabytes):
        path = tmp_path / f"disk{len(mounts)}"
        path.mkdir()
        mounts.append(tmpfs.mount(path, f"size={megabytes}m"))
        return path

    yield mount
    for path in mounts:
        tmpfs.unmount(path)


def _model_and_inputs():
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64))
    inputs = torch.randn(STEPS + 1, 32, 64, generator=torch.Generator().manual_seed(1))
    return net, inputs


def _run(session, net, inputs, dump_path, task, steps=STEPS, after_step=None):
    """Train ``steps`` steps in one start()/stop() window; the user catches DumpWriteError per step and
    carries on. Returns (debugger, [(step, error)], the error stop() raised or None)."""
    net = copy.deepcopy(net)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.01, foreach=False)
    debugger = PrecisionDebugger(task=task, level="L1", dump_path=str(dump_path))
    session.reset_counters()  # both runs name their calls alike
    debugger.start()
    errors = []
    for step in range(steps):
        try:
            loss = net(inputs[step]).sum()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        except DumpWriteError as error:
            errors.append((step, error))
        if after_step is not None:
            after_step(step)
    stopped = None
    try:
        debugger.stop()
    except DumpWriteError as error:
        stopped = error
    return debugger, errors, stopped


def _load(path):
    with open(str(path), encoding="utf-8") as handle:
        return json.load(handle)



def _frames(lines):
    return [line for line in lines if ", in test_" not in line]


def _tensor_leaves(value):
    if isinstance(value, dict):
        if value.get("type") == "torch.Tensor":
            yield value
        for item in value.values():
            yield from _tensor_leaves(item)
    elif isinstance(value, list):
        for item in value:
            yield from _tensor_leaves(item)


STOPPED = (r"\. Dumping to {rank} stopped: its dump\.json holds the (?P<held>\d+) entr(y|ies) finished before the "
           r"error; nothing more is written to it\. Free space \(or fix the cause\) and call start\(\) again to "
           r"resume\.$")
NO_SPACE = r"\[Errno 28\] No space left on device"


def _check_later_records_raise(errors, steps=STEPS):
    """From the first error on, every step raised, always the same message."""
    first = errors[0][0]
    assert [step for step, _ in errors] == list(range(first, steps))
    assert len({str(error) for _, error in errors}) == 1
    return first, errors[0][1]


def _check_short_traceback(error):
    """Raised on the training thread: no chained writer-thread error, no frame of the writer thread or torch.save."""
    assert error.__cause__ is None and error.__context__ is None
    files = [frame.filename for frame in traceback.extract_tb(error.__traceback__)]
    writer_files = ("background.py", "serialization.py", os.path.join("fs", "writes.py"))
    assert not [name for name in files if name.endswith(writer_files)], files


@pytest.mark.parametrize("path", ["cpu", "deferred", "queued"],
                         ids=["cpu_statistics", "deferred_statistics", "fused_queue_statistics"])
def test_a_full_disk_keeps_every_finished_entry_of_a_tensor_dump(small_disk, tmp_path, session, capsys, monkeypatch,
                                                                  path):
    # deferred: statistics read back in batches, as for tensors on an accelerator (none here: CPU ones
    # take that path), so entries also wait for their statistics when the disk fills; queued: the same through
    # the fused queue (references read by one pass at a launch, its numpy emulator here)
    monkeypatch.setattr(planner.DEFAULTS, "defer_cpu", path != "cpu")
    if path == "queued":
        monkeypatch.setattr(planner.DEFAULTS, "fused", "emulated")
    net, inputs = _model_and_inputs()
    _, errors, _ = _run(session, net, inputs, tmp_path / "reference", "tensor")
    assert not errors
    reference_dir = tmp_path / "reference" / "step0" / "rank"
    reference = _load(reference_dir / "dump.json")["data"]
    disk = small_disk(3)
    rank_dir = disk / "dump" / "step0" / "rank"
    reserves = []

    def look(_step):  # while the window is on: the reserve is a real (allocated) file, larger than dump.json
        dump_json = rank_dir / "dump.json"
        try:
            before = os.path.getsize(str(dump_json)) if dump_json.exists() else 0
            status = os.stat(str(rank_dir / ".ptdbg.reserve"))
        except FileNotFoundError:  # not made yet, or given back at the error meanwhile
            return
        if status.st_size == 0:  # being made: the writer thread is between its open and its fallocate (CI saw it)
            return
        reserves.append((status.st_size, status.st_blocks * 512, before))

    _, errors, stopped = _run(session, net, inputs, disk / "dump", "tensor", after_step=look)
    # the user saw one clear error, at every record from the first failure on; stop() had nothing to add
    assert errors and stopped is None
    first, error = _check_later_records_raise(errors)
    assert 2 <= first < STEPS - 2, first
    tensor_dir = rank_dir / "dump_tensor_data"
    pattern = r"^Cannot write the tensor file {}/(?P<file>[\w.]+\.pt): ({}|cannot keep \d+ bytes free for the dump's " \
              r"JSON files \(held in {}\): {})".format(re.escape(str(tensor_dir)), NO_SPACE,
                                                        re.escape(str(rank_dir / ".ptdbg.reserve")), NO_SPACE)
    match = re.match(pattern + STOPPED.format(rank=re.escape(str(rank_dir))), str(error))
    assert match, str(error)
    _check_short_traceback(error)
    assert reserves and all(held >= size >= max(dump_json, 64 * 1024) for size, held, dump_json in reserves), reserves

    # dump.json holds exactly the entries finished before the failed file: the reference's up to the
    # entry that names it, with the same values
    failed = match.group("file")
    names = list(reference)
    cut = next(index for index, name in enumerate(names) if failed in set(data_names(reference[name])))
    dump = _load(rank_dir / "dump.json")
    assert list(dump) == ["task", "level", "framework", "dump_data_dir", "data"] and dump["task"] == "tensor"
    data = dump["data"]
    assert list(data) == names[:cut] and int(match.group("held")) == cut > 20
    assert data == {name: reference[name] for name in names[:cut]}
    # every file it names loads and is the reference's tensor; nothing else is left (no partial, no orphan)
    named = [name for entry in data.values() for name in data_names(entry)]
    assert sorted(os.listdir(str(rank_dir))) == FILES
    assert sorted(os.listdir(str(tensor_dir))) == sorted(named) and len(named) > 60
    for name in named:
        saved = torch.load(str(tensor_dir / name), weights_only=True)
        assert torch.equal(saved, torch.load(str(reference_dir / "dump_tensor_data" / name), weights_only=True))
    stack = _load(rank_dir / "stack.json")
    reference_stack = _load(reference_dir / "stack.json")
    assert list(stack) == [name for name in reference_stack if name in data] and stack
    for name, lines in stack.items():  # the same frames (the test's own line that called _run aside)
        assert _frames(lines) == _frames(reference_stack[name])
    assert _load(rank_dir / "construct.json") == {}

    # compare and parse read it: every tensor it holds pairs with the reference's and passes
    leaves = sum(1 for entry in data.values() for _ in _tensor_leaves(entry))
    all_leaves = sum(1 for entry in reference.values() for _ in _tensor_leaves(entry))
    output = tmp_path / "compare"
    output.mkdir()
    outcome = compare({"npu_json_path": str(rank_dir / "dump.json"), "bench_json_path": str(reference_dir / "dump.json"),
                       "is_print_compare_log": False}, str(output), xlsx=False)
    counts = outcome.counts
    assert (counts.compared, counts.passed, counts.npu_only, counts.bench_only) == (leaves, leaves, 0, all_leaves - leaves)
    assert not outcome.torn
    capsys.readouterr()
    last = names[cut - 1]
    parse(str(rank_dir / "dump.json"), last.replace(".", "_"))
    printed = capsys.readouterr().out
    assert "Statistic Info:" in printed and last.replace(".", "_") in printed


def test_start_after_freeing_space_goes_on_from_the_finished_entries(small_disk, session):
    net, inputs = _model_and_inputs()
    disk = small_disk(3)
    filler = disk / "filler"
    filler.write_bytes(b"\0" * (1024 * 1024))
    rank_dir = disk / "dump" / "step0" / "rank"
    debugger, errors, _ = _run(session, net, inputs, disk / "dump", "tensor", steps=STEPS)
    assert errors
    kept = _load(rank_dir / "dump.json")["data"]
    filler.unlink()
    x = inputs[STEPS]
    debugger.start()  # the same step: the window adds to the finished entries
    net(x).sum().backward()
    debugger.stop()
    data = _load(rank_dir / "dump.json")["data"]
    assert list(data)[:len(kept)] == list(kept) and {name: data[name] for name in kept} == kept
    added = list(data)[len(kept):]
    assert added[0].startswith("Functional.linear.") and added[-1].startswith("Functional.linear.")
    assert len(added) == 9 and len([name for name in added if name.endswith(".backward")]) == 4, added
    named = [name for entry in data.values() for name in data_names(entry)]
    assert sorted(os.listdir(str(rank_dir / "dump_tensor_data"))) == sorted(named)
    for name in named:
        assert isinstance(torch.load(str(rank_dir / "dump_tensor_data" / name), weights_only=True), torch.Tensor)
    assert sorted(os.listdir(str(rank_dir))) == FILES


def test_a_full_disk_keeps_every_entry_of_a_statistics_dump(small_disk, tmp_path, session):
    net, inputs = _model_and_inputs()
    _, errors, _ = _run(session, net, inputs, tmp_path / "reference", "statistics")
    assert not errors
    reference = _load(tmp_path / "reference" / "step0" / "rank" / "dump.json")["data"]
    per_step = len(reference) // STEPS
    assert per_step * STEPS == len(reference)
    disk = small_disk(2)
    (disk / "filler").write_bytes(b"\0" * (1024 * 1024 + 512 * 1024))
    rank_dir = disk / "dump" / "step0" / "rank"
    _, errors, stopped = _run(session, net, inputs, disk / "dump", "statistics")
    assert errors and stopped is None
    first, error = _check_later_records_raise(errors)
    pattern = r"^Cannot (keep \d+ bytes free for the dump's JSON files \(held in {}\)|write {}): {}".format(
        re.escape(str(rank_dir / ".ptdbg.reserve")), re.escape(str(rank_dir)) + r"/\S+", NO_SPACE)
    match = re.match(pattern + STOPPED.format(rank=re.escape(str(rank_dir))), str(error))
    assert match, str(error)
    _check_short_traceback(error)
    data = _load(rank_dir / "dump.json")["data"]
    # every record of the steps before the error, and those of its step up to the one that raised
    held = int(match.group("held"))
    assert first * per_step <= held < (first + 1) * per_step and first >= 1
    assert list(data) == list(reference)[:held] and data == {name: reference[name] for name in list(reference)[:held]}
    assert sorted(os.listdir(str(rank_dir))) == ["construct.json", "dump.json", "stack.json"]


def test_stop_raises_the_error_no_record_saw(small_disk):
    """The file that fails is written after the last record was accepted: flush() (what stop() calls)
    raises the error, once; the record accepted meanwhile is not finished and not in dump.json."""
    disk = small_disk(1)
    rank_dir = disk / "step0" / "rank"
    background = BackgroundWriter()
    writer = MsprobeJsonWriter(str(rank_dir), "tensor", "L1", saves_tensors=True, background=background)
    writer.claim()
    try:
        first = writer.save_tensor("Torch.a.0.forward.output.0", torch.ones(4))
        writer.add_entry("Torch.a.0.forward", {"output": [{"data_name": first}]})
        background.flush()
        gate = threading.Event()
        background.submit(gate.wait)  # the writer thread waits here: the next file is written after the records
        big = writer.save_tensor("Torch.b.0.forward.output.0", torch.ones(512, 1024))  # 2 MiB on a 1 MiB disk
        writer.add_entry("Torch.b.0.forward", {"output": [{"data_name": big}]})
        writer.add_entry("Torch.c.0.forward", {"output": [{"type": "int", "value": 3}]})
        gate.set()
        with pytest.raises(DumpWriteError) as raised:
            writer.flush()
        writer.flush()  # said once
        with pytest.raises(DumpWriteError) as later:  # every later record raises it again
            writer.add_entry("Torch.d.0.forward", {})
    finally:
        writer.release()
        background.close()
    message = str(raised.value)
    assert message.startswith(f"Cannot write the tensor file {rank_dir / 'dump_tensor_data' / big}: ")
    assert re.search(NO_SPACE + STOPPED.format(rank=re.escape(str(rank_dir))), message) and "holds the 1 entry" in message
    assert str(later.value) == message
    assert _load(rank_dir / "dump.json")["data"] == {"Torch.a.0.forward": {"output": [{"data_name": first}]}}
    assert os.listdir(str(rank_dir / "dump_tensor_data")) == [first]
    assert sorted(os.listdir(str(rank_dir))) == FILES


def test_a_failed_file_does_not_deadlock_a_record_waiting_for_the_queue(small_disk):
    """The training thread waits in the full queue (holding the queue's order) while the writer thread fails a
    file and drops the unclaimed ones: both go on (CI hung here once), and the record raises the error."""
    disk = small_disk(1)
    rank_dir = disk / "step0" / "rank"
    background = BackgroundWriter(max_pending_bytes=3 << 20)
    writer = MsprobeJsonWriter(str(rank_dir), "tensor", "L1", saves_tensors=True, background=background)
    writer.claim()
    gate, taken = threading.Event(), threading.Event()
    outcome = []

    def hold():
        taken.set()
        gate.wait()

    def record():  # 2 + 1.5 MiB is more than the queue's bound: this file waits for the writer
        try:
            writer.save_tensor("Torch.d.0.forward.output.0", torch.ones(384, 1024))
            outcome.append("queued")
        except DumpWriteError as error:
            outcome.append(str(error))

    try:
        background.submit(hold)
        assert taken.wait(10)  # off the queue, running: the next file is accepted into an empty queue
        writer.save_tensor("Torch.b.0.forward.output.0", torch.ones(512, 1024))  # 2 MiB on a 1 MiB disk
        writer.save_tensor("Torch.c.0.forward.output.0", torch.ones(1024))  # still queued when the 2 MiB one fails
        waiting = threading.Thread(target=record, daemon=True)
        waiting.start()
        waiting.join(0.5)
        assert waiting.is_alive()  # blocked in the queue behind the two files
        gate.set()
        waiting.join(20)
        assert not waiting.is_alive(), "the record and the writer thread deadlocked"
        with pytest.raises(DumpWriteError) as raised:
            writer.flush()
    finally:
        gate.set()
        writer.release()
        background.close()
    assert str(raised.value).startswith("Cannot write the tensor file ")
    assert outcome in (["queued"], [str(raised.value)])
    assert os.listdir(str(rank_dir / "dump_tensor_data")) == []  # every file dropped: no entry named them


def test_start_on_a_full_disk_says_so_and_leaves_no_lock(small_disk, session):
    disk = small_disk(1)
    filler = disk / "filler"
    descriptor = os.open(str(filler), os.O_WRONLY | os.O_CREAT)
    try:
        while os.write(descriptor, b"\0" * 4096):  # every page of the disk
            pass
    except OSError:
        pass
    finally:
        os.close(descriptor)
    rank_dir = disk / "dump" / "step0" / "rank"
    debugger = PrecisionDebugger(task="statistics", level="L1", dump_path=str(disk / "dump"))
    with pytest.raises(DumpWriteError, match=r"^Cannot write the dump lock {}: {}$".format(
            re.escape(str(rank_dir / ".ptdbg.lock")), NO_SPACE)):
        debugger.start()
    assert not os.path.exists(str(rank_dir / ".ptdbg.lock"))
    assert debugger._recorder not in session.observers  # nothing is left to write at exit
    filler.unlink()
    debugger.start()
    torch.add(torch.ones(2), 1)
    debugger.stop()
    assert list(_load(rank_dir / "dump.json")["data"]) == ["Torch.add.0.forward"]
    assert sorted(os.listdir(str(rank_dir))) == ["construct.json", "dump.json", "stack.json"]


# -- the reserve is sized by the bytes of the entries to come, not their count x the longest ----------------------
def _held(rank_dir):
    """Bytes of blocks ``.ptdbg.reserve`` holds now (0 without one)."""
    try:
        return os.stat(str(rank_dir / ".ptdbg.reserve")).st_blocks * 512
    except FileNotFoundError:
        return 0


@pytest.mark.parametrize("task", ["statistics", "tensor"])
def test_one_call_with_3000_inputs_does_not_inflate_the_reserve(tmp_path, session, task):
    """One entry of 3,000 tensor leaves (~1 MB of text) among 2,000 small ones: the reserve follows the bytes of
    what is not yet in the JSON files, so it stays within a few times the largest one's size (it held 1,000+
    times dump.json's size, counting every later small entry as long as the big one)."""
    inputs = [torch.full((2,), float(k)) for k in range(3000)]
    small = torch.ones(4)
    dump_path = tmp_path / "dump"
    rank_dir = dump_path / "step0" / "rank"
    debugger = PrecisionDebugger(task=task, level="L1", dump_path=str(dump_path))
    debugger.start()
    torch.cat(inputs)
    peak = 0
    for k in range(2000):
        torch.relu(small)
        if k % 50 == 0:
            peak = max(peak, _held(rank_dir))
    debugger.stop()
    size = os.path.getsize(str(rank_dir / "dump.json"))
    assert 1e6 < size < 4e6, size
    # the reserve covers the largest file's next rewrite: here stack.json's (pytest's frames make deep stacks)
    largest = max(os.path.getsize(str(rank_dir / name)) for name in ("dump.json", "stack.json", "construct.json"))
    assert peak < 3 * largest, (peak, largest, size)


def test_a_64_mib_disk_takes_a_dump_whose_json_fits_many_times(small_disk, session):
    """A statistics dump of one call with 3,000 inputs, then small calls, on a 64 MiB disk: dump.json
    (under 2 MB) fits 30 times, and the reserve must not stop the dump."""
    disk = small_disk(64)
    inputs = [torch.full((2,), float(k)) for k in range(3000)]
    small = torch.ones(4)
    debugger = PrecisionDebugger(task="statistics", level="L1", dump_path=str(disk / "dump"))
    debugger.start()
    torch.cat(inputs)
    for _ in range(2000):
        torch.relu(small)  # a DumpWriteError here fails the test
    debugger.stop()
    data = _load(disk / "dump" / "step0" / "rank" / "dump.json")["data"]
    assert len(data) == 2001 and len(data["Torch.cat.0.forward"]["input_args"][0]) == 3000


def test_the_length_bound_of_an_entry_holds_for_any_value_and_stays_close_for_real_ones(tmp_path, session,
                                                                                         monkeypatch):
    """The reserve counts an entry at its text's length, and one still waiting for its numbers at a bound
    (``EntryTemplate.longest``) computed before they are in: never below the text it is finished with (msprobe's
    two extra keys included) and within a small factor of it for real entries."""
    from ptdbg_ascend.sinks.msprobe.encoder import EntryTemplate
    from ptdbg_ascend.sinks.msprobe.leaves import TensorLeaf
    from ptdbg_ascend.statistics import planner

    # a leaf whose statistics come later: null now, then numbers and msprobe's two extra keys
    numbers = [float("inf"), -1.0000000000000002e-300, 1.2345678901234567, 2.0, 65504.0, -1.5e-300]
    leaf = TensorLeaf(4, "torch.float16", (2, 3), True, numbers, (("data_name", "Torch.x.0.forward.output.0.pt"),))
    template = EntryTemplate('  "Torch.x.0.forward": {\n   "output": [\n    \x00\n   ]\n  }', [leaf])
    assert "Max_except_inf_nan" in template.render() and template.longest() >= len(template.render())
    # real entries of a statistics dump whose numbers are read back later: each late leaf is counted with six
    # numbers of the longest form, at most about twice its text
    measured = []
    render = EntryTemplate.render
    monkeypatch.setattr(EntryTemplate, "render", lambda self: measured.append((self.longest(), render(self)))
                        or measured[-1][1])
    monkeypatch.setattr(planner.DEFAULTS, "defer_cpu", True)
    debugger = PrecisionDebugger(task="statistics", level="L1", dump_path=str(tmp_path / "dump"))
    debugger.start()
    net = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU())
    net(torch.ones(2, 4)).sum().backward()
    debugger.stop()
    assert len(measured) > 5
    for bound, text in measured:
        assert len(text) <= bound <= 2.5 * len(text), text
