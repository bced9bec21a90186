"""The migration side stays inside the paths it was given and never writes through links (issue 12):

* ``ptdbg convert`` with record names holding ``../``, ``/../`` or absolute paths (pkl and dump.json)
  writes nothing outside its target, warns naming each such record and converts the rest;
* ``--name ../../x`` is exit 2 with one line; a symlink at the target is exit 2;
* a tensor file of the input that is a symlink out of the dump is not read (warning naming the record);
* links planted at ``config.json.tmp`` / ``script.py.ptdbg-migrate.tmp`` (the old predictable temp names)
  leave their victims unchanged; a ``config.json`` that is a symlink is exit 2; a migrated script that is
  a symlink keeps the link and its target is rewritten.

Every CLI run is a real ``python -m ptdbg_ascend.cli`` process; exit codes are checked.
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")  # convert reads and writes .pt files

VICTIM_TEXT = "victim: must never change\n"


def ptdbg(*args, cwd):
    return subprocess.run([sys.executable, "-m", "ptdbg_ascend.cli"] + [str(arg) for arg in args], cwd=str(cwd),
                          capture_output=True, text=True, timeout=120)


def snapshot(root):
    """Every path under ``root`` (links not followed) -> its bytes (files), link target, or "dir"."""
    found = {}
    for directory, dirs, files in os.walk(str(root)):
        for name in dirs + files:
            path = os.path.join(directory, name)
            if os.path.islink(path):
                found[path] = "link:" + os.readlink(path)
            elif os.path.isdir(path):
                found[path] = "dir"
            else:
                with open(path, "rb") as handle:
                    found[path] = handle.read()
    return found


def changes_outside(before, after, target):
    """Paths added, removed or changed anywhere except ``target`` and what is under it."""
    target = str(target)
    keys = set(before) | set(after)
    return sorted(path for path in keys if path != target and not path.startswith(target + os.sep)
                  and before.get(path) != after.get(path))


# --- convert: hostile record names ---------------------------------------------------------------

GOOD = "Functional_relu_0_forward_input.0"
GOOD_ARRAY = np.array([1.0, -2.0, 3.0], dtype=np.float32)


def hostile_legacy_dump(tmp_path):
    """rank0/npu_dump.pkl with one good record and three whose names are paths, each with an npy where a
    naive ``os.path.join(npy_dir, name + ".npy")`` finds it (the directories the names climb through
    exist). Joined naively under ``out/.work/dump_tensor_data`` their .pt files would land in tmp_path."""
    rank = tmp_path / "in" / "rank0"
    npy_dir = rank / "npu_dump"
    npy_dir.mkdir(parents=True)
    (npy_dir / "Tensor_..").mkdir()
    (npy_dir / "Functional_x").mkdir()
    absolute = str(tmp_path / "victims" / "Tensor_add_0_forward_input.0")
    names = [GOOD,
             "Tensor_../../../../escaped_0_forward_input.0",  # ../ right after the prefix
             "Functional_x/../../../../up_0_forward_output",  # holds /../
             absolute]
    lines = [[name, 0, [], "torch.float32", [3], [3.0, -2.0, 0.6666666865348816, 3.7416573867739413]]
             for name in names]
    (rank / "npu_dump.pkl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    np.save(str(npy_dir / (GOOD + ".npy")), GOOD_ARRAY)
    outside = np.array([7.0, 7.0, 7.0], dtype=np.float32)
    np.save(str(tmp_path / "in" / "escaped_0_forward_input.0.npy"), outside)  # npu_dump/Tensor_../../.. = in/
    np.save(str(tmp_path / "up_0_forward_output.npy"), outside)
    (tmp_path / "victims").mkdir()
    np.save(absolute + ".npy", outside)
    return rank, names


def test_convert_legacy_with_path_names_writes_only_inside_and_warns(tmp_path):
    rank, names = hostile_legacy_dump(tmp_path)
    (tmp_path / "out").mkdir()  # the target's parent (the work directory is made there)
    before = snapshot(tmp_path)
    done = ptdbg("convert", rank / "npu_dump.pkl", tmp_path / "out" / "json", cwd=tmp_path)
    assert changes_outside(before, snapshot(tmp_path), tmp_path / "out" / "json") == []
    assert done.returncode == 0, done.stderr
    for bad in names[1:]:
        assert f"skipped the record {bad!r}" in done.stdout, done.stdout
    dump = json.loads((tmp_path / "out" / "json" / "dump.json").read_text())
    assert list(dump["data"]) == ["Functional.relu.0.forward"]
    assert sorted(os.listdir(str(tmp_path / "out" / "json" / "dump_tensor_data"))) == [
        "Functional.relu.0.forward.input.0.pt"]
    tensor = torch.load(str(tmp_path / "out" / "json" / "dump_tensor_data" / "Functional.relu.0.forward.input.0.pt"),
                        weights_only=True)
    assert tensor.tolist() == [1.0, -2.0, 3.0]


def hostile_msprobe_dump(tmp_path):
    """rank/dump.json: a good tensor entry, entries whose call names hold ../, /../ or an absolute path
    (scalars: no tensor file is needed for the old converter to write their npy), and a tensor whose
    data_name climbs out of dump_tensor_data."""
    rank = tmp_path / "in" / "rank"
    (rank / "dump_tensor_data").mkdir(parents=True)
    torch.save(torch.tensor([1.0, 2.0]), str(rank / "dump_tensor_data" / "Tensor.view.0.forward.input.0.pt"))
    torch.save(torch.tensor([9.0, 9.0]), str(tmp_path / "in" / "secret.pt"))
    tensor = {"type": "torch.Tensor", "dtype": "torch.float32", "shape": [2], "Max": 2.0, "Min": 1.0, "Mean": 1.5,
              "Norm": 2.23606797749979}
    scalar = {"input_args": [{"type": "int", "value": 3}], "input_kwargs": {}, "output": []}
    absolute = str(tmp_path / "victims" / "Torch.add.0.forward")
    # Joined naively under out/.work/dump/: the first lands in out/, the second in tmp_path.
    bad_calls = ["Tensor.../../../escaped.0.forward", "Functional.a/../../../../up.0.forward", absolute]
    data = {"Tensor.view.0.forward": {"input_args": [dict(tensor, data_name="Tensor.view.0.forward.input.0.pt")],
                                      "input_kwargs": {}, "output": []},
            "Tensor.mul.0.forward": {"input_args": [dict(tensor, data_name="../../secret.pt")],
                                     "input_kwargs": {}, "output": []}}
    for call in bad_calls:
        data[call] = scalar
    (rank / "dump.json").write_text(json.dumps({"task": "tensor", "level": "L1", "dump_data_dir": None,
                                                "data": data}))
    (tmp_path / "victims").mkdir()
    return rank, bad_calls


def test_convert_msprobe_with_path_names_writes_only_inside_and_warns(tmp_path):
    rank, bad_calls = hostile_msprobe_dump(tmp_path)
    (tmp_path / "out").mkdir()
    before = snapshot(tmp_path)
    done = ptdbg("convert", rank, tmp_path / "out" / "legacy", cwd=tmp_path)
    assert changes_outside(before, snapshot(tmp_path), tmp_path / "out" / "legacy") == []
    assert done.returncode == 0, done.stderr
    for bad in bad_calls:
        assert f"skipped the entry {bad!r}" in done.stdout, done.stdout
    assert "record Tensor_mul_0_forward_input.0 keeps its statistics but not its tensor" in done.stdout
    out = tmp_path / "out" / "legacy"
    assert (out / "dump.pkl").read_text() == "".join(json.dumps(line) + "\n" for line in [
        ["Tensor_view_0_forward_input.0", 0, [], "torch.float32", [2], [2.0, 1.0, 1.5, 2.23606797749979]],
        ["Tensor_mul_0_forward_input.0", 0, [], "torch.float32", [2], [2.0, 1.0, 1.5, 2.23606797749979]]])
    assert sorted(os.listdir(str(out / "dump"))) == ["Tensor_view_0_forward_input.0.npy"]
    assert np.load(str(out / "dump" / "Tensor_view_0_forward_input.0.npy")).tolist() == [1.0, 2.0]


@pytest.mark.parametrize("name", ["../../x", "a/b", "..", ".", ""])
def test_convert_name_must_be_a_plain_directory_name(tmp_path, name):
    rank, _ = hostile_msprobe_dump(tmp_path)
    before = snapshot(tmp_path)
    done = ptdbg("convert", rank, tmp_path / "out", "--name", name, cwd=tmp_path)
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert done.stderr.startswith("ptdbg convert: error: Invalid name={!r}: must be a plain directory name".format(
        name)), done.stderr
    assert snapshot(tmp_path) == before


def test_convert_name_with_a_nul_byte_or_too_long_is_a_parameter_error(tmp_path):
    from ptdbg_ascend.compat.convert import convert
    from ptdbg_ascend.errors import ParameterError

    rank, _ = hostile_msprobe_dump(tmp_path)
    with pytest.raises(ParameterError, match=r"Invalid name='a\\x00b': must not contain NUL bytes"):
        convert(str(rank), str(tmp_path / "out"), name="a\x00b")
    # NAME_MAX (255 bytes) must hold ".{name}.pkl.XXXXXXXX.tmp", the temporary name of {name}.pkl: 237 at most
    with pytest.raises(ParameterError, match=r"is too long: at most 237 bytes"):
        convert(str(rank), str(tmp_path / "out"), name="x" * 238)
    convert(str(rank), str(tmp_path / "out"), name="x" * 237)
    assert sorted(os.listdir(str(tmp_path / "out"))) == ["x" * 237, "x" * 237 + ".pkl"]


def test_output_path_refuses_a_path_that_resolves_outside_its_root(tmp_path):
    from ptdbg_ascend.compat.convert_fs import output_path
    from ptdbg_ascend.errors import DumpPathError

    (tmp_path / "root").mkdir()
    (tmp_path / "elsewhere").mkdir()
    os.symlink(str(tmp_path / "elsewhere"), str(tmp_path / "root" / "link"))
    assert output_path(str(tmp_path / "root"), "a", "b.npy") == str(tmp_path / "root" / "a" / "b.npy")
    with pytest.raises(DumpPathError, match="outside the output directory"):
        output_path(str(tmp_path / "root"), "link", "x.npy")
    for part in ("..", ".", "a/b", ""):
        with pytest.raises(DumpPathError, match="not a plain name"):
            output_path(str(tmp_path / "root"), part)


def test_convert_target_that_is_a_symlink_is_refused(tmp_path):
    rank, _ = hostile_legacy_dump(tmp_path)
    (tmp_path / "elsewhere").mkdir()
    os.symlink(str(tmp_path / "elsewhere"), str(tmp_path / "out"))
    before = snapshot(tmp_path)
    done = ptdbg("convert", rank / "npu_dump.pkl", tmp_path / "out", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr == "ptdbg convert: error: The target {} is a symlink; ptdbg convert does not write through " \
                          "links. Remove it or choose another target. Nothing was written.\n".format(tmp_path / "out")
    assert snapshot(tmp_path) == before


# --- convert: tensor files that are symlinks out of the input dump ---------------------------------------

def test_convert_legacy_does_not_read_an_npy_linked_out_of_the_dump(tmp_path):
    rank = tmp_path / "in" / "rank0"
    (rank / "npu_dump").mkdir(parents=True)
    np.save(str(tmp_path / "secret.npy"), np.array([42.0, 43.0, 44.0], dtype=np.float32))
    lines = [[GOOD, 0, [], "torch.float32", [3], [3.0, -2.0, 0.6666666865348816, 3.7416573867739413]],
             ["Functional_relu_0_forward_output", 0, [], "torch.float32", [3], [3.0, 0.0, 1.3333333730697632, 3.0]]]
    (rank / "npu_dump.pkl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    np.save(str(rank / "npu_dump" / (GOOD + ".npy")), GOOD_ARRAY)
    os.symlink(str(tmp_path / "secret.npy"), str(rank / "npu_dump" / "Functional_relu_0_forward_output.npy"))
    done = ptdbg("convert", rank, tmp_path / "out", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "record Functional_relu_0_forward_output keeps its statistics but not its tensor" in done.stdout
    assert "outside the data directory" in done.stdout
    dump = json.loads((tmp_path / "out" / "dump.json").read_text())
    output = dump["data"]["Functional.relu.0.forward"]["output"][0]
    assert output == {"type": "torch.Tensor", "dtype": "torch.float32", "shape": [3], "Max": 3.0, "Min": 0.0,
                      "Mean": 1.3333333730697632, "Norm": 3.0}  # statistics kept, no data_name
    assert os.listdir(str(tmp_path / "out" / "dump_tensor_data")) == ["Functional.relu.0.forward.input.0.pt"]
    assert f"Wrote {tmp_path / 'out' / 'dump.json'}." in done.stdout
    assert "1 tensor file(s) in all." in done.stdout


def test_convert_msprobe_does_not_read_a_pt_linked_out_of_the_dump(tmp_path):
    rank = tmp_path / "in" / "rank"
    (rank / "dump_tensor_data").mkdir(parents=True)
    torch.save(torch.tensor([5.0, 6.0]), str(tmp_path / "secret.pt"))
    os.symlink(str(tmp_path / "secret.pt"), str(rank / "dump_tensor_data" / "Tensor.view.0.forward.input.0.pt"))
    leaf = {"type": "torch.Tensor", "dtype": "torch.float32", "shape": [2], "Max": 6.0, "Min": 5.0, "Mean": 5.5,
            "Norm": 7.810249675906654, "data_name": "Tensor.view.0.forward.input.0.pt"}
    (rank / "dump.json").write_text(json.dumps({"task": "tensor", "level": "L1", "dump_data_dir": None, "data": {
        "Tensor.view.0.forward": {"input_args": [leaf], "input_kwargs": {}, "output": []}}}))
    done = ptdbg("convert", rank, tmp_path / "out", "--name", "npu_dump", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "record Tensor_view_0_forward_input.0 keeps its statistics but not its tensor" in done.stdout
    assert (tmp_path / "out" / "npu_dump.pkl").read_text() == json.dumps(
        ["Tensor_view_0_forward_input.0", 0, [], "torch.float32", [2], [6.0, 5.0, 5.5, 7.810249675906654]]) + "\n"
    assert os.listdir(str(tmp_path / "out")) == ["npu_dump.pkl"]  # no npy dir: nothing was read
    assert "0 tensor file(s) in all." in done.stdout


# --- export-config and migrate: no writes through planted links -----------------------------------------

LEGACY_SCRIPT = """\
from ptdbg_ascend import *
set_dump_path("./dump/npu_dump.pkl")
set_dump_switch("ON", mode="api_list", api_list=["relu"])
set_dump_switch("OFF")
"""


EXPORT_SCRIPT = """\
import torch
from ptdbg_ascend import *
set_dump_path("./dump/npu_dump.pkl")
register_hook(torch.nn.ReLU(), acc_cmp_dump, rank=0)
set_dump_switch("ON", mode="api_list", api_list=["relu"])
set_dump_switch("OFF")
"""


def plant_victim(tmp_path, name="victim.txt"):
    victim = tmp_path / name
    victim.write_text(VICTIM_TEXT)
    return victim


def test_export_config_does_not_write_through_a_link_at_config_json_tmp(tmp_path):
    (tmp_path / "train.py").write_text(EXPORT_SCRIPT)
    victim = plant_victim(tmp_path)
    os.symlink(str(victim), str(tmp_path / "config.json.tmp"))
    done = ptdbg("export-config", "-o", "config.json", "train.py", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert victim.read_text() == VICTIM_TEXT
    assert os.readlink(str(tmp_path / "config.json.tmp")) == str(victim)  # left alone
    config = json.loads((tmp_path / "config.json").read_text())
    assert (config["task"], config["dump_path"], config["tensor"]["list"]) == ("tensor", "./dump", ["relu"])
    assert not os.path.islink(str(tmp_path / "config.json"))


def test_export_config_refuses_a_config_json_that_is_a_symlink(tmp_path):
    (tmp_path / "train.py").write_text(EXPORT_SCRIPT)
    victim = plant_victim(tmp_path)
    os.symlink(str(victim), str(tmp_path / "config.json"))
    done = ptdbg("export-config", "-o", "config.json", "train.py", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr == "ptdbg export-config: error: Cannot write config.json: it is a symlink (to {}); " \
                          "ptdbg_ascend does not write through links. Remove the link, or pass the file it points " \
                          "to.\n".format(victim)
    assert victim.read_text() == VICTIM_TEXT
    assert os.path.islink(str(tmp_path / "config.json"))


MIGRATED_SCRIPT = """\
from ptdbg_ascend import *
debugger = PrecisionDebugger(config_path="./config.json")
debugger.start()
debugger.stop()
"""


def test_migrate_does_not_write_through_links_at_its_old_temp_names(tmp_path):
    script = tmp_path / "script.py"
    script.write_text(LEGACY_SCRIPT)
    os.chmod(str(script), 0o755)
    victim = plant_victim(tmp_path)
    victim2 = plant_victim(tmp_path, "victim2.txt")
    os.symlink(str(victim), str(tmp_path / "script.py.ptdbg-migrate.tmp"))
    os.symlink(str(victim2), str(tmp_path / "config.json.tmp"))
    done = ptdbg("migrate", "script.py", "--write", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert victim.read_text() == VICTIM_TEXT and victim2.read_text() == VICTIM_TEXT
    assert script.read_text() == MIGRATED_SCRIPT
    assert os.stat(str(script)).st_mode & 0o777 == 0o755  # an executable script stays executable
    assert json.loads((tmp_path / "config.json").read_text())["dump_path"] == "./dump"
    assert sorted(os.listdir(str(tmp_path))) == ["config.json", "config.json.tmp", "script.py",
                                                 "script.py.ptdbg-migrate.tmp", "victim.txt", "victim2.txt"]


def test_migrate_of_a_symlinked_script_rewrites_its_target_and_keeps_the_link(tmp_path):
    (tmp_path / "src").mkdir()
    real = tmp_path / "src" / "real_train.py"
    real.write_text(LEGACY_SCRIPT)
    os.symlink(str(real), str(tmp_path / "train.py"))
    done = ptdbg("migrate", "train.py", "--write", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert os.readlink(str(tmp_path / "train.py")) == str(real)
    assert real.read_text() == MIGRATED_SCRIPT
    assert "train.py is a symlink: the migrated script is written to its target {}; the link is kept.".format(
        real) in done.stdout
    assert json.loads((tmp_path / "config.json").read_text())["dump_path"] == "./dump"


def test_migrate_refuses_a_config_json_symlink_and_writes_neither_file(tmp_path):
    script = tmp_path / "script.py"
    script.write_text(LEGACY_SCRIPT)
    victim = plant_victim(tmp_path)
    os.symlink(str(victim), str(tmp_path / "config.json"))
    done = ptdbg("migrate", "script.py", "--write", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "config.json: it is a symlink" in done.stderr
    assert victim.read_text() == VICTIM_TEXT
    assert script.read_text() == LEGACY_SCRIPT
    assert sorted(os.listdir(str(tmp_path))) == ["config.json", "script.py", "victim.txt"]
