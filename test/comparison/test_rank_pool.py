"""compare_distributed on worker processes (``workers``): the same reports and summary as in one process; a
corrupt rank is reported with its error while the others complete; a re-run resumes from the completion
records; bad ``workers`` values are refused."""

from __future__ import annotations

import csv
import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from ptdbg_ascend.comparison.api import compare_distributed
from ptdbg_ascend.errors import ParameterError

pytestmark = pytest.mark.torchfree

SLOW_CALLS = 10000  # a rank of 20,000 statistics rows: seconds to compare (the others: 3 calls)
QUIET = dict(is_print_compare_log=False, xlsx=False, html=False, rerun=False)
STAMP = re.compile(r"_\d{14}(_\d+)?")


def reports(out):
    """``{file name without its timestamp: bytes}`` of the per-pair CSVs, and the summary's rows likewise (the
    output directory named OUT)."""
    csvs = {STAMP.sub("", name): open(os.path.join(out, name), "rb").read() for name in os.listdir(out)
            if name.startswith("compare_result_")}
    summary = [name for name in os.listdir(out) if name.startswith("compare_summary_")]
    assert len(summary) == 1
    with open(os.path.join(out, summary[0]), newline="") as handle:
        return csvs, [[STAMP.sub("", cell.replace(out, "OUT")) for cell in row] for row in csv.reader(handle)]


def test_two_workers_write_what_one_process_writes(rank_dumps, tmp_path):
    npu = rank_dumps("npu", [0, 1, 2, 10], planted_rank=2)
    bench = rank_dumps("bench", [0, 1, 2, 10])
    one, two = str(tmp_path / "one"), str(tmp_path / "two")
    in_process = compare_distributed(npu, bench, one, workers=1, **QUIET)
    pooled = compare_distributed(npu, bench, two, workers=2, **QUIET)
    assert {o.csv_path for o in pooled} <= {os.path.join(two, name) for name in os.listdir(two)}
    assert reports(one) == reports(two)
    csvs, summary = reports(two)
    assert sorted(csvs) == [f"compare_result_rank{r}-rank{r}.csv" for r in (0, 1, 10, 2)]
    assert [row[:3] for row in summary[1:]] == [["rank0-rank0", "0", "passed"], ["rank1-rank1", "1", "passed"],
                                               ["rank2-rank2", "2", "failed"], ["rank10-rank10", "10", "passed"]]
    assert [o.first_failure for o in pooled] == [o.first_failure for o in in_process] == [
        None, None, "Functional_linear_0_forward_output", None]
    assert [r.pair for r in pooled.results] == ["rank0-rank0", "rank1-rank1", "rank2-rank2", "rank10-rank10"]
    assert pooled.summary_path == os.path.join(two, [n for n in os.listdir(two) if n.startswith("compare_summary")][0])


def test_a_corrupt_rank_is_reported_and_the_others_complete(rank_dumps, tmp_path):
    npu = rank_dumps("npu", [0, 1, 2])
    bench = rank_dumps("bench", [0, 1, 2])
    corrupt = os.path.join(npu, "rank1", "api_stack_npu_dump.pkl")
    with open(corrupt, "w") as handle:
        handle.write("garbage\n")
    out = str(tmp_path / "out")
    outcomes = compare_distributed(npu, bench, out, workers=2, **QUIET)
    assert [r.pair for r in outcomes.results] == ["rank0-rank0", "rank2-rank2"]
    assert outcomes.failed_pairs == {"rank1-rank1": f"error: FileFormatError: Dump file {corrupt} holds no records "
                                                    "(empty or unreadable)."}
    _, summary = reports(out)
    assert [(row[0], row[2], row[-1]) for row in summary[1:]] == [
        ("rank0-rank0", "passed", ""), ("rank2-rank2", "passed", ""),
        ("rank1-rank1", "not compared", f"error: FileFormatError: Dump file {corrupt} holds no records (empty or "
                                        "unreadable).")]
    assert sorted(os.listdir(os.path.join(out, ".ptdbg_compare"))) == ["rank0-rank0.json", "rank2-rank2.json"]


def test_a_rerun_resumes_and_changed_inputs_are_compared_again(rank_dumps, tmp_path):
    npu = rank_dumps("npu", [0, 1, 2])
    bench = rank_dumps("bench", [0, 1, 2])
    out = str(tmp_path / "out")
    compare_distributed(npu, bench, out, workers=2, **QUIET)
    records = os.path.join(out, ".ptdbg_compare")
    written = {name: os.stat(os.path.join(records, name)).st_mtime_ns for name in os.listdir(records)}
    again = compare_distributed(npu, bench, out, workers=2, **QUIET)
    assert list(again) == [] and again.resumed == ("rank0-rank0", "rank1-rank1", "rank2-rank2")
    assert [r.pair for r in again.results] == list(again.resumed)
    assert {name: os.stat(os.path.join(records, name)).st_mtime_ns for name in written} == written
    assert len([n for n in os.listdir(out) if n.startswith("compare_result_")]) == 3  # nothing compared again
    with open(os.path.join(bench, "rank2", "api_stack_bench_dump.pkl"), "a") as handle:  # other inputs now
        handle.write(open(os.path.join(bench, "rank0", "api_stack_bench_dump.pkl")).readline())
    third = compare_distributed(npu, bench, out, workers=1, **QUIET)
    assert third.resumed == ("rank0-rank0", "rank1-rank1") and [STAMP.sub("", os.path.basename(o.csv_path)) for o in
                                                                        third] == ["compare_result_rank2-rank2.csv"]
    assert len(compare_distributed(npu, bench, out, workers=1, resume=False, **QUIET)) == 3  # --no-resume


@pytest.mark.parametrize("workers", [0, -1, "x", True, 1.5])
def test_bad_workers_are_refused(rank_dumps, tmp_path, workers):
    npu = rank_dumps("npu", [0])
    with pytest.raises(ParameterError, match=r"Invalid workers=.*must be an int >= 1"):
        compare_distributed(npu, npu, str(tmp_path / "out"), workers=workers)
    assert not (tmp_path / "out").exists()


def test_cli_workers_minus_one_is_refused_naming_workers(rank_dumps, tmp_path):
    npu = rank_dumps("npu", [0])
    result = subprocess.run([sys.executable, "-m", "ptdbg_ascend", "compare-distributed", npu, npu,
                             str(tmp_path / "out"), "--workers", "-1"], capture_output=True, text=True)
    assert result.returncode == 2
    assert result.stderr.startswith("ptdbg compare-distributed: error: Invalid workers=-1: must be an int >= 1")


def test_a_record_that_cannot_be_trusted_is_compared_again(rank_dumps, tmp_path):
    npu = rank_dumps("npu", [0, 1, 2])
    out = str(tmp_path / "out")
    compare_distributed(npu, npu, out, workers=1, **QUIET)
    records = os.path.join(out, ".ptdbg_compare")
    with open(os.path.join(records, "rank0-rank0.json"), "w") as handle:
        handle.write("{not json")
    path = os.path.join(records, "rank1-rank1.json")
    record = json.load(open(path))
    record["result"]["csv_path"] = str(tmp_path / "elsewhere.csv")  # a CSV outside the output directory
    open(str(tmp_path / "elsewhere.csv"), "w").close()
    with open(path, "w") as handle:
        json.dump(record, handle)
    again = compare_distributed(npu, npu, out, workers=1, **QUIET)
    assert again.resumed == ("rank2-rank2",)
    assert [STAMP.sub("", os.path.basename(o.csv_path)) for o in again] == ["compare_result_rank0-rank0.csv",
                                                                            "compare_result_rank1-rank1.csv"]


def _children(pid):
    """The pids whose parent is ``pid`` (Linux /proc)."""
    found = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/stat") as handle:
                if int(handle.read().rsplit(")", 1)[1].split()[1]) == pid:
                    found.append(int(entry))
        except (OSError, ValueError, IndexError):
            continue
    return found


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="finds the workers through /proc")
def test_a_killed_worker_s_pair_is_compared_again_in_a_fresh_pool(statistics_ranks, tmp_path):
    npu = statistics_ranks("npu", range(3), slow_rank=0, slow_calls=SLOW_CALLS)
    bench = statistics_ranks("bench", range(3), slow_rank=0, slow_calls=SLOW_CALLS)
    out = str(tmp_path / "out")
    records = os.path.join(out, ".ptdbg_compare")
    process = subprocess.Popen([sys.executable, "-m", "ptdbg_ascend", "compare-distributed", npu, bench, out,
                                "--workers", "2", "--quiet", "--no-xlsx", "--no-html"],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.time() + 60
    while not (os.path.isdir(records) and len(os.listdir(records)) == 2):  # the two small pairs: rank0 in flight
        assert time.time() < deadline and process.poll() is None
        time.sleep(0.05)
    assert sorted(os.listdir(records)) == ["rank1-rank1.json", "rank2-rank2.json"]
    servers = [pid for pid in _children(process.pid) if b"forkserver" in open(f"/proc/{pid}/cmdline", "rb").read()]
    workers = [pid for server in servers for pid in _children(server)]
    assert len(workers) == 2
    for pid in workers:
        os.kill(pid, signal.SIGKILL)
    text, _ = process.communicate(timeout=60)
    assert process.returncode == 0, text
    assert "A compare worker died with rank0-rank0 in flight: comparing it again." in text
    assert sorted(os.listdir(records)) == ["rank0-rank0.json", "rank1-rank1.json", "rank2-rank2.json"]
    _, summary = reports(out)
    assert [(row[0], row[2]) for row in summary[1:]] == [(f"rank{r}-rank{r}", "passed") for r in range(3)]


def test_an_unguarded_script_compares_in_its_own_process(rank_dumps, tmp_path):
    """Worker processes import the main script again: called at a script's top level without
    ``if __name__ == "__main__":``, the default compares in the script's process (said), workers=2 is refused."""
    npu = rank_dumps("npu", [0, 1, 2])
    script = tmp_path / "compare_ranks.py"
    script.write_text("import sys\nfrom ptdbg_ascend import compare_distributed\n"
                      "workers = int(sys.argv[2]) if sys.argv[2] != 'default' else None\n"
                      f"result = compare_distributed({npu!r}, {npu!r}, sys.argv[1], workers=workers, "
                      "is_print_compare_log=False, xlsx=False, html=False)\nprint('pairs', len(result.results))\n")
    default = subprocess.run([sys.executable, str(script), str(tmp_path / "a"), "default"], capture_output=True,
                             text=True, timeout=60)
    assert default.returncode == 0, default.stdout + default.stderr
    assert "pairs 3" in default.stdout
    assert "Comparing the rank pairs in this process (workers=1): compare_distributed is called by the top-level " \
           f"code of {script} (line 4) without if __name__" in default.stdout
    asked = subprocess.run([sys.executable, str(script), str(tmp_path / "b"), "2"], capture_output=True, text=True,
                           timeout=60)
    assert asked.returncode == 1 and "WorkerProcessError: compare_distributed is called by the top-level" in \
        asked.stderr
    assert not (tmp_path / "b").exists()
