"""The pending batch of tensors behind the device statistics (``statistics/fused_batch.py``), on the CPU.

There is no accelerator here: ``planner.DEFAULTS.fused = EMULATED`` queues CPU tensors as an accelerator's
are queued (a reference to each, read by one fused pass at a launch: the numpy emulator of the Triton
kernels), and ``planner.DEFAULTS.defer_cpu`` sends CPU tensors down today's per-tensor device path. Each test
that guards a rule also runs once with the rule taken away and sees it fail (the "broken" runs).
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from ptdbg_ascend.statistics import fused_batch, planner
from ptdbg_ascend.statistics.device_batch import DeviceStatisticsBatch
from ptdbg_ascend.statistics.fused_batch import EMULATED, OFF, FusedQueue
from ptdbg_ascend.statistics.fused_plan import LEGACY, MSPROBE
from fake_torch_npu.fixtures import clean_session
from dump_json_names import tensor_leaves


@pytest.fixture
def emulated(monkeypatch):
    """The queue on CPU tensors (the emulator); returns the sizes of the passes launched, in order."""
    monkeypatch.setattr(planner.DEFAULTS, "fused", EMULATED)
    sizes = []
    original = FusedQueue._launch_group

    def counting(self, device, stream, fmt, items):
        sizes.append(len(items))
        return original(self, device, stream, fmt, items)

    monkeypatch.setattr(FusedQueue, "_launch_group", counting)
    return sizes


@pytest.fixture
def warnings_of(capsys):
    """``warnings_of()``: the ptdbg warnings printed since the last call (the log goes to stdout)."""

    def read():
        return [line for line in capsys.readouterr().out.splitlines() if "-[WARNING]" in line]

    return read


def _debugger(tmp_path, tag, **section):
    """A PrecisionDebugger (task statistics, level L1) writing under ``tmp_path/tag``; ``section``: its config's
    statistics section (scope, list)."""
    from ptdbg_ascend import PrecisionDebugger

    config = tmp_path / f"{tag}.json"
    config.write_text(json.dumps({"task": "statistics", "level": "L1", "dump_path": str(tmp_path / tag),
                                  "statistics": section}))
    return PrecisionDebugger(config_path=str(config))


def _dump_json(tmp_path, tag):
    return json.loads((tmp_path / tag / "step0" / "rank" / "dump.json").read_text())["data"]


def _numbers(leaf):
    return [leaf["Max"], leaf["Min"], leaf["Mean"], leaf["Norm"]]


def _adamw_step_dump(tmp_path, tag):
    """dump.json (PrecisionDebugger, task statistics, L1) of one AdamW step (foreach=False: ``step_t += 1``
    on a 0-d float tensor per parameter)."""
    from ptdbg_ascend import PrecisionDebugger

    torch.manual_seed(0)
    net = torch.nn.Linear(3, 2)
    optimizer = torch.optim.AdamW(net.parameters(), lr=0.1, foreach=False)
    net(torch.ones(1, 3)).sum().backward()
    debugger = PrecisionDebugger(dump_path=str(tmp_path / tag), task="statistics", level="L1")
    debugger.start()
    optimizer.step()
    debugger.stop()
    debugger.step()
    return json.loads((tmp_path / tag / "step0" / "rank" / "dump.json").read_text())["data"]


def test_a_zero_dim_step_count_is_recorded_as_it_was_before_adamw_increments_it(tmp_path, dump_session,
                                                                                 monkeypatch):
    """On the device path a 0-d float tensor was queued as itself: AdamW's ``step_t += 1`` changed it before
    the batch was read back, and dump.json showed the step count after the increment (1.0) as the input of
    the increment. It is queued as a copy now: the input reads 0.0, the output 1.0, as on the eager path."""
    monkeypatch.setattr(planner.DEFAULTS, "defer_cpu", True)
    data = _adamw_step_dump(tmp_path, "deferred")
    increments = [data[name] for name in data if name.startswith("Tensor.__iadd__.")]
    assert len(increments) == 2  # one per parameter
    for entry in increments:
        assert entry["input_args"][0]["shape"] == [] and entry["input_args"][0]["Max"] == 0.0
        assert entry["output"][0]["Max"] == 1.0


def _adamw_step_pkl(tmp_path, tag):
    """The pkl lines (legacy front-end, statistics only, filter_switch OFF: 0-d tensors kept) of one AdamW step
    (foreach=False)."""
    from ptdbg_ascend import acc_cmp_dump, register_hook, set_dump_path, set_dump_switch

    torch.manual_seed(0)
    net = torch.nn.Linear(3, 2)
    optimizer = torch.optim.AdamW(net.parameters(), lr=0.1, foreach=False)
    net(torch.ones(1, 3)).sum().backward()
    set_dump_path(str(tmp_path / tag / "dump.pkl"), dump_tag=tag)
    register_hook(net, acc_cmp_dump)
    set_dump_switch("ON", mode="all", filter_switch="OFF", summary_only=True)
    optimizer.step()
    set_dump_switch("OFF")
    pkl = next((tmp_path / tag / f"{tag}_v1.0" / "rank0").glob("*.pkl"))
    return [json.loads(line) for line in pkl.read_text(encoding="utf-8").splitlines()]


def test_a_zero_dim_step_count_in_the_legacy_pkl_is_the_one_before_the_increment(tmp_path, dump_session,
                                                                                  monkeypatch):
    """The legacy format's device path had the same bug (``device_reductions`` returned the 0-d tensor itself)."""
    monkeypatch.setattr(planner.DEFAULTS, "defer_cpu", True)
    records = {record[0]: record for record in _adamw_step_pkl(tmp_path, "deferred")}
    for index in (0, 1):
        name = f"Tensor___iadd___{index}_forward"
        assert records[name + "_input.0"][5] == [0.0, 0.0, 0.0, 0.0]
        assert records[name + "_output"][5] == [1.0, 1.0, 1.0, 1.0]


# -- the same numbers as today's eager path, on a real model ------------------------------------------------

def _pkl_records(tmp_path, model, train, tag, **switch):
    from ptdbg_ascend import acc_cmp_dump, register_hook, set_dump_path, set_dump_switch

    set_dump_path(str(tmp_path / tag / "npu_dump.pkl"), dump_tag=tag)
    register_hook(model, acc_cmp_dump)
    set_dump_switch("ON", **switch)
    train(model)
    set_dump_switch("OFF")
    pkl = next((tmp_path / tag / f"{tag}_v1.0" / "rank0").glob("*.pkl"))
    return [json.loads(line) for line in pkl.read_text(encoding="utf-8").splitlines()]


def _close(got, expected, what):
    """Max and Min exact; Mean and Norm to float32 rounding (the eager path sums float32 in float32, the fused
    pass in float64); nulls and non-finite numbers as they are."""
    assert got[:2] == expected[:2], what
    for index in (2, 3):
        a, b = got[index], expected[index]
        if a is None or b is None or not (math.isfinite(a) and math.isfinite(b)):
            assert a == b or (a != a and b != b), what
        else:
            assert abs(a - b) <= 2e-6 * abs(b) + 1e-7, (what, index, a, b)


@pytest.mark.parametrize("switch", [dict(mode="all", summary_only=True), dict(mode="api_stack")],
                         ids=["statistics only", "npy files (read on the writer thread)"])
def test_a_legacy_dump_through_the_queue_has_the_eager_numbers(tmp_path, dump_session, model, train, emulated,
                                                                monkeypatch, switch):
    initial = {key: value.clone() for key, value in model.state_dict().items()}
    monkeypatch.setattr(planner.DEFAULTS, "fused", OFF)
    reference = _pkl_records(tmp_path, model, train, "eager", **switch)
    assert emulated == []
    monkeypatch.setattr(planner.DEFAULTS, "fused", EMULATED)
    clean_session(dump_session)
    model.load_state_dict(initial)
    queued = _pkl_records(tmp_path, model, train, "queued", **switch)
    assert [record[0] for record in queued] == [record[0] for record in reference]
    tensors = 0
    for got, expected in zip(queued, reference):
        if got[0].endswith("_stack_info"):
            continue
        assert got[:5] == expected[:5]
        _close(got[5], expected[5], got[0])
        tensors += 1
    assert sum(emulated) >= tensors * 3 // 4  # most records were read by a fused pass
    assert len(emulated) < sum(emulated) / 2  # passes over many tensors, not one per tensor


class _InfNet(torch.nn.Module):
    """linear -> a division by a tensor with a zero (inf and nan: the *_except_inf_nan keys) -> relu, and an int
    tensor (argmax) and a float64 one through the dump."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(6, 4)

    def forward(self, x):
        y = self.fc(x)
        z = y / torch.tensor([1.0, 0.0, 2.0, 4.0])
        torch.argmax(y, dim=1)
        torch.exp(y.double())
        return torch.relu(y).sum() + torch.nan_to_num(z, posinf=0.0, neginf=0.0, nan=0.0).sum()


def _debugger_dump(tmp_path, tag):
    torch.manual_seed(0)
    net = _InfNet()
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
    debugger = _debugger(tmp_path, tag)
    debugger.start()
    for _ in range(2):
        optimizer.zero_grad()
        net(torch.randn(3, 6)).backward()
        optimizer.step()
    debugger.stop()
    debugger.step()
    return _dump_json(tmp_path, tag)


def test_a_precision_debugger_dump_through_the_queue_has_the_eager_numbers(tmp_path, dump_session, emulated,
                                                                            monkeypatch):
    monkeypatch.setattr(planner.DEFAULTS, "fused", OFF)
    reference = _debugger_dump(tmp_path, "eager")
    monkeypatch.setattr(planner.DEFAULTS, "fused", EMULATED)
    clean_session(dump_session)
    queued = _debugger_dump(tmp_path, "queued")
    assert list(queued) == list(reference)
    expected_leaves, got_leaves = list(tensor_leaves(reference)), list(tensor_leaves(queued))
    assert len(got_leaves) == len(expected_leaves) > 30
    for expected, got in zip(expected_leaves, got_leaves):
        assert list(got) == list(expected)  # the same keys in the same order (*_except_inf_nan included)
        _close(_numbers(got), _numbers(expected), got)
        pair = [expected.get("Max_except_inf_nan"), expected.get("Min_except_inf_nan")]
        if got["dtype"] == "torch.float64" and pair[0] is not None:
            # msprobe reduces float64 in float32: the device path's pair is of the float32 values (the eager
            # path's of the float64 ones; test_fused_statistics names this difference), so rounded as they are.
            pair = [float(np.float32(value)) for value in pair]
        assert [got.get("Max_except_inf_nan"), got.get("Min_except_inf_nan")] == pair, (got, expected)
    assert any("Max_except_inf_nan" in leaf for leaf in got_leaves)
    assert sum(emulated) >= len(got_leaves) // 2 and len(emulated) < sum(emulated) / 2


# -- writes to a queued tensor ------------------------------------------------------------------------------

def _relu_then_add_(tmp_path, tag, write, **section):
    """relu(x) recorded (its output queued), then ``write(y)`` changes the output in place, then neg(y)."""
    debugger = _debugger(tmp_path, tag, **section)
    debugger.start()
    y = torch.relu(torch.tensor([[1.0, -2.0], [3.0, 4.0]]))
    write(y)
    torch.neg(y)
    debugger.stop()
    return _dump_json(tmp_path, tag)


RELU = [4.0, 0.0, 2.0, math.sqrt(26.0)]
RELU_PLUS_ONE = [5.0, 1.0, 3.0, math.sqrt(46.0)]


def _without_the_watch(monkeypatch):
    """The broken run: in-place calls no longer launch the queue first."""
    monkeypatch.setattr(fused_batch.WRITES, "before_write", lambda args, kwargs: None)


@pytest.mark.parametrize("broken", [False, True], ids=["watched", "broken: not watched"])
@pytest.mark.parametrize("section", [{}, {"list": ["Torch.relu.0.forward", "Torch.neg.0.forward"]}],
                         ids=["add_ recorded", "add_ not selected"])
def test_an_in_place_write_after_queueing_launches_the_pass_first(tmp_path, dump_session, emulated, monkeypatch,
                                                                  warnings_of, section, broken):
    if broken:
        _without_the_watch(monkeypatch)
    data = _relu_then_add_(tmp_path, "dump", lambda y: y.add_(1.0), **section)
    relu = _numbers(data["Torch.relu.0.forward"]["output"][0])
    if broken:  # read after the write: the version check turns it into nulls, never the later numbers
        assert relu == [None] * 4 and len(warnings_of()) == 1
        return
    assert relu == pytest.approx(RELU, rel=1e-6)
    assert _numbers(data["Torch.neg.0.forward"]["input_args"][0]) == pytest.approx(RELU_PLUS_ONE, rel=1e-6)
    if not section:
        add = data["Tensor.add_.0.forward"]
        assert _numbers(add["input_args"][0]) == pytest.approx(RELU, rel=1e-6)
        assert _numbers(add["output"][0]) == pytest.approx(RELU_PLUS_ONE, rel=1e-6)
    else:
        assert "Tensor.add_.0.forward" not in data
    assert emulated[0] == 2  # launched before the write: relu's input and output
    assert warnings_of() == []


@pytest.mark.parametrize("broken", [False, True], ids=["watched", "broken: not watched"])
def test_an_unselected_legacy_in_place_write_launches_the_pass_first(tmp_path, dump_session, emulated, monkeypatch,
                                                                      broken):
    from ptdbg_ascend import acc_cmp_dump, register_hook, set_dump_path, set_dump_switch

    if broken:
        _without_the_watch(monkeypatch)
    set_dump_path(str(tmp_path / "npu_dump.pkl"), dump_tag="tag")
    register_hook(torch.nn.Linear(1, 1), acc_cmp_dump)
    set_dump_switch("ON", mode="list", scope=["Torch_relu_0_forward"], summary_only=True)
    y = torch.relu(torch.tensor([[1.0, -2.0], [3.0, 4.0]]))
    y.add_(1.0)  # not in the list
    set_dump_switch("OFF")
    records = {record[0]: record for record in
               (json.loads(line) for line in next(tmp_path.glob("tag_v1.0/rank0/*.pkl")).read_text().splitlines())}
    numbers = records["Torch_relu_0_forward_output"][5]
    assert numbers == ([None] * 4 if broken else pytest.approx(RELU, rel=1e-6))


def test_a_write_through_a_data_alias_is_seen_by_its_memory(tmp_path, dump_session, emulated, warnings_of):
    """``y.data.add_(1)`` does not bump ``y._version`` (a ``.data`` alias has a counter of its own): only the
    memory check sees it, and launches the pass before the write."""
    data = _relu_then_add_(tmp_path, "dump", lambda y: y.data.add_(1.0), list=["Torch.relu.0.forward"])
    assert _numbers(data["Torch.relu.0.forward"]["output"][0]) == pytest.approx(RELU, rel=1e-6)
    assert warnings_of() == []


def test_a_new_data_leaves_the_queued_alias_on_the_memory_recorded(tmp_path, dump_session, emulated, warnings_of):
    """``y.data = other`` swaps the memory behind ``y`` without a write: the queue holds an alias of the memory
    recorded, which still holds the values recorded."""
    def replace(y):
        y.data = torch.full((2, 2), 7.0)

    data = _relu_then_add_(tmp_path, "dump", replace)
    assert _numbers(data["Torch.relu.0.forward"]["output"][0]) == pytest.approx(RELU, rel=1e-6)
    assert _numbers(data["Torch.neg.0.forward"]["input_args"][0]) == [7.0, 7.0, 7.0, 14.0]
    assert warnings_of() == []


def test_writes_nothing_saw_give_nulls_and_one_warning(tmp_path, dump_session, emulated, warnings_of):
    """``zero_`` and ``copy_`` are not wrapped by default (``wrapped_apis_extra.txt``): nothing launches the pass
    before them. Their version bumps say the values changed: null statistics, never the numbers after the
    write, and one warning for the batch naming how many."""
    debugger = _debugger(tmp_path, "dump")
    debugger.start()
    y = torch.relu(torch.tensor([[1.0, -2.0], [3.0, 4.0]]))
    z = torch.neg(torch.tensor([5.0, 6.0]))
    y.zero_()
    z.copy_(torch.tensor([1.0, 1.0]))
    debugger.stop()
    data = _dump_json(tmp_path, "dump")
    assert _numbers(data["Torch.relu.0.forward"]["output"][0]) == [None] * 4
    assert _numbers(data["Torch.neg.0.forward"]["output"][0]) == [None] * 4
    assert _numbers(data["Torch.neg.0.forward"]["input_args"][0]) == [6.0, 5.0, 5.5, math.sqrt(61.0)]
    warnings = warnings_of()
    assert len(warnings) == 1 and "2 tensor(s) changed in place" in warnings[0], warnings
