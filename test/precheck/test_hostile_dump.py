"""A shared dump runs nothing: crafted dump.json files against the pre-check (issue 17, items 1, 2, 4, 5).

Every call below would, if run, leave a marker file, import a planted module, change a global setting of
torch, read outside the dump or crash the run. Each must end as a SKIP row saying why, with the marker
absent, the module never imported, the setting unchanged, and the run finishing normally."""

from __future__ import annotations

import csv
import os
import pickle
import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch")

from hostile_dumps import nested, raw, tensor_leaf, value, write_dump  # noqa: E402

from ptdbg_ascend.errors import FileFormatError, ParameterError  # noqa: E402
from ptdbg_ascend.precheck.run_ut import run_ut  # noqa: E402


def read_rows(path):
    with open(path, encoding="utf-8-sig", newline="") as handle:
        return {row[0]: row for row in list(csv.reader(handle))[1:]}


class MarkerPayload:
    """Unpickling it opens (creates) the marker file: what a malicious pickle does."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


PLANTED_MODULE = textwrap.dedent("""
    # imported only if the pre-check runs code a dump names
    open({marker!r}, "w").close()
    import torch
    Evil = torch.FloatTensor
""")


@pytest.fixture
def scene(tmp_path):
    """A working directory with a planted module (writes a marker when imported), a pickle payload and a
    tensor file outside any dump; the markers are paths that must never exist."""
    work = tmp_path / "work"
    work.mkdir()
    markers = {name: str(tmp_path / ("marker_" + name)) for name in ("save", "pickle", "import", "from_file",
                                                                       "vf_from_file", "aten_from_file")}
    (work / "planted_module.py").write_text(PLANTED_MODULE.format(marker=markers["import"]))
    payload = tmp_path / "payload.pkl"
    payload.write_bytes(pickle.dumps(MarkerPayload(markers["pickle"])))
    outside = tmp_path / "outside.pt"
    torch.save(torch.ones(3), str(outside))
    return work, markers, str(payload), str(outside)


def hostile_calls(markers, payload, outside):
    """``(dotted API name, input_args, input_kwargs)`` of calls with effects beyond their return value."""
    x = torch.ones(3)
    leaf = tensor_leaf("x.pt", x)
    return [
        ("Torch.save", [leaf, value("str", markers["save"])], {}),
        ("Torch.load", [value("str", payload)], {"weights_only": value("bool", False)}),
        ("Torch.load", [value("str", outside)], {}),  # a tensor outside the dump, judged "pass" before
        ("Torch.from_file", [value("str", markers["from_file"])], {"shared": value("bool", True),
                                                                   "size": value("int", 4)}),
        ("VF.from_file", [value("str", markers["vf_from_file"])], {"shared": value("bool", True),
                                                                   "size": value("int", 4)}),
        ("Aten.from_file.default", [value("str", markers["aten_from_file"])], {"shared": value("bool", True),
                                                                                "size": value("int", 4)}),
        ("Torch._import_dotted_name", [value("str", "planted_module")], {}),
        ("Torch.set_default_tensor_type", [value("str", "planted_module.Evil")], {}),
        ("Torch.set_default_dtype", [value("torch.dtype", "torch.float64")], {}),
        ("Torch.use_deterministic_algorithms", [value("bool", True)], {}),
        ("Torch.set_num_threads", [value("int", 1)], {}),
        ("Torch.manual_seed", [value("int", 7)], {}),
        ("Tensor.__reduce_ex__", [leaf, value("int", 2)], {}),
        ("Distributed.all_reduce", [leaf], {}),
        ("Tensor.cuda", [leaf], {}),
        ("Torch.relu", [leaf], {}),  # the one ordinary call: it runs and passes
    ], {"x.pt": x}


def check_nothing_ran(markers, rows):
    for name, marker in markers.items():
        assert not os.path.exists(marker), f"the {name} marker exists: code named by the dump ran"
    for name, row in rows.items():
        if name.startswith("Torch.relu."):
            assert row[1:3] == ["pass", " "], row
        else:
            assert row[1] == "SKIP", row
            assert "is not an API of the wrap list" in row[3] or "is never re-run from a dump" in row[3], row


def test_hostile_calls_from_the_cli_run_nothing_and_exit_normally(scene, tmp_path, child_env):
    work, markers, payload, outside = scene
    calls, tensors = hostile_calls(markers, payload, outside)
    dump = write_dump(str(tmp_path / "dump"), calls, tensors)
    for command in (["run-ut"], ["multi-run-ut", "-n", "2"]):
        out = tmp_path / ("out_" + command[0])
        process = subprocess.run([sys.executable, "-m", "ptdbg_ascend.cli"] + command + [
            "-api_info", dump, "-o", str(out), "--no-progress"], cwd=str(work), env=child_env,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=300)
        output = process.stdout.decode(errors="replace")
        assert process.returncode == 0, output
        assert "1 pass, 0 warning, 0 error, 15 SKIP" in output, output
        result = [name for name in os.listdir(str(out)) if name.startswith("accuracy_checking_result_")][0]
        rows = read_rows(str(out / result))
        assert len(rows) == 16
        check_nothing_ran(markers, rows)


def test_hostile_calls_in_process_leave_torch_settings_and_random_state_unchanged(scene, tmp_path, monkeypatch):
    work, markers, payload, outside = scene
    monkeypatch.chdir(str(work))
    monkeypatch.syspath_prepend(str(work))  # the planted module is importable: nothing may import it
    calls, tensors = hostile_calls(markers, payload, outside)
    dump = write_dump(str(tmp_path / "dump"), calls, tensors)
    before = (torch.get_default_dtype(), torch.are_deterministic_algorithms_enabled(), torch.get_num_threads(),
              torch.get_rng_state())
    outcome = run_ut(dump, str(tmp_path / "out"), progress=False)
    after = (torch.get_default_dtype(), torch.are_deterministic_algorithms_enabled(), torch.get_num_threads(),
             torch.get_rng_state())
    assert before[:3] == after[:3]
    assert torch.equal(before[3], after[3])  # the runs' manual_seed did not touch the caller's generator
    assert "planted_module" not in sys.modules
    check_nothing_ran(markers, read_rows(outcome.result_csv))
    assert outcome.counts == {"pass": 1, "SKIP": 15}
    reasons = dict(outcome.skipped)
    assert reasons["Distributed.all_reduce.13"] == ("Distributed.all_reduce is never re-run from a dump: it "
                                                    "communicates with the other ranks (collective communication) "
                                                    "(category distributed).")
    assert reasons["Torch.save.0"].startswith("Torch.save is not an API of the wrap list")


# One API per refused category, as if a user had added it to the wrap list: the categories alone must stop it.
# Each is replaced by a spy that leaves a marker when called; (prefix, API, the category it must fall in).
# (None of them is one the runner itself calls: manual_seed is, so initial_seed stands for the RNG.)
CATEGORY_PROBES = [
    ("Torch", "save", "file_io"), ("Torch", "pickler_hook", "serialization"),
    ("Torch", "_import_dotted_name", "imports"), ("Torch", "set_default_dtype", "global_state"),
    ("Torch", "initial_seed", "rng"), ("Tensor", "share_memory_", "storage"),
    ("Torch", "spawn_workers", "threads_and_processes"), ("Torch", "all_gather_object", "distributed"),
    ("Torch", "empty_cache", "devices"), ("Torch", "record_function", "profiler_and_logging"),
    ("Tensor", "register_hook", "autograd_side_effects"), ("Tensor", "__sizeof__", "special_methods"),
]


def test_every_refused_category_stops_its_apis_even_when_they_are_wrapped(tmp_path, monkeypatch):
    from ptdbg_ascend.precheck import admission

    assert {category for _, _, category in CATEGORY_PROBES} == {c.name for c in admission.categories()}
    x = torch.ones(2)
    calls = [(f"{prefix}.{api}", [tensor_leaf("x.pt", x)], {}) for prefix, api, _ in CATEGORY_PROBES]
    dump = write_dump(str(tmp_path / "dump"), calls, {"x.pt": x})
    markers = {}
    for prefix, api, category in CATEGORY_PROBES:
        found = admission.category_of(prefix, api)
        assert found is not None and found.name == category, (prefix, api, found)
        markers[(prefix, api)] = str(tmp_path / f"called_{prefix}_{api}")

        def spy(*args, _marker=markers[(prefix, api)], **kwargs):
            open(_marker, "w").close()
            return torch.ones(1)

        monkeypatch.setattr(torch.Tensor if prefix == "Tensor" else torch, api, spy, raising=False)
    extended = dict(admission.wrap_list())
    for prefix, api, _ in CATEGORY_PROBES:
        extended[prefix] = extended[prefix] | {api}
    monkeypatch.setattr(admission, "wrap_list", lambda: extended)
    outcome = run_ut(dump, str(tmp_path / "out"), progress=False)
    for (prefix, api), marker in markers.items():
        assert not os.path.exists(marker), f"{prefix}.{api} ran"
    reasons = dict(outcome.skipped)
    for index, (prefix, api, category) in enumerate(CATEGORY_PROBES):
        reason = reasons[f"{prefix}.{api}.{index}"]
        assert reason.startswith(f"{prefix}.{api} is never re-run from a dump"), reason
        assert reason.endswith(f"(category {category})."), reason


FORBIDDEN_MODULES = ("torch.serialization", "torch.hub", "torch.distributed", "torch.random", "torch.profiler",
                     "torch.multiprocessing", "torch.utils", "torch.cuda", "torch.backends", "torch.jit",
                     "torch._dynamo", "torch.autograd.profiler", "importlib", "pickle", "builtins", "os", "io")


def test_every_admitted_api_falls_in_no_category_and_is_torch_math():
    """Walks every name the pre-check may run: none falls in a refused category, and none resolves to a
    function of a module with effects (serialization, hub, distributed, RNG, profiler, processes...)."""
    from ptdbg_ascend.precheck import admission

    from ptdbg_ascend.precheck.execution import Unrunnable, resolve

    admitted = admission.admitted()
    assert len(admitted) > 1000
    resolved = 0
    for prefix, api in admitted:
        assert admission.category_of(prefix, api) is None, (prefix, api)
        assert admission.refusal(prefix, api) is None, (prefix, api)
        try:
            function = resolve(prefix, api)
        except Unrunnable:
            continue  # not in this torch (or an NPU API without torch_npu)
        resolved += 1
        module = getattr(function, "__module__", None) or ""
        assert not module.startswith(FORBIDDEN_MODULES), (prefix, api, module)
    assert resolved > 900


# --- arguments are data ----------------------------------------------------------------------------------

def test_arguments_are_rebuilt_from_their_recorded_type_only(tmp_path):
    x = torch.randn(2, 3)
    leaf = tensor_leaf("x.pt", x)
    deep = nested(800, value("int", 1))  # 960 in the report; pytest's own stack leaves json less room
    calls = [
        ("Functional.gelu", [leaf], {"approximate": value("str", "tanh")}),  # a word: runs
        ("Functional.gelu", [leaf], {"approximate": value("str", "/etc/passwd")}),  # a path: refused
        ("Torch.add", [leaf, value("=1+2", 1)], {}),  # crashed the run with a ValueError before
        ("Torch.add", [leaf, value("int", "3")], {}),  # an int that is a string
        ("Torch.add", [leaf, value("int", True)], {}),  # a bool is not an int
        ("Tensor.to", [leaf, value("torch.dtype", "torch.save")], {}),  # not a dtype, never getattr(torch, ...)
        ("Torch.sum", [leaf], {"dim": value("slice", ["a", None, None])}),
        ("Torch.add", [leaf, deep], {}),  # 800 levels deep: RecursionError ended the run before
        ("Torch.einsum", [value("str", "ij,kj->ik"), leaf, leaf], {}),  # an einsum equation: runs
        ("Torch.einsum", [value("str", "__import__('os')"), leaf, leaf], {}),
        ("Torch.add", [leaf, value("float32", 2.5)], {}),  # a numpy scalar: runs
        ("Torch.add", [leaf, value("object", 2.5)], {}),  # numpy.dtype("object"): refused
        ("Tensor.to", [leaf, value("str", "cpu")], {}),  # a device name: the run's device
    ]
    outcome = run_ut(write_dump(str(tmp_path / "dump"), calls, {"x.pt": x}), str(tmp_path / "out"), progress=False)
    rows = read_rows(outcome.result_csv)
    assert [rows["Functional.gelu.0"][1], rows["Torch.einsum.8"][1], rows["Torch.add.10"][1],
            rows["Tensor.to.12"][1]] == ["pass"] * 4
    expected = {
        "Functional.gelu.1": "the string '/etc/passwd' is not an argument the pre-check accepts",
        "Torch.add.2": "values of type '=1+2' are not rebuilt",
        "Torch.add.3": "recorded as int but holds '3'",
        "Torch.add.4": "recorded as int but holds True",
        "Tensor.to.5": "unknown dtype 'torch.save'",
        "Torch.sum.6": "recorded as slice but holds ['a', None, None]",
        "Torch.add.7": "its dump entry is nested more than 35 levels deep",
        "Torch.einsum.9": "the string \"__import__('os')\" is not an argument the pre-check accepts",
        "Torch.add.11": "values of type 'object' are not rebuilt",
    }
    for name, words in expected.items():
        assert rows[name][1] == "SKIP" and words in rows[name][3], (name, rows[name])
    assert outcome.counts == {"pass": 4, "SKIP": 9}


def test_numbers_beyond_float64_are_skip_rows_not_infinities(tmp_path):
    # Before: json read 1e400 as inf and -1e400 as -inf (Torch.add ran with -inf and passed); a 400-digit int
    # argument reached torch; a 5000-digit one made the whole dump "not valid JSON".
    x = torch.randn(4)
    leaf = tensor_leaf("x.pt", x)
    calls = [
        ("Torch.add", [leaf, value("float", raw("-1e400"))], {}),
        ("Torch.add", [leaf, value("int", raw("1" + "0" * 400))], {}),
        ("Torch.add", [leaf, value("int", raw("9" * 5000))], {}),
        ("Torch.relu", [tensor_leaf("x.pt", x, shape=[raw("1" + "0" * 400)])], {}),
        ("Torch.add", [leaf, value("float", raw("-Infinity"))], {}),  # what a dump writes: runs
        ("Torch.relu", [leaf], {}),
    ]
    outcome = run_ut(write_dump(str(tmp_path / "dump"), calls, {"x.pt": x}), str(tmp_path / "out"), progress=False)
    rows = read_rows(outcome.result_csv)
    expected = {
        "Torch.add.0": "recorded as float but holds <-1e400, beyond float64's range>",
        "Torch.add.1": "recorded as int but holds <a 401-digit integer, beyond float64's range>",
        "Torch.add.2": "recorded as int but holds <a 5000-digit integer, beyond float64's range>",
        "Torch.relu.3": "shape [<a 401-digit integer, beyond float64's range>] cannot be rebuilt",
    }
    for name, words in expected.items():
        assert rows[name][1] == "SKIP" and words in rows[name][3], (name, rows[name])
    assert rows["Torch.add.4"][1] == "pass" and rows["Torch.relu.5"][1] == "pass"


def test_a_call_key_written_twice_is_said_and_the_later_entry_runs(tmp_path, capsys):
    x = torch.randn(4)
    dump = write_dump(str(tmp_path / "dump"), [("Torch.relu", [tensor_leaf("x.pt", x)], {})], {"x.pt": x})
    with open(dump) as handle:
        text = handle.read()
    earlier = '"Torch.relu.0.forward": {"input_args": [%s], "input_kwargs": {}, "output": []}' % (
        '{"type": "torch.Tensor", "dtype": "torch.float16", "shape": [9], "Max": 1.0, "Min": -1.0, "Mean": 0.0, '
        '"Norm": 1.0}')
    with open(dump, "w") as handle:
        handle.write(text.replace('"data": {', '"data": {' + earlier + ", ", 1))
    capsys.readouterr()
    outcome = run_ut(dump, str(tmp_path / "out"), progress=False)
    out = capsys.readouterr().out
    assert ("The dump file {} has a key that appears twice in one object: 'Torch.relu.0.forward' in data. The later "
            "value is used.".format(dump)) in out
    rows = read_rows(outcome.result_csv)
    assert list(rows) == ["Torch.relu.0"] and rows["Torch.relu.0"][1] == "pass"  # the later entry: x.pt, [4]


# --- confined inputs ----------------------------------------------------------------------------------

def test_the_dump_never_chooses_its_data_directory(tmp_path):
    x = torch.randn(3)
    elsewhere = tmp_path / "elsewhere"
    write_dump(str(elsewhere), [], {"x.pt": x})  # tensors an attacker points at
    dump = write_dump(str(tmp_path / "dump"), [("Torch.relu", [tensor_leaf("x.pt", x)], {})],
                      extra={"dump_data_dir": str(elsewhere / "dump_tensor_data")}, with_data_dir=False)
    with pytest.raises(FileFormatError, match=r"names tensor files, but their directory \S+dump/dump_tensor_data "
                                              r"is missing.*--data-dir"):
        run_ut(dump, str(tmp_path / "out"), progress=False)
    assert not (tmp_path / "out").exists()
    # the user names it: read from there
    outcome = run_ut(dump, str(tmp_path / "out"), progress=False, data_dir=str(elsewhere / "dump_tensor_data"))
    assert outcome.counts == {"pass": 1}
    with pytest.raises(ParameterError, match="data_dir"):
        run_ut(dump, str(tmp_path / "out2"), progress=False, data_dir=str(tmp_path / "nowhere"))


def test_non_regular_files_are_refused_before_they_are_opened(tmp_path):
    x = torch.randn(3)
    dump = write_dump(str(tmp_path / "dump"), [("Torch.relu", [tensor_leaf("fifo.pt", x)], {}),
                                               ("Torch.relu", [tensor_leaf("link.pt", x)], {})], {})
    os.mkfifo(str(tmp_path / "dump" / "dump_tensor_data" / "fifo.pt"))
    torch.save(x, str(tmp_path / "secret.pt"))
    os.symlink(str(tmp_path / "secret.pt"), str(tmp_path / "dump" / "dump_tensor_data" / "link.pt"))
    fifo_dump = tmp_path / "fifo.json"
    os.mkfifo(str(fifo_dump))
    with pytest.raises(FileFormatError, match="is not a regular file"):
        run_ut(str(fifo_dump), str(tmp_path / "out"), progress=False)  # blocked forever before
    outcome = run_ut(dump, str(tmp_path / "out"), progress=False)
    rows = read_rows(outcome.result_csv)
    assert rows["Torch.relu.0"][1] == "SKIP" and "is not a regular file; it is not read" in rows["Torch.relu.0"][3]
    assert rows["Torch.relu.1"][1] == "SKIP" and "outside the data directory" in rows["Torch.relu.1"][3]


def test_a_tensor_file_must_hold_the_tensor_its_record_describes(tmp_path):
    x = torch.randn(4, 4)
    calls = [("Torch.relu", [tensor_leaf("x.pt", x, shape=[2, 2])], {}),
             ("Torch.relu", [tensor_leaf("x.pt", x, dtype="torch.float16")], {})]
    outcome = run_ut(write_dump(str(tmp_path / "dump"), calls, {"x.pt": x}), str(tmp_path / "out"), progress=False)
    rows = read_rows(outcome.result_csv)
    assert "holds a tensor of shape [4, 4], the dump records [2, 2]" in rows["Torch.relu.0"][3]
    assert "holds a torch.float32 tensor, the dump records torch.float16" in rows["Torch.relu.1"][3]
