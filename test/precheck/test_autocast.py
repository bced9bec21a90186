"""The pre-check of calls dumped inside ``torch.autocast``: a small model trained one step under CPU bfloat16
autocast, dumped with PrecisionDebugger(task="tensor"); run_ut re-runs each call in the autocast state the dump
records (or infers, for a dump without it), so the matmul-class calls are judged, none is SKIP."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from conftest import subprocess_env

torch = pytest.importorskip("torch")

from ptdbg_ascend.precheck.run_ut import run_ut  # noqa: E402

TRAIN = textwrap.dedent('''
    import sys, torch
    from ptdbg_ascend import PrecisionDebugger

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = torch.nn.Linear(16, 32)
            self.fc2 = torch.nn.Linear(32, 4)

        def forward(self, x):
            h = torch.nn.functional.gelu(self.fc1(x))
            a = torch.matmul(h, h.transpose(0, 1))
            return self.fc2(torch.matmul(a, h))  # a bfloat16 activation into a float32 weight

    torch.manual_seed(0)
    net = Net()
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
    debugger = PrecisionDebugger(dump_path=sys.argv[1], task="tensor", level="L1")
    x = torch.randn(8, 16)
    debugger.start()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = net(x)
    loss = out.float().pow(2).mean()
    loss.backward()
    optimizer.step()
    debugger.stop()
''')
MATMUL_CLASS = ("Functional.linear.0", "Torch.matmul.0", "Torch.matmul.1", "Functional.linear.1")
BF16_CPU = {"device_type": "cpu", "dtype": "torch.bfloat16"}


@pytest.fixture(scope="module")
def autocast_dump(tmp_path_factory):
    root = tmp_path_factory.mktemp("autocast_dump")
    script = root / "train.py"
    script.write_text(TRAIN)
    done = subprocess.run([sys.executable, str(script), str(root / "dump")], env=subprocess_env(),
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=300)
    assert done.returncode == 0, done.stdout.decode(errors="replace")
    return root / "dump" / "step0" / "rank" / "dump.json"


def _verdicts(outcome):
    with open(outcome.result_csv, encoding="utf-8-sig") as handle:
        rows = [line.rstrip("\n").split(",") for line in handle][1:]
    return {row[0]: row[1] for row in rows}


def test_the_dump_records_the_autocast_state_of_the_calls_inside_it_only(autocast_dump):
    data = json.loads(autocast_dump.read_text())["data"]
    for name in MATMUL_CLASS + ("Functional.gelu.0", "Tensor.transpose.0"):
        assert data[name + ".forward"]["autocast"] == BF16_CPU, name
        assert list(data[name + ".forward"]) == ["input_args", "input_kwargs", "output", "autocast"]
    outside = ("Tensor.pow.0.forward", "Tensor.mean.0.forward", "Tensor.add_.0.forward", "Functional.linear.1.backward")
    for name in outside:
        assert "autocast" not in data[name], name


def test_calls_dumped_under_autocast_are_rerun_under_it_none_skipped(autocast_dump, tmp_path):
    outcome = run_ut(str(autocast_dump), str(tmp_path / "ut"), progress=False)
    assert outcome.skipped == [] and "SKIP" not in outcome.counts
    verdicts = _verdicts(outcome)
    for name in MATMUL_CLASS:  # judged (pass/warning/error), re-run in bfloat16 as in training
        assert verdicts[name] in ("pass", "warning", "error"), (name, verdicts[name])
    details = open(outcome.details_csv, encoding="utf-8-sig").read()
    assert "Functional.linear.1.forward.output.0,torch.float64,torch.bfloat16," in details
    assert "Functional.linear.0.forward.output.0,torch.float64,torch.bfloat16," in details


def test_an_older_dump_without_the_autocast_key_has_it_inferred(autocast_dump, tmp_path):
    document = json.loads(autocast_dump.read_text())
    for entry in document["data"].values():
        entry.pop("autocast", None)
    old = autocast_dump.parent / "dump_without_autocast.json"
    old.write_text(json.dumps(document))
    outcome = run_ut(str(old), str(tmp_path / "ut"), progress=False)
    assert outcome.skipped == [] and "SKIP" not in outcome.counts
    details = open(outcome.details_csv, encoding="utf-8-sig").read()
    # float32 input and weight, bfloat16 output: only autocast gives that, so the re-run is under it
    assert "Functional.linear.0.forward.output.0,torch.float64,torch.bfloat16," in details


def test_a_malformed_autocast_value_is_skipped_with_its_reason(autocast_dump, tmp_path):
    document = json.loads(autocast_dump.read_text())
    document["data"]["Functional.linear.1.forward"]["autocast"] = {"device_type": "cpu", "dtype": "torch.int8"}
    bad = autocast_dump.parent / "dump_bad_autocast.json"
    bad.write_text(json.dumps(document))
    outcome = run_ut(str(bad), str(tmp_path / "ut"), progress=False)
    assert dict(outcome.skipped) == {
        "Functional.linear.1": "Functional.linear.1: its \"autocast\" value {'device_type': 'cpu', 'dtype': "
                               "'torch.int8'} is not {\"device_type\": \"cpu\", \"dtype\": one of torch.bfloat16, "
                               "torch.float16}; the autocast state it ran in is unknown, it is not run"}


def test_an_equal_autocast_run_has_no_error_and_the_lowered_gradients_are_judged_as_bfloat16(autocast_dump, tmp_path):
    """The benchmark starts from the inputs as autocast handed them to the call (rounded to bfloat16): the
    float64 answer of the unrounded float32 inputs made every bf16 linear an error. The float32 gradient of a
    float32 weight was computed in bfloat16 (through autocast's cast) and is judged by bfloat16's standard."""
    outcome = run_ut(str(autocast_dump), str(tmp_path / "ut"), progress=False)
    assert "error" not in outcome.counts, outcome.counts
    with open(outcome.details_csv, encoding="utf-8-sig") as handle:
        details = {row.split(",")[0]: row for row in handle}
    weight_gradient = details["Functional.linear.0.backward.output.1"]
    assert ",torch.float64,torch.float32,\"(32, 16)\"," in weight_gradient
    assert "Computed in torch.bfloat16 (autocast): judged by its standard." in weight_gradient
    # a call autocast leaves in float32 inputs is judged as before
    assert "Computed in" not in details["Tensor.pow.0.forward.output.0"]


def test_a_wrong_output_under_autocast_is_still_an_error(autocast_dump, tmp_path):
    """Judged against the dump's own outputs, a linear whose bfloat16 output is 5% off fails."""
    tensors = autocast_dump.parent / "dump_tensor_data"
    name = tensors / "Functional.linear.0.forward.output.0.pt"
    wrong = tmp_path / "wrong"
    import shutil
    shutil.copytree(str(autocast_dump.parent), str(wrong))
    torch.save(torch.load(str(name), weights_only=True) * 1.05, str(wrong / "dump_tensor_data" / name.name))
    outcome = run_ut(str(wrong / "dump.json"), str(tmp_path / "ut"), progress=False, dumped_outputs=True)
    assert _verdicts(outcome)["Functional.linear.0"] == "error"
    assert _verdicts(outcome)["Functional.linear.1"] != "error"


def test_the_benchmark_rounds_what_autocast_casts_and_keeps_float64():
    from ptdbg_ascend.precheck.execution import _Side

    x32 = torch.tensor([1.0 + 2 ** -12, 3.0])  # not a bfloat16 value
    x64 = torch.tensor([1.0 + 2 ** -12], dtype=torch.float64)
    side = _Side([x32, x64], {}, True, "cpu", False, rounded_to=torch.bfloat16)
    assert side.leaves[0].dtype == torch.float64 and side.leaves[0].tolist() == [1.0, 3.0]  # rounded to bf16
    assert side.leaves[1].tolist() == [1.0 + 2 ** -12]  # autocast never casts float64
