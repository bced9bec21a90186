"""The PrecisionDebugger's one dump.json encoder: the text ``json.dumps(indent=1)`` writes, with less work per call."""

from __future__ import annotations

import json
import math
import os
import time

import torch

from ptdbg_ascend import PrecisionDebugger
from ptdbg_ascend.sinks.msprobe import json_text, sink as sink_module

LEAF = {"type": "torch.Tensor", "dtype": "torch.float32", "shape": [16, 16], "Max": 3.4994678497314453,
        "Min": -2.5411460399627686, "Mean": -0.0632057785987854, "Norm": 16.747965674912486, "requires_grad": False}


def _values():
    """Entries as the sink builds them, and the odd values JSON must still write as json.dumps does."""
    nan, inf = float("nan"), float("inf")
    bool_leaf = dict(LEAF, dtype="torch.bool", Max=True, Min=False, Mean=None, Norm=None)
    odd_leaf = dict(LEAF, Max=inf, Min=-inf, Mean=nan, Norm=nan, requires_grad=True)
    extended = dict(odd_leaf, Max_except_inf_nan=1.5, Min_except_inf_nan=-1.5, data_name="x.pt")
    return [
        {"input_args": [LEAF, dict(LEAF, shape=[])], "input_kwargs": {}, "output": [LEAF]},
        {"input_args": [bool_leaf, odd_leaf, extended, None, dict(LEAF, Max=-inf, Min=5.0), dict(LEAF, Norm=inf),
                        dict(LEAF, shape=[3], dtype="torch.float\u00fc")],
         "input_kwargs": {"dim": {"type": "int", "value": 1}},
         "output": [[LEAF, {"type": "slice", "value": [None, 3, None]}]]},
        {"input_args": [{"type": "str", "value": "ü\n\"quoted\"\\"}, {"type": "float", "value": 1e-320},
                        {"type": "int", "value": 2 ** 70}, {"type": "torch.Size", "value": (2, 3)}],
         "output": [dict(LEAF, Norm=[[1.0, {"deep": [nan]}]])]},  # a leaf whose value nests (general path)
        ["File a.py, line 3, in f, \n y = torch.relu(x)", "File b.py, line 9, in <module>, \n f()"],
        {}, [], "text", 0.1, None, True,
    ]


def test_value_text_is_json_dumps_indent_1():
    for value in _values():
        for level in (0, 1, 3):
            expected = json.dumps(value, indent=1).replace("\n", "\n" + " " * level)
            assert json_text.value_text(value, level) == expected, value
    assert json_text.member_text("Torch.relu.0.forward", _values()[0], 1) == \
        '  "Torch.relu.0.forward": ' + json.dumps(_values()[0], indent=1).replace("\n", "\n  ")


def test_value_text_leaves_unusual_values_to_json():
    class Text(str):
        pass

    for value in ({1: "int key"}, {"a": Text("sub")}, [{None: 1, 2.5: [True]}]):
        assert json_text.value_text(value, 2) == json.dumps(value, indent=1).replace("\n", "\n  ")
    try:
        json_text.value_text({"a": object()})
    except TypeError as error:
        assert "not JSON serializable" in str(error)
    else:
        raise AssertionError("an object JSON cannot write must raise TypeError, as json.dumps does")


def test_a_tensor_recorded_twice_in_a_row_is_reduced_once(session, tmp_path, monkeypatch, read_dump):
    reduced = []
    original = sink_module.tensor_statistics_msprobe

    def counting(tensor):
        reduced.append(tuple(tensor.shape))
        return original(tensor)

    monkeypatch.setattr(sink_module, "tensor_statistics_msprobe", counting)
    x = torch.arange(12, dtype=torch.float32).reshape(3, 4) - 5
    debugger = PrecisionDebugger(task="statistics", level="L1", dump_path=str(tmp_path / "dump"))
    debugger.start()
    y = torch.relu(x)  # x in, y out
    z = torch.abs(y)   # y in again: its statistics come from the cache
    y.add_(1)          # in place: y's version changes, so it is reduced again (in and out)
    torch.exp(y)
    debugger.stop()
    # relu: x, y; abs: z (y cached); add_: y before, 1 (not a tensor), y after; exp: y cached, out
    assert reduced == [(3, 4)] * 6
    dump, _, _ = read_dump(str(tmp_path / "dump" / "step0" / "rank"))
    relu_out = dump["data"]["Torch.relu.0.forward"]["output"][0]
    abs_in = dump["data"]["Torch.abs.0.forward"]["input_args"][0]
    assert relu_out == abs_in and relu_out["Max"] == 6.0 and relu_out["Min"] == 0.0
    exp_in = dump["data"]["Torch.exp.0.forward"]["input_args"][0]
    assert exp_in["Max"] == 7.0 and exp_in["Min"] == 1.0  # after add_, not the cached relu numbers
    assert math.isclose(exp_in["Mean"], float((z + 1).mean()), rel_tol=1e-6)


def _open_reserves(rank_dir):
    """The files this process holds open under ``rank_dir`` named .ptdbg.reserve (removed or not)."""
    found = []
    for name in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(os.path.join("/proc/self/fd", name))
        except OSError:
            continue
        if target.startswith(str(rank_dir)) and ".ptdbg.reserve" in target:
            found.append(target)
    return found


def test_stop_removes_the_reserve_at_once_and_gives_its_space_back(session, tmp_path):
    debugger = PrecisionDebugger(task="statistics", level="L1", dump_path=str(tmp_path / "dump"))
    debugger.start()
    for _ in range(50):
        torch.relu(torch.ones(4, 4))
    rank_dir = tmp_path / "dump" / "step0" / "rank"
    assert ".ptdbg.reserve" in os.listdir(str(rank_dir))
    debugger.stop()
    assert sorted(os.listdir(str(rank_dir))) == ["construct.json", "dump.json", "stack.json"]
    deadline = time.monotonic() + 10
    while _open_reserves(rank_dir) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert _open_reserves(rank_dir) == []  # closed by the helper thread: its blocks are free


def test_a_recurring_leaf_text_is_the_text_of_its_own_values():
    """Leaf texts are reused by value (a tensor recorded as one call's output and the next call's input):
    a value that compares equal but is written differently (-0.0 and 0.0) never takes another leaf's text."""
    from ptdbg_ascend.sinks.msprobe.leaves import leaf_text

    cases = [
        (dict(LEAF, Min=0.0), dict(LEAF, Min=-0.0)),
        (dict(LEAF, Mean=-0.0), dict(LEAF, Mean=0.0)),
        (dict(LEAF, shape=[16, 16]), dict(LEAF, shape=[256])),
        (dict(LEAF, requires_grad=False), dict(LEAF, requires_grad=True)),
        (dict(LEAF, dtype="torch.float32"), dict(LEAF, dtype="torch.bfloat16")),
    ]
    for first, second in cases:
        for level in (0, 4):
            for leaf in (first, second, first):
                expected = json.dumps(leaf, indent=1).replace("\n", "\n" + " " * level)
                numbers = [leaf["Max"], leaf["Min"], leaf["Mean"], leaf["Norm"]]
                assert leaf_text(level, leaf["dtype"], leaf["shape"], leaf["requires_grad"], numbers) == expected, leaf


def test_finished_entries_leave_nothing_for_the_garbage_collector_to_walk(tmp_path):
    """A step's entries are kept as their text once finished: a long step (hundreds of thousands of calls)
    must not leave millions of small dicts and lists that every full collection walks again (seen as
    one slow window in three before). Their text is what dump.json shows; an entry extended later (an
    in-place collective's output) is still written whole."""
    import gc

    from ptdbg_ascend.sinks.msprobe.json_writer import MsprobeJsonWriter

    writer = MsprobeJsonWriter(str(tmp_path / "step0" / "rank0"), "statistics", "L1", saves_tensors=False)
    entry = {"input_args": [dict(LEAF), dict(LEAF, shape=[3])], "input_kwargs": {"dim": {"type": "int", "value": 1}},
             "output": [dict(LEAF)]}
    writer.add_entry("Torch.warm.0.forward", json.loads(json.dumps(entry)))
    gc.collect()
    before = len(gc.get_objects())
    for index in range(2000):
        writer.add_entry(f"Torch.add.{index}.forward", json.loads(json.dumps(entry)))
        writer.add_stack_literals(f"Torch.add.{index}.forward", ['"File a.py, line 3, in f, \\n y()"'])
    gc.collect()
    assert len(gc.get_objects()) - before < 200  # was > 10 objects per entry
    writer.add_entry("Torch.add.7.forward", {"output": [dict(LEAF, Max=9.5)]})  # extended after it was written
    writer.flush()
    writer.release()
    data = json.loads((tmp_path / "step0" / "rank0" / "dump.json").read_text())["data"]
    assert len(data) == 2001
    assert data["Torch.add.6.forward"] == entry
    assert data["Torch.add.7.forward"] == dict(entry, output=[dict(LEAF, Max=9.5)])
    stack = json.loads((tmp_path / "step0" / "rank0" / "stack.json").read_text())
    assert stack["Torch.add.3.forward"] == ["File a.py, line 3, in f, \n y()"]


class _Mixed(torch.nn.Module):
    """Values of every kind a call takes or gives: tensors (float, int, bool, 0-d, empty, inf and NaN),
    Python scalars and strings, keyword arguments (dim, dtype), tuples of tensors, None gradients, in-place
    updates (AdamW's per-parameter steps) and a parameter that gets no gradient."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(6, 4)
        self.unused = torch.nn.Linear(2, 2)

    def forward(self, x):
        y = torch.nn.functional.gelu(self.fc(x), approximate="tanh")
        values, indices = torch.max(y, dim=1)  # a tuple out; an int tensor
        torch.argmax(y, dim=1, keepdim=False)
        mask = y > 0.1  # a bool tensor
        z = torch.where(mask, y, torch.zeros_like(y))
        ratio = y / torch.tensor([1.0, 0.0, 2.0, 4.0])  # inf and NaN
        torch.nan_to_num(ratio, nan=0.0, posinf=1.0, neginf=-1.0)
        y.new_empty((0, 3)).sum(dim=0)  # empty
        w = torch.cat([z, y * 0.5], dim=-1).to(dtype=torch.float64).float()
        return w.sum() + values.mean() + indices.float().mean() * 0.0


def _mixed_dump(tmp_path, tag, monkeypatch):
    from ptdbg_ascend.jsonfile import load_json

    torch.manual_seed(0)
    model = _Mixed()
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01, foreach=False)
    debugger = PrecisionDebugger(task="statistics", level="L1", dump_path=str(tmp_path / tag))
    for _ in range(2):
        debugger.start()
        loss = model(torch.randn(3, 6))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        debugger.stop()
        debugger.step()
    monkeypatch.undo()
    rank_dirs = [tmp_path / tag / f"step{step}" / "rank" for step in (0, 1)]
    return [(rank / name).read_text() for rank in rank_dirs for name in ("dump.json", "construct.json")], \
        [load_json(str(rank / "stack.json"), "stack.json") for rank in rank_dirs]


def _assert_written_as_json_writes_it(texts):
    """Each file is, byte for byte, ``json.dumps(indent=1)`` of what it holds, and every tensor leaf has msprobe's
    keys in msprobe's order."""
    order = ["type", "dtype", "shape", "Max", "Min", "Mean", "Norm", "requires_grad", "Max_except_inf_nan",
             "Min_except_inf_nan", "md5", "data_name"]
    for text in texts:
        assert json.dumps(json.loads(text), indent=1) == text
    leaves = []

    def walk(value):
        if isinstance(value, dict):
            if value.get("type") == "torch.Tensor":
                leaves.append(value)
            for item in value.values():
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)

    walk(json.loads(texts[0]))
    for leaf in leaves:
        assert list(leaf) == [key for key in order if key in leaf], leaf
    return leaves


def test_entries_are_written_as_json_writes_them(session, tmp_path, monkeypatch):
    """A statistics dump writes each entry's text straight from the call's values (encoder.py), nothing as dicts.
    On a model with every kind of value (bool and empty tensors, inf/NaN, a dtype keyword, in-place updates,
    backward entries) the files are byte for byte what ``json.dumps(indent=1)`` writes of them."""
    texts, stacks = _mixed_dump(tmp_path, "text", monkeypatch)
    leaves = _assert_written_as_json_writes_it(texts)
    data = json.loads(texts[0])["data"]
    assert "Torch.max.0.forward" in data and "Tensor.__gt__.0.forward" in data
    assert any(name.endswith(".backward") for name in data)
    assert any(".add_." in name or ".mul_." in name or ".lerp_." in name for name in data)  # in-place updates
    assert any(leaf["dtype"] == "torch.bool" and leaf["Mean"] is None for leaf in leaves)
    assert any("Max_except_inf_nan" in leaf for leaf in leaves)
    assert stacks[0] and set(stacks[0]) <= set(data)


def test_encoder_fast_leaf_writes_what_the_general_path_writes(session, tmp_path, monkeypatch):
    """``values_block`` writes a plain CPU tensor's leaf straight from its numbers; with that shortcut off every
    value goes through ``value()``: the same model (bool, empty, inf/NaN, Parameters, in-place, backward) gives
    the same bytes in every file. Also checks the shortcut is taken (the general path is entered less)."""
    from ptdbg_ascend.sinks.msprobe import encoder

    general = []
    original_value, original_bind = encoder.EntryEncoder.value, encoder.EntryEncoder.bind

    def counting(self, value, *args):
        general.append(type(value))
        return original_value(self, value, *args)

    def without_shortcut(self, *args, **kwargs):
        original_bind(self, *args, **kwargs)
        self._plain_cpu = False

    monkeypatch.setattr(encoder.EntryEncoder, "value", counting)
    fast, _ = _mixed_dump(tmp_path, "fast", monkeypatch)
    taken = len(general)
    general.clear()
    monkeypatch.setattr(encoder.EntryEncoder, "value", counting)
    monkeypatch.setattr(encoder.EntryEncoder, "bind", without_shortcut)
    slow, _ = _mixed_dump(tmp_path, "slow", monkeypatch)
    assert fast == slow
    assert taken < len(general) / 2, (taken, len(general))


def test_a_tensor_whose_statistics_raise_is_written_as_the_dicts_write_it(session, tmp_path, monkeypatch, read_dump):
    """A dtype the reductions refuse must not stop the user's call: the tensor is written as a leaf of a special
    kind, with the numbers of the values it holds."""
    original = sink_module.tensor_statistics_msprobe

    def refusing(tensor):
        if tuple(tensor.shape) == (5,):
            raise RuntimeError("no arithmetic for this dtype")
        return original(tensor)

    monkeypatch.setattr(sink_module, "tensor_statistics_msprobe", refusing)
    debugger = PrecisionDebugger(task="statistics", level="L1", dump_path=str(tmp_path / "dump"))
    debugger.start()
    y = torch.relu(torch.arange(5, dtype=torch.float32) - 2)
    torch.exp(torch.ones(2, 2))
    debugger.stop()
    data = read_dump(str(tmp_path / "dump" / "step0" / "rank"))[0]["data"]
    leaf = data["Torch.relu.0.forward"]["output"][0]
    assert leaf["shape"] == [5] and leaf["Max"] == 2.0 and leaf["Min"] == 0.0  # special leaf: its own numbers
    assert data["Torch.exp.0.forward"]["output"][0]["Max"] == float(torch.exp(torch.tensor(1.0)))
    assert y.tolist() == [0.0, 0.0, 0.0, 1.0, 2.0]


def test_entries_waiting_for_device_statistics_are_written_as_json_writes_them(session, tmp_path, monkeypatch):
    """On an accelerator (emulated: ``planner.DEFAULTS.defer_cpu``) an entry whose tensors' statistics are read back
    later is kept as its text with a placeholder per such leaf (``encoder.EntryTemplate``), not as dicts. Once read,
    the files are what ``json.dumps(indent=1)`` writes of them, with msprobe's ``*_except_inf_nan`` keys where a
    read-back Max or Min is not finite, and the numbers of the eager path."""
    from ptdbg_ascend.statistics import planner
    from ptdbg_ascend.sinks.msprobe import encoder

    templates = []
    original = encoder.EntryTemplate.__init__

    def counting(self, text, late):
        templates.append(len(late))
        original(self, text, late)

    monkeypatch.setattr(planner.DEFAULTS, "defer_cpu", True)
    monkeypatch.setattr(encoder.EntryTemplate, "__init__", counting)
    texts, _ = _mixed_dump(tmp_path, "late", monkeypatch)  # (undoes the patches)
    assert len(templates) > 20 and sum(templates) > 50
    leaves = _assert_written_as_json_writes_it(texts)
    assert any("Max_except_inf_nan" in leaf for leaf in leaves)
    eager, _ = _mixed_dump(tmp_path, "eager", monkeypatch)
    late_data, eager_data = json.loads(texts[0])["data"], json.loads(eager[0])["data"]
    assert list(late_data) == list(eager_data)
    for name, entry in late_data.items():  # float32 reductions on the device path, float64 eager: close, same keys
        assert json.dumps(entry).count("Max") == json.dumps(eager_data[name]).count("Max"), name


def test_an_entry_template_extended_later_is_written_whole(tmp_path):
    """An entry added again under its name (an in-place collective's output after its input) while its
    first part still waits for device statistics: both parts are written, each leaf with its numbers, and
    the entry is shown only once every number is in."""
    from ptdbg_ascend.statistics.pending import PendingStatistics as PendingDeviceStatistics
    from ptdbg_ascend.sinks.msprobe.entries import StepEntries
    from ptdbg_ascend.sinks.msprobe.encoder import EntryEncoder, EntryTemplate
    from ptdbg_ascend.sinks.msprobe.leaves import TensorLeaf

    numbers = {}

    def pending(values):
        waiting = PendingDeviceStatistics([None] * len(values))
        waiting.values, waiting.count = True, 1  # not read yet
        numbers[id(waiting)] = values
        return waiting

    def read(waiting):
        waiting[:] = numbers[id(waiting)]
        waiting.values = None

    first, second = pending([2.0, -1.0, 0.5, 3.0]), pending([float("inf"), 1.0, float("inf"), float("inf"), 4.0, 1.0])
    texts = EntryEncoder(lambda tensor: [0.0, 0.0, 0.0, 0.0])
    late = [TensorLeaf(4, "torch.float32", (2,), False, first), TensorLeaf(4, "torch.float16", (), True, second)]
    blocks = [("input_args", "[\n    \x00,\n    \x00\n   ]")]
    entries = StepEntries()
    entries.add("Torch.x.0.forward", texts.entry("Torch.x.0.forward", blocks, late), None)
    third = pending([5.0, 5.0, 5.0, 5.0])
    output = [TensorLeaf(4, "torch.float32", (1,), False, third)]
    entries.add("Torch.x.0.forward", texts.entry("Torch.x.0.forward", [("output", "[\n    \x00\n   ]")], output), None)

    def shown():
        return json.loads(str(entries.finished_text(0)[0]))

    assert shown() == {}  # nothing read yet
    read(first)
    read(second)
    assert shown() == {}  # the output's numbers are still to come
    read(third)
    entry = shown()["Torch.x.0.forward"]
    leaf = {"type": "torch.Tensor", "dtype": "torch.float32", "shape": [2], "Max": 2.0, "Min": -1.0, "Mean": 0.5,
            "Norm": 3.0, "requires_grad": False}
    assert entry["input_args"][0] == leaf
    inf = float("inf")
    assert entry["input_args"][1] == {"type": "torch.Tensor", "dtype": "torch.float16", "shape": [], "Max": inf,
                                      "Min": 1.0, "Mean": inf, "Norm": inf, "requires_grad": True,
                                      "Max_except_inf_nan": 4.0, "Min_except_inf_nan": 1.0}
    assert entry["output"] == [dict(LEAF, shape=[1], Max=5.0, Min=5.0, Mean=5.0, Norm=5.0)]
    assert isinstance(EntryTemplate("", []).late, list)


def test_a_waiting_leaf_never_outgrows_the_length_the_disk_reserve_counts():
    """The JSON reserve holds room for each entry before it exists (safety_guide.md, disk full); for an entry
    still waiting for its numbers, its length is an upper bound that the finished text must stay within."""
    from ptdbg_ascend.sinks.msprobe.leaves import TensorLeaf

    inf, nan, tiny = float("inf"), float("nan"), -2.2250738585072014e-308
    for numbers in ([1.0, 2.0, 3.0, 4.0], [tiny, tiny, tiny, tiny], [inf, tiny, nan, inf, tiny, tiny],
                    [nan, nan, nan, nan, -inf, inf], [-1.2345678901234567e-300] * 4 + [tiny, tiny]):
        for shape in ((), (1,), (1024, 1024, 3)):
            for tail in ((), (("md5", "0123abcd"), ("data_name", "Torch.x.0.forward.output.0.pt"))):
                leaf = TensorLeaf(4, "torch.bfloat16", shape, True, list(numbers), tail)
                assert len(leaf.text()) <= leaf.longest(), (numbers, shape, tail)


def _in_place_dump(tmp_path, tag, monkeypatch):
    """In-place calls on the emulated device path, some under autocast, and a call with a bool output."""
    from ptdbg_ascend.statistics import planner

    monkeypatch.setattr(planner.DEFAULTS, "defer_cpu", True)
    x = torch.tensor([[1.0, -2.0], [3.0, float("inf")]])
    debugger = PrecisionDebugger(task="statistics", level="L1", dump_path=str(tmp_path / tag))
    debugger.start()
    y = torch.relu(x)
    y.mul_(2.0)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y.add_(torch.ones(2, 2))
        torch.mm(y, y).sub_(1.0)
    z = torch.ones(3)
    z.lt_(2.0)
    torch.lt(z, 2.0)  # a bool output
    debugger.stop()
    monkeypatch.undo()
    return (tmp_path / tag / "step0" / "rank" / "dump.json").read_text()


def test_in_place_entries_keep_the_inputs_taken_before_the_call(session, tmp_path, monkeypatch):
    """An in-place call's inputs are taken before the call, as text with placeholders for the leaves whose
    numbers are still on the device; its outputs (and its autocast value) are added after the call, and the
    entry is written as ``json.dumps(indent=1)`` writes it once every number is in."""
    texts = _in_place_dump(tmp_path, "text", monkeypatch)
    _assert_written_as_json_writes_it([texts])
    data = json.loads(texts)["data"]
    assert data["Tensor.add_.0.forward"]["autocast"]
    assert data["Tensor.add_.0.forward"]["input_args"][0]["Max"] == math.inf
    assert data["Tensor.add_.0.forward"]["input_args"][0]["Max_except_inf_nan"] == 6.0  # before the add
    assert data["Tensor.add_.0.forward"]["output"][0]["Max_except_inf_nan"] == 7.0
