"""The files beside the dumps are from strangers too: compare.json and the paths it names, the writer's
lock, an api_mapping file, the finding file a later run reads back; and a dump that pairs a module record with
an API record. None of them may hang the compare, take memory by its content, or end it with a traceback.

Every case writes real files; the CLI runs as ``python -m ptdbg_ascend.cli`` where a hang or a memory blow-up
must be contained (a timeout, an address-space cap) so that the code before the fix fails the test instead of
taking the machine.
"""

from __future__ import annotations

import csv
import json
import os
import resource
import subprocess
import sys
import time

import numpy as np
import pytest

from ptdbg_ascend.cli import main as ptdbg_main
from ptdbg_ascend.comparison.api import compare
from ptdbg_ascend.errors import FileFormatError, ParameterError

pytestmark = pytest.mark.torchfree

GOOD = {f"Torch_relu_{i}_forward_output": np.arange(4, dtype=np.float32) + i for i in range(3)}


def _stats(array):
    data = np.asarray(array, dtype=np.float64)
    return [float(data.max()), float(data.min()), float(data.mean()), float(np.sqrt((data * data).sum()))]


def legacy(root, extra=(), files=None):
    """``root/dump.pkl`` + ``root/dump/*.npy``: the three GOOD calls, then ``extra`` lines; ``files``: more npys."""
    data = root / "dump"
    data.mkdir(parents=True)
    lines = []
    for name, array in dict(GOOD, **(files or {})).items():
        np.save(str(data / (name + ".npy")), array)
    for name, array in GOOD.items():
        lines.append([name, 0, [], "torch.float32", list(array.shape), _stats(array)])
    lines.extend(extra)
    (root / "dump.pkl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    return str(root / "dump.pkl"), str(data)


def msprobe(root, extra=None):
    """``root/dump.json`` (statistics only) with the GOOD calls as Torch.relu.{i}.forward, plus ``extra``."""
    root.mkdir(parents=True)
    data = {f"Torch.relu.{i}.forward": {"input_args": [], "input_kwargs": {}, "output": [_leaf(array)]}
            for i, array in enumerate(GOOD.values())}
    data.update(extra or {})
    (root / "dump.json").write_text(json.dumps({"task": "statistics", "level": "L1", "dump_data_dir": None,
                                                "data": data}))
    return str(root / "dump.json")


def _leaf(array):
    return dict(type="torch.Tensor", dtype="torch.float32", shape=list(array.shape), requires_grad=False,
                **dict(zip(("Max", "Min", "Mean", "Norm"), _stats(array))))


def rows_of(csv_path):
    with open(csv_path, newline="") as handle:
        return list(csv.DictReader(handle))


def cli(*args, cwd, memory=None, timeout=120):
    """``ptdbg ARGS`` in a child process: ``(exit status, stdout + stderr)``; the address space capped at
    ``memory`` bytes when given. A run past ``timeout`` s is a failure of the test, not a hung suite."""
    def cap():
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))

    try:
        done = subprocess.run([sys.executable, "-m", "ptdbg_ascend.cli"] + [str(arg) for arg in args], cwd=str(cwd),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              timeout=timeout, preexec_fn=cap if memory else None)
    except subprocess.TimeoutExpired:
        pytest.fail(f"ptdbg {' '.join(map(str, args))} ran past {timeout} s (it hung)")
    return done.returncode, done.stdout


def assert_good_rows_pass(rows):
    by_name = {row["NPU Name"]: row for row in rows}
    for name in GOOD:
        assert by_name[name]["Result"] == "pass", by_name[name]


# --- compare.json: the paths it names ------------------------------------------------------------------------

def compare_json(tmp_path, **paths):
    path = tmp_path / "compare.json"
    path.write_text(json.dumps(dict({"is_print_compare_log": False}, **paths)))
    return path


def test_compare_json_naming_dumps_through_symlinks_compares_them(tmp_path, capsys):
    npu, bench = msprobe(tmp_path / "npu"), msprobe(tmp_path / "bench")
    os.symlink(npu, str(tmp_path / "npu_link.json"))
    os.symlink(bench, str(tmp_path / "bench_link.json"))
    spec = compare_json(tmp_path, npu_path=str(tmp_path / "npu_link.json"), bench_path=str(tmp_path / "bench_link.json"))
    assert ptdbg_main(["-f", "pytorch", "compare", "-i", str(spec), "-o", str(tmp_path / "out"), "--quiet"]) == 0
    (report,) = (name for name in os.listdir(str(tmp_path / "out")) if name.endswith(".csv"))
    assert_good_rows_pass(rows_of(str(tmp_path / "out" / report)))


@pytest.mark.parametrize("key", ["npu_path", "bench_path", "stack_path"])
@pytest.mark.parametrize("through_link", [False, True], ids=["fifo", "link-to-fifo"])
def test_compare_json_naming_a_fifo_is_refused_at_once(tmp_path, key, through_link):
    # Before: "NPU dump file ... does not exist or is not a file" (a FIFO exists; the key was not named), and a
    # stack_path FIFO "Stack file ... does not exist."
    paths = {"npu_path": msprobe(tmp_path / "npu"), "bench_path": msprobe(tmp_path / "bench")}
    fifo = str(tmp_path / "fifo")
    os.mkfifo(fifo)
    named = fifo
    if through_link:
        named = str(tmp_path / "link")
        os.symlink(fifo, named)
    paths[key] = named
    spec = compare_json(tmp_path, **paths)
    started = time.monotonic()
    status, out = cli("-f", "pytorch", "compare", "-i", spec, "-o", tmp_path / "out", cwd=tmp_path, timeout=60)
    assert time.monotonic() - started < 60
    assert status == 2, out
    assert f"ptdbg compare: error: The compare.json {spec}: {key!r} names {named}" in out, out
    assert "which is a FIFO, not a regular file or a directory; it is not read." in out, out
    assert not (tmp_path / "out").exists()


def test_compare_json_that_is_itself_a_fifo_is_refused_at_once(tmp_path):
    fifo = tmp_path / "compare.json"
    os.mkfifo(str(fifo))
    status, out = cli("-f", "pytorch", "compare", "-i", fifo, "-o", tmp_path / "out", cwd=tmp_path, timeout=60)
    assert status == 2 and f"The compare.json {fifo} does not exist (or is not a file)." in out, out


def test_compare_json_naming_a_dangling_link_says_where_it_points(tmp_path):
    paths = {"npu_path": str(tmp_path / "gone"), "bench_path": msprobe(tmp_path / "bench")}
    os.symlink(str(tmp_path / "nowhere.json"), paths["npu_path"])
    spec = compare_json(tmp_path, **paths)
    status, out = cli("-f", "pytorch", "compare", "-i", spec, "-o", tmp_path / "out", cwd=tmp_path)
    assert status == 2
    assert ("The compare.json {}: 'npu_path' names {}, which does not exist (a symlink to {}).".format(
        spec, paths["npu_path"], tmp_path / "nowhere.json")) in out, out


# --- the writer's lock ------------------------------------------------------------------------------------

@pytest.mark.parametrize("fmt", ["pkl", "json"])
def test_a_fifo_where_the_dump_lock_goes_does_not_hang_the_compare(tmp_path, fmt):
    # Before: the torn-dump check opened .ptdbg.lock to read "pid host": a FIFO blocked it forever.
    if fmt == "pkl":
        npu, _ = legacy(tmp_path / "npu")
        bench, _ = legacy(tmp_path / "bench")
    else:
        npu, bench = msprobe(tmp_path / "npu"), msprobe(tmp_path / "bench")
    os.mkfifo(os.path.join(os.path.dirname(npu), ".ptdbg.lock"))
    status, out = cli("compare", npu, bench, tmp_path / "out", "--no-xlsx", cwd=tmp_path, timeout=60)
    assert status == 0, out
    assert ("NPU dump {} may be incomplete: its directory holds a dump lock that cannot be read (The dump lock {} is "
            "not a regular file (a FIFO); remove it, or choose another dump path.)".format(
                npu, os.path.join(os.path.dirname(npu), ".ptdbg.lock"))) in out
    status, out = cli("parse", npu, "Torch_relu_1_forward", cwd=tmp_path, timeout=60)
    assert status == 0 and "[Torch_relu_1_forward_output]" in out, out


# --- an api_mapping file ----------------------------------------------------------------------------------

BILLION_LAUGHS = """\
a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]
"""


@pytest.mark.parametrize("top", ["list", "mapping"])
def test_api_mapping_yaml_alias_bomb_is_refused_without_expanding(tmp_path, top):
    # Before: a top-level list of aliases (333 bytes) expanded into ParameterError's message (9**9 strings):
    # MemoryError after 22 s, or after 40 s under this test's 1 GiB address-space cap. A top-level mapping was
    # refused at its first value (a short list) by luck of the order.
    pytest.importorskip("yaml")
    bomb = tmp_path / "mapping.yaml"
    text = BILLION_LAUGHS if top == "mapping" else "".join("- " + line.split(": ", 1)[1] + "\n"
                                                          for line in BILLION_LAUGHS.splitlines())
    bomb.write_text(text)
    assert len(text.encode()) == (342 if top == "mapping" else 333)
    npu, _ = legacy(tmp_path / "npu")
    bench, _ = legacy(tmp_path / "bench")
    started = time.monotonic()
    status, out = cli("compare", npu, bench, tmp_path / "out", "--api-mapping", bomb, cwd=tmp_path,
                      memory=1 << 30, timeout=60)
    assert time.monotonic() - started < 30
    assert status == 2, out
    assert ("ptdbg compare: error: The api_mapping file {} uses a YAML alias (*a, line 2): a mapping of API names "
            "has no use for one, and aliases can make a few bytes expand into billions of values; write each "
            "name out.".format(bomb)) in out, out
    assert len(out) < 1000


def test_api_mapping_value_that_is_long_is_quoted_in_part(tmp_path):
    npu, _ = legacy(tmp_path / "npu")
    mapping = tmp_path / "mapping.json"
    mapping.write_text(json.dumps({"Functional_relu": ["x" * 100000]}))
    with pytest.raises(ParameterError) as caught:
        compare({"npu_pkl_path": npu, "bench_pkl_path": npu}, str(tmp_path / "out"), api_mapping=str(mapping))
    message = str(caught.value)
    assert message.startswith("Invalid api_mapping['Functional_relu']=['xxxxx")
    assert "xxxxx...: names must look like 'Functional_rms_norm'" in message and len(message) < 1000


def test_api_mapping_file_over_a_mebibyte_is_refused_unread(tmp_path):
    npu, _ = legacy(tmp_path / "npu")
    mapping = tmp_path / "mapping.json"
    with open(str(mapping), "w") as handle:
        handle.write('{"Functional_relu": "Functional_relu"' + " " * (1 << 20) + "}")
    with pytest.raises(FileFormatError, match=r"The api_mapping file .*mapping.json holds 1048614 bytes, more than "
                                              r"the 1048576 bytes such a file can hold; it is not read."):
        compare({"npu_pkl_path": npu, "bench_pkl_path": npu}, str(tmp_path / "out"), api_mapping=str(mapping))


# --- the finding file read back by run_ut's compare link --------------------------------------------------------

def test_a_finding_file_of_1_5_gb_is_refused_unread(tmp_path):
    # Before: read whole by the compare link (json.loads of 1.5 GB: under a 1 GiB cap, MemoryError).
    npu, npu_data = legacy(tmp_path / "npu", [["Torch_relu_9_forward_output", 0, [], "torch.float32", [4],
                                               _stats(np.ones(4))]], files={"Torch_relu_9_forward_output": np.ones(4)})
    bench, bench_data = legacy(tmp_path / "bench", [["Torch_relu_9_forward_output", 0, [], "torch.float32", [4],
                                                     _stats(np.zeros(4))]],
                               files={"Torch_relu_9_forward_output": np.zeros(4)})
    outcome = compare({"npu_pkl_path": npu, "bench_pkl_path": bench, "npu_dump_data_dir": npu_data,
                       "bench_dump_data_dir": bench_data, "is_print_compare_log": False}, str(tmp_path / "out"),
                      xlsx=False)
    finding = outcome.csv_path.replace("compare_result_", "compare_finding_").replace(".csv", ".json")
    assert os.path.isfile(finding)
    with open(finding, "r+b") as handle:  # sparse: 1.5 GB that takes no disk
        handle.truncate(1500 * 1000 * 1000)
    script = ("from ptdbg_ascend.precheck.compare_link import read_compare\n"
              "from ptdbg_ascend.errors import FileFormatError\n"
              "try:\n    read_compare({!r})\nexcept FileFormatError as error:\n    print('refused:', error)\n"
              .format(outcome.csv_path))

    def cap():
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))

    done = subprocess.run([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=120, preexec_fn=cap)
    assert done.returncode == 0, done.stdout
    assert ("refused: The compare finding {} holds 1500000000 bytes, more than the 1048576 bytes such a file can "
            "hold; it is not read.".format(finding)) in done.stdout, done.stdout


# --- a module record paired with an API record -----------------------------------------------------------------

MODULE_ARRAYS = {"input.0": np.arange(4, dtype=np.float32), "output": np.arange(4, dtype=np.float32) * 2}


def test_a_module_record_paired_with_an_api_record_does_not_crash(tmp_path, capsys):
    # The NPU side dumped the layer as a module (legacy module names, and an msprobe L0 entry); the bench side as
    # the API it calls. Mapped onto each other (api_mapping), by fuzzy matching, or not at all: a report, rows
    # that say what they compared, never a traceback. (Module support itself is another change's.)
    module = {"Module_layer1.Linear_0_forward_" + side: array for side, array in MODULE_ARRAYS.items()}
    api = {"Functional_linear_0_forward_" + side: array for side, array in MODULE_ARRAYS.items()}
    npu, npu_data = legacy(tmp_path / "npu", [[name, 0, [], "torch.float32", [4], _stats(array)]
                                              for name, array in module.items()], files=module)
    bench, bench_data = legacy(tmp_path / "bench", [[name, 0, [], "torch.float32", [4], _stats(array)]
                                                    for name, array in api.items()], files=api)
    mapping = tmp_path / "mapping.json"
    mapping.write_text(json.dumps({"Module_layer1.Linear": "Functional_linear"}))
    l0 = msprobe(tmp_path / "l0", {"Module.layer1.Linear.forward.0": {
        "input_args": [_leaf(MODULE_ARRAYS["input.0"])], "input_kwargs": {}, "output": [_leaf(MODULE_ARRAYS["output"])]}})
    runs = [
        (["compare", npu, bench, tmp_path / "o1", "--npu-dump-data-dir", npu_data, "--bench-dump-data-dir", bench_data,
          "--api-mapping", mapping], "o1"),
        (["compare", npu, bench, tmp_path / "o2", "--npu-dump-data-dir", npu_data, "--bench-dump-data-dir", bench_data,
          "--fuzzy-match"], "o2"),
        (["compare", l0, bench, tmp_path / "o3", "--api-mapping", mapping], "o3"),
        (["compare", bench, l0, tmp_path / "o4"], "o4"),
    ]
    for args, out in runs:
        capsys.readouterr()
        status = ptdbg_main([str(arg) for arg in args] + ["--quiet", "--no-xlsx"])
        printed = capsys.readouterr()
        # 3: incomplete (a record without a partner), never a traceback
        assert status in (0, 1, 3) and "Traceback" not in printed.out + printed.err, (args, printed.err)
        (report,) = (name for name in os.listdir(str(tmp_path / out)) if name.endswith(".csv"))
        rows = rows_of(str(tmp_path / out / report))
        assert_good_rows_pass(rows)
        names = {row["NPU Name"] for row in rows} | {row["Bench Name"] for row in rows}
        assert "Functional_linear_0_forward_output" in names, (out, names)
    mapped = {row["NPU Name"]: row for row in rows_of(os.path.join(str(tmp_path / "o1"), [
        name for name in os.listdir(str(tmp_path / "o1")) if name.endswith(".csv")][0]))}
    row = mapped["Module_layer1.Linear_0_forward_output"]
    assert row["Bench Name"] == "Functional_linear_0_forward_output" and row["Result"] == "pass", row
