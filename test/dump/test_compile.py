"""torch.compile with the dump installed (dump/compiled.py): the compiled forward runs compiled, the tool
causes no graph break and no recompile, the eager code around it is dumped, nothing is recorded while
dynamo traces (fake tensors) or from the compiled code, and the log says so once."""

from __future__ import annotations

import json
import os

import pytest
import torch

from ptdbg_ascend import PrecisionDebugger, acc_cmp_dump, register_hook, set_dump_path, set_dump_switch
from ptdbg_ascend.dump import compiled

NOTICE = "calls inside torch.compile'd code"


class Mlp(torch.nn.Module):
    """Linear -> GELU -> (* 2) -> Linear. ``Tensor.mul`` is called on fake tensors while dynamo traces,
    and by the graph's generated code when the eager backend runs it."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(8, 16)
        self.act = torch.nn.GELU()
        self.fc2 = torch.nn.Linear(16, 4)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)).mul(2.0))


FORWARD_APIS = ("Functional_linear", "Functional_gelu", "Tensor_mul", "Functional.linear", "Functional.gelu", "Tensor.mul")


def train(backend=None, steps=2, around_step=None):
    """Two SGD steps of a fresh Mlp (same weights and data every time), compiled with ``backend`` (None:
    eager). Returns the losses (the eager loss and optimizer step run outside the compiled forward)."""
    torch.manual_seed(0)
    net = Mlp()
    model = torch.compile(net, backend=backend) if backend else net
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
    generator = torch.Generator().manual_seed(1)
    losses = []
    for step in range(steps):
        if around_step is not None:
            around_step[0]()
        x = torch.randn(4, 8, generator=generator)
        loss = torch.nn.functional.cross_entropy(model(x), torch.tensor([0, 1, 2, 3]))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.detach().clone())
        if around_step is not None:
            around_step[1]()
    return losses


def assert_same_losses(got, expected):
    assert [loss.item().hex() for loss in got] == [loss.item().hex() for loss in expected]


@pytest.fixture
def dynamo(monkeypatch):
    """A fresh dynamo (caches and counters) and a fresh once-per-process notice; dynamo's counters
    are returned. ``torch._dynamo.reset()`` also drops the compile callbacks: the next switch ON
    registers them again."""
    import torch._dynamo
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    monkeypatch.setattr(compiled, "_TOLD", [])
    yield counters
    torch._dynamo.reset()
    counters.clear()


def compile_stats(counters):
    return {"graph_break": dict(counters["graph_break"]), "frames": dict(counters["frames"]),
            "unique_graphs": counters["stats"]["unique_graphs"]}


def baseline(session, dynamo, backend):
    """Losses and dynamo's statistics of the compiled run without the tool (originals restored)."""
    session.unwrap()
    losses = train(backend)
    stats = compile_stats(dynamo)
    import torch._dynamo

    torch._dynamo.reset()
    dynamo.clear()
    assert not stats["graph_break"], stats
    return losses, stats


def legacy_dump(tmp_path, backend, around_step=None):
    set_dump_path(str(tmp_path / "dump.pkl"))
    register_hook(torch.nn.Linear(1, 1), acc_cmp_dump)
    set_dump_switch("ON", mode="api_stack")
    try:
        return train(backend, around_step=around_step)
    finally:
        set_dump_switch("OFF")


def pkl_lines(tmp_path):
    paths = [os.path.join(root, name) for root, _, names in os.walk(str(tmp_path)) for name in names
             if name.endswith(".pkl")]
    assert len(paths) == 1, paths
    with open(paths[0], encoding="utf-8") as handle:
        return [json.loads(line) for line in handle]


def eager_names(tmp_path):
    """The record names of the same training run, not compiled."""
    set_dump_path(str(tmp_path / "dump.pkl"))
    register_hook(torch.nn.Linear(1, 1), acc_cmp_dump)
    set_dump_switch("ON", mode="api_stack")
    train(None)
    set_dump_switch("OFF")
    return {line[0] for line in pkl_lines(tmp_path)}


def check_dump(lines, capsys_text):
    names = [line[0] for line in lines]
    # The eager parts: the loss (forward and backward) and the optimizer's in-place updates.
    assert "Functional_cross_entropy_0_forward_input.0" in names
    assert "Functional_cross_entropy_1_backward_output.0" in names
    assert any(name.startswith("Tensor_add__") for name in names)
    # Nothing from inside the compiled forward, neither from tracing nor from the compiled code.
    assert not [name for name in names if name.startswith(FORWARD_APIS)]
    for line in lines:
        if line[0].endswith("_stack_info"):
            files = [frame[0] for frame in line[1]]
            assert not [f for f in files if "torch/_dynamo" in f or "torch/_inductor" in f or "_aot_autograd" in f
                        or f.startswith("<eval_with_key>") or "torchinductor" in f], line
        else:
            assert "Fake" not in json.dumps(line), line
    notices = [text for text in capsys_text.splitlines() if NOTICE in text]
    assert len(notices) == 1, notices
    assert "Mlp" in notices[0] and "test_compile.py:" in notices[0], notices  # which code was compiled
    return names


def test_eager_backend_runs_compiled_and_dumps_the_eager_parts(dump_session, dynamo, tmp_path, capsys):
    expected, expected_stats = baseline(dump_session, dynamo, "eager")
    capsys.readouterr()

    losses = legacy_dump(tmp_path / "compiled", "eager")

    assert_same_losses(losses, expected)
    assert compile_stats(dynamo) == expected_stats  # no graph break, no recompile caused by the wrappers
    names = check_dump(pkl_lines(tmp_path / "compiled"), capsys.readouterr().out)
    # x.mul(2.0): called on fake tensors while tracing (not counted), then once per step by the graph.
    assert dump_session.counters.get("Tensor_mul") == 2
    # The eager calls keep the names of an eager run (the compiled forward does not count).
    dump_session.reset_counters()
    assert set(names) == {name for name in eager_names(tmp_path / "eager") if not name.startswith(FORWARD_APIS)}


def test_compile_the_callbacks_missed_is_not_recorded_nor_counted(dump_session, dynamo, tmp_path, capsys):
    """torch._dynamo.reset() inside the window drops the compile callbacks: the dump path still steps aside."""
    import torch._dynamo

    def reset_dynamo():
        torch._dynamo.reset()

    expected, _ = baseline(dump_session, dynamo, "eager")
    capsys.readouterr()
    losses = legacy_dump(tmp_path, "eager", around_step=(reset_dynamo, lambda: None))
    assert_same_losses(losses, expected)
    assert not dynamo["graph_break"]
    # The notice comes from the dump path (x.mul on fake tensors while compiling).
    names = check_dump(pkl_lines(tmp_path), capsys.readouterr().out)
    assert dump_session.counters.get("Tensor_mul") == 2  # the traced calls were taken back
    assert "Functional_cross_entropy_1_forward_input.0" in names  # two steps, two compiles, counters in step


def test_precision_debugger_statistics_l1(dump_session, dynamo, tmp_path, capsys):
    expected, expected_stats = baseline(dump_session, dynamo, "eager")
    capsys.readouterr()
    debugger = PrecisionDebugger(task="statistics", level="L1", dump_path=str(tmp_path))

    def stop_and_step():
        debugger.stop()
        debugger.step()

    losses = train("eager", around_step=(debugger.start, stop_and_step))

    assert_same_losses(losses, expected)
    assert compile_stats(dynamo) == expected_stats
    for step in range(2):
        with open(str(tmp_path / f"step{step}" / "rank" / "dump.json"), encoding="utf-8") as handle:
            data = json.load(handle)["data"]
        assert "Functional.cross_entropy.0.forward" in data
        assert any(name.startswith("Tensor.add_.") for name in data)
        assert not [name for name in data if name.startswith(FORWARD_APIS)]
    notices = [text for text in capsys.readouterr().out.splitlines() if NOTICE in text]
    assert len(notices) == 1, notices


@pytest.fixture(scope="module")
def inductor_works():
    try:
        torch._dynamo.reset()
        torch.compile(lambda x: torch.nn.functional.gelu(x) * 2)(torch.randn(3))
    except Exception as error:  # noqa: BLE001 - any failure to build means no inductor here
        pytest.skip(f"inductor cannot compile on this machine (no working C++ compiler?): {error}")
    finally:
        torch._dynamo.reset()


@pytest.mark.slow
def test_inductor_runs_compiled_and_dumps_the_eager_parts(inductor_works, dump_session, dynamo, tmp_path, capsys):
    expected, expected_stats = baseline(dump_session, dynamo, "inductor")
    capsys.readouterr()

    losses = legacy_dump(tmp_path, "inductor")

    # Compiled with the tool against compiled without: the same kernels, so bit-identical.
    assert_same_losses(losses, expected)
    assert compile_stats(dynamo) == expected_stats
    check_dump(pkl_lines(tmp_path), capsys.readouterr().out)
    assert not dump_session.counters.get("Tensor_mul")  # inductor's kernels call no wrapped API
    # Against eager: inductor fuses and reorders float32 arithmetic, so only close (a few ulps).
    eager = train(None)
    torch.testing.assert_close(torch.stack(losses), torch.stack(eager), rtol=1e-5, atol=1e-6)
