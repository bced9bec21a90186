"""PrecisionDebugger tensor dumps (issue 20): the training thread takes each tensor's copy and nothing more.
The writer thread reads the statistics from the copy it saves, and a tensor recorded again unchanged (one
call's output, the next call's input) is neither copied nor written again: its ``.pt`` is a hard link to
the first file, as the legacy format links its npy files. The files and the numbers must be those of
before."""

from __future__ import annotations

import json
import os
import threading

import torch

from ptdbg_ascend import PrecisionDebugger
from ptdbg_ascend.fs import writes
from ptdbg_ascend.statistics import planner
from ptdbg_ascend.statistics.cache import StatisticsCache
from dump_json_names import tensor_leaves


class _TensorMix(torch.nn.Module):
    """Tensors of every layout and dtype the copy path sees or leaves alone: large enough for the writer
    thread to read their statistics (torch reduces them) and smaller ones, contiguous views at an offset
    (chunk), non-contiguous views (t(), slices), float16, bfloat16, float64, int64, inf and NaN, and AdamW's
    in-place updates (foreach=False)."""

    def __init__(self) -> None:
        super().__init__()
        self.big = torch.nn.Linear(512, 256)  # its weight: 131072 elements, over WRITER_STATISTICS_MIN_ELEMENTS
        self.head = torch.nn.Linear(256, 8)

    def forward(self, x):
        h = torch.relu(self.big(x))
        top, bottom = h.chunk(2, dim=0)  # contiguous, at an offset
        torch.exp(bottom.t() * 0.01)  # non-contiguous
        half = top.half() * 2
        torch.add(half.bfloat16(), 1)
        torch.sum(top.double(), dim=1)
        torch.mul(torch.arange(12).reshape(3, 4), 3)
        torch.div(h[:4, :4], torch.tensor([1.0, 0.0, -0.0, 2.0]))  # inf and NaN; a non-contiguous slice
        return self.head(h).sum()


def _tensor_dump(tmp_path, tag, steps=2):
    torch.manual_seed(0)
    model = _TensorMix()
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01, foreach=False)
    x = torch.randn(300, 512)
    debugger = PrecisionDebugger(task="tensor", level="L1", dump_path=str(tmp_path / tag))
    for _ in range(steps):
        debugger.start()
        model(x).backward()
        optimizer.step()
        optimizer.zero_grad()
        debugger.stop()
        debugger.step()
    return [tmp_path / tag / f"step{step}" / "rank" for step in range(steps)]


def _texts(rank_dirs):
    texts = []
    for rank in rank_dirs:
        dump = (rank / "dump.json").read_text()
        texts.append("\n".join(line for line in dump.splitlines() if '"dump_data_dir"' not in line))
        texts.extend((rank / name).read_text() for name in ("stack.json", "construct.json"))
    return texts


def test_a_tensor_dump_is_the_same_with_statistics_from_copies_and_linked_files(session, tmp_path, monkeypatch):
    from fake_torch_npu.fixtures import clean_session

    threads = []
    compute = planner.StatisticsPlanner.from_copy

    def counting(self, pending, copy):
        threads.append(threading.current_thread() is threading.main_thread())
        return compute(self, pending, copy)

    dumps = {}
    for tag in ("lean", "eager"):
        if tag == "lean":
            monkeypatch.setattr(planner.StatisticsPlanner, "from_copy", counting)
        else:  # before: every statistic read at the call, every file copied and written
            monkeypatch.undo()
            clean_session(session)
            monkeypatch.setattr(planner.DEFAULTS, "from_copies", False)
            monkeypatch.setattr(StatisticsCache, "saved", lambda self, tensor, name, make: (make(tensor), None))
        dumps[tag] = _tensor_dump(tmp_path, tag)  # one line: stack.json names it
        if tag == "lean":
            assert len(threads) >= 30 and not any(threads)  # read from the copies, on the writer thread
    lean, eager = dumps["lean"], dumps["eager"]
    assert _texts(lean) == _texts(eager)

    linked = 0
    for rank in lean:
        data = json.loads((rank / "dump.json").read_text())["data"]
        leaves = [leaf for leaf in tensor_leaves(data) if "data_name" in leaf]
        assert len(leaves) > 100
        for leaf in leaves:
            path = rank / "dump_tensor_data" / leaf["data_name"]
            linked += os.stat(str(path)).st_nlink > 1
            saved = torch.load(str(path), weights_only=True)
            assert list(saved.shape) == leaf["shape"] and str(saved.dtype) == leaf["dtype"]
            values = saved.float()  # msprobe reduces float64 and ints in float32 (monotonic: the same extremes)
            if leaf["Max"] is not None and bool(torch.isfinite(values).all()):
                # Each file holds what its own leaf says: a link never stands for a tensor changed since
                # (AdamW's in-place updates, an in-place call's input and output).
                assert float(values.max()) == leaf["Max"] and float(values.min()) == leaf["Min"], leaf["data_name"]
    assert linked > 50  # one call's output, the next call's input


def test_a_new_window_saves_a_tensor_again(session, tmp_path):
    """Files of an earlier window may be in another step's directory, or removed after a write error: a
    tensor recorded again in a new window gets a file of its own, not a link."""
    x = torch.randn(8, 8)
    debugger = PrecisionDebugger(task="tensor", level="L1", dump_path=str(tmp_path / "dump"))
    debugger.start()
    y = torch.relu(x)
    torch.exp(y)  # y again, in the same window: linked
    debugger.stop()
    debugger.start()
    torch.abs(y)  # y again, in a new window: written again
    debugger.stop()
    files = tmp_path / "dump" / "step0" / "rank" / "dump_tensor_data"
    relu_out = os.stat(str(files / "Torch.relu.0.forward.output.0.pt"))
    assert os.stat(str(files / "Torch.exp.0.forward.input.0.pt")).st_ino == relu_out.st_ino
    abs_in = os.stat(str(files / "Torch.abs.0.forward.input.0.pt"))
    assert abs_in.st_ino != relu_out.st_ino and abs_in.st_nlink == 1
    assert torch.equal(torch.load(str(files / "Torch.abs.0.forward.input.0.pt"), weights_only=True), y)


def test_link_file_replaces_a_symlink_and_copies_where_links_fail(tmp_path, monkeypatch):
    source = tmp_path / "first.pt"
    source.write_bytes(b"tensor bytes")
    victim = tmp_path / "victim"
    victim.write_bytes(b"not yours")
    target = tmp_path / "second.pt"
    os.symlink(str(victim), str(target))
    writes.link_file(str(source), str(target))
    assert not os.path.islink(str(target)) and os.stat(str(target)).st_ino == os.stat(str(source)).st_ino
    assert victim.read_bytes() == b"not yours"  # never written through the link

    def no_links(*args, **kwargs):
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "link", no_links)
    copied = tmp_path / "third.pt"
    writes.link_file(str(source), str(copied))
    assert copied.read_bytes() == b"tensor bytes" and os.stat(str(copied)).st_nlink == 1
    assert sorted(os.listdir(str(tmp_path))) == ["first.pt", "second.pt", "third.pt", "victim"]  # no temporary left
