"""A resume CSV must be the run's own: the run file records the dump.json's fingerprint and is checked on
resume (another dump, a missing or corrupt run file: refused), the CSVs must be regular files (a symlink,
a FIFO or a directory is refused before anything is opened), and one writer at a time holds the lock
(two resumes started at the same moment: exactly one proceeds, no duplicated row)."""

from __future__ import annotations

import csv
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time

import pytest

torch = pytest.importorskip("torch")

from ptdbg_ascend.errors import FileFormatError, ParameterError  # noqa: E402
from ptdbg_ascend.precheck import ut_lock  # noqa: E402
from ptdbg_ascend.precheck.multi_run_ut import multi_run_ut  # noqa: E402
from ptdbg_ascend.precheck.run_ut import run_ut  # noqa: E402

SHORT = ["linear", "softmax"]  # 6 calls of the reference model


def read_csv(path):
    with open(path, encoding="utf-8-sig", newline="") as handle:
        return list(csv.reader(handle))


def read_bytes(path):
    with open(path, "rb") as handle:
        return handle.read()


def run_file_of(result_csv):
    directory, name = os.path.split(result_csv)
    return os.path.join(directory, "accuracy_checking_run_" + name[len("accuracy_checking_result_"):-4] + ".jsonl")


def partial_run(dump, directory, white_list=SHORT, keep=2):
    """A run cut after ``keep`` APIs (as if killed): its result CSV path."""
    outcome = run_ut(dump, str(directory), progress=False, white_list=white_list)
    rows = read_csv(outcome.result_csv)
    with open(outcome.result_csv, "w", encoding="utf-8-sig", newline="") as handle:
        csv.writer(handle).writerows(rows[:1 + keep])
    return outcome.result_csv


# --- the fingerprint ---------------------------------------------------------------------------------------

def test_a_new_pair_records_the_dump_fingerprint(model_dumps, tmp_path):
    outcome = run_ut(model_dumps["clean"], str(tmp_path), progress=False, white_list=SHORT, seed=7)
    with open(run_file_of(outcome.result_csv), encoding="utf-8") as handle:
        lines = handle.read().splitlines()
    record = json.loads(lines[0])
    data = read_bytes(model_dumps["clean"])
    assert record["format"] == "ptdbg_ascend run_ut run" and record["version"] == 2
    assert record["dump"] == {"path": os.path.abspath(model_dumps["clean"]), "size": len(data),
                              "sha256": hashlib.sha256(data).hexdigest()}
    assert (record["inputs"], record["outputs"], record["seed"]) == ("dumped tensors", "re-run outputs", 7)
    assert record["pair"] == os.path.basename(outcome.result_csv)[len("accuracy_checking_result_"):-len(".csv")]
    assert len(record["nonce"]) == 32
    # then one line per API, in the order of the result CSV, each the chain digest of its rows
    names = [row[0] for row in read_csv(outcome.result_csv)[1:]]
    apis = [json.loads(line) for line in lines[1:]]
    assert [api["api"] for api in apis] == names and len(names) == 6
    chain = hashlib.sha256(lines[0].encode("utf-8")).hexdigest()
    details = read_csv(outcome.details_csv)[1:]
    for api, row in zip(apis, read_csv(outcome.result_csv)[1:]):
        rows = [d for d in details if d[0].startswith(row[0] + ".")]
        chain = hashlib.sha256(chain.encode() + b"\n" + json.dumps([row, rows], ensure_ascii=False,
                                                                   separators=(",", ":")).encode()).hexdigest()
        assert api["chain"] == chain
    # the CSVs keep msprobe 1.0.4's columns: nothing of this is in them
    assert read_csv(outcome.result_csv)[0] == ["API name", "Forward Test Success", "Backward Test Success", "Message"]


def test_resume_with_another_dump_is_refused_and_touches_nothing(model_dumps, tmp_path):
    result = partial_run(model_dumps["clean"], tmp_path)
    details = result.replace("result", "details")
    before = read_bytes(result), read_bytes(details)
    with pytest.raises(ParameterError) as caught:
        run_ut(model_dumps["planted"], progress=False, result_csv_path=result, white_list=SHORT)
    message = str(caught.value)
    assert message.startswith(f"Invalid result_csv_path={result!r}: must be a run of the same dump.json.")
    assert os.path.abspath(model_dumps["clean"]) in message and model_dumps["planted"] in message
    assert f"Resume with -api_info {os.path.abspath(model_dumps['clean'])}" in message
    assert (read_bytes(result), read_bytes(details)) == before
    with pytest.raises(ParameterError, match="must be a run of the same dump.json"):
        multi_run_ut(model_dumps["planted"], n=1, progress=False, result_csv_path=result, white_list=SHORT)
    assert (read_bytes(result), read_bytes(details)) == before


def test_the_same_dump_moved_elsewhere_resumes(model_dumps, tmp_path):
    result = partial_run(model_dumps["clean"], tmp_path / "out")
    moved = tmp_path / "moved"
    shutil.copytree(os.path.dirname(model_dumps["clean"]), str(moved))
    resumed = run_ut(str(moved / "dump.json"), progress=False, result_csv_path=result, white_list=SHORT)
    assert resumed.apis_resumed == 2 and resumed.apis_run == 4
    assert len({row[0] for row in read_csv(result)[1:]}) == 6


def test_resume_run_another_way_is_refused(model_dumps, tmp_path):
    result = partial_run(model_dumps["clean"], tmp_path)
    with pytest.raises(ParameterError, match=r"resumed the way it was started. Its APIs were checked with dumped "
                                             r"tensors, this run would use random data"):
        run_ut(model_dumps["clean"], progress=False, result_csv_path=result, white_list=SHORT, random_data=True)
    with pytest.raises(ParameterError, match=r"checked with re-run outputs, this run would use dumped outputs"):
        run_ut(model_dumps["clean"], progress=False, result_csv_path=result, white_list=SHORT, dumped_outputs=True)
    # the seed is not part of the identity
    assert run_ut(model_dumps["clean"], progress=False, result_csv_path=result, white_list=SHORT, seed=99).apis_run == 4


def test_missing_or_corrupt_run_file_is_a_clear_error(model_dumps, tmp_path):
    result = partial_run(model_dumps["clean"], tmp_path)
    run_file = run_file_of(result)
    saved = read_bytes(run_file)
    os.remove(run_file)  # as a pair written before the run file existed
    with pytest.raises(ParameterError) as caught:
        run_ut(model_dumps["clean"], progress=False, result_csv_path=result, white_list=SHORT)
    assert "Invalid result_csv_path=" in str(caught.value)
    assert f"{run_file} is missing: the CSVs were written before ptdbg_ascend recorded which dump.json" \
        in str(caught.value)
    assert "Start a new run" in str(caught.value)
    for bad, expected in ((b"{\"format\": ", "is not valid JSON"),
                          (b"", "is empty"),
                          (b"{\"format\": \"other\", \"version\": 2}\n", "is not a run_ut run file of format"),
                          (saved.replace(b"\"size\"", b"\"sighs\""), "is not a run_ut run file of format")):
        with open(run_file, "wb") as handle:
            handle.write(bad)
        with pytest.raises(FileFormatError, match=expected) as caught:
            run_ut(model_dumps["clean"], progress=False, result_csv_path=result, white_list=SHORT)
        assert run_file in str(caught.value)
    os.remove(run_file)
    os.symlink(str(tmp_path / "elsewhere.json"), run_file)
    with pytest.raises(FileFormatError, match="is a symlink"):
        run_ut(model_dumps["clean"], progress=False, result_csv_path=result, white_list=SHORT)
    assert not os.path.exists(str(tmp_path / "elsewhere.json"))
    assert len(read_csv(result)) == 3  # never rewritten


def test_run_file_format_and_version_are_checked_on_load(tmp_path):
    """The run file says what it is: another format name or version is refused, naming the file and both."""
    from ptdbg_ascend.precheck import ut_identity

    path = str(tmp_path / "accuracy_checking_run_1.jsonl")
    identity = ut_identity.RunIdentity("/d/dump.json", 12, "ab" * 32, "dumped tensors", "re-run outputs", 3)
    ut_identity.write(path, identity, "1")
    assert ut_identity.read(path, "r.csv") == ut_identity.RunIdentity("/d/dump.json", 12, "ab" * 32, "dumped tensors",
                                                                      "re-run outputs", 3, pair="1")
    saved = json.loads(read_bytes(path))
    for changed, found in (({"version": 1}, "format 'ptdbg_ascend run_ut run' version 1"),
                           ({"format": "ptdbg_ascend.finding"}, "format 'ptdbg_ascend.finding' version 2")):
        with open(path, "w") as handle:
            handle.write(json.dumps(dict(saved, **changed)) + "\n")
        with pytest.raises(FileFormatError) as caught:
            ut_identity.read(path, "r.csv")
        assert str(caught.value).startswith("The run file {} is not a run_ut run file of format "
                                            "'ptdbg_ascend run_ut run' version 2 (ValueError: {})".format(path, found))


@pytest.mark.parametrize("field, literal, said", [
    ("size", "1e400", "its dump size <1e400, beyond float64's range> is not a number of bytes"),
    ("size", "1" + "0" * 400, "its dump size <a 401-digit integer, beyond float64's range> is not a number of bytes"),
    ("size", "12.5", "its dump size 12.5 is not a number of bytes"),
    ("size", "true", "its dump size True is not a number of bytes"),
    ("size", "-1", "its dump size -1 is not a number of bytes"),
    ("seed", "1e400", "its seed <1e400, beyond float64's range> is not an integer"),
], ids=["size-1e400", "size-400-digits", "size-12.5", "size-true", "size--1", "seed-1e400"])
def test_run_file_numbers_of_the_wrong_kind_are_refused(tmp_path, field, literal, said):
    """Before: "size": 1e400 raised OverflowError from int() (a traceback); 12.5 and true were read as 12 and 1."""
    from ptdbg_ascend.precheck import ut_identity

    path = str(tmp_path / "accuracy_checking_run_1.json")
    ut_identity.write(path, ut_identity.RunIdentity("/d/dump.json", 12, "ab" * 32, "dumped tensors",
                                                    "re-run outputs", 3), "")
    text = read_bytes(path).decode()
    text = text.replace('"size": 12', '"size": ' + literal) if field == "size" else \
        text.replace('"seed": 3', '"seed": ' + literal)
    with open(path, "w") as handle:
        handle.write(text)
    with pytest.raises(FileFormatError) as caught:
        ut_identity.read(path, "r.csv")
    assert str(caught.value).startswith("The run file {} is not a run_ut run file of format 'ptdbg_ascend run_ut "
                                        "run' version 2 (ValueError: {})".format(path, said)), str(caught.value)


# --- regular files only -----------------------------------------------------------------------------------

def test_a_symlinked_csv_is_refused_and_stays_a_link(model_dumps, tmp_path):
    result = partial_run(model_dumps["clean"], tmp_path / "real")
    name = os.path.basename(result)
    before = read_bytes(result)
    links = tmp_path / "links"
    links.mkdir()
    for real in (result, result.replace("result", "details"), run_file_of(result)):
        os.symlink(real, str(links / os.path.basename(real)))
    with pytest.raises(ParameterError, match=r": an existing .* both regular files. .*{} is a symlink \(to {}\)"
                       .format(name, result)):
        run_ut(model_dumps["clean"], progress=False, result_csv_path=str(links / name), white_list=SHORT)
    assert os.path.islink(str(links / name)) and read_bytes(result) == before
    assert sorted(os.listdir(str(links))) == sorted(os.path.basename(p) for p in
                                                    (result, result.replace("result", "details"), run_file_of(result)))
    # the result CSV itself, its details CSV a link: refused the same way
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    shutil.copy(result, str(mixed / name))
    shutil.copy(run_file_of(result), str(mixed))
    details_name = name.replace("result", "details")
    os.symlink(result.replace("result", "details"), str(mixed / details_name))
    with pytest.raises(ParameterError, match=f"{details_name} is a symlink"):
        run_ut(model_dumps["clean"], progress=False, result_csv_path=str(mixed / name), white_list=SHORT)
    assert os.path.islink(str(mixed / details_name))


def test_a_fifo_or_directory_named_like_a_result_csv_is_refused_at_once(model_dumps, tmp_path, child_env):
    fifo = tmp_path / "accuracy_checking_result_20240101000000.csv"
    os.mkfifo(str(fifo))
    code = ("from ptdbg_ascend.precheck.run_ut import run_ut\n"
            "try:\n    run_ut({!r}, progress=False, result_csv_path={!r})\n"
            "except Exception as error:\n    print(error)\n").format(model_dumps["clean"], str(fifo))
    started = time.time()
    process = subprocess.run([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             timeout=60, env=child_env)
    text = process.stdout.decode()
    assert f"{fifo} is a FIFO." in text, text
    assert time.time() - started < 30  # refused, not blocked opening the FIFO
    directory = tmp_path / "d" / "accuracy_checking_result_20240101000000.csv"
    directory.mkdir(parents=True)
    with pytest.raises(ParameterError, match="is a directory"):
        run_ut(model_dumps["clean"], progress=False, result_csv_path=str(directory))


# --- one writer at a time -----------------------------------------------------------------------------------

def test_a_held_lock_refuses_a_resume_naming_the_holder(model_dumps, tmp_path):
    result = partial_run(model_dumps["clean"], tmp_path)
    lock = ut_lock.acquire(result)
    try:
        with pytest.raises(ParameterError) as caught:
            run_ut(model_dumps["clean"], progress=False, result_csv_path=result, white_list=SHORT)
        message = str(caught.value)
        assert "must not be in use by another run" in message
        assert f"(pid {os.getpid()} on host " in message
        assert os.path.join(str(tmp_path), "." + os.path.basename(result) + ".lock") in message
    finally:
        lock.release()
    assert len(read_csv(result)) == 3  # untouched while refused
    assert run_ut(model_dumps["clean"], progress=False, result_csv_path=result, white_list=SHORT).apis_run == 4


RESUMER = """
import os, sys, time
ready, go = sys.argv[1], sys.argv[2]
from ptdbg_ascend.cli import main  # torch and the pre-check imported before the start line
import ptdbg_ascend.precheck.execution, ptdbg_ascend.precheck.judge
open(ready, "w").close()
while not os.path.exists(go):
    time.sleep(0.002)
sys.exit(main(sys.argv[3:]))
"""


def test_two_resumes_started_at_the_same_moment_exactly_one_proceeds(model_dumps, tmp_path, child_env):
    result = partial_run(model_dumps["clean"], tmp_path / "out", white_list=["layer_norm"], keep=1)
    script = tmp_path / "resumer.py"
    script.write_text(RESUMER)
    go = tmp_path / "go"
    processes = []
    for number in range(2):
        ready = tmp_path / f"ready{number}"
        processes.append((ready, subprocess.Popen(
            [sys.executable, str(script), str(ready), str(go), "run-ut", "-api_info", model_dumps["clean"],
             "-csv_path", result, "--no-progress"],
            env=child_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)))
    deadline = time.time() + 120
    while not all(ready.exists() for ready, _ in processes):
        assert time.time() < deadline and all(p.poll() is None for _, p in processes)
        time.sleep(0.01)
    go.write_text("")  # both start now
    outputs = [(p.wait(timeout=300), p.stdout.read().decode(), p.stderr.read().decode()) for _, p in processes]
    codes = sorted(code for code, _, _ in outputs)
    assert codes == [0, 2], outputs
    winner = [p for (_, p), out in zip(processes, outputs) if out[0] == 0][0]
    loser_error = [err for code, _, err in outputs if code == 2][0]
    assert loser_error.startswith("ptdbg run-ut: error: Invalid result_csv_path={!r}: must not be in use by another "
                                  "run. Another run_ut/multi_run_ut writes it right now (pid {} on host "
                                  .format(result, winner.pid)), loser_error
    assert loser_error.count("\n") == 1
    names = [row[0] for row in read_csv(result)[1:]]
    assert len(names) == len(set(names)) == 190  # every API of the dump once: no row appended twice
    details = [row[0] for row in read_csv(result.replace("result", "details"))[1:]]
    assert len(details) == len(set(details))


def test_torchrun_rank0_checks_the_fingerprint_too(model_dumps, tmp_path, child_env):
    result = partial_run(model_dumps["clean"], tmp_path / "out")
    before = read_bytes(result)
    process = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                              "-m", "ptdbg_ascend.cli", "multi-run-ut", "-api_info", model_dumps["planted"],
                              "-csv_path", result, "-n", "1", "--no-progress", "-white_list"] + SHORT,
                             env=child_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120,
                             cwd=str(tmp_path))
    text = process.stdout.decode(errors="replace")
    assert process.returncode != 0, text
    assert f"ptdbg multi-run-ut: error: Invalid result_csv_path={result!r}: must be a run of the same dump.json" in text
    assert "multi_run_ut: rank 0 could not start" in text  # rank 1 stops too, naming rank 0's reason
    assert read_bytes(result) == before


# --- the run file belongs to these CSVs ----------------------------------------------------------------------

def test_csvs_of_another_dump_under_this_runs_run_file_are_refused(model_dumps, tmp_path, child_env):
    """The CSVs of a run of the clean dump, with the run file of a run of the planted dump put beside them
    (renamed to their tail): the fingerprint says "planted", the rows are the clean run's. Resumed with the
    planted dump, the two runs would be mixed in one report, exit status 0."""
    clean = partial_run(model_dumps["clean"], tmp_path)
    planted = partial_run(model_dumps["planted"], tmp_path)  # the same directory: another tail
    shutil.copy(run_file_of(planted), run_file_of(clean))
    before = read_bytes(clean), read_bytes(clean.replace("result", "details"))
    done = subprocess.run([sys.executable, "-m", "ptdbg_ascend.cli", "run-ut", "-api_info", model_dumps["planted"],
                           "-csv_path", clean, "--no-progress", "-white_list"] + SHORT,
                          capture_output=True, text=True, timeout=300,
                          env=child_env)
    assert done.returncode == 2, (done.returncode, done.stdout[-1500:], done.stderr[-1500:])
    assert done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("ptdbg run-ut: error: Invalid result_csv_path={!r}: must be resumed with the "
                                  "run file written with it.".format(clean)), done.stderr
    assert "was written for accuracy_checking_result_{}".format(
        os.path.basename(planted)[len("accuracy_checking_result_"):]) in done.stderr
    assert (read_bytes(clean), read_bytes(clean.replace("result", "details"))) == before


def test_a_forged_fingerprint_over_the_rows_of_another_dump_is_refused(model_dumps, tmp_path):
    """The run file of a clean run edited to name the planted dump (its size and SHA-256): the rows were
    checked from the clean dump, and the run file's record of them no longer matches what it claims."""
    clean = partial_run(model_dumps["clean"], tmp_path)
    data = read_bytes(model_dumps["planted"])
    with open(run_file_of(clean), encoding="utf-8") as handle:
        lines = handle.read().splitlines(True)
    record = json.loads(lines[0])
    record["dump"] = {"path": model_dumps["planted"], "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    with open(run_file_of(clean), "w", encoding="utf-8") as handle:
        handle.write(json.dumps(record, sort_keys=True) + "\n" + "".join(lines[1:]))
    before = read_bytes(clean)
    with pytest.raises(ParameterError) as caught:
        run_ut(model_dumps["planted"], progress=False, result_csv_path=clean, white_list=SHORT)
    message = str(caught.value)
    assert message.startswith("Invalid result_csv_path={!r}: must be resumed with the run file written with it."
                              .format(clean)), message
    assert "API 1 (Functional.linear.0) of the result CSV is not the one its run file records" in message
    assert read_bytes(clean) == before


def test_rows_of_another_run_appended_to_a_result_csv_are_refused(model_dumps, tmp_path):
    """Rows of a planted-dump run appended to a clean run's CSVs (another API than the ones it ran)."""
    clean = partial_run(model_dumps["clean"], tmp_path / "clean", white_list=["linear"], keep=2)
    planted = run_ut(model_dumps["planted"], str(tmp_path / "planted"), progress=False, white_list=["gelu"])
    for mine, theirs in ((clean, planted.result_csv),
                         (clean.replace("result", "details"), planted.details_csv)):
        with open(mine, "a", encoding="utf-8", newline="") as handle:
            csv.writer(handle).writerows(read_csv(theirs)[1:])
    with pytest.raises(ParameterError) as caught:
        run_ut(model_dumps["clean"], progress=False, result_csv_path=clean, white_list=["linear", "gelu"])
    assert "API 3 (Functional.gelu.0) of the result CSV is not the one its run file records" in str(caught.value)
    # the same CSVs and run file as they were: the 2 APIs of the clean run resume
    rows = read_csv(clean)[:3]
    with open(clean, "w", encoding="utf-8-sig", newline="") as handle:
        csv.writer(handle).writerows(rows)
    resumed = run_ut(model_dumps["clean"], progress=False, result_csv_path=clean, white_list=["linear", "gelu"])
    assert (resumed.apis_resumed, resumed.apis_run) == (2, 4)  # the other 3 linear calls, and gelu


@pytest.mark.parametrize("cut", ["line missing", "line torn"])
def test_the_last_api_without_its_run_file_line_is_run_again(model_dumps, tmp_path, cut, capsys):
    """Killed after an API's result row, before its run file line (whole or cut): that API is run again,
    and the resumed CSVs and run file are those of an uninterrupted run."""
    whole = run_ut(model_dumps["clean"], str(tmp_path / "whole"), progress=False, white_list=SHORT)
    result = partial_run(model_dumps["clean"], tmp_path / "cut")
    with open(run_file_of(result), encoding="utf-8") as handle:
        lines = handle.read().splitlines(True)
    kept = lines[:2] + ([lines[2][:20]] if cut == "line torn" else [])  # the first API recorded, not the second
    with open(run_file_of(result), "w", encoding="utf-8") as handle:
        handle.write("".join(kept))
    capsys.readouterr()
    resumed = run_ut(model_dumps["clean"], progress=False, result_csv_path=result, white_list=SHORT)
    assert (resumed.apis_resumed, resumed.apis_run) == (1, 5)
    assert "the last API, Torch.softmax.0, has its rows but no line in the run file yet" in capsys.readouterr().out
    assert read_csv(result) == read_csv(whole.result_csv)
    assert read_csv(result.replace("result", "details")) == read_csv(whole.details_csv)
    with open(run_file_of(result), encoding="utf-8") as handle:
        resumed_lines = handle.read().splitlines()
    with open(run_file_of(whole.result_csv), encoding="utf-8") as handle:
        whole_lines = handle.read().splitlines()
    assert resumed_lines[0] == lines[0].rstrip("\n") and len(resumed_lines) == 7
    assert [json.loads(line)["api"] for line in resumed_lines[1:]] == [json.loads(line)["api"] for line in whole_lines[1:]]
    # and it resumes again, every API recorded: nothing to run
    assert run_ut(model_dumps["clean"], progress=False, result_csv_path=result, white_list=SHORT).apis_run == 0
