"""run_ut on the reference model's dumps (conftest ``model_dumps``): clean run, planted inaccurate gelu,
resume after SIGKILL, bad input, random data, filter_same, save_error_data, the CLI."""

from __future__ import annotations

import csv
import json
import os
import shutil
import signal
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

from ptdbg_ascend.cli import main as ptdbg  # noqa: E402
from ptdbg_ascend.errors import FileFormatError, ParameterError  # noqa: E402
from ptdbg_ascend.precheck.run_ut import run_ut  # noqa: E402

RESULT_HEADER = ["API name", "Forward Test Success", "Backward Test Success", "Message"]
# the APIs of the reference model that cannot be re-run: dropout is random
EXPECTED_SKIPS = {"Functional.dropout.0": "Random API Functional.dropout"}


def read_csv(path):
    with open(path, encoding="utf-8-sig", newline="") as handle:
        return list(csv.reader(handle))


def csv_files(directory):
    return sorted(name for name in os.listdir(str(directory)) if name.endswith(".csv"))


def report(outcome):
    print(outcome.summary())
    for name, reason in outcome.skipped:
        print("SKIP", name, reason)


def test_clean_model_every_rerunnable_api_passes(model_dumps, tmp_path):
    outcome = run_ut(model_dumps["clean"], str(tmp_path), progress=False)
    report(outcome)
    false_alarms = [f.name for f in outcome.failures]
    assert false_alarms == []  # goal and result: 0 false alarms
    assert dict(outcome.skipped).keys() == EXPECTED_SKIPS.keys()
    for name, reason in outcome.skipped:
        assert reason.startswith(EXPECTED_SKIPS[name])
    # one transformer block + CNN forward/backward + one AdamW step over 14 parameters
    assert outcome.counts["pass"] > 150 and outcome.counts.get("error", 0) == 0 and outcome.counts["SKIP"] == 1
    results = read_csv(outcome.result_csv)
    assert results[0] == RESULT_HEADER
    assert ["Functional.linear.0", "pass", "pass", ""] in results
    assert ["Functional.dropout.0", "SKIP", "SKIP",
            "Random API Functional.dropout: two runs draw different numbers, it is not compared."] in results
    names = [row[0] for row in read_csv(outcome.details_csv)[1:]]
    # layer_norm(x, [16], weight, bias, eps): tensor inputs x, weight, bias (numbered as the dump's backward
    # output block: one per tensor input); x needs no grad in the first block, so no row .backward.output.0
    assert names[:4] == ["Functional.layer_norm.0.forward.output.0", "Functional.layer_norm.0.backward.output.1",
                         "Functional.layer_norm.0.backward.output.2", "Functional.linear.0.forward.output.0"]
    assert "Tensor.chunk.0.forward.output.2" in names
    assert os.path.basename(outcome.result_csv).replace("result", "details") == os.path.basename(outcome.details_csv)


def test_planted_inaccurate_gelu_is_named_forward_and_backward_only(model_dumps, tmp_path, planted_gelu):
    outcome = run_ut(model_dumps["planted"], str(tmp_path), progress=False)
    report(outcome)
    assert [(f.name, f.forward, f.backward) for f in outcome.failures] == [("Functional.gelu.0", "error", "error")]
    assert outcome.failures[0].code_line.endswith("torch.nn.functional.gelu(self.ff1(self.ln2(x))))")
    assert "precheck_model.py:" in outcome.failures[0].code_line
    summary = outcome.summary()
    assert "error   Functional.gelu.0  forward error / backward error" in summary
    details = {row[0]: row for row in read_csv(outcome.details_csv)[1:]}
    assert details["Functional.gelu.0.forward.output.0"][21] == "error"
    assert details["Functional.gelu.0.backward.output.0"][21] == "error"


def test_dumped_outputs_mode_judges_the_dump_itself(model_dumps, tmp_path):
    outcome = run_ut(model_dumps["planted"], str(tmp_path), progress=False, dumped_outputs=True,
                     white_list=["gelu", "linear"])
    report(outcome)
    # the dump's own gelu outputs were computed through bfloat16: named without re-running the planted gelu
    assert [(f.name, f.forward, f.backward) for f in outcome.failures] == [("Functional.gelu.0", "error", "error")]
    assert outcome.counts == {"pass": 5, "error": 1}


def test_random_data_on_a_statistics_dump_is_reproducible(model_dumps, tmp_path):
    runs = {}
    for name, seed in (("a", 5), ("b", 5), ("c", 6)):
        outcome = run_ut(model_dumps["statistics"], str(tmp_path / name), progress=False, seed=seed,
                         white_list=["linear", "layer_norm", "softmax", "matmul", "relu", "conv2d"])
        assert outcome.random_data
        runs[name] = (read_csv(outcome.result_csv), read_csv(outcome.details_csv))
    assert runs["a"] == runs["b"]
    assert runs["a"][0] == runs["c"][0] and runs["a"][1] != runs["c"][1]  # same verdicts, other numbers
    assert len(runs["a"][0]) == 1 + 5 + 2 + 1 + 2 + 1 + 1  # linear x5, layer_norm x2, softmax, matmul x2, relu, conv2d
    assert all(row[1] == "pass" for row in runs["a"][0][1:])


def test_random_data_false_on_a_statistics_dump_is_refused(model_dumps, tmp_path):
    with pytest.raises(ParameterError, match="random_data"):
        run_ut(model_dumps["statistics"], str(tmp_path), progress=False, random_data=False)
    assert os.listdir(str(tmp_path)) == []


def test_filter_same_keeps_the_first_of_identical_calls(model_dumps, tmp_path):
    rank = tmp_path / "rank"
    shutil.copytree(os.path.dirname(model_dumps["clean"]), str(rank))
    dump = json.loads((rank / "dump.json").read_text())
    data = dump["data"]
    twin = json.loads(json.dumps(data["Functional.linear.0.forward"]))
    twin["input_args"][0]["Max"] = 123.0  # differs in Max/Min only: the same call for -f
    twin["input_args"][0]["Min"] = -123.0
    other = json.loads(json.dumps(data["Functional.linear.0.forward"]))
    other["input_args"][0]["Mean"] = 0.5  # differs in Mean: another call
    data["Functional.linear.90.forward"] = twin
    data["Functional.linear.91.forward"] = other
    (rank / "dump.json").write_text(json.dumps(dump))
    filtered = run_ut(str(rank / "dump.json"), str(tmp_path / "f"), progress=False, filter_same=True,
                      white_list=["Functional.linear"])
    unfiltered = run_ut(str(rank / "dump.json"), str(tmp_path / "u"), progress=False, white_list=["linear"])
    names = [row[0] for row in read_csv(filtered.result_csv)[1:]]
    assert "Functional.linear.90" not in names and "Functional.linear.91" in names and len(names) == 6
    assert len(read_csv(unfiltered.result_csv)) == 1 + 7


def test_black_list_wins_over_white_list(model_dumps, tmp_path):
    outcome = run_ut(model_dumps["clean"], str(tmp_path), progress=False, white_list=["linear", "gelu"],
                     black_list=["Functional.linear"])
    assert [row[0] for row in read_csv(outcome.result_csv)[1:]] == ["Functional.gelu.0"]


def test_save_error_data_writes_failing_apis_only(model_dumps, tmp_path, planted_gelu):
    errors = tmp_path / "errors"
    errors.mkdir()
    outcome = run_ut(model_dumps["planted"], str(tmp_path / "out"), progress=False, save_error_data=True,
                     error_data_path=str(errors), white_list=["gelu", "layer_norm"])
    directory = outcome.error_data_dir
    assert os.path.dirname(directory) == str(errors)
    assert os.path.basename(directory).startswith("ut_error_data")
    assert sorted(os.listdir(directory)) == [
        "Functional.gelu.0.backward.input.0.pt", "Functional.gelu.0.backward.output.bench.0.pt",
        "Functional.gelu.0.backward.output.device.0.pt", "Functional.gelu.0.forward.input.0.pt",
        "Functional.gelu.0.forward.output.bench.0.pt", "Functional.gelu.0.forward.output.device.0.pt"]
    bench = torch.load(os.path.join(directory, "Functional.gelu.0.forward.output.bench.0.pt"), weights_only=True)
    device = torch.load(os.path.join(directory, "Functional.gelu.0.forward.output.device.0.pt"), weights_only=True)
    assert bench.dtype == torch.float64 and device.dtype == torch.float32 and bench.shape == (2, 5, 32)


# --- resume ---------------------------------------------------------------------------------------------

KILLER = """
import os, signal, sys
from ptdbg_ascend.precheck import execution
real = execution.execute
count = [0]
def execute(*args, **kwargs):
    count[0] += 1
    if count[0] == {kill_at}:
        os.kill(os.getpid(), signal.SIGKILL)  # mid-run: the API in flight is lost
    return real(*args, **kwargs)
execution.execute = execute
from ptdbg_ascend.cli import main
sys.exit(main(sys.argv[1:]))
"""
RESUME_LIST = ["linear", "layer_norm", "matmul", "softmax", "__add__"]


def test_resume_after_sigkill_gives_the_uninterrupted_csvs(model_dumps, tmp_path, child_env):
    whole = run_ut(model_dumps["clean"], str(tmp_path / "whole"), progress=False, white_list=RESUME_LIST)
    script = tmp_path / "killer.py"
    script.write_text(KILLER.format(kill_at=7))
    out = tmp_path / "resumed"
    process = subprocess.run([sys.executable, str(script), "run-ut", "-api_info", model_dumps["clean"], "-o", str(out),
                              "--no-progress", "-white_list"] + RESUME_LIST,
                             env=child_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120)
    assert process.returncode == -signal.SIGKILL, process.stdout.decode(errors="replace")
    result_name, details_name = [n for n in csv_files(out) if "result" in n], [n for n in csv_files(out) if "details" in n]
    result = str(out / result_name[0])
    assert len(read_csv(result)) == 1 + 6  # six APIs finished before the kill
    with open(result, "ab") as handle:  # and a kill in the middle of writing a line, inside a character
        handle.write("Functional.linear.9,pa精".encode()[:-1])
    resumed = run_ut(model_dumps["clean"], progress=False, result_csv_path=result, white_list=RESUME_LIST)
    assert resumed.result_csv == result and os.path.basename(resumed.details_csv) == details_name[0]
    assert resumed.apis_resumed == 6 and resumed.apis_run == len(read_csv(whole.result_csv)) - 1 - 6
    assert read_csv(resumed.result_csv) == read_csv(whole.result_csv)
    assert read_csv(resumed.details_csv) == read_csv(whole.details_csv)
    assert csv_files(out) == sorted(result_name + details_name)  # appended, no new pair


def test_resume_drops_details_rows_of_the_api_in_flight(model_dumps, tmp_path):
    whole = run_ut(model_dumps["clean"], str(tmp_path / "whole"), progress=False, white_list=["linear"])
    partial = run_ut(model_dumps["clean"], str(tmp_path / "part"), progress=False, white_list=["linear"])
    results, details = read_csv(partial.result_csv), read_csv(partial.details_csv)
    # as if killed after the details rows of linear.2 and before its result row
    with open(partial.result_csv, "w", encoding="utf-8-sig", newline="") as handle:
        csv.writer(handle).writerows(results[:3])
    resumed = run_ut(model_dumps["clean"], progress=False, result_csv_path=partial.result_csv, white_list=["linear"])
    assert resumed.apis_run == 3
    assert read_csv(resumed.details_csv) == read_csv(whole.details_csv) == details


# --- bad input: clear messages, nothing written ------------------------------------------------------

def test_bad_inputs_are_clear_and_write_nothing(model_dumps, tmp_path):
    out = tmp_path / "out"
    corrupt = tmp_path / "corrupt" / "dump.json"
    corrupt.parent.mkdir()
    corrupt.write_text(open(model_dumps["clean"]).read()[:5000])
    cases = [
        (dict(api_info=str(tmp_path / "none.json")), FileFormatError, "does not exist"),
        (dict(api_info=str(corrupt)), FileFormatError, "is not valid JSON"),
        (dict(api_info=model_dumps["clean"], white_list=["gelu", "no_such_api"]), ParameterError,
         "not in the wrap list: no_such_api"),
        (dict(api_info=model_dumps["clean"], black_list=["Functional.matmul"]), ParameterError,
         "not in the wrap list: Functional.matmul"),
        (dict(api_info=model_dumps["clean"], save_error_data=True, error_data_path=str(tmp_path / "missing")),
         ParameterError, "error_data_path=.*must be an existing directory"),
        (dict(api_info=model_dumps["clean"], result_csv_path=str(tmp_path / "accuracy_checking_result_1.csv")),
         ParameterError, "result_csv_path"),
        (dict(api_info=model_dumps["clean"], device="cuda:7"), ParameterError, "device"),
    ]
    for kwargs, error, message in cases:
        with pytest.raises(error, match=message):
            run_ut(out_path=str(out), progress=False, **kwargs)
    assert not out.exists() or os.listdir(str(out)) == []


def test_tensors_missing_from_the_dump(model_dumps, tmp_path):
    rank = tmp_path / "rank"
    shutil.copytree(os.path.dirname(model_dumps["clean"]), str(rank))
    os.remove(str(rank / "dump_tensor_data" / "Functional.gelu.0.forward.input.0.pt"))
    dump = json.loads((rank / "dump.json").read_text())
    dump["dump_data_dir"] = str(rank / "dump_tensor_data")  # as if dumped here (the original's dir exists)
    (rank / "dump.json").write_text(json.dumps(dump))
    outcome = run_ut(str(rank / "dump.json"), str(tmp_path / "one"), progress=False, white_list=["gelu", "softmax"])
    results = {row[0]: row for row in read_csv(outcome.result_csv)[1:]}
    assert results["Torch.softmax.0"][1:3] == ["pass", "pass"]
    assert results["Functional.gelu.0"][1:3] == ["SKIP", "SKIP"]
    assert "Functional.gelu.0.forward.input.0.pt is missing from the dump" in results["Functional.gelu.0"][3]
    shutil.rmtree(str(rank / "dump_tensor_data"))
    with pytest.raises(FileFormatError,
                       match=r"names tensor files, but their directory \S+dump_tensor_data is missing"):
        run_ut(str(rank / "dump.json"), str(tmp_path / "all"), progress=False)
    assert not (tmp_path / "all").exists()


# --- CLI ---------------------------------------------------------------------------------------------------

def test_cli_exit_status_and_msprobe_spellings(model_dumps, tmp_path, capsys, planted_gelu):
    assert ptdbg(["run-ut", "--api_info_file", model_dumps["clean"], "--out_path", str(tmp_path / "a"),
                  "--filter_api", "--no-progress", "-white_list", "linear", "softmax"]) == 0
    assert "run_ut: 6 APIs: 6 pass, 0 warning, 0 error, 0 SKIP" in capsys.readouterr().out
    assert ptdbg(["run-ut", "-api_info", model_dumps["planted"], "-o", str(tmp_path / "b"), "--no-progress",
                  "-white_list", "gelu"]) == 1
    printed = capsys.readouterr().out
    assert "Functional.gelu.0" in printed and "precheck_model.py:" in printed
    assert ptdbg(["run-ut", "-api_info", model_dumps["clean"], "-o", str(tmp_path / "c"),
                  "-white_list", "nope"]) == 2
    error = capsys.readouterr().err
    assert error.startswith("ptdbg run-ut: error: Invalid white_list=['nope']") and error.count("\n") == 1
    resumed = [n for n in csv_files(tmp_path / "a") if "result" in n][0]
    assert ptdbg(["run-ut", "-api_info", model_dumps["clean"], "--result_csv_path", str(tmp_path / "a" / resumed),
                  "--no-progress", "-white_list", "linear", "softmax"]) == 0
    assert "0 run now" in capsys.readouterr().out
    # the judge's api_precision_compare behind the command: a softmax run against itself is no error
    assert ptdbg(["run-ut", "-api_info", model_dumps["clean"], "-o", str(tmp_path / "s"), "--no-progress",
                  "-white_list", "softmax"]) == 0
    details = [n for n in csv_files(tmp_path / "s") if "details" in n][0]
    assert ptdbg(["api-precision-compare", "-npu", str(tmp_path / "s" / details), "-gpu",
                  str(tmp_path / "s" / details), "-o", str(tmp_path / "cmp")]) == 0
    assert sorted(n.split("_2")[0] for n in csv_files(tmp_path / "cmp")) == [
        "api_precision_compare_details", "api_precision_compare_result"]


def test_cli_config_json_run_ut_section(model_dumps, tmp_path, capsys):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"task": "run_ut", "run_ut": {"white_list": ["softmax"],
                                                               "error_data_path": str(tmp_path)}}))
    assert ptdbg(["run-ut", "-api_info", model_dumps["clean"], "-o", str(tmp_path / "o"), "-config", str(config),
                  "--no-progress"]) == 0
    assert "run_ut: 1 APIs: 1 pass" in capsys.readouterr().out
