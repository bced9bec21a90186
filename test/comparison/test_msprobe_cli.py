"""What a newcomer and an msprobe user type for compare and parse, on real dumps of a small conv-BN-ReLU
model (PrecisionDebugger dump.json + stack.json, and a legacy pkl): ``ptdbg -f pytorch compare -i
compare.json -o OUT -s``, ``ptdbg compare A/dump.json B/dump.json OUT --stack-mode`` (the stack.json beside
the dump is found), output directories created, compare.json errors naming the file, ``parse`` of an absent
call, a dump.json with and without the ``framework`` key, compare without openpyxl."""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys

import pytest

pytest.importorskip("torch")

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CLI = [sys.executable, "-m", "ptdbg_ascend.cli"]

DUMP_SCRIPT = '''
import sys
import torch
from ptdbg_ascend import PrecisionDebugger, acc_cmp_dump, register_hook, seed_all, set_dump_path, set_dump_switch

out, variant, layout = sys.argv[1], sys.argv[2], sys.argv[3]
seed_all(1234)
torch.set_num_threads(1)


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3)
        self.bn = torch.nn.BatchNorm2d(4)
        self.fc = torch.nn.Linear(4 * 4 * 4, 3)

    def forward(self, x):
        h = self.bn(self.conv(x))
        slope = 0.5 if variant == "planted" else 0.01
        h = torch.nn.functional.leaky_relu(h, slope)  # PLANTED_LINE
        return self.fc(torch.relu(h).flatten(1))


torch.manual_seed(0)
model = Net()
x = torch.randn(2, 3, 6, 6)
if layout == "pkl":
    set_dump_path(out)
    register_hook(model, acc_cmp_dump)
    set_dump_switch("ON", mode="api_stack")
    model(x).sum().backward()
    set_dump_switch("OFF")
else:
    debugger = PrecisionDebugger(dump_path=out, task="tensor", level="L1")
    debugger.start()
    model(x).sum().backward()
    debugger.stop()
    debugger.step()
'''


def env():
    found = dict(os.environ)
    found["PYTHONPATH"] = os.pathsep.join([REPO] + ([found["PYTHONPATH"]] if found.get("PYTHONPATH") else []))
    found.setdefault("OMP_NUM_THREADS", "1")
    return found


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """``{"base": rank dir, "planted": rank dir, "pkl": legacy pkl}``: two PrecisionDebugger runs (the planted
    one changes leaky_relu's slope) and a legacy dump of the base run; plus each dump's stderr."""
    root = tmp_path_factory.mktemp("msprobe_cli")
    script = root / "train.py"
    script.write_text(DUMP_SCRIPT)
    found = {"root": root, "script": str(script), "stderr": {}}
    for name, variant, layout in (("base", "base", "json"), ("planted", "planted", "json"), ("pkl", "base", "pkl")):
        result = subprocess.run([sys.executable, str(script), str(root / name), variant, layout], capture_output=True,
                                text=True, cwd=str(root), env=env(), timeout=300)
        assert result.returncode == 0, result.stderr[-3000:]
        found["stderr"][name] = result.stderr
        found[name] = (str(root / name / "step0" / "rank") if layout == "json"
                       else str(root / name / "ptdbg_dump_v1.0" / "rank0" / "api_stack_dump.pkl"))
    return found


def cli(args, cwd):
    return subprocess.run(CLI + list(args), capture_output=True, text=True, cwd=str(cwd), env=env(), timeout=300)


def rows_of(csv_path):
    with open(csv_path, encoding="utf-8-sig", newline="") as handle:
        return list(csv.DictReader(handle))


def only_file(directory, prefix, suffix=".csv"):
    names = [name for name in os.listdir(directory) if name.startswith(prefix) and name.endswith(suffix)]
    assert len(names) == 1, os.listdir(directory)
    return os.path.join(directory, names[0])


def planted_line():
    return next(number for number, line in enumerate(DUMP_SCRIPT.splitlines(), 1) if "PLANTED_LINE" in line)


def test_msprobe_compare_json_with_framework_option(runs, tmp_path):
    """msprobe 1.0.4's command and compare.json; the output directory (two levels) is created; -s fills the
    stack column from the file's stack_path; the advisor names leaky_relu and the planted line."""
    spec = {"npu_path": os.path.join(runs["planted"], "dump.json"),
            "bench_path": os.path.join(runs["base"], "dump.json"),
            "stack_path": os.path.join(runs["planted"], "stack.json"), "is_print_compare_log": False}
    (tmp_path / "compare.json").write_text(json.dumps(spec))
    result = cli(["-f", "pytorch", "compare", "-i", "compare.json", "-o", "./output/new", "-s"], tmp_path)
    assert result.returncode == 1, result.stderr  # an API's accuracy is not reached
    assert "Suspect Nodes: Functional_leaky_relu_0_forward_output" in result.stdout
    out = tmp_path / "output" / "new"
    rows = rows_of(only_file(str(out), "compare_result_"))
    first = next(row for row in rows if row["NPU Name"].startswith("Functional_leaky_relu_0_forward"))
    assert f"{runs['script']}\", line {planted_line()}" in first["NPU_Stack_Info"]
    advice = open(only_file(str(out), "advisor_", ".txt"), encoding="utf-8").read()
    assert "Functional_leaky_relu_0_forward" in advice and "PLANTED_LINE" in advice
    assert os.path.isfile(only_file(str(out), "compare_result_", ".xlsx"))
    # -c: no advisor; -f after the command: fuzzy match (msprobe's compare flags)
    result = cli(["compare", "-i", "compare.json", "-o", "out2", "-s", "-c", "-f"], tmp_path)
    assert result.returncode == 1, result.stderr
    assert not [name for name in os.listdir(str(tmp_path / "out2")) if name.startswith("advisor_")]
    assert "This task uses fuzzy matching" in result.stdout


def test_two_equal_runs_through_compare_json_pass(runs, tmp_path):
    spec = {"npu_path": os.path.join(runs["base"], "dump.json"), "bench_path": os.path.join(runs["base"], "dump.json"),
            "stack_path": os.path.join(runs["base"], "stack.json"), "is_print_compare_log": True}
    (tmp_path / "compare.json").write_text(json.dumps(spec))
    result = cli(["-f", "pytorch", "compare", "-i", "compare.json", "-o", "out", "-s"], tmp_path)
    assert result.returncode == 0, result.stderr
    assert "Suspect Nodes: NA" in result.stdout  # no false alarm on two equal runs


def test_stack_json_beside_the_dump_is_found(runs, tmp_path):
    """``ptdbg compare A/dump.json B/dump.json OUT --stack-mode`` without --stack-path, and a compare.json
    without stack_path; without any stack.json the error says --stack-path."""
    npu, bench = os.path.join(runs["planted"], "dump.json"), os.path.join(runs["base"], "dump.json")
    result = cli(["compare", npu, bench, "out", "--stack-mode", "--quiet"], tmp_path)
    assert result.returncode == 1, result.stderr
    rows = rows_of(only_file(str(tmp_path / "out"), "compare_result_"))
    first = next(row for row in rows if row["NPU Name"].startswith("Functional_leaky_relu_0_forward"))
    assert f"line {planted_line()}" in first["NPU_Stack_Info"]
    (tmp_path / "compare.json").write_text(json.dumps({"npu_path": npu, "bench_path": bench}))
    result = cli(["compare", "-i", "compare.json", "-o", "out_json", "-s"], tmp_path)
    assert result.returncode == 1, result.stderr
    no_stack = tmp_path / "no_stack"
    shutil.copytree(runs["planted"], str(no_stack))
    os.remove(str(no_stack / "stack.json"))
    result = cli(["compare", str(no_stack / "dump.json"), bench, "out3", "--stack-mode"], tmp_path)
    assert result.returncode == 2
    assert ("does not contain stack information, please turn off the stack_mode ({}), or give the NPU stack.json "
            "with --stack-path (input_param['stack_path']): there is no stack.json beside the dump.json"
            .format(no_stack / "dump.json")) in result.stderr
    assert not (tmp_path / "out3").exists()  # a refused compare creates no output directory


def test_compare_json_errors_name_the_file_and_the_key(runs, tmp_path):
    dump = os.path.join(runs["base"], "dump.json")
    cases = {
        "bad.json": ("{not json", "The compare.json {} is not valid JSON"),
        "list.json": ("[]", "The compare.json {} must hold a JSON object"),
        "missing.json": (json.dumps({"npu_path": dump}), "The compare.json {} needs the key 'bench_path'"),
        "type.json": (json.dumps({"npu_path": dump, "bench_path": 3}),
                      "The compare.json {}: 'bench_path' must be a non-empty path string; it is 3."),
        "flag.json": (json.dumps({"npu_path": dump, "bench_path": dump, "is_print_compare_log": "yes"}),
                      "The compare.json {}: 'is_print_compare_log' must be true or false; it is 'yes'."),
        "unknown.json": (json.dumps({"npu_path": dump, "bench_path": dump, "script": "x.py"}),
                         "The compare.json {} has the unknown key 'script'; allowed keys: npu_path, bench_path, "
                         "stack_path, is_print_compare_log."),
        "absent.json": (json.dumps({"npu_path": dump, "bench_path": "nowhere/dump.json"}),
                        "The compare.json {}: 'bench_path' names nowhere/dump.json, which does not exist."),
        "mixed.json": (json.dumps({"npu_path": dump, "bench_path": os.path.dirname(runs["base"])}),
                       "The compare.json {}: the npu_path and bench_path need to be of the same type"),
    }
    for name, (text, expected) in cases.items():
        (tmp_path / name).write_text(text)
        result = cli(["-f", "pytorch", "compare", "-i", name, "-o", "out"], tmp_path)
        assert result.returncode == 2, (name, result.stderr)
        assert result.stderr.startswith("ptdbg compare: error: " + expected.format(name)), (name, result.stderr)
    assert not (tmp_path / "out").exists()
    result = cli(["compare", "-i", "missing.json", dump, "-o", "out"], tmp_path)
    assert result.returncode == 2 and f"give no positional argument (got {dump})" in result.stderr


def test_framework_other_than_pytorch_is_refused(tmp_path):
    result = cli(["-f", "mindspore", "compare", "-i", "compare.json", "-o", "out"], tmp_path)
    assert result.returncode == 2
    assert ("ptdbg: error: argument -f/--framework: 'mindspore' is not supported: ptdbg_ascend debugs PyTorch only; "
            "the one value allowed is 'pytorch'") in result.stderr


def test_compare_json_with_step_directories_compares_every_rank(runs, tmp_path):
    """msprobe's multi-rank form: npu_path and bench_path are step directories (here step0/rank)."""
    spec = {"npu_path": os.path.dirname(runs["planted"]), "bench_path": os.path.dirname(runs["base"]),
            "stack_path": "", "is_print_compare_log": False}
    (tmp_path / "compare.json").write_text(json.dumps(spec))
    result = cli(["compare", "-i", "compare.json", "-o", "out"], tmp_path)
    assert result.returncode == 2 and "'stack_path' must be a non-empty path string" in result.stderr
    del spec["stack_path"]
    (tmp_path / "compare.json").write_text(json.dumps(spec))
    result = cli(["compare", "-i", "compare.json", "-o", "out", "-s"], tmp_path)
    assert result.returncode == 1, result.stderr
    assert "Suspect Nodes: Functional_leaky_relu_0_forward_output" in result.stdout
    assert only_file(str(tmp_path / "out"), "compare_result_rank-rank_")


def test_dump_json_framework_key_and_readers_with_and_without_it(runs, tmp_path):
    """Our dump.json starts task, level, framework (msprobe 26.x's acc_check reads it); a dump without the
    key (msprobe 1.0.4's) compares to the same rows."""
    from ptdbg_ascend.comparison.api import compare

    with open(os.path.join(runs["planted"], "dump.json"), encoding="utf-8") as handle:
        document = json.load(handle)
    assert list(document) == ["task", "level", "framework", "dump_data_dir", "data"]
    assert document["framework"] == "pytorch"
    old = tmp_path / "old"
    shutil.copytree(runs["planted"], str(old))
    del document["framework"]
    (old / "dump.json").write_text(json.dumps(document))
    bench = os.path.join(runs["base"], "dump.json")
    with_key = compare({"npu_path": os.path.join(runs["planted"], "dump.json"), "bench_path": bench,
                        "is_print_compare_log": False}, str(tmp_path / "a"), xlsx=False)
    without = compare({"npu_path": str(old / "dump.json"), "bench_path": bench, "is_print_compare_log": False},
                      str(tmp_path / "b"), xlsx=False)
    assert with_key.first_failure == without.first_failure == "Functional_leaky_relu_0_forward_output"
    drop = ("NPU_Stack_Info",)
    strip = [[{k: v for k, v in row.items() if k not in drop} for row in rows_of(outcome.csv_path)]
             for outcome in (with_key, without)]
    assert strip[0] == strip[1]


def test_parse_names_nearby_calls(runs, tmp_path):
    """The compare guide's ``ptdbg parse PKL Torch_batch_norm_0_forward``: F.batch_norm is dumped as
    Functional_batch_norm; the absent name exits 2 naming it, the right one prints its stack."""
    result = cli(["parse", runs["pkl"], "Torch_batch_norm_0_forward"], tmp_path)
    assert result.returncode == 2
    assert result.stderr == ("ptdbg parse: error: Invalid module_name_prefix='Torch_batch_norm_0_forward': no call "
                             "of that name in {}. Nearby names in the dump: Functional_batch_norm_0_forward, "
                             "Functional_batch_norm_0_backward.\n".format(runs["pkl"]))
    result = cli(["parse", runs["pkl"], "Functional_batch_norm_0_forward"], tmp_path)
    assert result.returncode == 0, result.stderr
    assert "Trace back(Functional_batch_norm_0_forward):" in result.stdout
    assert "[Functional_batch_norm_0_forward_input.0][dtype: torch.float32][shape: [2, 4, 4, 4]]" in result.stdout
    result = cli(["parse", os.path.join(runs["base"], "dump.json"), "Functional.batch_norm.0.forward"], tmp_path)
    assert result.returncode == 2
    assert "The dump names calls the legacy way: Functional_batch_norm_0_forward." in result.stderr


NO_OPENPYXL = '''
import sys
sys.modules["openpyxl"] = None  # as if it were not installed
from ptdbg_ascend.comparison.api import compare
from ptdbg_ascend.errors import ParameterError
param = {"npu_path": sys.argv[1], "bench_path": sys.argv[2], "is_print_compare_log": False}
try:
    compare(param, sys.argv[3])
except ParameterError as error:
    print("REFUSED", error)
outcome = compare(param, sys.argv[3], xlsx=False)
print("CSV", outcome.csv_path, outcome.xlsx_path)
'''


def test_compare_runs_without_openpyxl(runs, tmp_path):
    """openpyxl is needed only for the .xlsx: without it compare(xlsx=False) (ptdbg compare --no-xlsx) writes
    the CSV and the advisor; with xlsx=True it is refused before anything is written."""
    script = tmp_path / "no_openpyxl.py"
    script.write_text(NO_OPENPYXL)
    out = tmp_path / "out"
    result = subprocess.run([sys.executable, str(script), os.path.join(runs["planted"], "dump.json"),
                             os.path.join(runs["base"], "dump.json"), str(out)], capture_output=True, text=True,
                            env=env(), timeout=300)
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stdout.splitlines() if line.startswith(("REFUSED", "CSV"))]
    assert lines[0] == ("REFUSED Invalid xlsx=True: writing the .xlsx needs openpyxl, which is not installed. Install "
                        "it (pip install openpyxl), or pass xlsx=False (ptdbg compare --no-xlsx) for the CSV alone.")
    assert lines[1].startswith(f"CSV {out}") and lines[1].endswith(" None")
    assert sorted(name.rsplit("_", 1)[0] + os.path.splitext(name)[1] for name in os.listdir(str(out))) == \
        ["advisor.txt", "compare_finding.json", "compare_report.html", "compare_result.csv"]  # no .xlsx; the page needs none
