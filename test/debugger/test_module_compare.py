"""Comparing module dumps: PrecisionDebugger at level L0 (modules) and mix (modules and APIs), from a
config.json over 3 training steps, of a transformers GPT-NeoX decoder and of a plain torch.nn model. One
run carries a planted error; the compare pairs the module rows in execution order and the advisor names
the planted module (and, in mix, the API inside it); two equal runs name nothing; an L0 dump against a
legacy pkl says that one side has no module records."""

from __future__ import annotations

import csv
import json
import os

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from fake_torch_npu.fixtures import clean_session

from ptdbg_ascend import PrecisionDebugger, compare
from ptdbg_ascend.dump.session import get_session
from ptdbg_ascend.errors import CompareError
from ptdbg_ascend.formats.finding import Finding

STEPS = 3
# The planted GPT-NeoX module: its weights x 1.1 in the NPU run.
NEOX_PLANTED = "Module.gpt_neox.layers.1.mlp.dense_4h_to_h.Linear.forward.0"
NEOX_PLANTED_CALL = "Module_gpt_neox.layers.1.mlp.dense_4h_to_h.Linear_0_forward"
NEOX_MLP = "Module_gpt_neox.layers.1.mlp.GPTNeoXMLP_0"
# Its F.linear: four per layer (query_key_value, dense, dense_h_to_4h, dense_4h_to_h), the eighth overall.
NEOX_PLANTED_API = "Functional_linear_7_forward"


# -- the models ----------------------------------------------------------------------------------------
class Block(nn.Module):
    """linear -> tanh -> x gain (1.0; the planted run's block 1 has 1.10)."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.fc = nn.Linear(width, width)
        self.act = nn.Tanh()
        self.gain = 1.0

    def forward(self, x):
        return self.act(self.fc(x)) * self.gain


class PlainNet(nn.Module):
    """stem -> 3 blocks -> head. ``probe``: an extra call of ``head`` under no_grad before the blocks (a
    monitoring call one run makes and the other does not)."""

    def __init__(self, probe: bool = False) -> None:
        super().__init__()
        self.stem = nn.Linear(8, 16)
        self.blocks = nn.Sequential(Block(16), Block(16), Block(16))
        self.head = nn.Linear(16, 4)
        self.probe = probe

    def forward(self, x):
        x = self.stem(x)
        if self.probe:
            with torch.no_grad():
                self.head(x)
        return self.head(self.blocks(x))


def plain_model(planted: bool = False) -> PlainNet:
    torch.manual_seed(0)
    model = PlainNet(probe=planted)
    if planted:
        model.blocks[1].gain = 1.10
    return model


def neox_model(planted: bool = False):
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    config = GPTNeoXConfig(vocab_size=128, hidden_size=64, num_hidden_layers=3, num_attention_heads=4,
                           intermediate_size=256)
    torch.manual_seed(0)
    model = GPTNeoXForCausalLM(config)  # random init from the config: nothing downloaded
    if planted:
        with torch.no_grad():
            model.gpt_neox.layers[1].mlp.dense_4h_to_h.weight.mul_(1.1)
    return model


# -- the runs --------------------------------------------------------------------------------------------
def _train(root: str, model, level: str, batches, loss_of, task: str = "tensor") -> str:
    """Dump ``STEPS`` training steps of ``model`` with a config.json in ``root``; returns ``root``."""
    os.makedirs(root)
    config = os.path.join(root, "config.json")
    with open(config, "w") as handle:
        json.dump({"task": task, "dump_path": os.path.join(root, "dump"), "level": level, "seed": 1234, task: {}},
                  handle)
    debugger = PrecisionDebugger(config_path=config, model=model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    for batch in batches:
        debugger.start()
        loss_of(model, batch).backward()
        optimizer.step()
        optimizer.zero_grad()
        debugger.stop()
        debugger.step()
    return root


def _plain_batches():
    generator = torch.Generator().manual_seed(1)
    return [(torch.randn(4, 8, generator=generator), torch.randn(4, 4, generator=generator)) for _ in range(STEPS)]


def _plain_loss(model, batch):
    x, y = batch
    return F.mse_loss(model(x), y)


def _neox_batches():
    generator = torch.Generator().manual_seed(1)
    return [torch.randint(0, 128, (2, 8), generator=generator) for _ in range(STEPS)]


def _neox_loss(model, ids):
    return model(input_ids=ids, labels=ids).loss


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """``runs(name)``: the run directory of one dumped run, made on first use (each run once per module)."""
    root = str(tmp_path_factory.mktemp("module_runs"))
    made = {}
    recipes = {
        "plain_L0": lambda d: _train(d, plain_model(), "L0", _plain_batches(), _plain_loss),
        "plain_L0_planted": lambda d: _train(d, plain_model(True), "L0", _plain_batches(), _plain_loss),
        "plain_L0_again": lambda d: _train(d, plain_model(), "L0", _plain_batches(), _plain_loss),
        "plain_mix_stat": lambda d: _train(d, plain_model(), "mix", _plain_batches(), _plain_loss, "statistics"),
        "plain_mix_stat_planted": lambda d: _train(d, plain_model(True), "mix", _plain_batches(), _plain_loss,
                                                   "statistics"),
        "plain_legacy": _legacy_run,
        "neox_L0": lambda d: _train(d, neox_model(), "L0", _neox_batches(), _neox_loss),
        "neox_L0_planted": lambda d: _train(d, neox_model(True), "L0", _neox_batches(), _neox_loss),
        "neox_mix": lambda d: _train(d, neox_model(), "mix", _neox_batches(), _neox_loss),
        "neox_mix_again": lambda d: _train(d, neox_model(), "mix", _neox_batches(), _neox_loss),
        "neox_mix_planted": lambda d: _train(d, neox_model(True), "mix", _neox_batches(), _neox_loss),
    }

    def run(name: str) -> str:
        if name not in made:
            clean_session(get_session())
            try:
                made[name] = recipes[name](os.path.join(root, name))
            finally:
                clean_session(get_session())
        return made[name]

    return run


def _legacy_run(root: str) -> str:
    """The plain model's first step dumped with the legacy calls: a pkl of API records, no module records."""
    from ptdbg_ascend import acc_cmp_dump, register_hook, set_dump_path, set_dump_switch

    os.makedirs(root)
    model = plain_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    set_dump_path(os.path.join(root, "dump.pkl"))
    register_hook(model, acc_cmp_dump)
    set_dump_switch("ON", mode="api_stack")
    _plain_loss(model, _plain_batches()[0]).backward()
    optimizer.step()
    set_dump_switch("OFF")
    return root


def _json(run_dir: str, step: int) -> str:
    return os.path.join(run_dir, "dump", f"step{step}", "rank", "dump.json")


class Compared:
    """One compare's outcome, CSV rows (dicts, header = line 1) and advisor file lines."""

    def __init__(self, outcome) -> None:
        self.outcome = outcome
        with open(outcome.csv_path, newline="", encoding="utf-8") as handle:
            self.rows = list(csv.DictReader(handle))
        with open(outcome.advisor_path, encoding="utf-8") as handle:
            self.advice = handle.read().splitlines()
        self.names = [row["NPU Name"] for row in self.rows]

    def row(self, name: str) -> dict:
        return self.rows[self.names.index(name)]

    def line_of(self, prefix: str) -> str:
        found = [line for line in self.advice if line.startswith(prefix)]
        assert len(found) == 1, (prefix, self.advice)
        return found[0]


def _compare(npu: str, bench: str, out: str, **options) -> Compared:
    options.setdefault("stack_mode", True)
    options.setdefault("xlsx", False)
    return Compared(compare({"npu_json_path": npu, "bench_json_path": bench, "is_print_compare_log": False},
                            out, **options))


# -- GPT-NeoX ------------------------------------------------------------------------------------------
def test_neox_l0_pairs_module_rows_and_names_the_planted_module(runs, tmp_path):
    result = _compare(_json(runs("neox_L0_planted"), 0), _json(runs("neox_L0"), 0), str(tmp_path / "out"))
    counts = result.outcome.counts
    # every module record of the step pairs (forward and backward), none is one-sided
    assert counts.rows == counts.paired == 176 and counts.npu_only == counts.bench_only == 0
    assert all(row["NPU Name"] == row["Bench Name"] for row in result.rows)
    assert all(name.startswith("Module_gpt_neox.") or name.startswith("Module_lm_head.") for name in result.names)
    # execution order: the MLP's input, the modules inside it, then its output
    order = [NEOX_MLP + "_forward_input.0", "Module_gpt_neox.layers.1.mlp.dense_h_to_4h.Linear_0_forward_input.0",
             NEOX_PLANTED_CALL + "_input.0", NEOX_PLANTED_CALL + "_output", NEOX_MLP + "_forward_output"]
    assert [result.names.index(name) for name in order] == sorted(result.names.index(name) for name in order)
    # the first failing row is the planted module's output: everything before it passes
    failing = result.names.index(NEOX_PLANTED_CALL + "_output")
    assert [row["Result"] for row in result.rows[:failing]] == ["pass"] * failing
    assert result.rows[failing]["Result"] == "error"
    assert "Relative error 1.00e-01 > 1.0e-03 allowed for float32" in result.rows[failing]["Err_message"]
    assert "self.dense_4h_to_h(hidden_states)" in result.row(NEOX_PLANTED_CALL + "_input.0")["NPU_Stack_Info"]
    assert not result.outcome
    assert result.outcome.finding.call == NEOX_PLANTED_CALL and result.outcome.finding.line == failing + 2
    assert result.advice[0] == "Suspect API: {} (Cause: its output differs beyond what its precision and its inputs " \
        "explain)".format(NEOX_PLANTED_CALL)
    # a module call is not re-run (the re-run proves API calls), and the advisor says so after the suspect
    assert result.advice[1] == ('Re-run: not run: {} is a module call: only API calls are re-run (a dump at level '
                                '"mix" records the APIs inside it).'.format(NEOX_PLANTED_CALL))
    assert result.advice[2].startswith("Code: ") and result.advice[2].endswith(
        "hidden_states = self.dense_4h_to_h(hidden_states)")
    assert result.advice[3].startswith("First failure: {} (CSV line {}): Relative error 1.00e-01".format(
        NEOX_PLANTED_CALL + "_output", failing + 2))
    assert result.advice[4] == (
        'Diverging module: {0} (first failing module: its inputs match, its output does not; no API records are '
        'compared: dump both runs at level "mix" with "scope": ["{0}"] to see the APIs inside it)'.format(NEOX_PLANTED))
    assert result.advice[5].startswith("Next step: ")


def test_neox_mix_interleaves_apis_and_names_the_api_inside_the_module(runs, tmp_path):
    result = _compare(_json(runs("neox_mix_planted"), 0), _json(runs("neox_mix"), 0), str(tmp_path / "out"))
    counts = result.outcome.counts
    assert counts.rows == counts.paired and counts.npu_only == counts.bench_only == 0
    modules = [name for name in result.names if name.startswith("Module_")]
    assert len(modules) == 176 and len(result.names) - len(modules) > 500  # both kinds, all paired
    # forward: the module's input, its API, its output; backward: the same, gradients in
    forward = [NEOX_MLP + "_forward_input.0", NEOX_PLANTED_CALL + "_input.0", NEOX_PLANTED_API + "_input.0",
               NEOX_PLANTED_API + "_input.1", NEOX_PLANTED_API + "_output", NEOX_PLANTED_CALL + "_output",
               NEOX_MLP + "_forward_output"]
    backward = [NEOX_MLP + "_backward_input.0", "Module_gpt_neox.layers.1.mlp.dense_4h_to_h.Linear_0_backward_input.0",
                "Functional_linear_7_backward_input.0", "Functional_linear_7_backward_output.0",
                "Module_gpt_neox.layers.1.mlp.dense_4h_to_h.Linear_0_backward_output.0", NEOX_MLP + "_backward_output.0"]
    for sequence in (forward, backward):
        positions = [result.names.index(name) for name in sequence]
        assert positions == sorted(positions), sequence
    # the first failing row: the perturbed weight, an input of the planted module's F.linear
    failing = result.names.index(NEOX_PLANTED_API + "_input.1")
    assert [row["Result"] for row in result.rows[:failing]] == ["pass"] * failing
    assert result.rows[failing]["Result"] == "error"
    assert result.advice[0].startswith(f"Suspect API: {NEOX_PLANTED_API} (Input:")
    # the planted weight is what differs: the linear's output carries it and passes, so does the module's; the
    # module named is the one the first failing row is in
    assert result.line_of("Diverging module: ") == (
        "Diverging module: {} (the first failing row is inside it: its inputs match; first failing API "
        "inside it: {})".format(NEOX_PLANTED, NEOX_PLANTED_API))
    # the answer block: the module line sits before "Next step"
    assert result.advice.index(result.line_of("Diverging module: ")) < result.advice.index(
        result.line_of("Next step: "))


def test_neox_mix_finding_file_keeps_its_fields(runs, tmp_path):
    result = _compare(_json(runs("neox_mix_planted"), 0), _json(runs("neox_mix"), 0), str(tmp_path / "out"))
    finding_path = result.outcome.advisor_path.replace("advisor_", "compare_finding_").replace(".txt", ".json")
    with open(finding_path, encoding="utf-8") as handle:
        finding = json.load(handle)
    # the fields of an API comparison's finding, no more (run_ut --compare reads them)
    assert sorted(finding) == sorted(["format", "version"] + list(Finding._fields))
    assert finding["call"] == NEOX_PLANTED_API and finding["record"] == NEOX_PLANTED_API + "_input.1"


@pytest.mark.parametrize("step", range(STEPS))
def test_two_equal_neox_mix_runs_name_nothing(runs, tmp_path, step):
    result = _compare(_json(runs("neox_mix_again"), step), _json(runs("neox_mix"), step), str(tmp_path / "out"))
    assert result.outcome and result.outcome.counts.failed == 0 and result.outcome.counts.paired > 600
    assert result.advice[0] == "All data in comparison result meets the accuracy requirements."
    assert not [line for line in result.advice if line.startswith("Diverging module")]


# -- the plain torch.nn model ----------------------------------------------------------------------------
def test_plain_l0_extra_module_call_leaves_the_rest_paired(runs, tmp_path):
    result = _compare(_json(runs("plain_L0_planted"), 0), _json(runs("plain_L0"), 0), str(tmp_path / "out"))
    # the probe's extra head call is one-sided; the real head call (NPU counter 1) pairs with bench's 0
    assert result.row("Module_head.Linear_0_forward_output")["Bench Name"] == "Nan"
    assert result.row("Module_head.Linear_0_forward_output")["Err_message"] == "No bench data matched."
    assert result.row("Module_head.Linear_1_forward_output")["Bench Name"] == "Module_head.Linear_0_forward_output"
    assert result.row("Module_head.Linear_0_backward_input.0")["Bench Name"] == "Module_head.Linear_0_backward_input.0"
    assert result.outcome.counts.npu_only == 2 and result.outcome.counts.bench_only == 0
    assert result.outcome.finding.call == "Module_blocks.1.Block_0_forward"
    assert result.advice[1].startswith("Re-run: not run: Module_blocks.1.Block_0_forward is a module call")
    assert result.advice[2].startswith("Code: ") and result.advice[2].endswith(
        f"test_module_compare.py:{PlainNet.forward.__code__.co_firstlineno + 5}  return self.head(self.blocks(x))")
    assert result.line_of("Diverging module: ").startswith(
        "Diverging module: Module.blocks.1.Block.forward.0 (first failing module: its inputs match, its output does not;")
    # the rows of block 1 before its output pass: the first failure is where the gain was planted
    failing = result.names.index("Module_blocks.1.Block_0_forward_output")
    assert result.rows[failing]["Result"] == "error" and {row["Result"] for row in result.rows[:failing]} == {
        "pass", "unmatched"}


def test_plain_mix_statistics_names_the_planted_api_inside_the_block(runs, tmp_path):
    result = _compare(_json(runs("plain_mix_stat_planted"), 0), _json(runs("plain_mix_stat"), 0),
                      str(tmp_path / "out"))
    assert "Max diff" in result.rows[0]  # a statistics dump: the summary comparison
    assert result.outcome.finding.call == "Tensor___mul___1_forward"
    block = ["Module_blocks.1.Block_0_forward_input.0", "Functional_linear_3_forward_input.0",
             "Torch_tanh_1_forward_output", "Tensor___mul___1_forward_output", "Module_blocks.1.Block_0_forward_output"]
    positions = [result.names.index(name) for name in block]
    assert positions == sorted(positions)
    assert result.row("Module_blocks.1.Block_0_forward_output")["Result"] == "error"
    assert result.line_of("Diverging module: ") == (
        "Diverging module: Module.blocks.1.Block.forward.0 (first failing module: its inputs match, its output does "
        "not; first failing API inside it: Tensor___mul___1_forward)")


def test_two_equal_plain_l0_runs_name_nothing(runs, tmp_path):
    for step in range(STEPS):
        result = _compare(_json(runs("plain_L0_again"), step), _json(runs("plain_L0"), step), str(tmp_path / str(step)))
        # 12 module calls forward (input and output) and 12 backward (the stem gets no input gradient)
        assert result.outcome and result.outcome.counts.paired == result.outcome.counts.rows == 47
        assert not [line for line in result.advice if line.startswith("Diverging module")]


def test_l0_against_a_legacy_pkl_says_one_side_has_no_module_records(runs, tmp_path):
    pkl = os.path.join(runs("plain_legacy"), "ptdbg_dump_v1.0", "rank0", "api_stack_dump.pkl")
    with pytest.raises(CompareError) as raised:
        compare({"npu_json_path": _json(runs("plain_L0"), 0), "bench_pkl_path": pkl}, str(tmp_path / "out"))
    message = str(raised.value)
    assert "holds module records only" in message and "holds no module records" in message
    assert pkl in message and "level L0" in message
    assert not os.path.exists(str(tmp_path / "out"))  # refused before anything was written


def test_mix_against_a_legacy_pkl_compares_the_api_records(runs, tmp_path):
    pkl = os.path.join(runs("plain_legacy"), "ptdbg_dump_v1.0", "rank0", "api_stack_dump.pkl")
    result = Compared(compare({"npu_json_path": _json(runs("plain_mix_stat"), 0), "bench_pkl_path": pkl,
                               "is_print_compare_log": False}, str(tmp_path / "out"), xlsx=False))
    assert result.outcome and not [name for name in result.names if name.startswith("Module_")]
    assert result.outcome.counts.compared > 40
    assert result.line_of("Note: only the NPU dump holds module records") == (
        "Note: only the NPU dump holds module records (24 module calls, level L0 or mix); the other holds none (a "
        "legacy pkl or a dump at level L1), so they are left out and the API records are compared. Dump both runs "
        "at level mix to compare the modules too.")


def test_module_rows_in_the_xlsx(runs, tmp_path):
    openpyxl = pytest.importorskip("openpyxl")
    result = _compare(_json(runs("plain_L0_planted"), 0), _json(runs("plain_L0"), 0), str(tmp_path / "out"),
                      xlsx=True)
    sheet = openpyxl.load_workbook(result.outcome.xlsx_path)["compare_result"]
    names = [cell.value for cell in sheet["A"]][1:]
    assert names == result.names
