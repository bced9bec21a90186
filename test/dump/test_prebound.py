"""Pre-bound references (issue 19, item 5): a transformers-like activation module stores
``torch.nn.functional.gelu`` in ``__init__``, before ``register_hook`` / ``PrecisionDebugger.start``. Its calls
are recorded as ``Functional_gelu_0_forward`` (legacy) / ``Functional.gelu.0.forward`` (dump.json), a gelu
error planted in the "NPU" run is named as the cause with the user's line, two equal runs do not fail, and a
reference the dump still cannot see (a ``functools.partial``) is reported as the gap between the two dumped
calls around it, not as a data problem.

Every run is its own process: the wrappers are global, and the model must be built while the originals are
still in place (the real order, which an earlier test of this process would have changed).
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys

import pytest

from ptdbg_ascend.comparison.api import compare

torch = pytest.importorskip("torch")

DUMP_SCRIPT = '''
import functools
import sys

import torch
from ptdbg_ascend import *

out, front, variant = sys.argv[1], sys.argv[2], sys.argv[3]
torch.set_num_threads(1)
if variant in ("planted", "partial_planted"):
    # The NPU's gelu, as torch_npu would install it at import, with a 1 % error; the model below keeps it.
    # Its own torch functions are held in a closure, which the dump does not look into.
    def make_npu_gelu(exact_gelu, mul):
        def npu_gelu(input, approximate="none"):
            return mul(exact_gelu(input, approximate=approximate), 1.01)

        return npu_gelu

    torch.nn.functional.gelu = make_npu_gelu(torch.nn.functional.gelu, torch.mul)


class GELUActivation(torch.nn.Module):
    """As transformers.activations.GELUActivation: the function is taken once, when the model is built."""

    def __init__(self, through_partial=False):
        super().__init__()
        if through_partial:
            self.act = functools.partial(torch.nn.functional.gelu, approximate="none")
        else:
            self.act = torch.nn.functional.gelu

    def forward(self, input):
        return self.act(input)


class MLP(torch.nn.Module):
    """A GPT-like block's MLP: c_fc -> GELUActivation -> c_proj."""

    def __init__(self, through_partial):
        super().__init__()
        self.c_fc = torch.nn.Linear(8, 32)
        self.act = GELUActivation(through_partial)
        self.c_proj = torch.nn.Linear(32, 8)

    def forward(self, hidden):
        hidden = self.c_fc(hidden)
        hidden = self.act(hidden)
        return self.c_proj(hidden)


torch.manual_seed(0)
model = MLP(variant.startswith("partial"))  # built BEFORE the hooks, the documented order
x = torch.randn(4, 8, generator=torch.Generator().manual_seed(1))
if front == "legacy":
    set_dump_path(out)
    register_hook(model, acc_cmp_dump)
    set_dump_switch("ON", mode="api_stack")
    model(x).sum().backward()
    set_dump_switch("OFF")
else:
    debugger = PrecisionDebugger(task="tensor", level="L1", dump_path=out, model=model)
    debugger.start()
    model(x).sum().backward()
    debugger.stop()
'''
# The user's line of the gelu call: the innermost frame outside torch (GELUActivation.forward).
GELU_LINE = "return self.act(input)"
GELU_LINE_NUMBER = DUMP_SCRIPT.splitlines().index("        " + GELU_LINE) + 1


def _dump(root, front, variant):
    script = root / "prebound_run.py"
    if not script.exists():
        script.write_text(DUMP_SCRIPT)
    out = root / f"{front}_{variant}"
    result = subprocess.run([sys.executable, str(script), str(out), front, variant],
                            capture_output=True, text=True, cwd=str(root), timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return out


@pytest.fixture(scope="module")
def legacy_runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("prebound")
    runs = {}
    for variant in ("base", "again", "planted", "partial", "partial_planted"):
        rank = _dump(root, "legacy", variant) / "ptdbg_dump_v1.0" / "rank0"
        runs[variant] = (str(rank / "api_stack_dump.pkl"), str(rank / "api_stack_dump"))
    return runs


def _compare(runs, npu, bench, output):
    output.mkdir()
    param = {"npu_pkl_path": runs[npu][0], "bench_pkl_path": runs[bench][0], "npu_dump_data_dir": runs[npu][1],
             "bench_dump_data_dir": runs[bench][1], "is_print_compare_log": False}
    outcome = compare(param, str(output), stack_mode=True)
    with open(outcome.advisor_path) as handle:
        advice = handle.read()
    with open(outcome.csv_path) as handle:
        rows = list(csv.DictReader(handle))
    return outcome, advice, rows


def _calls(pkl):
    names = []
    with open(pkl, encoding="utf-8") as handle:
        for line in handle:
            name = json.loads(line)[0]
            if name.endswith("_forward_output"):
                names.append(name[: -len("_output")])
    return names


def test_prebound_gelu_is_recorded_under_its_usual_name(legacy_runs):
    for variant in ("base", "planted"):  # the stored reference is torch's gelu, then the "NPU"'s own
        assert _calls(legacy_runs[variant][0]) == ["Functional_linear_0_forward", "Functional_gelu_0_forward",
                                                  "Functional_linear_1_forward"], variant


def test_planted_error_in_a_prebound_gelu_names_gelu_with_the_users_line(legacy_runs, tmp_path):
    outcome, advice, _rows = _compare(legacy_runs, "planted", "base", tmp_path / "out")
    finding = outcome.finding
    assert (finding.kind, finding.call, finding.api) == ("cause", "Functional_gelu_0_forward", "Functional_gelu")
    assert finding.user_line.endswith(f"prebound_run.py:{GELU_LINE_NUMBER}  {GELU_LINE}"), finding.user_line
    assert outcome.first_failure == "Functional_gelu_0_forward_output"
    assert "Suspect API: Functional_gelu_0_forward (Cause: its output differs beyond what its precision and its inputs " \
        "explain)" in advice


def test_two_equal_runs_do_not_fail(legacy_runs, tmp_path):
    outcome, advice, rows = _compare(legacy_runs, "again", "base", tmp_path / "out")
    assert outcome and outcome.first_failure is None, advice
    assert any(r["NPU Name"] == "Functional_gelu_0_forward_output" and r["Accuracy Reached or Not"] == "Yes"
               for r in rows)


def test_a_reference_still_unseen_is_reported_as_the_gap_between_two_dumped_calls(legacy_runs, tmp_path):
    # functools.partial keeps the function where the dump does not look: no gelu record on either side.
    assert _calls(legacy_runs["partial"][0]) == ["Functional_linear_0_forward", "Functional_linear_1_forward"]
    outcome, advice, _rows = _compare(legacy_runs, "partial_planted", "partial", tmp_path / "out")
    assert outcome.finding.kind == "input" and outcome.first_failure.startswith("Functional_linear_1_forward_input")
    assert "every dumped call before it matched: the difference arose between Functional_linear_0_forward (" in advice
    assert ") and Functional_linear_1_forward (" in advice
    assert "loading order" not in advice and "seed_all" not in advice and "weights" not in advice


def test_precision_debugger_records_the_prebound_gelu(tmp_path):
    out = _dump(tmp_path, "msprobe", "planted")
    dumps = [os.path.join(directory, "dump.json") for directory, _dirs, files in os.walk(str(out))
             if "dump.json" in files]
    assert len(dumps) == 1, dumps
    with open(dumps[0], encoding="utf-8") as handle:
        data = json.load(handle)["data"]
    forward = [name for name in data if name.startswith("Functional.") and name.endswith(".forward")]
    assert forward == ["Functional.linear.0.forward", "Functional.gelu.0.forward", "Functional.linear.1.forward"]


USER_MODULE = '''
import torch
from torch import relu
from torch.nn.functional import conv2d


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(2, 2, 1)
        self.act = torch.nn.functional.gelu

    def forward(self, x):
        return relu(self.act(conv2d(x, self.conv.weight)))
'''


def test_rebinding_covers_module_globals_and_unwrap_restores_it(dump_session, monkeypatch):
    """In one process: a user module's ``from torch import relu`` / ``from torch.nn.functional import conv2d``
    and a module attribute, taken before the wrappers, are recorded after ``rebind``; ``unwrap`` puts every
    original back."""
    import types

    from ptdbg_ascend.dump.prebound import rebind

    session = dump_session
    session.unwrap()  # an earlier test of this process installed the wrappers: build against the originals
    try:
        user = types.ModuleType("user_modeling_prebound")
        monkeypatch.setitem(sys.modules, user.__name__, user)
        exec(compile(USER_MODULE, "user_modeling_prebound.py", "exec"), user.__dict__)
        block = user.Block()
        session.ensure_wrapped()
        session.reset_counters()
        assert rebind(session, block) == 3  # the module's relu and conv2d, block.act
        assert rebind(session, block) == 0  # already wrappers: nothing left to replace
        block(torch.randn(1, 2, 3, 3))
        # torch.conv2d is torch.nn.functional.conv2d: the reference is recorded under Functional.
        assert {key: value for key, value in session.counters.items() if value} == {
            "Functional_conv2d": 1, "Functional_gelu": 1, "Torch_relu": 1}
        session.unwrap()
        assert user.relu is torch.relu and user.conv2d is torch.conv2d
        assert block.act is torch.nn.functional.gelu and not hasattr(block.act, "__ptdbg_original__")
    finally:
        session.ensure_wrapped()


def test_a_wrapper_replaced_since_an_earlier_start_is_not_bound(dump_session, monkeypatch):
    """start() runs every step, so the map of wrappers is kept between calls: a reference to an original
    whose wrapper someone has replaced since must stay as it is, as when the map was built afresh; and
    after unwrap() and wrapping again (as many patches, all new wrappers) the map is built again."""
    import types

    from ptdbg_ascend.dump.prebound import rebind, wrappers_by_original

    session = dump_session

    def user_module(name):
        user = types.ModuleType(name)
        monkeypatch.setitem(sys.modules, name, user)
        exec(compile(USER_MODULE, name + ".py", "exec"), user.__dict__)
        return user

    session.unwrap()
    first, second = user_module("user_prebound_first"), user_module("user_prebound_second")
    first_block, second_block = first.Block(), second.Block()  # built before the wrappers, as a model is
    functional = torch.nn.functional
    wrapped_gelu = None
    try:
        session.ensure_wrapped()
        kept = wrappers_by_original(session)
        assert wrappers_by_original(session) is kept  # kept, not walked again
        session.unwrap()
        session.ensure_wrapped()  # the same number of patches, all new wrappers: built again
        assert wrappers_by_original(session) is not kept
        wrapped_gelu = functional.gelu
        functional.gelu = lambda input, approximate="none": input  # someone else's patch over the wrapper
        assert rebind(session, second_block) == 2  # the module's relu and conv2d; block.act is left alone
        assert second_block.act is wrapped_gelu.__ptdbg_original__
        functional.gelu = wrapped_gelu
        assert rebind(session, first_block) == 3  # relu, conv2d and block.act
        assert first_block.act is wrapped_gelu
    finally:
        if wrapped_gelu is not None:
            functional.gelu = wrapped_gelu
        session.ensure_wrapped()
