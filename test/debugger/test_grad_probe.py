"""grad_probe (``ptdbg_ascend/grad_probe``): the gradient summaries before each optimizer step, msprobe 1.0.4's
columns at each level, the packed directions, and the compare that names the step where two runs diverge."""

from __future__ import annotations

import csv
import hashlib
import json
import math
import os
import subprocess
import sys

import numpy
import pytest
import torch

from ptdbg_ascend import GradComparator, PrecisionDebugger
from ptdbg_ascend.errors import CompareError, FileFormatError, ParameterError


def debugger_for(tmp_path, name="dump", **section):
    config = {"task": "grad_probe", "dump_path": str(tmp_path / name), "grad_probe": section}
    for key in ("step", "rank"):
        if key in section:
            config[key] = section.pop(key)
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(config))
    return PrecisionDebugger(config_path=str(path))


@pytest.fixture
def monitors():
    """Every GradientMonitor a test makes is removed afterwards (its hook is global to torch's optimizers)."""
    made = []
    yield made
    for debugger in made:
        debugger._grad_monitor.remove()


def one_update(model, gradients):
    """One SGD step of ``model`` with its parameters' gradients set by hand (``name -> tensor``)."""
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for name, parameter in model.named_parameters():
        parameter.grad = gradients[name].clone()
    optimizer.step()


def read_csv(path):
    with open(path, newline="") as handle:
        return list(csv.reader(handle))


GRADIENT = torch.tensor([[0.5, -2.0, 0.0], [3.0, -0.25, 0.0]])
BIAS_GRADIENT = torch.tensor([-1.5, 4.0])


@pytest.mark.parametrize("level", ["L0", "L1", "L2"])
def test_the_summary_columns_and_numbers_of_each_level(session, tmp_path, monitors, level):
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    debugger = debugger_for(tmp_path, grad_level=level, bounds=[-1, 0, 1])
    debugger.monitor(model)
    monitors.append(debugger)
    one_update(model, {"weight": GRADIENT, "bias": BIAS_GRADIENT})
    rows = read_csv(tmp_path / "dump" / "rank0" / "grad_summary_0.csv")
    header = {"L0": ["param_name", "MD5", "max", "min", "norm", "shape"],
              "L1": ["param_name", "max", "min", "norm", "shape"],
              "L2": ["param_name", "(-inf, -1]", "(-1, 0]", "(0, 1]", "(1, inf)", "'=0", "max", "min", "norm",
                     "shape"]}[level]
    assert rows[0] == header  # ('=0: a spreadsheet shows it as text, never as a formula)
    weight = dict(zip(header, rows[1]))
    assert (weight["param_name"], weight["shape"]) == ("weight", "[2, 3]")
    assert (float(weight["max"]), float(weight["min"])) == (3.0, -2.0)
    assert float(weight["norm"]) == pytest.approx(math.sqrt(0.25 + 4 + 9 + 0.0625), rel=1e-6)
    assert rows[2][0] == "bias" and rows[2][-1] == "[2]"
    if level == "L0":
        # msprobe 1.0.4's "MD5": of the float32 bytes, by hand
        assert weight["MD5"] == hashlib.md5(GRADIENT.numpy().astype(numpy.float32).tobytes()).hexdigest()
        assert not os.path.exists(tmp_path / "dump" / "rank0" / "step0")
        return
    if level == "L2":  # -2 | -0.25, 0, 0 | 0.5 | 3 ; zeros 2 of 6
        assert [float(weight[key]) for key in header[1:6]] == [1 / 6, 3 / 6, 1 / 6, 1 / 6, 2 / 6]
    packed = numpy.load(tmp_path / "dump" / "rank0" / "step0" / "weight.npy", allow_pickle=False)
    assert packed.dtype == numpy.uint8 and packed.shape == (1,)  # 6 signs in one byte
    assert list(numpy.unpackbits(packed)[:6]) == [1, 0, 0, 1, 0, 0]  # grad > 0, row-major
    bias = numpy.load(tmp_path / "dump" / "rank0" / "step0" / "bias.npy", allow_pickle=False)
    assert list(numpy.unpackbits(bias)) == [0, 1, 0, 0, 0, 0, 0, 0]


def test_steps_count_optimizer_calls_and_the_step_rank_and_param_lists_select(session, tmp_path, monitors):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.Linear(2, 1))
    debugger = debugger_for(tmp_path, step=[1, 3], param_list=["1.weight", "no.such"])
    debugger.monitor(model)
    monitors.append(debugger)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(5):
        model(torch.ones(2, 3)).sum().backward()
        optimizer.step()
        debugger.start(); debugger.stop(); debugger.step()  # (no-ops for grad_probe, as in 1.0.4)
    listing = sorted(os.listdir(tmp_path / "dump" / "rank0"))
    assert listing == ["grad_summary_1.csv", "grad_summary_3.csv", "step1", "step3"]
    assert [row[0] for row in read_csv(tmp_path / "dump" / "rank0" / "grad_summary_3.csv")] == ["param_name",
                                                                                                "1.weight"]
    other_rank = debugger_for(tmp_path, name="ranked", rank=[1])
    other_rank.monitor(model)
    monitors.append(other_rank)
    model(torch.ones(2, 3)).sum().backward()
    optimizer.step()
    assert not os.path.exists(tmp_path / "ranked")  # this process is rank 0
    # an optimizer of another model is not counted: the monitor's step stays where its own optimizer left it
    steps_before = debugger._grad_monitor.step
    other = torch.nn.Linear(2, 2)
    other(torch.ones(1, 2)).sum().backward()
    torch.optim.SGD(other.parameters(), lr=0.1).step()
    assert debugger._grad_monitor.step == steps_before == 5


def test_a_sparse_gradient_is_left_out_with_a_warning(session, tmp_path, monitors, capsys):
    torch.manual_seed(0)
    model = torch.nn.ModuleDict({"embedding": torch.nn.Embedding(10, 4, sparse=True), "head": torch.nn.Linear(4, 1)})
    debugger = debugger_for(tmp_path, grad_level="L1")
    debugger.monitor(model)
    monitors.append(debugger)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(2):
        model["head"](model["embedding"](torch.tensor([1, 2]))).sum().backward()
        optimizer.step()
    names = [row[0] for row in read_csv(tmp_path / "dump" / "rank0" / "grad_summary_1.csv")]
    assert names == ["param_name", "head.weight", "head.bias"]
    assert capsys.readouterr().out.count("leaves out embedding.weight") == 1  # (the package logs to stdout)


def test_grad_probe_does_not_seed_and_monitor_needs_its_task(session, tmp_path, monitors):
    torch.manual_seed(7)
    expected = torch.rand(3)
    torch.manual_seed(7)
    debugger = debugger_for(tmp_path)
    assert torch.equal(torch.rand(3), expected)  # 1.0.4 seeds every task but grad_probe
    with pytest.raises(ParameterError, match="Invalid task='statistics'"):
        PrecisionDebugger(task="statistics", dump_path=str(tmp_path / "x")).monitor(torch.nn.Linear(1, 1))
    with pytest.raises(ParameterError, match="Invalid model="):
        debugger.monitor("model")


def train(path, tmp_path, lr_from_update=None, steps=8):
    """A small MLP, SGD, 8 optimizer updates, monitored at L1; from update ``lr_from_update`` (counted from 0) on, the
    learning rate is 10x: the weights differ after that update, the gradients from the next step on."""
    debugger = debugger_for(tmp_path, name=path, grad_level="L1")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.GELU(), torch.nn.Linear(32, 32), torch.nn.GELU(),
                                torch.nn.Linear(32, 3))
    debugger.monitor(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    generator = torch.Generator().manual_seed(1)
    try:
        for step in range(steps):
            if step == lr_from_update:
                for group in optimizer.param_groups:
                    group["lr"] = 0.5
            x, y = torch.randn(16, 8, generator=generator), torch.randint(0, 3, (16,), generator=generator)
            loss = torch.nn.functional.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    finally:
        debugger._grad_monitor.remove()
    return str(tmp_path / path)


def test_compare_names_step_3_when_the_learning_rate_changes_from_the_third_update(session, tmp_path):
    equal_a, equal_b = train("a", tmp_path), train("b", tmp_path)
    changed = train("c", tmp_path, lr_from_update=2)
    same = GradComparator.compare_distributed(equal_a, equal_b, str(tmp_path / "same"))
    assert list(same) == [0] and same[0].first_step is None
    assert all(value == 1.0 for values in same[0].similarities.values() for value in values)
    assert "agree over steps 0-7" in same[0].answer
    result = GradComparator.compare_distributed(equal_a, changed, str(tmp_path / "out"))[0]
    assert result.steps == list(range(8))
    assert result.first_step == 3
    assert all(result.similarities["summary"][step] == 1.0 for step in range(3))
    assert result.similarities["summary"][3] < 1.0
    first = [name for name, _, _ in result.first_parameters]
    # every series named dropped by more than 0.03 at step 3, the largest drop first
    drops = [previous - value for _, value, previous in result.first_parameters]
    assert all(drop > 0.03 for drop in drops) and drops == sorted(drops, reverse=True)
    assert "first diverge at step 3" in result.answer and first[0] in result.answer
    print(result.answer)
    rows = read_csv(tmp_path / "out" / "rank0" / "similarities.csv")
    assert rows[0] == ["step"] + [str(step) for step in range(8)]
    assert [row[0] for row in rows[1:]] == ["0.weight", "0.bias", "2.weight", "2.bias", "4.weight", "4.bias",
                                            "summary"]
    pictures = sorted(os.listdir(tmp_path / "out" / "rank0" / "similarities_picture"))
    assert len(pictures) == 7 and "summary_similarities" in pictures[-1]


def test_similarity_is_the_share_of_equal_signs_weighted_by_elements(tmp_path):
    """Two rank directories written by hand: 16 signs (2 differ) and 3 signs (1 differs, msprobe's boolean .npy)."""
    for side, flips in (("a", set()), ("b", {0, 9})):
        rank = tmp_path / side / "rank0"
        (rank / "step0").mkdir(parents=True)
        (rank / "grad_summary_0.csv").write_text('param_name,max,min,norm,shape\nw,1,0,1,"[4, 4]"\nb,1,0,1,[3]\n')
        signs = numpy.array([index % 3 == 0 for index in range(16)]) ^ numpy.array([i in flips for i in range(16)])
        numpy.save(rank / "step0" / "w.npy", numpy.packbits(signs))
        numpy.save(rank / "step0" / "b.npy", numpy.array([True, False, side == "b"]))
    result = GradComparator.compare(str(tmp_path / "a" / "rank0"), str(tmp_path / "b" / "rank0"), str(tmp_path / "o"))
    assert result.similarities == {"w": [14 / 16], "b": [2 / 3], "summary": [16 / 19]}
    assert result.first_step == 0  # below 0.97 at the first step


@pytest.mark.parametrize("csv_text, direction, message", [
    ('param_name,max,min,norm,shape\n../../etc/passwd,1,0,1,[2]\n', None, "not a grad_summary row"),
    ('param_name,max,shape\nw,1,"[2, x]"\n', None, "not a grad_summary row"),
    ('name,max,shape\nw,1,[2]\n', None, "not a grad_summary CSV"),
    ('param_name,max,min,norm,shape\nw,1,0,1,[64]\n', numpy.zeros(9, numpy.uint8), "packed bytes"),
    ('param_name,max,min,norm,shape\nw,1,0,1,[64]\n', numpy.zeros(8, numpy.float32), "packed bytes"),
])
def test_hostile_dumps_are_refused_with_the_file_named(tmp_path, csv_text, direction, message):
    for side in ("a", "b"):
        rank = tmp_path / side
        (rank / "step0").mkdir(parents=True)
        (rank / "grad_summary_0.csv").write_text(csv_text)
        numpy.save(rank / "step0" / "w.npy", direction if direction is not None else numpy.zeros(8, numpy.uint8))
    with pytest.raises(FileFormatError, match=message) as error:
        GradComparator.compare(str(tmp_path / "a"), str(tmp_path / "b"), str(tmp_path / "o"))
    assert str(tmp_path) in str(error.value)  # (the side read first is named)
    assert not os.path.exists("/etc/passwd.npy")


def test_no_common_step_or_rank_says_what_to_do(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    with pytest.raises(CompareError, match="No rank"):
        GradComparator.compare_distributed(str(tmp_path / "a"), str(tmp_path / "b"), str(tmp_path / "o"))
    with pytest.raises(CompareError, match="grad_level L1 or L2"):
        GradComparator.compare(str(tmp_path / "a"), str(tmp_path / "b"), str(tmp_path / "o"))


def test_the_command_prints_the_answer_and_exits_1_on_a_divergence(session, tmp_path):
    equal, changed = train("a", tmp_path, steps=5), train("c", tmp_path, lr_from_update=2, steps=5)
    command = [sys.executable, "-m", "ptdbg_ascend.cli", "grad-compare", equal, changed, "-o", str(tmp_path / "cli")]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert result.returncode == 1, result.stderr
    assert "first diverge at step 3" in result.stdout
    assert os.path.isfile(tmp_path / "cli" / "rank0" / "similarities.csv")
    same = subprocess.run(command[:4] + [equal, equal, "-o", str(tmp_path / "cli2")], capture_output=True, text=True,
                          timeout=120)
    assert same.returncode == 0 and "agree over steps 0-4" in same.stdout
