"""Nothing lost, nothing let in: hostile and malformed dumps on the compare side.

Every file compare opens lies inside the data directory the user gave; names taken from a dump are plain
file names or the row says why not; a ``.pt`` is never unpickled; a bad line or record is a warning or a
row message and the rest of the report stands; report names never collide; the CLI turns every error
into one line and an exit status.
"""

from __future__ import annotations

import csv
import json
import multiprocessing
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from ptdbg_ascend.cli import main as ptdbg_main
from ptdbg_ascend.comparison import reports
from ptdbg_ascend.comparison.api import compare
from ptdbg_ascend.comparison.metrics import compare_arrays
from ptdbg_ascend.errors import FileFormatError

GOOD_CALLS = 3  # calls every dump below holds besides the hostile record, so the report has rows that pass


# --- dump builders -------------------------------------------------------------------------------------

def _stats(array):
    data = np.asarray(array, dtype=np.float64)
    return [float(data.max()), float(data.min()), float(data.mean()), float(np.sqrt((data * data).sum()))]


def good_arrays():
    return {f"Torch_relu_{i}_forward_output": np.arange(4, dtype=np.float32) + i for i in range(GOOD_CALLS)}


def legacy(root, extra_lines=(), files=None, shapes=None):
    """``{root}/dump.pkl`` + ``{root}/data/*.npy``: the good calls, then ``extra_lines`` (lists are JSON-encoded,
    strings written as they are); ``files`` name -> array saved as ``data/{name}.npy``."""
    data = root / "data"
    data.mkdir(parents=True)
    lines = []
    for name, array in good_arrays().items():
        lines.append(json.dumps([name, 0, [], "torch.float32", list(array.shape), _stats(array)]))
        np.save(str(data / (name + ".npy")), array)
    for line in extra_lines:
        lines.append(line if isinstance(line, str) else json.dumps(line))
    for name, array in (files or {}).items():
        np.save(str(data / (name + ".npy")), array)
    (root / "dump.pkl").write_text("\n".join(lines) + "\n")
    return {"pkl": str(root / "dump.pkl"), "data": str(data)}


def leaf(data_name, array, **changes):
    value = {"type": "torch.Tensor", "dtype": "torch.float32", "shape": list(np.shape(array)),
             "Max": 1.0, "Min": 0.0, "Mean": 0.5, "Norm": 1.0, "requires_grad": False, "data_name": data_name}
    value.update(changes)
    return value


def msprobe(root, extra=None, suffix=".npy"):
    """``{root}/dump.json`` + ``{root}/dump_tensor_data/``: the good calls as Torch.relu.{i}.forward (tensors
    as .npy, which the loader reads without torch), plus ``extra`` entries."""
    data = root / "dump_tensor_data"
    data.mkdir(parents=True)
    entries = {}
    for i, array in enumerate(good_arrays().values()):
        name = f"Torch.relu.{i}.forward.output.0{suffix}"
        if suffix == ".npy":
            np.save(str(data / name), array)
        else:
            import torch
            torch.save(torch.from_numpy(array), str(data / name))
        entries[f"Torch.relu.{i}.forward"] = {"input_args": [], "input_kwargs": {},
                                                       "output": [leaf(name, array)]}
    entries.update(extra or {})
    (root / "dump.json").write_text(json.dumps({"task": "tensor", "level": "L1", "data": entries}))
    return {"pkl": str(root / "dump.json"), "data": str(data)}


def param(npu, bench, data=True):
    result = {"npu_pkl_path": npu["pkl"], "bench_pkl_path": bench["pkl"], "is_print_compare_log": False}
    if data:
        result.update(npu_dump_data_dir=npu["data"], bench_dump_data_dir=bench["data"])
    return result


def rows_of(outcome):
    with open(outcome.csv_path, newline="") as handle:
        return {row["NPU Name"]: row for row in csv.DictReader(handle)}


def run_cli(npu, bench, output_dir, capsys, data=True):
    args = ["compare", npu["pkl"], bench["pkl"], output_dir, "--quiet", "--no-auto-analyze"]
    if data:
        args += ["--npu-dump-data-dir", npu["data"], "--bench-dump-data-dir", bench["data"]]
    capsys.readouterr()
    status = ptdbg_main(args)
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err + captured.out
    return status, captured


def assert_good_rows_pass(rows):
    for name in good_arrays():
        assert rows[name]["Result"] == "pass", rows[name]


# --- 1. never unpickle -------------------------------------------------------------------------------

EVIL_MODULE = '''
import sys, torch

class Evil:
    def __init__(self, marker):
        self.marker = marker
    def __reduce__(self):
        return (open, (self.marker, "w"))

torch.save({"weight": Evil(sys.argv[2])}, sys.argv[1])
'''


def _evil_pt(path, marker, tmp_path):
    script = tmp_path / "make_evil.py"
    script.write_text(EVIL_MODULE)
    subprocess.run([sys.executable, str(script), str(path), str(marker)], check=True)


@pytest.mark.parametrize("force_unsafe", [False, True], ids=["default-env", "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"])
def test_pt_with_a_pickle_payload_is_never_unpickled(tmp_path, output_dir, force_unsafe):
    torch = pytest.importorskip("torch")
    # The payload works: unpickling it without weights_only writes its marker.
    probe_marker, probe = tmp_path / "probe_marker", tmp_path / "probe.pt"
    _evil_pt(probe, probe_marker, tmp_path)
    torch.load(str(probe), weights_only=False)
    assert probe_marker.exists()

    marker = tmp_path / "pwned"
    evil_array = np.ones(4, np.float32)
    evil = {"Torch.relu.9.forward": {"input_args": [], "input_kwargs": {},
                                     "output": [leaf("Torch.relu.9.forward.output.0.pt", evil_array)]}}
    npu = msprobe(tmp_path / "npu", evil, suffix=".pt")
    bench = msprobe(tmp_path / "bench", evil, suffix=".pt")
    _evil_pt(os.path.join(npu["data"], "Torch.relu.9.forward.output.0.pt"), marker, tmp_path)
    torch.save(torch.from_numpy(evil_array), os.path.join(bench["data"], "Torch.relu.9.forward.output.0.pt"))

    env = dict(os.environ)
    env.pop("TORCH_FORCE_WEIGHTS_ONLY_LOAD", None)
    if force_unsafe:
        env["TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"] = "1"
    result = subprocess.run([sys.executable, "-m", "ptdbg_ascend.cli", "compare", npu["pkl"], bench["pkl"],
                             output_dir, "--quiet"], capture_output=True, text=True, env=env)
    assert not marker.exists()
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    (report,) = (name for name in os.listdir(output_dir) if name.endswith(".csv"))
    with open(os.path.join(output_dir, report), newline="") as handle:
        rows = {row["NPU Name"]: row for row in csv.DictReader(handle)}
    row = rows["Torch_relu_9_forward_output"]
    assert row["Result"] == "not compared"
    assert "cannot be read" in row["Err_message"] and "it is not unpickled" in row["Err_message"]
    assert_good_rows_pass(rows)


# --- 2. stay inside the data directory -----------------------------------------------------------------


@pytest.mark.torchfree
def test_pkl_record_name_climbing_out_is_not_opened(tmp_path, output_dir, capsys):
    array = np.ones(4, np.float32)
    climbing = "../../x_0_forward_output"
    np.save(str(tmp_path / "x_0_forward_output.npy"), array)  # where ../../ leads from npu/data
    line = [climbing, 0, [], "torch.float32", [4], _stats(array)]
    npu = legacy(tmp_path / "npu", [line])
    bench = legacy(tmp_path / "bench", [line])
    rows = rows_of(compare(param(npu, bench), output_dir, auto_analyze=False, xlsx=False))
    assert rows[climbing]["Result"] == "not compared"
    assert "not a plain file name" in rows[climbing]["Err_message"]
    assert_good_rows_pass(rows)
    status, _ = run_cli(npu, bench, output_dir, capsys)
    assert status == 0


@pytest.mark.torchfree
@pytest.mark.parametrize("data_name, reason", [
    ("../outside.npy", "not a plain file name"),
    ("ABSOLUTE", "not a plain file name"),
    ("sub/Torch.relu.9.forward.output.0.npy", "not a plain file name"),
    (5, "is not a string"),
    (["a.npy"], "is not a string"),
], ids=["dotdot", "absolute", "separator", "integer", "list"])
def test_dump_json_data_name_that_is_not_a_plain_name(tmp_path, output_dir, capsys, data_name, reason):
    array = np.ones(4, np.float32)
    outside = tmp_path / "outside.npy"
    np.save(str(outside), array)
    if data_name == "ABSOLUTE":
        data_name = str(outside)
    extra = {"Torch.relu.9.forward": {"input_args": [], "input_kwargs": {}, "output": [leaf(data_name, array)]}}
    npu, bench = msprobe(tmp_path / "npu", extra), msprobe(tmp_path / "bench", extra)
    rows = rows_of(compare(param(npu, bench), output_dir, auto_analyze=False, xlsx=False))
    row = rows["Torch_relu_9_forward_output"]
    assert row["Result"] == "not compared"
    assert reason in row["Err_message"] and "nothing was read" in row["Err_message"]
    assert_good_rows_pass(rows)
    status, _ = run_cli(npu, bench, output_dir, capsys)
    assert status == 0


@pytest.mark.torchfree
def test_symlink_out_of_the_data_directory_is_refused(tmp_path, output_dir, capsys):
    array = np.ones(4, np.float32)
    name = "Torch_relu_9_forward_output"
    line = [name, 0, [], "torch.float32", [4], _stats(array)]
    npu = legacy(tmp_path / "npu", [line])
    bench = legacy(tmp_path / "bench", [line], files={name: array})
    secret = tmp_path / "secret.npy"
    np.save(str(secret), array)
    os.symlink(str(secret), os.path.join(npu["data"], name + ".npy"))
    # A link that stays inside the directory is still read.
    os.remove(os.path.join(npu["data"], "Torch_relu_0_forward_output.npy"))
    os.symlink("Torch_relu_1_forward_output.npy", os.path.join(npu["data"], "Torch_relu_0_forward_output.npy"))
    rows = rows_of(compare(param(npu, bench), output_dir, auto_analyze=False, xlsx=False))
    assert rows[name]["Result"] == "not compared"
    assert "outside the data directory" in rows[name]["Err_message"]
    assert rows["Torch_relu_0_forward_output"]["Result"] == "error"  # read: it holds call 1's data
    status, _ = run_cli(npu, bench, output_dir, capsys)
    assert status == 1  # the link inside the directory is read, and differs


# --- 3. robust readers -------------------------------------------------------------------------------

NESTED = "[" * 100000 + "]" * 100000


@pytest.mark.torchfree
@pytest.mark.parametrize("line, warning", [
    (NESTED, "Skipped corrupt line 4"),
    (["Torch_relu_9_forward_output", 0, [], "torch.float32", ["x"], [1.0, 0.0, 0.5, 1.0]], "is not a list of"),
    (["Torch_relu_9_forward_output", 0, [], "torch.float32", [[2]], [1.0, 0.0, 0.5, 1.0]], "is not a list of"),
], ids=["nested-100000", "shape-x", "shape-nested"])
def test_pkl_line_that_cannot_be_read_is_a_warning(tmp_path, output_dir, capsys, line, warning):
    npu, bench = legacy(tmp_path / "npu", [line]), legacy(tmp_path / "bench")
    for data in (True, False):
        capsys.readouterr()
        outcome = compare(param(npu, bench, data), output_dir, auto_analyze=False, xlsx=False)
        assert warning in capsys.readouterr().out
        rows = rows_of(outcome)
        assert "Torch_relu_9_forward_output" not in rows
        assert_good_rows_pass(rows)
        status, _ = run_cli(npu, bench, output_dir, capsys, data)
        assert status == 0


# A statistic beyond float64's range (no tensor has one) is corrupt or crafted: read as no value, said with the
# file, the line and the statistic; the record stays, so its tensor is still compared. Before: a 400-digit
# integer or 1e400 read as inf without a word (making the record look like an overflow); a 5000-digit one lost
# the line in a pkl ("corrupt") and the whole dump.json ("not valid JSON").
BEYOND_FLOAT64 = [
    ("1" + "0" * 400, "a 401-digit integer"),
    ("-" + "9" * 5000, "a 5000-digit integer"),
    ("1e400", "1e400"),
    ("-2.5E+999", "-2.5E+999"),
]
BEYOND_IDS = ["400-digits", "5000-digits", "1e400", "-2.5E+999"]


@pytest.mark.torchfree
@pytest.mark.parametrize("literal, said", BEYOND_FLOAT64, ids=BEYOND_IDS)
def test_pkl_statistic_beyond_float64_is_no_value(tmp_path, output_dir, capsys, literal, said):
    array = np.ones(4, np.float32)
    name = "Torch_relu_9_forward_output"
    line = f'["{name}", 0, [], "torch.float32", [4], [{literal}, 1.0, 1.0, 2.0]]'
    npu = legacy(tmp_path / "npu", [line], files={name: array})
    bench = legacy(tmp_path / "bench", [[name, 0, [], "torch.float32", [4], _stats(array)]], files={name: array})
    warning = ("Line 4 of {}: the max of {} is {}, beyond float64's range: read as no value (Nan in the report)."
               .format(npu["pkl"], name, said))
    for data in (True, False):
        capsys.readouterr()
        rows = rows_of(compare(param(npu, bench, data), output_dir, auto_analyze=False, xlsx=False))
        assert warning in capsys.readouterr().out
        assert (rows[name]["NPU max"], rows[name]["NPU min"], rows[name]["NPU l2norm"]) == ("Nan", "1.0", "2.0")
        assert rows[name]["Result"] == "pass"  # the tensors (full) or the other statistics (summary) agree
        assert_good_rows_pass(rows)
    status, captured = run_cli(npu, bench, output_dir, capsys)
    assert status == 0 and "beyond float64's range" in captured.out


@pytest.mark.torchfree
@pytest.mark.parametrize("literal, said", BEYOND_FLOAT64, ids=BEYOND_IDS)
def test_dump_json_statistic_beyond_float64_is_no_value(tmp_path, output_dir, capsys, literal, said):
    array = np.ones(4, np.float32)
    extra = {"Torch.relu.9.forward": {"input_args": [], "input_kwargs": {},
                                      "output": [leaf("Torch.relu.9.forward.output.0.npy", array, Norm="NORM")]}}
    npu, bench = msprobe(tmp_path / "npu", extra), msprobe(tmp_path / "bench", extra)
    with open(npu["pkl"]) as handle:
        text = handle.read()
    with open(npu["pkl"], "w") as handle:  # json cannot write such a number: spliced in as text
        handle.write(text.replace('"NORM"', literal))
    for side in (npu, bench):
        np.save(os.path.join(side["data"], "Torch.relu.9.forward.output.0.npy"), array)
    warning = ("Entry 'Torch.relu.9.forward' of {}: the Norm of Torch_relu_9_forward_output is {}, beyond float64's "
               "range: read as no value (Nan in the report).".format(npu["pkl"], said))
    name = "Torch_relu_9_forward_output"
    for data in (True, False):
        capsys.readouterr()
        rows = rows_of(compare(param(npu, bench, data), output_dir, auto_analyze=False, xlsx=False))
        assert warning in capsys.readouterr().out
        assert (rows[name]["NPU max"], rows[name]["NPU l2norm"]) == ("1.0", "Nan")
        assert_good_rows_pass(rows)
        status, _ = run_cli(npu, bench, output_dir, capsys, data)
        assert status == 0


@pytest.mark.torchfree
def test_pkl_line_that_is_not_utf8_is_named_with_its_byte(tmp_path, output_dir, capsys):
    # Before: "Skipped corrupt line 4 of ... (truncated last line: was the run killed?)": a wrong reason.
    name = "Torch_relu_9_forward_output"
    line = json.dumps([name, 0, [], "torch.float32", [4], [1.0, 1.0, 1.0, 2.0]]).encode()
    bad = line.replace(b"float32", b"flo\xe9t32")
    npu = legacy(tmp_path / "npu")
    with open(npu["pkl"], "ab") as handle:
        handle.write(bad + b"\n")
    bench = legacy(tmp_path / "bench", [[name, 0, [], "torch.float32", [4], [1.0, 1.0, 1.0, 2.0]]])
    capsys.readouterr()
    rows = rows_of(compare(param(npu, bench), output_dir, auto_analyze=False, xlsx=False))
    out = capsys.readouterr().out
    assert ("Skipped line 4 of {}: it is not UTF-8 text (byte 0xe9 at byte {} of the line)."
            .format(npu["pkl"], bad.index(b"\xe9") + 1)) in out
    assert "truncated" not in out
    assert name not in rows and rows["Nan"]["Bench Name"] == name  # the bench side's row only
    assert rows["Nan"]["Result"] == "unmatched"
    assert_good_rows_pass(rows)
    status, _ = run_cli(npu, bench, output_dir, capsys)
    assert status == 0


@pytest.mark.torchfree
@pytest.mark.parametrize("entry, warning", [
    ({"input_args": 5, "input_kwargs": {}, "output": []}, "input_args is not a list"),
    ({"input_args": [], "input_kwargs": 7, "output": []}, "input_kwargs is not an object"),
    ({"input_args": [], "input_kwargs": {},
      "output": [leaf("Torch.relu.9.forward.output.0.npy", np.ones(4), shape=["x"])]}, "is not a list of"),
    ({"input_args": [], "input_kwargs": {},
      "output": [leaf("Torch.relu.9.forward.output.0.npy", np.ones(4), shape=[10 ** 400])]}, "is not a list of"),
], ids=["input_args-int", "input_kwargs-int", "shape-x", "shape-400-digits"])
def test_dump_json_entry_that_is_malformed(tmp_path, output_dir, capsys, entry, warning):
    extra = {"Torch.relu.9.forward": entry}
    npu, bench = msprobe(tmp_path / "npu", extra), msprobe(tmp_path / "bench", extra)
    for side in (npu, bench):
        np.save(os.path.join(side["data"], "Torch.relu.9.forward.output.0.npy"), np.ones(4, np.float32))
    for data in (True, False):
        capsys.readouterr()
        rows = rows_of(compare(param(npu, bench, data), output_dir, auto_analyze=False, xlsx=False))
        if warning:
            assert warning in capsys.readouterr().out
        assert_good_rows_pass(rows)
        status, _ = run_cli(npu, bench, output_dir, capsys, data)
        assert status == 0


@pytest.mark.torchfree
def test_parse_reads_past_malformed_lines(tmp_path, capsys):
    array = np.ones(4, np.float32)
    huge = "1" + "0" * 400
    npu = legacy(tmp_path / "npu", [
        NESTED, ["Torch_relu_9_forward_input.0", 0, [], "torch.float32", ["x"], []],
        f'["Torch_relu_9_forward_output", 0, [], "torch.float32", [4], [{huge}, 0.0, 0.5, 1.0]]'],
        files={"Torch_relu_9_forward_output": array})
    capsys.readouterr()
    assert ptdbg_main(["parse", npu["pkl"], "Torch_relu_9_forward"]) == 0
    out = capsys.readouterr().out
    assert "[Torch_relu_9_forward_output][dtype: torch.float32][shape: [4]][max: Nan][min: 0.0]" in out
    assert f"Line 6 of {npu['pkl']}: the max of Torch_relu_9_forward_output is a 401-digit integer" in out
    assert "Traceback" not in out


@pytest.mark.torchfree
def test_dump_json_that_is_not_utf8_is_refused_naming_line_and_column(tmp_path, output_dir):
    # A dump.json is one JSON document (msprobe and this tool write it ASCII-escaped): a foreign byte means it
    # was edited or corrupted, and no record boundary is known before it parses. Refused, with where the byte
    # is. Before: "'utf-8' codec can't decode byte 0xe9 in position 1234: invalid continuation byte".
    npu, bench = msprobe(tmp_path / "npu"), msprobe(tmp_path / "bench")
    with open(npu["pkl"], "rb") as handle:
        data = handle.read().replace(b'"output": [', b'\n"output": [', 1)
    data = data.replace(b"torch.float32", b"torch.flo\xe9t32", 1)
    with open(npu["pkl"], "wb") as handle:
        handle.write(data)
    line = data.count(b"\n", 0, data.index(b"\xe9")) + 1
    column = data.index(b"\xe9") - data.rfind(b"\n", 0, data.index(b"\xe9"))
    with pytest.raises(FileFormatError, match=r"^Cannot read the dump file {}: it is not UTF-8 text \(byte 0xe9 at "
                                              r"line {}, column {}\)\.$".format(re.escape(npu["pkl"]), line, column)):
        compare(param(npu, bench), output_dir, auto_analyze=False, xlsx=False)
    assert line == 2


# --- 3b. names: a counter too long to be one ---------------------------------------------------------

LONG_COUNTER = "1" * 5000  # int() of it raises ValueError (Python's 4300-digit limit)


@pytest.mark.torchfree
def test_pkl_record_with_a_5000_digit_counter_is_skipped(tmp_path, output_dir, capsys):
    # Before: compare and parse raised "ValueError: Exceeds the limit (4300 digits)" from the name parser.
    name = f"Torch_relu_{LONG_COUNTER}_forward_output"
    npu = legacy(tmp_path / "npu", [[name, 0, [], "torch.float32", [4], [1.0, 1.0, 1.0, 2.0]]])
    bench = legacy(tmp_path / "bench")
    capsys.readouterr()
    rows = rows_of(compare(param(npu, bench), output_dir, auto_analyze=False, xlsx=False))
    out = capsys.readouterr().out
    assert "Skipped line 4 of {}: {!r}... ({} characters) is not a dump record name: it holds a number of 5000 " \
           "digits (a call counter or index has at most 18).".format(npu["pkl"], name[:255], len(name)) in out
    assert LONG_COUNTER not in out  # the name is shown in part
    assert sorted(rows) == sorted(good_arrays())
    assert_good_rows_pass(rows)
    assert ptdbg_main(["parse", npu["pkl"], "Torch_relu_1_forward"]) == 0
    assert "[Torch_relu_1_forward_output][dtype: torch.float32]" in capsys.readouterr().out


@pytest.mark.torchfree
@pytest.mark.parametrize("counter", [LONG_COUNTER, "1" * 19], ids=["5000-digits", "19-digits"])
def test_dump_json_call_with_a_counter_too_long_is_skipped(tmp_path, output_dir, capsys, counter):
    key = f"Torch.relu.{counter}.forward"
    array = np.ones(4, np.float32)
    extra = {key: {"input_args": [], "input_kwargs": {}, "output": [leaf("x.npy", array)]}}
    npu, bench = msprobe(tmp_path / "npu", extra), msprobe(tmp_path / "bench")
    capsys.readouterr()
    rows = rows_of(compare(param(npu, bench), output_dir, auto_analyze=False, xlsx=False))
    out = capsys.readouterr().out
    shown = repr(key) if len(key) <= 255 else f"{key[:255]!r}... ({len(key)} characters)"
    assert "Skipped entry {} of {}: not an API or module call name: it holds a number of {} digits (a call counter or index " \
           "has at most 18).".format(shown, npu["pkl"], len(counter)) in out
    assert sorted(rows) == sorted(good_arrays())
    assert_good_rows_pass(rows)
    assert ptdbg_main(["parse", npu["pkl"], "Torch_relu_1_forward"]) == 0
    status, _ = run_cli(npu, bench, output_dir, capsys)
    assert status == 0


# --- 3c. the same record twice -------------------------------------------------------------------------

@pytest.mark.torchfree
def test_pkl_record_written_twice_is_said_and_the_later_line_is_used(tmp_path, output_dir, capsys):
    # Before: both lines were kept without a word: two NPU rows of one name, one of them unmatched.
    array = good_arrays()["Torch_relu_1_forward_output"]
    later = [9.0, 1.0, 2.5, 5.477225575051661]
    npu = legacy(tmp_path / "npu", [["Torch_relu_1_forward_output", 0, [], "torch.float32", [4], later],
                                    ["Torch_relu_1_forward_stack_info", [["a.py", "1", "f", "x"]]],
                                    ["Torch_relu_1_forward_stack_info", [["b.py", "2", "g", "y"]]]])
    bench = legacy(tmp_path / "bench")
    capsys.readouterr()
    outcome = compare(param(npu, bench, data=False), output_dir, auto_analyze=False, xlsx=False)
    out = capsys.readouterr().out
    assert ("The dump file {} repeats 2 record names: 'Torch_relu_1_forward_output' (lines 2 and 4); "
            "'Torch_relu_1_forward_stack_info' (lines 5 and 6). The later line of each is used."
            .format(npu["pkl"])) in out
    with open(outcome.csv_path, newline="") as handle:
        names = [row["NPU Name"] for row in csv.DictReader(handle)]
    assert names.count("Torch_relu_1_forward_output") == 1
    row = rows_of(outcome)["Torch_relu_1_forward_output"]
    assert row["NPU max"] == "9.0" and row["Result"] != "pass"  # the later line's max, against the bench's 4.0
    assert array.max() == 4.0
    assert ptdbg_main(["parse", npu["pkl"], "Torch_relu_1_forward"]) == 0
    parsed = capsys.readouterr().out
    assert 'File "b.py", line 2, in g' in parsed and "a.py" not in parsed and "[max: 9.0]" in parsed


@pytest.mark.torchfree
def test_dump_json_call_twice_is_said_and_the_later_entry_is_used(tmp_path, output_dir, capsys):
    # The same key twice (json keeps the later) and two keys that name one call (a counter 01 and 1).
    array = good_arrays()["Torch_relu_1_forward_output"]
    npu, bench = msprobe(tmp_path / "npu"), msprobe(tmp_path / "bench")
    with open(npu["pkl"]) as handle:
        text = handle.read()
    twice = ('"Torch.relu.1.forward": {"input_args": [], "input_kwargs": {}, "output": [%s]}, '
             '"Torch.relu.01.forward": {"input_args": [], "input_kwargs": {}, "output": [%s]}, '
             % (json.dumps(leaf("a.npy", array, Max=7.0)), json.dumps(leaf("b.npy", array, Max=9.0))))
    with open(npu["pkl"], "w") as handle:
        handle.write(text.replace('"data": {', '"data": {' + twice))
    capsys.readouterr()
    outcome = compare(param(npu, bench, data=False), output_dir, auto_analyze=False, xlsx=False)
    out = capsys.readouterr().out
    assert ("The dump file {} has a key that appears twice in one object: 'Torch.relu.1.forward' in data. The later "
            "value is used.".format(npu["pkl"])) in out
    assert ("The dump file {} names a call twice: 'Torch.relu.1.forward' and 'Torch.relu.01.forward' are both "
            "Torch_relu_1_forward. The later entry is used.".format(npu["pkl"])) in out
    with open(outcome.csv_path, newline="") as handle:
        names = [row["NPU Name"] for row in csv.DictReader(handle)]
    assert names.count("Torch_relu_1_forward_output") == 1
    assert rows_of(outcome)["Torch_relu_1_forward_output"]["NPU max"] == "9.0"


# --- 4. odd data judged right ------------------------------------------------------------------------

@pytest.mark.torchfree
@pytest.mark.parametrize("recorded, stored, reason", [
    ([4], np.ones(1000, np.float32), "records shape [4]"),
    ([2, 2], np.ones(4, np.float32), "records shape [2, 2]"),
    ([4], np.ones(4, np.int64), "records dtype torch.float32"),
], ids=["4-vs-1000", "2x2-vs-4", "float-vs-int"])
def test_recorded_shape_or_dtype_not_what_the_file_holds(tmp_path, output_dir, capsys, recorded, stored, reason):
    name = "Torch_relu_9_forward_output"
    line = [name, 0, [], "torch.float32", recorded, [1.0, 1.0, 1.0, 2.0]]
    npu = legacy(tmp_path / "npu", [line], files={name: stored})
    bench = legacy(tmp_path / "bench", [line], files={name: stored})
    rows = rows_of(compare(param(npu, bench), output_dir, auto_analyze=False, xlsx=False))
    assert rows[name]["Result"] == "not compared"
    assert "Not compared: the dump " + reason in rows[name]["Err_message"]
    assert_good_rows_pass(rows)
    status, _ = run_cli(npu, bench, output_dir, capsys)
    assert status == 0


@pytest.mark.torchfree
@pytest.mark.parametrize("value", [1e200, 1e300, 1.7e308])
def test_identical_huge_float64_tensors_compare_equal(tmp_path, output_dir, value):
    array = np.full(1000, value)
    array[::3] *= -1
    metrics = compare_arrays(array, array.copy())
    assert metrics.cosine == 1.0 and metrics.max_abs_err == 0.0 and metrics.max_relative_err == 0.0
    assert metrics.accumulated_relative_err == 0.0 and metrics.euclidean_relative_distance == 0.0
    assert not any("nan" in message.lower() for message in metrics.messages)
    name = "Torch_relu_9_forward_output"
    stats = [value, -value, 0.0, 1e308]
    line = [name, 0, [], "torch.float64", [1000], stats]
    npu = legacy(tmp_path / "npu", [line], files={name: array})
    bench = legacy(tmp_path / "bench", [line], files={name: array})
    row = rows_of(compare(param(npu, bench), output_dir, auto_analyze=False, xlsx=False))[name]
    assert row["Result"] == "pass" and row["Accuracy Reached or Not"] == "Yes", row
    assert "nan" not in row["Err_message"].lower()


@pytest.mark.torchfree
def test_opposite_huge_and_tiny_tensors():
    big = np.full(10, 1.7e308)
    metrics = compare_arrays(big, -big)
    assert metrics.cosine == pytest.approx(-1.0) and metrics.max_abs_err == float("inf")
    assert metrics.accumulated_relative_err == pytest.approx(2.0)
    assert metrics.euclidean_relative_distance == pytest.approx(2.0)
    tiny = np.array([1e-30, -2e-30, 3e-30])
    # Both norms below float64's epsilon: round-off only, Cosine 1.0 by the guide's rule (was -1.0).
    assert compare_arrays(tiny, -tiny).cosine == 1.0
    small = tiny * 1e15  # norms ~4e-15, above epsilon: the true cosine, exact although the squares are tiny
    assert compare_arrays(small, -small).cosine == -1.0


# --- 5. unique report names --------------------------------------------------------------------------

@pytest.mark.torchfree
def test_two_compares_in_one_second_keep_both_reports(tmp_path, output_dir, monkeypatch):
    npu, bench = legacy(tmp_path / "npu"), legacy(tmp_path / "bench")
    import ptdbg_ascend.comparison.run as run

    monkeypatch.setattr(run.time, "strftime", lambda fmt, *args: "20240101120000")
    first = compare(param(npu, bench), output_dir)
    second = compare(param(npu, bench), output_dir)
    third = compare(param(npu, bench), output_dir, suffix="s")
    assert os.path.basename(first.csv_path) == "compare_result_20240101120000.csv"  # the legacy name when free
    assert os.path.basename(second.csv_path) == "compare_result_20240101120000_1.csv"
    assert os.path.basename(second.xlsx_path) == "compare_result_20240101120000_1.xlsx"
    assert os.path.basename(second.advisor_path) == "advisor_20240101120000_1.txt"
    assert os.path.basename(second.html_path) == "compare_report_20240101120000_1.html"
    assert os.path.basename(third.csv_path) == "compare_result_s_20240101120000.csv"
    assert len(os.listdir(output_dir)) == 12  # csv, xlsx, advisor, html of each
    # A stem whose advisor file is taken (its csv deleted) is not reused.
    os.remove(first.csv_path)
    fourth = compare(param(npu, bench), output_dir)
    assert os.path.basename(fourth.csv_path) == "compare_result_20240101120000_2.csv"
    fifth = compare(param(npu, bench), output_dir, auto_analyze=False, xlsx=False, html=False)
    assert os.path.basename(fifth.csv_path) == "compare_result_20240101120000.csv"


def _claim(output_dir):
    tail, path, handle = reports.claim_report(output_dir, "20240101120000")
    handle.write(str(os.getpid()))
    handle.close()
    return path


@pytest.mark.torchfree
def test_concurrent_claims_never_share_a_name(output_dir):
    context = multiprocessing.get_context("fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn")
    with context.Pool(8) as pool:
        paths = pool.map(_claim, [output_dir] * 40)
    assert len(set(paths)) == 40
    assert sorted(os.listdir(output_dir)) == sorted(os.path.basename(path) for path in paths)


# --- 6. one CLI boundary -----------------------------------------------------------------------------

@pytest.mark.torchfree
def test_cli_unexpected_error_is_one_line_and_exit_2(tmp_path, output_dir, capsys, monkeypatch):
    npu, bench = legacy(tmp_path / "npu"), legacy(tmp_path / "bench")
    import ptdbg_ascend.comparison.api as api

    def broken(*args, **kwargs):
        raise ZeroDivisionError("float division\nby zero")

    monkeypatch.setattr(api, "compare", broken)
    args = ["compare", npu["pkl"], bench["pkl"], output_dir]
    assert ptdbg_main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith("ptdbg compare: error: ZeroDivisionError: float division by zero")
    assert "--debug" in err
    assert ptdbg_main(["--debug"] + args) == 2
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and "ZeroDivisionError" in err


@pytest.mark.torchfree
def test_cli_input_error_with_and_without_debug(tmp_path, output_dir, capsys):
    npu = legacy(tmp_path / "npu")
    args = ["compare", npu["pkl"], str(tmp_path / "missing.pkl"), output_dir]
    assert ptdbg_main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("ptdbg compare: error: Bench dump file")
    assert ptdbg_main(["--debug"] + args) == 2
    assert "Traceback (most recent call last)" in capsys.readouterr().err
    with pytest.raises(SystemExit) as usage:  # argparse's usage errors stay exit 2
        ptdbg_main(["compare", npu["pkl"]])
    assert usage.value.code == 2
