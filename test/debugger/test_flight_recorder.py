"""The flight recorder (``ptdbg_ascend/flight``): the last steps kept in memory, nothing written while training is
healthy, the kept steps written as ordinary dumps when a trigger fires, and trigger.json saying why."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy
import pytest
import torch

from ptdbg_ascend import FlightRecorder, FlightRecorderTriggered, PrecisionDebugger, compare
from ptdbg_ascend.errors import CallOrderError, ParameterError

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "flight_worker.py")


class ExpNet(torch.nn.Module):
    """linear -> relu -> linear -> exp -> linear: a large input makes torch.exp the first API with an inf."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.fc2, self.fc3 = torch.nn.Linear(8, 16), torch.nn.Linear(16, 16), torch.nn.Linear(16, 1)

    def forward(self, x):
        return self.fc3(torch.exp(self.fc2(torch.relu(self.fc1(x)))))


def batch(step: int, scale: float = 1.0) -> torch.Tensor:
    """The batch of ``step``, made without a torch API the recorder records (numpy, then from_numpy)."""
    values = numpy.random.default_rng(step).standard_normal((4, 8)).astype(numpy.float32)
    return torch.from_numpy(values * numpy.float32(scale))


def train(steps, on_step, planted_step=None, scale=1e3):
    """``steps`` SGD steps of ExpNet (seed 0); ``on_step(step, loss)`` after each. At ``planted_step`` the input is
    multiplied by ``scale`` (outside torch): torch.exp overflows."""
    torch.manual_seed(0)
    model = ExpNet()
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    for step in range(steps):
        x = batch(step, scale if step == planted_step else 1.0)
        loss = model(x).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        on_step(step, loss)
    return model


def files_under(root):
    return sorted(os.path.relpath(os.path.join(folder, name), str(root))
                  for folder, _, names in os.walk(str(root)) for name in names)


def test_an_overflow_at_step_13_leaves_the_last_four_steps_and_names_the_first_api(session, tmp_path):
    dump_path = tmp_path / "flight"
    recorder = FlightRecorder(str(dump_path), last_steps=4)
    seen_before = []

    def on_step(step, loss):
        seen_before.append(files_under(tmp_path))  # before this step's check: nothing on disk yet
        recorder.step(loss)

    recorder.start()
    with pytest.raises(FlightRecorderTriggered, match="fired at step 13"):
        train(20, on_step, planted_step=13)
    assert len(seen_before) == 14 and all(listing == [] for listing in seen_before)
    assert not os.path.exists(str(tmp_path / "flight" / "step9"))
    assert files_under(dump_path) == ["step{}/rank/{}".format(step, name) for step in (10, 11, 12, 13)
                                      for name in ("dump.json", "stack.json")] + ["trigger.json"]
    trigger = json.loads((dump_path / "trigger.json").read_text())
    assert trigger["format"] == "ptdbg_ascend.trigger" and trigger["version"] == 1
    assert (trigger["step"], trigger["rank"], trigger["reason"]) == (13, None, "nonfinite_output")
    # by hand: fc1 and fc2 stay finite (inputs of ~1e3), exp(~1e3) is inf; relu's and the linears' before it are not
    assert trigger["first_nonfinite"] == "Torch.exp.0.forward.output.0"
    assert trigger["code_line"].endswith("return self.fc3(torch.exp(self.fc2(torch.relu(self.fc1(x)))))")
    assert trigger["code_line"].startswith(os.path.abspath(__file__) + ":")
    assert trigger["steps_written"] == [10, 11, 12, 13]
    step13 = json.loads((dump_path / "step13" / "rank" / "dump.json").read_text())
    assert (step13["task"], step13["level"], step13["dump_data_dir"]) == ("statistics", "L1", None)
    names = list(step13["data"])
    assert names[:4] == ["Functional.linear.0.forward", "Torch.relu.0.forward", "Functional.linear.1.forward",
                         "Torch.exp.0.forward"]
    assert step13["data"]["Torch.exp.0.forward"]["output"][0]["Max"] == float("inf")
    assert step13["data"]["Functional.linear.1.forward"]["output"][0]["Max"] < 1e5
    stack = json.loads((dump_path / "step13" / "rank" / "stack.json").read_text())
    assert any("test_flight_recorder.py" in line for line in stack["Torch.exp.0.forward"])


@pytest.mark.parametrize("fused", ["off", "emulated"])
def test_on_the_device_path_the_statistics_read_back_at_step_find_the_overflow(session, tmp_path, monkeypatch, fused):
    """The accelerator's path on CPU tensors (statistics queued, read back at step(); with the fused queue too): the
    same steps, the same first non-finite record, and the numbers of the kept steps are those of the CPU path."""
    from ptdbg_ascend.statistics import planner

    monkeypatch.setattr(planner.DEFAULTS, "defer_cpu", True)
    monkeypatch.setattr(planner.DEFAULTS, "fused", fused)
    recorder = FlightRecorder(str(tmp_path / "flight"), last_steps=2)
    recorder.start()
    with pytest.raises(FlightRecorderTriggered):
        train(8, lambda step, loss: recorder.step(loss), planted_step=5)
    trigger = json.loads((tmp_path / "flight" / "trigger.json").read_text())
    assert (trigger["step"], trigger["first_nonfinite"], trigger["steps_written"]) == (
        5, "Torch.exp.0.forward.output.0", [4, 5])
    step4 = json.loads((tmp_path / "flight" / "step4" / "rank" / "dump.json").read_text())["data"]
    from ptdbg_ascend.statistics import fused_batch

    assert not fused_batch.WRITES.armed  # stopped: nothing left queued (in-place calls pay no scan)
    monkeypatch.setattr(planner.DEFAULTS, "defer_cpu", False)
    cpu = FlightRecorder(str(tmp_path / "cpu"), last_steps=2)
    cpu.start()
    with pytest.raises(FlightRecorderTriggered):
        train(8, lambda step, loss: cpu.step(loss), planted_step=5)
    on_cpu = json.loads((tmp_path / "cpu" / "step4" / "rank" / "dump.json").read_text())["data"]
    assert list(step4) == list(on_cpu)
    # torch's reductions, not numpy's: a mean near 0 (-5e-4 of values ~0.3) differs by 1e-9 in float32
    assert numbers_of(step4) == pytest.approx(numbers_of(on_cpu), rel=1e-6, abs=1e-8)


def numbers_of(value):
    """Every number of a dump.json value, in order."""
    if isinstance(value, dict):
        return [number for item in value.values() for number in numbers_of(item)]
    if isinstance(value, list):
        return [number for item in value for number in numbers_of(item)]
    return [value] if type(value) in (int, float) else []


def test_a_healthy_run_writes_nothing_and_keeps_a_bounded_memory(session, tmp_path):
    recorder = FlightRecorder(str(tmp_path / "flight"), last_steps=3)
    sizes = []
    with recorder:
        train(8, lambda step, loss: (recorder.step(loss), sizes.append((recorder.kept_bytes, len(recorder._kept)))))
    assert files_under(tmp_path) == []
    assert [count for _, count in sizes] == [2, 3, 3, 3, 3, 3, 3, 3]  # the current (new) step included
    one_step = sizes[2][0] / 2  # two finished steps and an empty new one
    assert 2000 < one_step < 200_000
    # a bound of about one step: the oldest steps are dropped first, the bound holds
    small = FlightRecorder(str(tmp_path / "small"), last_steps=3, max_bytes=int(one_step * 1.5))
    with small:
        train(5, lambda step, loss: (small.step(loss), sizes.append((small.kept_bytes, len(small._kept)))))
    assert all(kept <= int(one_step * 1.5) for kept, _ in sizes[8:])
    assert files_under(tmp_path) == []


def test_a_kept_step_is_the_dump_the_precision_debugger_writes(session, tmp_path):
    """The same run dumped by PrecisionDebugger (step 12 only) and by a recorder fired by hand after step 12: one
    dump.json, byte for byte, and compare passes every row."""
    debugger = PrecisionDebugger(task="statistics", level="L1", dump_path=str(tmp_path / "debugger"), step=[12])
    torch.manual_seed(0)
    model = ExpNet()
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    for step in range(13):
        debugger.start()
        loss = model(batch(step)).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        debugger.stop()
        debugger.step()
    session.unwrap()
    recorder = FlightRecorder(str(tmp_path / "flight"), last_steps=1, loss_spike=1e6, on_trigger="continue")

    def on_step(step, loss):
        recorder.step(loss if step != 12 else 1e9)  # a planted loss spike fires at step 12

    with recorder:
        train(14, on_step)
    assert json.loads((tmp_path / "flight" / "trigger.json").read_text())["reason"] == "loss_spike"
    ours = (tmp_path / "flight" / "step12" / "rank" / "dump.json").read_bytes()
    theirs = (tmp_path / "debugger" / "step12" / "rank" / "dump.json").read_bytes()
    assert ours == theirs
    outcome = compare({"npu_json_path": str(tmp_path / "flight" / "step12" / "rank" / "dump.json"),
                       "bench_json_path": str(tmp_path / "debugger" / "step12" / "rank" / "dump.json")},
                      str(tmp_path / "out"), xlsx=False, auto_analyze=False)
    assert outcome and outcome.counts.compared > 20


def test_with_a_model_the_modules_are_kept_too_and_construct_json_is_written(session, tmp_path):
    torch.manual_seed(0)
    model = ExpNet()
    recorder = FlightRecorder(str(tmp_path / "flight"), last_steps=1, model=model)
    recorder.start()
    with pytest.raises(FlightRecorderTriggered):
        for step in range(3):
            model(batch(step, 1e3 if step == 2 else 1.0)).sum().backward()
            recorder.step()
    rank_dir = tmp_path / "flight" / "step2" / "rank"
    assert sorted(os.listdir(str(rank_dir))) == ["construct.json", "dump.json", "stack.json"]
    dump = json.loads((rank_dir / "dump.json").read_text())
    assert dump["level"] == "mix"
    assert "Module.fc2.Linear.forward.0" in dump["data"] and "Torch.exp.0.forward" in dump["data"]
    construct = json.loads((rank_dir / "construct.json").read_text())
    assert construct["Functional.linear.1.forward"] == "Module.fc2.Linear.forward.0"
    trigger = json.loads((tmp_path / "flight" / "trigger.json").read_text())
    assert trigger["first_nonfinite"] == "Torch.exp.0.forward.output.0"


@pytest.mark.parametrize("losses, reason, step", [
    ([1.0, 0.9, 0.8, 0.7, 9.0, 0.6], "loss_spike", 4),  # 9.0 > 10 x 0.8, the median of the 3 steps before
    ([1.0, 0.9, float("nan")], "nonfinite_loss", 2),
    ([1.0, 50.0, 0.9], None, None),  # one earlier loss is no median: no spike at step 1
    ([-1.0, -2.0, -3.0, 40.0], None, None),  # a median <= 0: no spike rule
])
def test_loss_triggers(session, tmp_path, losses, reason, step):
    recorder = FlightRecorder(str(tmp_path / "flight"), last_steps=2, on_trigger="continue")
    with recorder:
        for loss in losses:
            torch.relu(torch.ones(2))
            recorder.step(torch.tensor(loss))
    if reason is None:
        assert files_under(tmp_path) == []
        return
    trigger = json.loads((tmp_path / "flight" / "trigger.json").read_text())
    assert (trigger["reason"], trigger["step"], trigger["first_nonfinite"]) == (reason, step, None)
    assert trigger["steps_written"] == [step - 1, step]


def test_an_exception_leaving_the_loop_writes_the_steps_and_goes_on(session, tmp_path):
    recorder = FlightRecorder(str(tmp_path / "flight"), last_steps=2)

    def on_step(step, loss):
        if step == 5:
            raise KeyError("planted")
        recorder.step(loss)

    with pytest.raises(KeyError, match="planted"):
        with recorder:
            train(10, on_step)
    trigger = json.loads((tmp_path / "flight" / "trigger.json").read_text())
    assert (trigger["reason"], trigger["step"], trigger["steps_written"]) == ("exception", 5, [4, 5])
    assert trigger["detail"] == "KeyError: 'planted'"
    step5 = json.loads((tmp_path / "flight" / "step5" / "rank" / "dump.json").read_text())
    assert "Torch.exp.0.forward" in step5["data"]  # the step cut by the exception, as far as it went
    assert list(session.observers) == []  # stopped on the way out


def test_ctrl_c_is_not_a_trigger(session, tmp_path):
    with pytest.raises(KeyboardInterrupt):
        with FlightRecorder(str(tmp_path / "flight")):
            torch.relu(torch.ones(2))
            raise KeyboardInterrupt
    assert files_under(tmp_path) == []


def _worker(*arguments, timeout=120):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    return subprocess.run([sys.executable, WORKER, *map(str, arguments)], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, env=env, timeout=timeout)


def test_sigterm_writes_the_steps_then_ends_the_process_as_sigterm_does(tmp_path):
    result = _worker("sigterm", tmp_path / "flight")
    assert result.returncode == -15, result.stdout.decode()[-2000:]
    trigger = json.loads((tmp_path / "flight" / "trigger.json").read_text())
    assert (trigger["reason"], trigger["step"], trigger["steps_written"]) == ("sigterm", 5, [4, 5])
    assert "Torch.exp.0.forward" in json.loads((tmp_path / "flight" / "step5" / "rank" / "dump.json").read_text())["data"]


def test_an_uncaught_exception_without_with_writes_the_steps_at_exit(tmp_path):
    result = _worker("uncaught", tmp_path / "flight")
    assert result.returncode == 1 and b"planted failure at step 6" in result.stdout
    trigger = json.loads((tmp_path / "flight" / "trigger.json").read_text())
    assert (trigger["reason"], trigger["step"]) == ("exception", 6)
    assert trigger["detail"] == "ValueError: planted failure at step 6"


def test_two_ranks_both_write_and_the_trigger_names_the_rank_where_the_inf_was_made(tmp_path):
    dump_path, init_file = tmp_path / "flight", tmp_path / "init"
    processes = [subprocess.Popen([sys.executable, WORKER, "ranks", str(dump_path), str(rank), "2", str(init_file)],
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  env=dict(os.environ, OMP_NUM_THREADS="1")) for rank in range(2)]
    outputs = [process.communicate(timeout=120)[0].decode(errors="replace") for process in processes]
    assert [process.returncode for process in processes] == [0, 0], outputs
    assert all("TRIGGERED" in output for output in outputs)
    assert files_under(dump_path) == ["step{}/rank{}/{}".format(step, rank, name) for step in (2, 3)
                                      for rank in (0, 1) for name in ("dump.json", "stack.json")] + ["trigger.json"]
    trigger = json.loads((dump_path / "trigger.json").read_text())
    # rank 0's first inf is the all_reduce's output (it came from rank 1): rank 1 made it, in torch.exp or before
    assert (trigger["rank"], trigger["step"], trigger["reason"]) == (1, 3, "nonfinite_output")
    assert trigger["first_nonfinite"] in ("Functional.linear.0.forward.output.0", "Torch.exp.0.forward.output.0")
    rank0 = json.loads((dump_path / "step3" / "rank0" / "dump.json").read_text())["data"]
    assert rank0["Distributed.all_reduce.0.forward"]["output"][0]["Max"] == float("inf")
    assert rank0["Torch.exp.0.forward"]["output"][0]["Max"] < float("inf")
    # the recorder's own all_reduce (the agreement at step()) is not recorded: only the training's
    assert [name for name in rank0 if name.startswith("Distributed.")] == ["Distributed.all_reduce.0.forward"]


@pytest.mark.parametrize("arguments, parameter", [
    ({"last_steps": 0}, "last_steps"), ({"last_steps": True}, "last_steps"), ({"loss_spike": 1.0}, "loss_spike"),
    ({"loss_spike": "10"}, "loss_spike"), ({"on_trigger": "raise"}, "on_trigger"), ({"max_bytes": 0}, "max_bytes"),
    ({"model": "net"}, "model"), ({"dump_path": None}, "dump_path"), ({"dump_path": ""}, "dump_path"),
])
def test_bad_arguments_name_the_parameter(tmp_path, arguments, parameter):
    arguments = {"dump_path": str(tmp_path), **arguments}
    with pytest.raises(ParameterError, match=f"Invalid {parameter}="):
        FlightRecorder(**arguments)


def test_step_before_start_and_a_bad_loss_say_what_to_do(session, tmp_path):
    recorder = FlightRecorder(str(tmp_path / "flight"))
    with pytest.raises(CallOrderError, match=r"before start\(\)"):
        recorder.step()
    with recorder:
        with pytest.raises(ParameterError, match="Invalid loss="):
            recorder.step(torch.ones(3))
