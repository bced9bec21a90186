"""Tensor files of accelerator tensors (issue 20, ``sinks/host_copies.py``): the copy is launched at the
call on the stream the script runs on, an event marks its end, and the writer thread moves it to host
memory on a copy stream made to wait for that event. The training thread never waits for the device.

No accelerator here: ``DEVICE_COPIES.on_cpu`` sends CPU tensors down that path, and a recording stand-in
for the accelerator's stream API (what ``torch.cuda`` and ``torch.npu`` offer: current_stream, Stream,
Event, stream()) keeps the order of what each thread did. Both front-ends must write the files of the CPU
path, and the order must be the one that makes the copy safe on a device: the event recorded at the call
on the script's own (side) stream, waited for by the copy stream before the transfer, and nothing waited
for on the training thread."""

from __future__ import annotations

import contextlib
import json
import threading
import weakref

import numpy as np
import pytest
import torch

from ptdbg_ascend import PrecisionDebugger, acc_cmp_dump, register_hook, set_dump_path, set_dump_switch
from ptdbg_ascend import streams as streams_module
from ptdbg_ascend.statistics import device_batch as device_statistics, planner
from ptdbg_ascend.streams import LAUNCH_STREAMS, LaunchStreams
from ptdbg_ascend.sinks import host_copies
from fake_torch_npu.fixtures import clean_session
from dump_json_names import tensor_leaves


class _Stream:
    def __init__(self, streams: _Streams, name: str) -> None:
        self._streams, self.name = streams, name

    def wait_event(self, event: _Event) -> None:
        self._streams.note("wait", self, event)

    def wait_stream(self, stream: _Stream) -> None:
        self._streams.note("wait_stream", self, stream)


class _Event:
    def __init__(self, streams: _Streams) -> None:
        self._streams = streams
        self.stream = None

    def record(self, stream: _Stream) -> None:
        self.stream = stream
        self._streams.note("record", stream, self)

    def synchronize(self) -> None:
        self._streams.note("synchronize", self.stream, self)


class _Streams:
    """The stream API of an accelerator module, recording ``(what, on the main thread, stream, event)``.
    Each thread has its own current stream, as on CUDA."""

    def __init__(self) -> None:
        self.log = []
        self._lock = threading.Lock()
        self._local = threading.local()
        self.default = _Stream(self, "default")
        self.pinned = []  # weak references to the pinned stand-ins handed out
        self.alive_at_allocation = []  # how many of them were still referenced when the next was asked for

    def note(self, what, stream, event) -> None:
        with self._lock:
            self.log.append((what, threading.current_thread() is threading.main_thread(), stream, event))

    def current_stream(self, device=None) -> _Stream:
        return getattr(self._local, "stream", None) or self.default

    def Stream(self, device=None) -> _Stream:  # noqa: N802 - torch's name
        return _Stream(self, "made")

    def Event(self) -> _Event:  # noqa: N802 - torch's name
        return _Event(self)

    @contextlib.contextmanager
    def stream(self, stream: _Stream):
        self.note("enter", stream, None)
        previous = getattr(self._local, "stream", None)
        self._local.stream = stream
        try:
            yield
        finally:
            self._local.stream = previous


@pytest.fixture
def device_copies(monkeypatch):
    """CPU tensors down the device path through a recording stream API; every other copy through a
    stand-in for pinned memory (a plain CPU tensor), so both ways to host memory run. Returns the streams."""
    streams = _Streams()
    monkeypatch.setattr(host_copies.DEVICE_COPIES, "on_cpu", True)
    monkeypatch.setitem(streams_module._STREAM_MODULES, "cpu", streams)
    monkeypatch.setattr(streams_module, "_TOOL_STREAMS", {})
    for name, empty in (("_streams", {}), ("_seen", set()), ("_keys", {}), ("_overflowed", set())):
        monkeypatch.setattr(LAUNCH_STREAMS, name, empty)  # what earlier tests noted with torch's own streams
    turns = []

    def pinned_stand_in(on_device):
        turns.append(None)
        if len(turns) % 2 == 0:
            return None
        buffer = torch.empty(on_device.shape, dtype=on_device.dtype)
        streams.alive_at_allocation.append(sum(ref() is not None for ref in streams.pinned))
        streams.pinned.append(weakref.ref(buffer))
        return buffer

    monkeypatch.setattr(host_copies, "_pinned_buffer", pinned_stand_in)
    return streams


def _check_order(streams: _Streams, user_stream: _Stream) -> int:
    """The order that makes a device copy safe; returns the number of copies."""
    log = streams.log
    on_main = [entry for entry in log if entry[1] and entry[:3] != ("enter", True, user_stream)]  # not the script's
    assert on_main and all(what == "record" for what, _, _, _ in on_main)  # the training thread never waits
    recorded = [event for what, _, _, event in on_main]
    assert all(event.stream is user_stream for event in recorded)  # after the copy, on the script's stream
    waits = [(stream, event) for what, main, stream, event in log if what == "wait"]
    assert all(stream.name == "made" for stream, _ in waits)  # a copy stream of the tool's own
    assert sorted(map(id, (event for _, event in waits))) == sorted(map(id, recorded))  # each copy waited for
    position = {id(entry[3]): index for index, entry in enumerate(log) if entry[0] == "record"}
    assert all(position[id(event)] < log.index(("wait", False, stream, event)) for stream, event in waits)
    # The pinned transfers: the writer waits for its own event, recorded on the copy stream.
    synchronized = [event for what, _, _, event in log if what == "synchronize"]
    assert synchronized and all(event.stream.name == "made" for event in synchronized)
    # Pinned memory goes back to torch's cache as soon as its file is written (it is never freed to the
    # system: a copy kept until the step ends would grow that cache to a step's worth).
    assert streams.pinned and not [ref for ref in streams.pinned if ref() is not None]
    assert max(streams.alive_at_allocation) == 0  # one at a time, even within a call's job (legacy)
    return len(recorded)


class _Net(torch.nn.Module):
    """A linear layer, bf16 and float64 copies (the legacy npy widens bf16 to float32), an in-place update."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(16, 8)

    def forward(self, x):
        y = torch.relu(self.fc(x))
        torch.mul(y.bfloat16(), 3)
        torch.sum(y.double(), dim=0)
        z = y * 2
        z.add_(1.0)  # in place: the input file holds the value before, the output the value after
        return torch.tanh(z).sum()


def _run(streams, user_stream, tag, dump):
    torch.manual_seed(0)
    net = _Net()
    x = torch.randn(4, 16)
    with dump(tag, net):
        context = streams.stream(user_stream) if streams is not None else contextlib.nullcontext()
        with context:  # the script runs on a side stream
            net(x).backward()


def _debugger_dump(tmp_path, task):
    """A ``dump(tag, net)`` context for :func:`_run`: PrecisionDebugger(task) start() ... stop()."""
    @contextlib.contextmanager
    def dump(tag, net):
        debugger = PrecisionDebugger(task=task, level="L1", dump_path=str(tmp_path / tag))
        debugger.start()
        yield
        debugger.stop()  # (a batch of device statistics is read here, on the default stream)

    return dump


def _on_device_then_on_cpu(session, monkeypatch, streams, dump) -> int:
    """The run on the device path (on a side stream), its order checked, then the CPU path's run (tags
    "device" and "cpu"); returns the number of device copies."""
    user_stream = _Stream(streams, "user")
    _run(streams, user_stream, "device", dump)
    copies = _check_order(streams, user_stream)
    monkeypatch.setattr(host_copies.DEVICE_COPIES, "on_cpu", False)
    clean_session(session)
    _run(None, None, "cpu", dump)
    return copies


def test_a_precision_debugger_tensor_dump_copies_on_the_device_in_a_safe_order(session, tmp_path, device_copies,
                                                                               monkeypatch):
    copies = _on_device_then_on_cpu(session, monkeypatch, device_copies, _debugger_dump(tmp_path, "tensor"))

    rank = {tag: tmp_path / tag / "step0" / "rank" for tag in ("device", "cpu")}
    texts = {tag: [line for line in (folder / "dump.json").read_text().splitlines() if "dump_data_dir" not in line]
             for tag, folder in rank.items()}
    assert texts["device"] == texts["cpu"]
    assert (rank["device"] / "construct.json").read_text() == (rank["cpu"] / "construct.json").read_text()
    leaves = [leaf for leaf in tensor_leaves(json.loads((rank["device"] / "dump.json").read_text())["data"])
              if "data_name" in leaf]
    assert len(leaves) > 20 and copies >= len(leaves) // 2  # links stand for the rest (unchanged tensors)
    for leaf in leaves:
        got = torch.load(str(rank["device"] / "dump_tensor_data" / leaf["data_name"]), weights_only=True)
        expected = torch.load(str(rank["cpu"] / "dump_tensor_data" / leaf["data_name"]), weights_only=True)
        assert got.dtype == expected.dtype and torch.equal(got, expected), leaf["data_name"]
        assert got.device.type == "cpu"


def test_a_legacy_npy_dump_copies_on_the_device_in_a_safe_order(session, tmp_path, device_copies, monkeypatch):
    @contextlib.contextmanager
    def legacy_dump(tag, net):
        set_dump_path(str(tmp_path / tag / "npu_dump.pkl"), dump_tag=tag)
        register_hook(net, acc_cmp_dump)
        set_dump_switch("ON", mode="all")
        yield
        set_dump_switch("OFF")

    copies = _on_device_then_on_cpu(session, monkeypatch, device_copies, legacy_dump)

    rank = {tag: tmp_path / tag / f"{tag}_v1.0" / "rank0" for tag in ("device", "cpu")}
    lines = {tag: next(folder.glob("*.pkl")).read_text().splitlines() for tag, folder in rank.items()}
    assert lines["device"] == lines["cpu"]
    npy = {tag: sorted(path.name for path in (folder / "npu_dump").glob("*.npy")) for tag, folder in rank.items()}
    assert npy["device"] == npy["cpu"] and copies >= len(npy["cpu"]) // 2 > 10
    for name in npy["cpu"]:
        got, expected = np.load(str(rank["device"] / "npu_dump" / name)), np.load(str(rank["cpu"] / "npu_dump" / name))
        assert got.dtype == expected.dtype and np.array_equal(got, expected), name
    bf16 = [json.loads(line)[0] for line in lines["device"] if json.loads(line)[3] == "torch.bfloat16"]
    assert bf16 and all(np.load(str(rank["device"] / "npu_dump" / (name + ".npy"))).dtype == np.float32
                        for name in bf16)  # widened on the device, before the transfer


def test_a_full_device_memory_reads_copies_back_at_the_call(session, tmp_path, device_copies, monkeypatch, capsys):
    """A copy the device has no memory for is read back at the call (the script's run must go on): the
    files are the same, the log says why the dump is slower, once."""
    copy_on_device = host_copies._copy_on_device
    calls = []

    def full_every_other_time(data, dtype):
        calls.append(None)
        if len(calls) % 2:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 MiB")
        return copy_on_device(data, dtype)

    monkeypatch.setattr(host_copies, "_copy_on_device", full_every_other_time)

    debugger_dump = _debugger_dump(tmp_path, "tensor")
    _run(device_copies, _Stream(device_copies, "user"), "full", debugger_dump)
    monkeypatch.setattr(host_copies.DEVICE_COPIES, "on_cpu", False)
    clean_session(session)
    _run(None, None, "cpu", debugger_dump)
    assert len(calls) > 10
    assert capsys.readouterr().out.count("memory is full: tensor files of its tensors are read back at the call") == 1
    rank = {tag: tmp_path / tag / "step0" / "rank" for tag in ("full", "cpu")}
    names = sorted(path.name for path in (rank["cpu"] / "dump_tensor_data").iterdir())
    assert names == sorted(path.name for path in (rank["full"] / "dump_tensor_data").iterdir())
    for name in names:
        got = torch.load(str(rank["full"] / "dump_tensor_data" / name), weights_only=True)
        expected = torch.load(str(rank["cpu"] / "dump_tensor_data" / name), weights_only=True)
        assert got.dtype == expected.dtype and torch.equal(got, expected), name


def test_deferred_statistics_are_read_after_the_stream_they_were_launched_on(session, tmp_path, device_copies,
                                                                            monkeypatch):
    """Statistics of device tensors are reduced at the call, on the script's stream, and read back in a batch
    later, here at stop() outside the script's side stream: the read runs on a stream of the tool's own that
    waits for the side stream on the device first (a side stream's work is not ordered with another stream's
    otherwise: FSDP's all-gather stream, a prefetch stream)."""
    monkeypatch.setattr(planner.DEFAULTS, "defer_cpu", True)
    read_back = device_statistics._read_back

    def noted_read(torch_module, stacks):
        device_copies.note("read", device_copies.current_stream(), None)
        return read_back(torch_module, stacks)

    monkeypatch.setattr(device_statistics, "_read_back", noted_read)
    user_stream = _Stream(device_copies, "user")
    _run(device_copies, user_stream, "statistics", _debugger_dump(tmp_path, "statistics"))
    log = device_copies.log
    reads = [index for index, entry in enumerate(log) if entry[0] == "read"]
    assert reads
    for index in reads:  # on a stream of the tool's own, made to wait for the side stream first
        reader = log[index][2]
        assert reader.name == "made"
        assert ("wait_stream", True, reader, user_stream) in log[:index]
    # Nothing was put on the script's streams: they wait for nothing of the tool's.
    assert not [entry for entry in log if entry[0] == "wait_stream" and entry[2].name != "made"]
    data = json.loads((tmp_path / "statistics" / "step0" / "rank" / "dump.json").read_text())["data"]
    assert all(leaf["Max"] is not None for leaf in tensor_leaves(data))  # every batch was read


def test_a_script_with_ever_new_streams_is_read_after_a_whole_device_synchronisation(device_copies, monkeypatch):
    launches = LaunchStreams()
    monkeypatch.setattr(LaunchStreams, "MAX_STREAMS", 2)
    synchronized = []
    monkeypatch.setattr(device_copies, "synchronize", lambda device=None: synchronized.append(device), raising=False)
    cpu = torch.device("cpu")
    made = [_Stream(device_copies, f"script's {number}") for number in range(3)]
    for stream in made[:2]:
        with device_copies.stream(stream):
            launches.note(cpu)
            launches.note(cpu)  # noted once
    with launches.reading(cpu):
        pass
    waited = [entry[3] for entry in device_copies.log if entry[0] == "wait_stream"]
    assert waited == made[:2] and not synchronized
    with device_copies.stream(made[2]):
        launches.note(cpu)  # one too many: not kept
    with launches.reading(cpu):
        pass
    assert synchronized == [None]
