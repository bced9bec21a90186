"""The advisor's suspect proven by re-execution (``comparison/rerun.py``): the suspect call re-run from the NPU's own
dumped inputs in float64 and judged by the pre-check's standard of its dtype. Real model (``rerun_model.py``), real
dumps written by the tool itself, each expected ratio computed here from the dumped tensors by hand."""

from __future__ import annotations

import glob
import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest

from ptdbg_ascend.cli import main as ptdbg_main
from ptdbg_ascend.comparison import rerun as rerun_module
from ptdbg_ascend.comparison.api import compare
from ptdbg_ascend.errors import FileFormatError
from ptdbg_ascend.formats import finding as finding_file
from ptdbg_ascend.precheck.compare_report import read_finding

torch = pytest.importorskip("torch")

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
F64_EPS = float(np.finfo(np.float64).eps)  # what the pre-check adds to |bench| in a relative error (float32)
DUMPS = {"clean": ("tensor", ""), "kernel": ("tensor", "kernel"), "input": ("tensor", "input"),
         "backward": ("tensor", "backward"),
         "statistics_clean": ("statistics", ""), "statistics_kernel": ("statistics", "kernel"),
         "legacy_clean": ("legacy", ""), "legacy_kernel": ("legacy", "kernel"), "legacy_linear": ("legacy", "linear")}


@pytest.fixture(scope="module")
def dumps(tmp_path_factory):
    """``{name: dump root}`` of one training step of ``rerun_model.py`` per DUMPS entry, each in a fresh
    interpreter (the planted kernel is in place before the tool wraps the APIs)."""
    root = tmp_path_factory.mktemp("rerun_dumps")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([REPO] + ([os.environ["PYTHONPATH"]]
                                                                if os.environ.get("PYTHONPATH") else [])))
    processes = {name: subprocess.Popen([sys.executable, os.path.join(HERE, "rerun_model.py"), str(root / name),
                                         kind] + ([plant] if plant else []), env=env,
                                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
                 for name, (kind, plant) in DUMPS.items()}
    for name, process in processes.items():
        output = process.communicate(timeout=300)[0].decode(errors="replace")
        assert process.returncode == 0, output
    return {name: str(root / name) for name in DUMPS}


def _json(root):
    return os.path.join(root, "step0", "rank", "dump.json")


def _compare_json(dumps, npu, output, **options):
    param = {"npu_path": _json(dumps[npu]), "bench_path": _json(dumps["clean" if "statistics" not in npu
                                                                       else "statistics_clean"]),
             "is_print_compare_log": False}
    return compare(param, str(output), xlsx=False, **options)


def _legacy_param(dumps, npu):
    def files(name):
        (pkl,) = glob.glob(os.path.join(dumps[name], "rerun_v1.0", "rank0", "*.pkl"))
        return pkl, pkl[:-len(".pkl")]
    (npu_pkl, npu_dir), (bench_pkl, bench_dir) = files(npu), files("legacy_clean")
    return {"npu_pkl_path": npu_pkl, "bench_pkl_path": bench_pkl, "npu_dump_data_dir": npu_dir,
            "bench_dump_data_dir": bench_dir, "is_print_compare_log": False}


def _advisor_lines(outcome):
    with open(outcome.advisor_path, encoding="utf-8") as handle:
        return handle.read().splitlines()


def _dumped_tensors(root, entry_name):
    """``(inputs, outputs)`` of a dump.json entry as float64 numpy arrays, read from its .pt files."""
    with open(_json(root), encoding="utf-8") as handle:
        entry = json.load(handle)["data"][entry_name]
    data = os.path.join(root, "step0", "rank", "dump_tensor_data")

    def load(leaf):
        return torch.load(os.path.join(data, leaf["data_name"]), weights_only=True).double().numpy()
    return [load(leaf) for leaf in entry["input_args"]], [load(leaf) for leaf in entry["output"]]


def _float32_ratio(npu, exact):
    """The pre-check's float32 standard worked out by hand: cosine <= 0.99 fails; else a max abs error under
    0.001 passes (ratio max_abs / 0.001); else the share of elements off by 0.1 % or more, over 0.1 %."""
    npu, exact = npu.ravel(), exact.ravel()
    cosine = npu @ exact / (np.linalg.norm(npu) * np.linalg.norm(exact))
    assert cosine > 0.99  # the two cases here are decided past the cosine
    max_abs = float(np.max(np.abs(npu - exact)))
    if max_abs < 0.001:
        return max_abs / 0.001
    relative = np.abs(npu - exact) / (np.abs(exact) + F64_EPS)
    return float(np.count_nonzero(relative >= 0.001)) / relative.size / 0.001


def _gelu(x):
    return 0.5 * x * (1.0 + np.vectorize(math.erf)(x / math.sqrt(2.0)))


def test_a_planted_inaccurate_kernel_is_reproduced_with_its_ratio(dumps, tmp_path):
    outcome = _compare_json(dumps, "kernel", tmp_path)
    finding = outcome.finding
    assert finding.call == "Functional_gelu_0_forward" and finding.kind == "cause"
    (x,), (npu_out,) = _dumped_tensors(dumps["kernel"], "Functional.gelu.0.forward")
    expected = _float32_ratio(npu_out, _gelu(x))
    assert expected == pytest.approx(1000)  # 2 % off everywhere: every element beyond float32's 0.1 %
    rerun = finding.rerun
    assert rerun.verdict == "reproduced" and math.isclose(rerun.ratio, expected, rel_tol=1e-9), rerun
    lines = _advisor_lines(outcome)
    assert lines[0].startswith("Suspect API: Functional_gelu_0_forward (Cause:")
    assert lines[1] == ("Re-run: reproduced. Functional_gelu_0_forward's output is 1000x further from the float64 "
                        "re-run of its own inputs than float32 allows: the API is inaccurate here. A CPU run in "
                        "float32 is within it ({}): the NPU's kernel is off.".format(
                            rerun.reason.split("within it (")[1].split(")")[0]))
    cpu_ratio = float(rerun.reason.split("within it (")[1].split("x)")[0])
    assert cpu_ratio < 0.01  # torch's own float32 gelu of the same inputs: round-off only
    # the finding file (version 4) carries it, and reads back equal
    (path,) = glob.glob(str(tmp_path / "compare_finding_*.json"))
    with open(path, encoding="utf-8") as handle:
        record = json.load(handle)
    assert record["version"] == 4 and record["rerun"] == {"verdict": "reproduced", "ratio": rerun.ratio,
                                                          "reason": rerun.reason}
    assert read_finding(path) == finding


def test_a_planted_backward_kernel_is_reproduced_from_the_dumped_gradients(dumps, tmp_path):
    """gelu's forward exact, its backward 2 % off: re-run from its forward input and the gradient arriving at its
    output (both from the dump), the gradient it computed is what is judged."""
    outcome = _compare_json(dumps, "backward", tmp_path)
    assert outcome.finding.call == "Functional_gelu_0_backward"
    (x,), _ = _dumped_tensors(dumps["backward"], "Functional.gelu.0.forward")
    with open(_json(dumps["backward"]), encoding="utf-8") as handle:
        backward = json.load(handle)["data"]["Functional.gelu.0.backward"]
    data = os.path.join(dumps["backward"], "step0", "rank", "dump_tensor_data")
    grad_out, npu_grad_in = (torch.load(os.path.join(data, backward[side][0]["data_name"]), weights_only=True)
                             .double().numpy() for side in ("input", "output"))
    # gelu'(x) = Phi(x) + x phi(x)
    derivative = (0.5 * (1.0 + np.vectorize(math.erf)(x / math.sqrt(2.0)))
                  + x * np.exp(-x * x / 2) / math.sqrt(2 * math.pi))
    expected = _float32_ratio(npu_grad_in, grad_out * derivative)
    assert expected == pytest.approx(1000)  # 2 % off everywhere
    rerun = outcome.finding.rerun
    assert rerun.verdict == "reproduced" and math.isclose(rerun.ratio, expected, rel_tol=1e-6), rerun
    assert rerun.reason.startswith("Functional_gelu_0_backward's gradient w.r.t. input 0 is 1000x further from the "
                                   "float64 re-run of its own inputs than float32 allows")


def test_a_planted_input_difference_is_not_reproduced(dumps, tmp_path):
    outcome = _compare_json(dumps, "input", tmp_path)
    finding = outcome.finding
    assert (finding.call, finding.kind) == ("Functional_linear_0_forward", "input")
    (x, weight, bias), (npu_out,) = _dumped_tensors(dumps["input"], "Functional.linear.0.forward")
    expected = _float32_ratio(npu_out, x @ weight.T + bias)
    assert 0 < expected < 0.01  # float32 round-off of a 16-term sum
    rerun = finding.rerun
    assert rerun.verdict == "not_reproduced" and math.isclose(rerun.ratio, expected, rel_tol=1e-9), rerun
    assert _advisor_lines(outcome)[1] == (
        "Re-run: not reproduced. Functional_linear_0_forward's output is what its dumped inputs give ({:.3g}x what "
        "float32 allows): the difference came in through its inputs or through something not dumped."
        .format(expected))


def test_a_legacy_call_with_non_tensor_arguments_is_not_run_naming_them(dumps, tmp_path):
    outcome = compare(_legacy_param(dumps, "legacy_kernel"), str(tmp_path), xlsx=False)
    assert outcome.finding.call == "Functional_gelu_0_forward"
    assert outcome.finding.rerun == finding_file.Rerun(
        "not_run", None, "a legacy pkl dump does not record Functional.gelu's non-tensor arguments (approximate), so "
        "the call cannot be rebuilt as it ran; dump it with PrecisionDebugger(task=\"tensor\", level=\"L1\") to "
        "have it re-run")
    assert _advisor_lines(outcome)[1].startswith("Re-run: not run: a legacy pkl dump does not record "
                                                 "Functional.gelu's non-tensor arguments (approximate)")


def test_a_legacy_call_of_tensors_only_is_re_run_from_its_npy_files(dumps, tmp_path):
    """F.linear takes tensors only: rebuilt from the legacy dump's npy files (the planted linear is 2 % off)."""
    param = _legacy_param(dumps, "legacy_linear")
    outcome = compare(param, str(tmp_path), xlsx=False)
    assert outcome.finding.call == "Functional_linear_0_forward"
    data = param["npu_dump_data_dir"]
    x, weight, bias, npu_out = (np.load(os.path.join(data, f"Functional_linear_0_forward_{suffix}.npy"))
                                .astype(np.float64) for suffix in ("input.0", "input.1", "input.2", "output"))
    expected = _float32_ratio(npu_out, x @ weight.T + bias)
    rerun = outcome.finding.rerun
    assert rerun.verdict == "reproduced" and math.isclose(rerun.ratio, expected, rel_tol=1e-9), rerun


def test_a_statistics_dump_is_not_run(dumps, tmp_path):
    outcome = _compare_json(dumps, "statistics_kernel", tmp_path)
    assert outcome.finding.call == "Functional_gelu_0_forward"
    assert outcome.finding.rerun == finding_file.Rerun("not_run", None, "the dump holds statistics only (no tensor "
                                                                        "files)")
    assert _advisor_lines(outcome)[1] == "Re-run: not run: the dump holds statistics only (no tensor files)."


def test_rerun_false_and_no_rerun_leave_it_out(dumps, tmp_path):
    outcome = _compare_json(dumps, "kernel", tmp_path / "api", rerun=False)
    assert outcome.finding.call == "Functional_gelu_0_forward" and outcome.finding.rerun is None
    assert not any(line.startswith("Re-run:") for line in _advisor_lines(outcome))
    (path,) = glob.glob(str(tmp_path / "api" / "compare_finding_*.json"))
    with open(path, encoding="utf-8") as handle:
        assert json.load(handle)["rerun"] is None
    status = ptdbg_main(["compare", _json(dumps["kernel"]), _json(dumps["clean"]), str(tmp_path / "cli"), "--quiet",
                         "--no-xlsx", "--no-rerun"])
    assert status == 1
    (advisor,) = glob.glob(str(tmp_path / "cli" / "advisor_*.txt"))
    with open(advisor, encoding="utf-8") as handle:
        text = handle.read()
    assert "Suspect API: Functional_gelu_0_forward" in text and "Re-run:" not in text


def test_the_time_bound_makes_it_not_run(dumps, tmp_path, monkeypatch):
    monkeypatch.setattr(rerun_module, "RERUN_SECONDS", 1e-9)
    rerun = _compare_json(dumps, "kernel", tmp_path).finding.rerun
    assert rerun.verdict == "not_run" and rerun.ratio is None
    assert rerun.reason.startswith("the re-run took ") and rerun.reason.endswith(" s, over its bound of 1e-09 s")


def test_a_finding_of_version_3_still_reads_and_a_wrong_rerun_is_refused(tmp_path):
    rerun = finding_file.Rerun("reproduced", 37.2, "Functional_gelu_0_forward's output is 37.2x further ...")
    found = finding_file.Finding("Functional_gelu_0_forward_output", 7, "cause", "Functional_gelu_0_forward",
                                 "Functional_gelu", None, None, (), rerun=rerun)
    record = json.loads(finding_file.encode(found))
    assert record["version"] == 4 and finding_file.decode(record, "f.json") == found
    not_run = found._replace(rerun=finding_file.Rerun("not_run", None, "the dump holds statistics only"))
    assert finding_file.decode(json.loads(finding_file.encode(not_run)), "f.json") == not_run  # a null ratio
    version_3 = {key: value for key, value in dict(record, version=3).items() if key != "rerun"}
    assert finding_file.decode(version_3, "old.json") == found._replace(rerun=None)
    path = str(tmp_path / "compare_finding_x.json")
    for bad, expected in ((dict(record, rerun="reproduced"), "the field 'rerun' is 'reproduced', not a dict or null"),
                          ({k: v for k, v in record.items() if k != "rerun"}, "the field 'rerun' is missing"),
                          (dict(record, rerun=dict(record["rerun"], verdict="proven")),
                           "the re-run verdict 'proven' is none of reproduced, not_reproduced, not_run"),
                          (dict(record, rerun=dict(record["rerun"], ratio="37.2")),
                           "the field 'rerun.ratio' is '37.2', not a float or null"),
                          (dict(record, rerun=dict(record["rerun"], ratio=-1.0)),
                           "the re-run ratio -1.0 is not a finite number >= 0"),
                          (dict(record, rerun=dict(record["rerun"], reason=None)),
                           "the field 'rerun.reason' is None, not a str")):
        with open(path, "w", encoding="utf-8") as handle:
            json.dump(bad, handle)
        with pytest.raises(FileFormatError) as error:
            read_finding(path)
        assert str(error.value).startswith(f"{path} is not a compare finding of format 'ptdbg_ascend.finding' "
                                           "version 4: ") and expected in str(error.value), str(error.value)


def _hostile_pair(root, name):
    """An NPU and a bench dump.json of one call ``name`` (dotted, without counter and direction) whose NPU output
    differs: the advisor's suspect."""
    params = {}
    for side, output in (("npu", [3.0, 4.0]), ("bench", [1.0, 2.0])):
        folder = os.path.join(str(root), side)
        data = os.path.join(folder, "dump_tensor_data")
        os.makedirs(data)
        leaves = []
        for leaf_name, values in (("in.pt", [1.0, 2.0]), ("out.pt", output)):
            torch.save(torch.tensor(values), os.path.join(data, leaf_name))
            leaves.append({"type": "torch.Tensor", "dtype": "torch.float32", "shape": [2], "Max": max(values),
                           "Min": min(values), "Mean": sum(values) / 2, "Norm": math.hypot(*values),
                           "requires_grad": False, "data_name": leaf_name})
        dump = {"task": "tensor", "level": "L1", "dump_data_dir": None,
                "data": {f"{name}.0.forward": {"input_args": [leaves[0]], "input_kwargs": {}, "output": [leaves[1]]}}}
        with open(os.path.join(folder, "dump.json"), "w", encoding="utf-8") as handle:
            json.dump(dump, handle)
        params[side + "_path"] = os.path.join(folder, "dump.json")
    return dict(params, is_print_compare_log=False)


@pytest.mark.parametrize("name, prefix_api", [("Torch.system", "Torch.system"),
                                              ("Functional.__import__", "Functional.__import__"),
                                              ("Tensor.__reduce_ex__", "Tensor.__reduce_ex__")])
def test_a_hostile_dump_runs_nothing_but_allowlisted_apis(tmp_path, monkeypatch, name, prefix_api):
    """A dump naming a callable that is reachable in torch (planted here, so a lookup would find it) runs nothing:
    not on the pre-check's allowlist."""
    param = _hostile_pair(tmp_path, name)
    called = []
    prefix, api = name.split(".", 1)
    owner = {"Torch": torch, "Functional": torch.nn.functional, "Tensor": torch.Tensor}[prefix]
    monkeypatch.setattr(owner, api, lambda *args, **kwargs: called.append(args), raising=False)
    outcome = compare(param, str(tmp_path / "out"), xlsx=False)
    assert outcome.finding.call == name.replace(".", "_") + "_0_forward"
    rerun = outcome.finding.rerun
    assert rerun.verdict == "not_run" and rerun.reason.startswith(f"not allowlisted: {prefix_api} "), rerun
    assert called == []


def test_an_npu_only_api_without_torch_npu_is_not_run(tmp_path):
    outcome = compare(_hostile_pair(tmp_path, "NPU.fast_gelu"), str(tmp_path / "out"), xlsx=False)
    assert outcome.finding.call == "NPU_fast_gelu_0_forward"
    assert outcome.finding.rerun == finding_file.Rerun(
        "not_run", None, "NPU.fast_gelu is an NPU-only API and torch_npu is not installed here")


def test_a_call_over_the_memory_budget_is_not_run_before_it_runs(dumps, tmp_path, monkeypatch):
    """The pre-check's budget (a quarter of the memory available), here 1 KiB: gelu's 4x32 float32 input, its
    float64 and float32 copies alone take 2 KiB."""
    from ptdbg_ascend.precheck import call_values

    monkeypatch.setattr(call_values, "default_budget", lambda: 1024)
    rerun = _compare_json(dumps, "kernel", tmp_path).finding.rerun
    assert rerun.verdict == "not_run" and rerun.reason.startswith("Needs about 2.0 KiB (inputs as loaded, their "
                                                                  "float64 and dumped-dtype copies), over the memory "
                                                                  "budget of 1.0 KiB per call; not run."), rerun


def test_a_random_api_is_not_run_as_the_pre_check_skips_it(tmp_path):
    outcome = compare(_hostile_pair(tmp_path, "Functional.dropout"), str(tmp_path / "out"), xlsx=False)
    assert outcome.finding.rerun == finding_file.Rerun(
        "not_run", None, "Random API Functional.dropout: two runs draw different numbers, it is not compared.")
