"""free_benchmark (``ptdbg_ascend/free_benchmark``): a planted bfloat16-fragile softmax found with no bench run, no
finding on stock kernels, training undisturbed in check mode, ``fix`` replacing the output, the backward stage,
preheating, and the CSV."""

from __future__ import annotations

import math
import os

import pytest
import torch
import torch.nn.functional as F

from free_benchmark_model import EXACT_SOFTMAX, fragile_softmax, train, write_config
from ptdbg_ascend import PrecisionDebugger
from ptdbg_ascend.errors import DumpPathError
from ptdbg_ascend.free_benchmark.report import COLUMNS, FILE_NAME, read_rows

MODEL_FILE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "free_benchmark_model.py")


def plant(monkeypatch, session):
    """The fragile softmax in place of F.softmax, wrapped by the next start() (the session unwrapped first: a
    wrapper installed by an earlier test would otherwise be replaced by the plain function, unseen)."""
    session.unwrap()
    monkeypatch.setattr(F, "softmax", fragile_softmax)


@pytest.fixture
def planted(monkeypatch, session):
    plant(monkeypatch, session)
    yield
    session.unwrap()  # (before monkeypatch puts F.softmax back: the wrappers must not outlive the plant)


def findings(tmp_path, name="fb"):
    path = tmp_path / name / FILE_NAME
    return read_rows(str(path)) if path.exists() else []


def test_improve_precision_finds_the_planted_bf16_softmax_and_names_its_line(planted, session, tmp_path):
    train(PrecisionDebugger(config_path=write_config(tmp_path)), steps=2)
    rows = findings(tmp_path)
    assert [(row["api_name"], row["step"]) for row in rows] == [
        ("Functional.softmax.0.forward", "0"), ("Functional.softmax.0.forward", "1")]
    with open(tmp_path / "fb" / FILE_NAME, encoding="utf-8") as handle:
        assert handle.readline().strip() == ",".join(COLUMNS)
    for row in rows:
        assert row["rank"] == "0" and row["pert_mode"] == "improve_precision" and row["stage"] == "forward"
        assert 0.01 < float(row["max_rel"]) < 0.2  # about 3 % off; the standard is 0.4 %
        assert row["dtype"] == "torch.bfloat16" and row["shape"] == "torch.Size([2, 64, 64])"
        assert row["output_index"] == "" and float(row["threshold"]) == 0.004
        assert row["code_line"].startswith(MODEL_FILE + ":") and "weights = F.softmax(" in row["code_line"]


def test_stock_kernels_give_no_finding_and_a_float32_model_is_told_nothing_was_checked(session, tmp_path, capsys):
    train(PrecisionDebugger(config_path=write_config(tmp_path, "bf16")), steps=2)
    assert not (tmp_path / "bf16" / FILE_NAME).exists()
    out = capsys.readouterr().out
    # layer_norm, linear x2, matmul x2, truediv, softmax, gelu; the optimizer's add_ and the float32 loss are not
    assert "free_benchmark (improve_precision) at step 1: 8 call(s) of 6 API(s) checked, 0 beyond the standard." in out
    assert "not perturbed (6 call(s): Tensor.add_): an optimizer update" in out

    train(PrecisionDebugger(config_path=write_config(tmp_path, "fp32")), dtype=torch.float32, steps=1)
    assert not (tmp_path / "fp32" / FILE_NAME).exists()
    out = capsys.readouterr().out
    assert "NO call was checked, so nothing is known to be stable" in out
    assert "nothing to raise to float32" in out and "use pert_mode add_noise or bit_noise" in out


@pytest.mark.parametrize("mode", ["improve_precision", "add_noise", "no_change"])
def test_check_mode_leaves_the_training_values_and_its_random_numbers_alone(session, tmp_path, mode):
    plain, _ = train(None, steps=3, dropout=0.2)
    checked, _ = train(PrecisionDebugger(config_path=write_config(tmp_path, pert_mode=mode)), steps=3, dropout=0.2)
    assert checked == plain  # bit for bit, dropout's masks included


def test_fix_replaces_the_planted_output_with_the_accurate_one(monkeypatch, session, tmp_path):
    stock, _ = train(None, steps=2)
    x = torch.randn(4, 64, generator=torch.Generator().manual_seed(3)).bfloat16().requires_grad_()
    plant(monkeypatch, session)
    try:
        planted, _ = train(None, steps=2)
        debugger = PrecisionDebugger(config_path=write_config(tmp_path, handler_type="fix"))
        session.reset_counters()  # (the calls of earlier tests in this process counted too)
        debugger.start()
        weights = F.softmax(x, dim=-1)
        weights.pow(2).sum().backward()
        debugger.stop()
        debugger.step()
        fixed, _ = train(debugger, steps=2)
    finally:
        session.unwrap()
    expected = EXACT_SOFTMAX(x.detach().float(), dim=-1)
    assert torch.equal(weights, expected.bfloat16())  # the float32 run's output, in the call's dtype
    assert not torch.equal(fragile_softmax(x.detach(), dim=-1), expected.bfloat16())
    exact_x = x.detach().float().requires_grad_()
    EXACT_SOFTMAX(exact_x, dim=-1).bfloat16().float().pow(2).sum().backward()
    assert x.grad is not None and torch.allclose(x.grad.float(), exact_x.grad, rtol=0.02, atol=1e-3)
    for fixed_loss, planted_loss, stock_loss in zip(fixed, planted, stock):
        assert abs(fixed_loss - stock_loss) < abs(planted_loss - stock_loss)
    # fix also writes what it replaced and how far it was (1.0.4's fix wrote nothing)
    assert [(row["api_name"], row["step"]) for row in findings(tmp_path)] == [
        ("Functional.softmax.0.forward", step) for step in ("0", "1", "2")]


def test_the_backward_stage_finds_the_planted_softmax_gradient(planted, session, tmp_path):
    config = write_config(tmp_path, fuzz_stage="backward", list=["softmax", "gelu"])
    train(PrecisionDebugger(config_path=config), steps=1)
    rows = findings(tmp_path)
    assert [row["api_name"] for row in rows] == ["Functional.softmax.0.backward"]
    assert rows[0]["stage"] == "backward" and rows[0]["output_index"] == "" and float(rows[0]["max_rel"]) > 0.01
    assert "weights = F.softmax(" in rows[0]["code_line"]  # the forward call's line, not loss.backward()


def test_scope_names_exact_calls_and_list_substrings(planted, session, tmp_path, capsys):
    train(PrecisionDebugger(config_path=write_config(tmp_path, "scope", scope=["Functional.softmax.0.forward"])),
          steps=1)
    assert len(findings(tmp_path, "scope")) == 1
    assert "1 call(s) of 1 API(s) checked" in capsys.readouterr().out
    train(PrecisionDebugger(config_path=write_config(tmp_path, "list", list=["gelu"])), steps=1)
    assert findings(tmp_path, "list") == []


def test_preheating_calibrates_accurate_but_sensitive_apis_and_keeps_the_inaccurate_one(planted, session, tmp_path):
    # add_noise on bfloat16: every API moves by more than 0.4 % for a 1e-4 nudge, yet agrees with the CPU
    config = write_config(tmp_path, "noise", pert_mode="add_noise", if_preheat=True, preheat_step=2, max_sample=4)
    debugger = PrecisionDebugger(config_path=config)
    train(debugger, steps=4)
    standards = debugger._free_benchmark.preheat.standards
    assert standards[("Functional.linear", "bfloat16")] > 0.004 and ("Functional.softmax", "bfloat16") not in standards
    assert {row["api_name"] for row in findings(tmp_path, "noise")} <= {"Functional.softmax.0.forward"}
    # the planted softmax disagrees with the CPU: its standard stays, reported once the preheating is over
    config = write_config(tmp_path, "precision", if_preheat=True, preheat_step=2)
    train(PrecisionDebugger(config_path=config), steps=3)
    assert [(row["api_name"], row["step"]) for row in findings(tmp_path, "precision")] == [
        ("Functional.softmax.0.forward", "2")]


def test_an_existing_csv_of_another_table_is_refused_and_a_symlink_never_followed(planted, session, tmp_path):
    (tmp_path / "fb").mkdir()
    (tmp_path / "fb" / FILE_NAME).write_text("a,b\n1,2\n")
    with pytest.raises(DumpPathError, match="holds another table"):
        train(PrecisionDebugger(config_path=write_config(tmp_path)), steps=1)
    assert (tmp_path / "fb" / FILE_NAME).read_text() == "a,b\n1,2\n"
    os.remove(tmp_path / "fb" / FILE_NAME)
    os.symlink(tmp_path / "elsewhere.csv", tmp_path / "fb" / FILE_NAME)
    with pytest.raises(DumpPathError, match="symlink is never followed"):
        train(PrecisionDebugger(config_path=write_config(tmp_path)), steps=1)
    assert not (tmp_path / "elsewhere.csv").exists()


def test_a_second_run_appends_below_the_one_header(planted, session, tmp_path):
    for _ in range(2):
        train(PrecisionDebugger(config_path=write_config(tmp_path)), steps=1)
    text = (tmp_path / "fb" / FILE_NAME).read_text()
    assert text.count("rank,pert_mode") == 1 and len(findings(tmp_path)) == 2
    assert not [name for name in os.listdir(tmp_path / "fb") if name != FILE_NAME]  # no temporary left


def test_an_in_place_call_is_perturbed_on_copies(session, tmp_path):
    def step(debugger):
        x = torch.linspace(-2, 2, 64, dtype=torch.bfloat16)
        if debugger:
            debugger.start()
        y = x.clone().mul_(3.0).add_(1.0)
        if debugger:
            debugger.stop()
        return y

    config = write_config(tmp_path, pert_mode="bit_noise", list=["mul_"])
    assert torch.equal(step(PrecisionDebugger(config_path=config)), step(None))
    rows = findings(tmp_path)
    assert [row["api_name"] for row in rows] == ["Tensor.mul_.0.forward"]  # a one-bit nudge is 0.8 % in bf16
    assert math.isclose(float(rows[0]["max_rel"]), 2 ** -7, rel_tol=0.5)
