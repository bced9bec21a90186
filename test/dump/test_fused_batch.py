"""The pending batch of tensors behind the device statistics (``statistics/fused_batch.py``), on the CPU.

There is no accelerator here: ``planner.DEFAULTS.fused = EMULATED`` queues CPU tensors as an accelerator's
are queued (a reference to each, read by one fused pass at a launch: the numpy emulator of the Triton
kernels), and ``planner.DEFAULTS.defer_cpu`` sends CPU tensors down today's per-tensor device path. Each test
that guards a rule also runs once with the rule taken away and sees it fail (the "broken" runs).
"""

from __future__ import annotations

import gc
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
from inf_net import InfNet
from legacy_pkl_dump import legacy_pkl_lines


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
    return [json.loads(line) for line in legacy_pkl_lines(tmp_path, model, train, tag, **switch)]


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


def _debugger_dump(tmp_path, tag):
    torch.manual_seed(0)
    net = InfNet(float64=True)
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


@pytest.mark.parametrize("broken", [False, True], ids=["launched at the pass's end", "broken: not launched"])
def test_an_accumulated_gradient_keeps_the_numbers_of_its_own_pass(tmp_path, dump_session, emulated, monkeypatch,
                                                                    broken):
    """Two backward passes without zero_grad: autograd stole the first pass's gradient (the queue holds an
    alias of it, not the tensor, so no clone) and adds the second into it in place, which no wrapper sees. The
    first pass's numbers are read when that pass ends."""
    if broken:
        monkeypatch.setattr(FusedQueue, "_launch_at_backward_end", lambda self: None)
    weight = torch.nn.Parameter(torch.tensor([1.0, -1.0, 2.0]))
    debugger = _debugger(tmp_path, "dump")
    debugger.start()
    for x in ([1.0, 2.0, 3.0], [4.0, 5.0, 6.0]):
        torch.mul(torch.tensor(x), weight).sum().backward()
    debugger.stop()
    data = _dump_json(tmp_path, "dump")
    first, second = (_numbers(data[f"Torch.mul.{index}.backward"]["output"][1]) for index in (0, 1))
    assert weight.grad.tolist() == [5.0, 7.0, 9.0]
    assert second == pytest.approx([6.0, 4.0, 5.0, math.sqrt(77.0)], rel=1e-6)
    assert first == ([None] * 4 if broken else pytest.approx([3.0, 1.0, 2.0, math.sqrt(14.0)], rel=1e-6))


@pytest.mark.parametrize("broken", [False, True], ids=["an alias", "broken: the tensor itself"])
def test_a_queued_gradient_is_still_stolen_by_autograd_not_cloned(tmp_path, dump_session, emulated, monkeypatch,
                                                                  broken):
    """The queue keeps an alias of a recorded gradient, not the tensor: autograd, which steals a fresh gradient
    into ``.grad`` only when nothing else holds it, still does, instead of cloning it for every parameter."""
    if broken:
        held, real = [], FusedQueue.add
        monkeypatch.setattr(FusedQueue, "add", lambda self, tensor, fmt: (held.append(tensor), real(self, tensor, fmt))[1])
    weight = torch.nn.Parameter(torch.tensor([1.0, -1.0, 2.0]))
    arriving = []
    weight.register_hook(lambda gradient: arriving.append(gradient.data_ptr()))  # before autograd stores it
    debugger = _debugger(tmp_path, "dump")
    debugger.start()
    torch.mul(torch.tensor([1.0, 2.0, 3.0]), weight).sum().backward()
    debugger.stop()
    assert (weight.grad.data_ptr() == arriving[0]) is not broken


def _linear_and_adamw(tmp_path, kind, section):
    """A Linear's forward (its weight recorded as an input), backward and one AdamW step of ``kind``; returns
    (the weight before the step, dump.json's data)."""
    torch.manual_seed(0)
    net = torch.nn.Linear(4, 3)
    options = {"fused": dict(fused=True), "foreach": dict(foreach=True), "single": dict(foreach=False)}[kind]
    optimizer = torch.optim.AdamW(net.parameters(), lr=0.5, **options)
    before = net.weight.detach().clone()
    debugger = _debugger(tmp_path, "dump", **section)
    debugger.start()
    net(torch.ones(2, 4)).sum().backward()
    optimizer.step()
    debugger.stop()
    assert not torch.equal(before, net.weight)
    return before, _dump_json(tmp_path, "dump")


@pytest.mark.parametrize("broken", [False, True], ids=["watched", "broken: not watched"])
# Forward only: a recorded backward would launch the queue at its end, before the step.
@pytest.mark.parametrize("section", [{"data_mode": ["forward"]}, {"list": ["Functional.linear.0.forward"]}],
                         ids=["step recorded", "step not selected"])
@pytest.mark.parametrize("kind", ["fused", "foreach", "single"])
def test_an_optimizer_step_launches_the_pass_before_it_writes_the_parameters(tmp_path, dump_session, emulated,
                                                                             monkeypatch, kind, section, broken):
    """The fused step (``torch._fused_adamw_``) writes the parameters without bumping their version counters: only
    the memory check before the call keeps the numbers recorded before it. The foreach and single-tensor steps
    bump them (unwatched: nulls)."""
    from ptdbg_ascend.statistics.msprobe_rules import eager_statistics

    if broken:
        _without_the_watch(monkeypatch)
    before, data = _linear_and_adamw(tmp_path, kind, section)
    recorded = _numbers(data["Functional.linear.0.forward"]["input_args"][1])
    expected = pytest.approx(eager_statistics(before), rel=1e-6)
    if not broken:
        assert recorded == expected
    elif kind == "fused":  # no version bump: the numbers after the step, the wrong ones
        assert recorded != expected and None not in recorded
    else:
        assert recorded == [None] * 4
    if kind == "fused" and "list" not in section and not broken:
        params = data["Torch._fused_adamw_.0.forward"]["input_args"][0]
        assert _numbers(params[0]) == expected  # the step's own input, read before it writes


# -- the bound, and what the queue does not take ------------------------------------------------------------

def test_the_queue_launches_at_1024_tensors_and_reads_once_at_resolve():
    reads = []
    batch = DeviceStatisticsBatch(on_read=reads.append, fused=EMULATED)
    tensors = [torch.full((3,), float(index)) for index in range(FusedQueue.MAX_TENSORS + 2)]
    pending = [batch.queued(tensor, LEGACY) for tensor in tensors[:FusedQueue.MAX_TENSORS - 1]]
    assert batch.queue.has_queued() and not any(numbers.done() for numbers in pending)
    pending.append(batch.queued(tensors[FusedQueue.MAX_TENSORS - 1], LEGACY))
    assert not batch.queue.has_queued()  # the 1024th launched the pass
    pending += [batch.queued(tensor, LEGACY) for tensor in tensors[FusedQueue.MAX_TENSORS:]]
    assert batch.queue.has_queued() and batch.pending_count() == len(tensors)
    batch.resolve()
    assert reads == [len(tensors)]  # one read for both passes
    assert [numbers[0] for numbers in pending] == [float(index) for index in range(len(tensors))]
    assert pending[5] == [5.0, 5.0, 5.0, pytest.approx(math.sqrt(75.0))]


def test_the_queue_launches_at_its_bytes_counting_a_shared_storage_once(monkeypatch):
    monkeypatch.setattr(FusedQueue, "MAX_BYTES", 1 << 20)
    queue = FusedQueue(EMULATED)
    base = torch.arange(200_000, dtype=torch.float32)  # 800,000 bytes
    for view in (base[:100_000], base[50_000:], base, base.reshape(400, 500).t()):
        assert queue.add(view, MSPROBE) is not None
    assert queue.has_queued()  # four tensors of one storage: 800,000 bytes, under the bound
    queue.add(torch.ones(100_000), MSPROBE)  # another 400,000
    assert not queue.has_queued()
    launched, changed = queue.take_launched()
    assert [len(item.pending) for item in launched] == [5] and changed == 0
    assert launched[0].plan.sources == []  # read: the references went at the launch, not at the read-back


def test_inference_tensors_and_views_with_gaps_take_the_per_tensor_path():
    from ptdbg_ascend.statistics import rules
    from ptdbg_ascend.statistics.planner import StatisticsPlanner

    with torch.inference_mode():
        inference = torch.arange(12.0).reshape(3, 4)
    gappy = torch.arange(64.0).reshape(8, 8)[:, ::2]
    dense = torch.arange(20.0).reshape(4, 5).t()  # a transpose is dense in memory: queued as it lies
    statistics = StatisticsPlanner(rules.LEGACY, fused=EMULATED)
    numbers = [statistics.device(tensor) for tensor in (inference, gappy, dense)]
    assert [type(item.values) for item in numbers] == [list, list, bool]  # reductions launched / a reference
    statistics.batch.resolve()
    for item, tensor in zip(numbers, (inference, gappy, dense)):
        expected = rules.LEGACY.eager(tensor.clone())
        assert item[:2] == expected[:2] and item[2:] == pytest.approx(expected[2:], rel=1e-6)


def test_auto_on_the_cpu_and_off_keep_the_per_tensor_path():
    from ptdbg_ascend.errors import ParameterError
    from ptdbg_ascend.statistics import rules
    from ptdbg_ascend.statistics.planner import StatisticsPlanner

    assert planner.DEFAULTS.fused == fused_batch.AUTO
    assert DeviceStatisticsBatch(fused=fused_batch.AUTO).queued(torch.ones(3), LEGACY) is None  # no CUDA here
    assert DeviceStatisticsBatch(fused=OFF).queue is None
    assert StatisticsPlanner(rules.MSPROBE, fused=EMULATED).defer_cpu  # the emulator reads CPU tensors
    assert not StatisticsPlanner(rules.MSPROBE, fused=EMULATED, defer_cpu=False).defer_cpu  # unless told not to
    with pytest.raises(ParameterError, match="fused"):
        StatisticsPlanner(rules.LEGACY, fused="on")


# -- the engine's watch ---------------------------------------------------------------------------------

def test_an_in_place_call_costs_one_attribute_test_while_nothing_is_queued(tmp_path, dump_session, emulated,
                                                                           monkeypatch):
    """The engine asks the watch before an in-place call only when ``WRITES.armed``: with nothing queued that
    attribute is the whole cost (no argument scan, no lock)."""
    asked = []
    real = fused_batch.WRITES.before_write
    monkeypatch.setattr(fused_batch.WRITES, "before_write", lambda args, kwargs: (asked.append(1), real(args, kwargs)))
    x = torch.ones(3)
    debugger = _debugger(tmp_path, "dump", list=["Torch.neg.0.forward"])
    debugger.start()
    gc.collect()  # (a writer an earlier test dropped with tensors queued goes, and disarms the watch, when collected)
    assert not fused_batch.WRITES.armed
    x.add_(1.0)  # not selected, nothing queued
    torch.mul(x, 2.0, out=torch.empty(3))
    assert asked == []
    torch.neg(x)  # recorded: its input and output queued
    assert fused_batch.WRITES.armed
    x.add_(1.0)  # writes a queued tensor: launched first
    assert asked == [1] and not fused_batch.WRITES.armed
    x.mul_(3.0)
    assert asked == [1]
    debugger.stop()
    assert _numbers(_dump_json(tmp_path, "dump")["Torch.neg.0.forward"]["input_args"][0]) == \
        [2.0, 2.0, 2.0, pytest.approx(math.sqrt(12.0))]


def test_a_queue_dropped_unlaunched_disarms_the_watch():
    """A writer dropped with tensors still queued (stopped by a full disk, a process's last window) leaves no queue
    behind: the watch disarms as the queue goes, so in-place calls go back to costing one attribute test."""
    watch = fused_batch.WriteWatch()

    asked = []

    class Queue:  # (weak-referenceable, as FusedQueue)
        def launch_if_written(self, written):
            asked.append(self)

    kept, dropped = Queue(), Queue()
    watch.arm(kept)
    watch.arm(dropped)
    del dropped
    assert watch.armed  # the other one still holds tensors
    watch.before_write((torch.ones(2),), {})
    assert asked == [kept]
    watch.disarm(kept)
    alone = Queue()
    watch.arm(alone)
    del alone  # the only queue goes unlaunched
    assert not watch.armed


# -- the queue on the Triton kernels, interpreted on the CPU (bash scripts/triton_venv.sh --test) -----------

@pytest.fixture
def interpreted_kernels(interpreted):
    """The queue's CPU tensors read by the Triton kernels under ``TRITON_INTERPRET=1`` (skipped without triton;
    ``interpreted``: test/dump/conftest.py)."""
    return {"cpu": fused_batch.TRITON}


def _mixed_tensors():
    generator = torch.Generator().manual_seed(3)
    floats = torch.randn(3 * 4096 + 7, generator=generator, dtype=torch.float64) * 3 + 1
    special = floats[:50].clone().float()
    special[[3, 9, 20]] = torch.tensor([math.inf, -math.inf, math.nan])
    return [floats.float(), floats.to(torch.bfloat16), floats, (floats * 100).to(torch.int32), special,
            floats[:6000].float().reshape(60, 100).t(), torch.tensor([2 ** 62 + 2 ** 38 + 1, -7]),
            torch.full((100,), 1e20)]


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")  # the interpreter's inf - inf
@pytest.mark.parametrize("fmt", [LEGACY, MSPROBE])
def test_the_queue_on_the_interpreted_kernels_reads_what_the_emulator_reads(interpreted_kernels, fmt):
    tensors = _mixed_tensors()
    results = []
    for runners in (interpreted_kernels, None):
        reads = []
        batch = DeviceStatisticsBatch(on_read=reads.append, fused=EMULATED, runners=runners)
        pending = [batch.queued(tensor, fmt) for tensor in tensors]
        batch.launch()  # the kernels queued here, read below
        batch.resolve()
        assert reads == [len(tensors)] and all(numbers.done() for numbers in pending)
        results.append([list(numbers) for numbers in pending])
    kernel, emulator = results
    for got, expected in zip(kernel, emulator):
        assert len(got) == len(expected)
        assert got[:2] == expected[:2] and got[4:] == expected[4:]  # extremes exact, and msprobe's pair
        assert got[2:4] == pytest.approx(expected[2:4], rel=1e-12, nan_ok=True)


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
def test_a_precision_debugger_dump_on_the_interpreted_kernels_has_the_eager_numbers(tmp_path, dump_session,
                                                                                   interpreted_kernels, monkeypatch):
    monkeypatch.setattr(planner.DEFAULTS, "fused", OFF)
    reference = _debugger_dump(tmp_path, "eager")
    monkeypatch.setattr(planner.DEFAULTS, "fused", EMULATED)
    monkeypatch.setattr(fused_batch, "_runner_for", lambda kind, mode: interpreted_kernels.get(kind))
    launched = []
    real = fused_batch._kernel_finals
    monkeypatch.setattr(fused_batch, "_kernel_finals",
                        lambda plan, device, stream: (launched.append(len(plan.sources)), real(plan, device, stream))[1])
    clean_session(dump_session)
    queued = _debugger_dump(tmp_path, "kernels")
    assert list(queued) == list(reference)
    expected_leaves, got_leaves = list(tensor_leaves(reference)), list(tensor_leaves(queued))
    for expected, got in zip(expected_leaves, got_leaves):
        assert list(got) == list(expected)
        _close(_numbers(got), _numbers(expected), got)
    assert sum(launched) >= len(got_leaves) // 2
