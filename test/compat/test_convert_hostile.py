"""``ptdbg convert`` of records no dump writes: one such record is a warning naming the file, the line (or
entry) and the record, and the rest converts; nothing it holds chooses how much memory is taken or what
reaches the terminal.

Every case is a real dump written here, converted by the real ``python -m ptdbg_ascend.cli`` process; the
converted files are read back.
"""

import json
import os
import resource
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")  # convert reads and writes .pt files

from ptdbg_ascend.compat.convert import convert  # noqa: E402

GOOD = ["Torch_relu_0_forward_output", 0, [], "torch.float32", [4], [1.0, 1.0, 1.0, 2.0]]
HOSTILE = "Torch_add_0_forward_input.1"


def ptdbg(*args, cwd, memory=None):
    """``ptdbg ARGS`` in a child process (its address space capped at ``memory`` bytes when given, so a
    conversion that pads a list to 10**12 items fails there instead of taking the machine)."""
    def cap():
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))

    return subprocess.run([sys.executable, "-m", "ptdbg_ascend.cli"] + [str(arg) for arg in args], cwd=str(cwd),
                          capture_output=True, text=True, timeout=300,
                          preexec_fn=cap if memory else None)


def legacy_dump(root, lines, npy=("Torch_relu_0_forward_output",)):
    """``root/dump.pkl`` (lines: lists JSON-encoded, strings as they are) + ``root/dump/{name}.npy``."""
    (root / "dump").mkdir(parents=True)
    (root / "dump.pkl").write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n"
                                           for line in lines))
    for name in npy:
        np.save(str(root / "dump" / (name + ".npy")), np.ones(4, np.float32))
    return root / "dump.pkl"


class Done:
    """What an in-process ``convert`` printed (the log goes to stdout) and its exit status (0, or 2 and the
    error as the CLI prints it)."""

    def __init__(self, source, target, capsys):
        from ptdbg_ascend.errors import PtdbgError

        capsys.readouterr()
        self.returncode, self.stderr = 0, ""
        try:
            convert(str(source), str(target))
        except PtdbgError as error:
            self.returncode, self.stderr = 2, str(error)
        self.stdout = capsys.readouterr().out


def converted(out):
    return json.loads((out / "dump.json").read_text())["data"]


def assert_good_converted(data):
    leaf = data["Torch.relu.0.forward"]["output"][0]
    assert leaf["data_name"] == "Torch.relu.0.forward.output.0.pt" and leaf["Max"] == 1.0


# --- scalar records that hold another kind of value ----------------------------------------------------------

@pytest.mark.parametrize("dtype, value, said", [
    ("<class 'int'>", "NaN", "nan"),
    ("<class 'int'>", "Infinity", "inf"),
    ("<class 'int'>", "1.5", "1.5"),
    ("<class 'float'>", '"abc"', "'abc'"),
    ("<class 'float'>", '"1.5"', "'1.5'"),
    ("<class 'bool'>", "0.5", "0.5"),
    ("<class 'int'>", "1" + "0" * 400, "a 401-digit integer"),
], ids=["int-NaN", "int-Infinity", "int-1.5", "float-string", "float-numeric-string", "bool-0.5", "int-400-digits"])
def test_scalar_record_holding_another_kind_is_skipped(tmp_path, capsys, dtype, value, said):
    # Before: ValueError / OverflowError from int() or float() abandoned the conversion (exit 2, "an unexpected
    # error"); '1.5' and 0.5 were converted silently to 1.5 and True, 1.5 to the int 1.
    kind = dtype[len("<class '"):-2]
    line = '["{}", 0, [], "{}", "[]", [{v}, {v}, {v}, {v}]]'.format(HOSTILE, dtype, v=value)
    pkl = legacy_dump(tmp_path / "in", [GOOD, line])
    done = Done(pkl, tmp_path / "out", capsys)
    assert done.returncode == 0, done.stderr
    assert ("Line 2 of {}: skipped the record '{}': recorded as {} but holds {}; nothing was converted for it."
            .format(pkl, HOSTILE, kind, said)) in done.stdout, done.stdout
    data = converted(tmp_path / "out")
    assert_good_converted(data)
    assert "Torch.add.0.forward" not in data


@pytest.mark.parametrize("dtype, value, kept", [
    ("<class 'int'>", "3.0", 3), ("<class 'int'>", "-2", -2), ("<class 'bool'>", "1.0", True),
    ("<class 'bool'>", "false", False), ("<class 'float'>", "NaN", "nan"), ("<class 'float'>", "2", 2.0),
], ids=["int-3.0", "int--2", "bool-1.0", "bool-false", "float-NaN", "float-2"])
def test_scalar_records_as_dumps_write_them_still_convert(tmp_path, capsys, dtype, value, kept):
    line = '["{}", 0, [], "{}", "[]", [{v}, {v}, {v}, {v}]]'.format(HOSTILE, dtype, v=value)
    pkl = legacy_dump(tmp_path / "in", [GOOD, line])
    done = Done(pkl, tmp_path / "out", capsys)
    assert done.returncode == 0 and "skipped" not in done.stdout, done.stdout
    (scalar,) = (leaf for leaf in converted(tmp_path / "out")["Torch.add.0.forward"]["input_args"] if leaf)
    if kept == "nan":
        assert scalar["type"] == "float" and scalar["value"] != scalar["value"]
    else:
        assert scalar == {"type": dtype[len("<class '"):-2], "value": kept} and type(scalar["value"]) is type(kept)


# --- tensor records with a bad shape or statistics ----------------------------------------------------------

@pytest.mark.parametrize("shape", [["x"], [-1], [1.5], [10 ** 400], [[2]], "[4]"],
                         ids=["x", "negative", "float", "400-digits", "nested", "string"])
def test_legacy_tensor_record_with_a_bad_shape_is_skipped(tmp_path, capsys, shape):
    # Before: the shape was copied into dump.json as it was (a 400-digit size included), without a word.
    line = [HOSTILE, 0, [], "torch.float32", shape, [1.0, 1.0, 1.0, 2.0]]
    pkl = legacy_dump(tmp_path / "in", [GOOD, line], npy=("Torch_relu_0_forward_output", HOSTILE))
    done = Done(pkl, tmp_path / "out", capsys)
    assert done.returncode == 0, done.stderr
    assert f"Line 2 of {pkl}: skipped the record '{HOSTILE}': shape " in done.stdout, done.stdout
    assert "is not a list of non-negative integers" in done.stdout
    data = converted(tmp_path / "out")
    assert_good_converted(data)
    assert "Torch.add.0.forward" not in data
    assert os.listdir(str(tmp_path / "out" / "dump_tensor_data")) == ["Torch.relu.0.forward.output.0.pt"]


def test_msprobe_tensor_leaf_with_a_bad_shape_is_skipped(tmp_path):
    rank = tmp_path / "in"
    rank.mkdir()
    leaf = {"type": "torch.Tensor", "dtype": "torch.float32", "Max": 1.0, "Min": 1.0, "Mean": 1.0, "Norm": 2.0}
    data = {"Torch.relu.0.forward": {"input_args": [dict(leaf, shape=[4])], "input_kwargs": {}, "output": []},
            "Torch.add.0.forward": {"input_args": [dict(leaf, shape=["x"])], "input_kwargs": {}, "output": []}}
    (rank / "dump.json").write_text(json.dumps({"task": "statistics", "level": "L1", "data": data}))
    done = ptdbg("convert", rank, tmp_path / "out", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert ("{}: skipped the record 'Torch_add_0_forward_input.0': shape ['x'] is not a list of non-negative "
            "integers (below 2**63); nothing was converted for it.".format(rank / "dump.json")) in done.stdout
    assert (tmp_path / "out" / "dump.pkl").read_text() == json.dumps(
        ["Torch_relu_0_forward_input.0", 0, [], "torch.float32", [4], [1.0, 1.0, 1.0, 2.0]]) + "\n"


@pytest.mark.parametrize("literal, said", [("1" + "0" * 400, "a 401-digit integer"), ("-1e400", "-1e400")],
                         ids=["400-digits", "-1e400"])
def test_statistic_beyond_float64_converts_as_null_both_ways(tmp_path, capsys, literal, said):
    # Before: pkl -> dump.json copied the 400 digits as they were; -1e400 became -Infinity (an overflow).
    line = f'["{HOSTILE}", 0, [], "torch.float32", [4], [1.0, {literal}, 1.0, 2.0]]'
    pkl = legacy_dump(tmp_path / "in", [GOOD, line])
    done = Done(pkl, tmp_path / "json", capsys)
    assert done.returncode == 0, done.stderr
    assert (f"Line 2 of {pkl}: the min of {HOSTILE} is {said}, beyond float64's range: converted as null."
            in done.stdout), done.stdout
    leaf = converted(tmp_path / "json")["Torch.add.0.forward"]["input_args"][1]
    assert (leaf["Max"], leaf["Min"], leaf["Norm"]) == (1.0, None, 2.0)
    # and from a dump.json that holds one
    dump = tmp_path / "json" / "dump.json"
    dump.write_text(dump.read_text().replace('"Min": null', '"Min": ' + literal))
    done = Done(tmp_path / "json", tmp_path / "back", capsys)
    assert done.returncode == 0, done.stderr
    assert (f"{dump}: the Min of {HOSTILE} is {said}, beyond float64's range: converted as null."
            in done.stdout), done.stdout
    lines = [json.loads(text) for text in (tmp_path / "back" / "dump.pkl").read_text().splitlines()]
    assert [HOSTILE, 0, [], "torch.float32", [4], [1.0, None, 1.0, 2.0]] in lines


def test_dump_step_of_any_kind_is_said_not_a_crash(tmp_path, capsys):
    # Before: TypeError "unhashable type: 'list'" (a set of the steps) abandoned the conversion.
    lines = [GOOD] + [[f"Torch_relu_{index}_forward_output", step, [], "torch.float32", [4],
                       [1.0, 1.0, 1.0, 2.0]] for index, step in enumerate([[1], "a", 101, {"x": 1}, 7, 8, 9], 1)]
    pkl = legacy_dump(tmp_path / "in", lines)
    done = Done(pkl, tmp_path / "out", capsys)
    assert done.returncode == 0, done.stderr
    assert (f"{pkl} holds dump_step 'a', 101, 7, 8, 9 and 2 more; msprobe dump.json has no such field."
            in done.stdout), done.stdout
    assert len(converted(tmp_path / "out")) == 8


# --- indices and names that cannot become files or lists ---------------------------------------------------------

def test_record_index_of_10_to_the_12_is_skipped_not_padded(tmp_path):
    # Before: _place padded a list to 10**12 nulls (MemoryError; here, under a 2 GiB cap, exit 2).
    name = "Torch_add_0_forward_input.1000000000000"
    pkl = legacy_dump(tmp_path / "in", [GOOD, [name, 0, [], "torch.float32", [4], [1.0, 1.0, 1.0, 2.0]],
                                        ["Torch_add_0_forward_input.3", 0, [], "torch.float32", [4],
                                         [1.0, 1.0, 1.0, 2.0]]])
    done = ptdbg("convert", pkl, tmp_path / "out", cwd=tmp_path, memory=2 << 30)
    assert done.returncode == 0, done.stderr
    assert ("Line 2 of {}: skipped the record '{}': its index 1000000000000 would pad its list with 1000000000000 "
            "nulls, more than the 1000192 this conversion may pad (1000000 and 64 per line of the file); nothing was "
            "converted for it.".format(pkl, name) in done.stdout), done.stdout
    data = converted(tmp_path / "out")
    assert_good_converted(data)
    assert data["Torch.add.0.forward"]["input_args"][:3] == [None, None, None]  # input.3 is padded as usual
    assert data["Torch.add.0.forward"]["input_args"][3]["shape"] == [4]


def test_record_name_too_long_for_its_temporary_file_keeps_its_statistics(tmp_path):
    # 251 bytes with ".npy": a plain file name, but ".{name}.XXXXXXXX.tmp" of its .pt is over 255 bytes.
    # Before: DumpWriteError "[Errno 36] File name too long" abandoned the whole conversion.
    name = "Torch_" + "a" * (251 - len("Torch__0_forward_output.npy")) + "_0_forward_output"
    assert len(name + ".npy") == 251
    pkl = legacy_dump(tmp_path / "in", [GOOD, [name, 0, [], "torch.float32", [4], [1.0, 1.0, 1.0, 2.0]]],
                      npy=("Torch_relu_0_forward_output", name))
    done = ptdbg("convert", pkl, tmp_path / "out", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    dotted = f"Torch.{'a' * (251 - len('Torch__0_forward_output.npy'))}.0.forward.output.0.pt"
    assert ("Line 2 of {}: record {} keeps its statistics but not its tensor: the file name {} and its temporary "
            "name (.{}.XXXXXXXX.tmp) would take {} bytes, more than the 255 a file name can."
            .format(pkl, name, dotted, dotted, len(dotted) + 14)) in done.stdout, done.stdout
    data = converted(tmp_path / "out")
    assert_good_converted(data)
    (entry,) = (value for key, value in data.items() if key != "Torch.relu.0.forward")
    assert entry["output"][0]["Max"] == 1.0 and "data_name" not in entry["output"][0]
    assert os.listdir(str(tmp_path / "out" / "dump_tensor_data")) == ["Torch.relu.0.forward.output.0.pt"]


def test_msprobe_record_name_too_long_for_its_npy_keeps_its_statistics(tmp_path):
    rank = tmp_path / "in"
    (rank / "dump_tensor_data").mkdir(parents=True)
    api = "a" * (255 - len("Torch._0.forward.input.0.pt"))
    dotted = f"Torch.{api}.0.forward"
    torch.save(torch.ones(4), str(rank / "dump_tensor_data" / (dotted + ".input.0.pt")))
    leaf = {"type": "torch.Tensor", "dtype": "torch.float32", "shape": [4], "Max": 1.0, "Min": 1.0, "Mean": 1.0,
            "Norm": 2.0, "data_name": dotted + ".input.0.pt"}
    scalar = {"type": "int", "value": 3}
    data = {dotted: {"input_args": [leaf, scalar], "input_kwargs": {}, "output": []}}
    (rank / "dump.json").write_text(json.dumps({"task": "tensor", "level": "L1", "data": data}))
    done = ptdbg("convert", rank, tmp_path / "out", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    legacy = f"Torch_{api}_0_forward_input."
    for index in (0, 1):
        assert "{}: record {}{} keeps its statistics but not its tensor: the file name".format(
            rank / "dump.json", legacy, index) in done.stdout, done.stdout
    lines = [json.loads(text) for text in (tmp_path / "out" / "dump.pkl").read_text().splitlines()]
    assert [line[0] for line in lines] == [legacy + "0", legacy + "1"]
    assert not (tmp_path / "out" / "dump").exists() or os.listdir(str(tmp_path / "out" / "dump")) == []


def test_counter_too_long_names_the_line_in_part(tmp_path):
    # 19 digits: outside the grammar, a refused conversion naming the line (as any name outside it); a 5000-digit
    # one is over 255 characters: skipped as any name that cannot be a file name. Both quoted in part.
    pkl = legacy_dump(tmp_path / "a", [GOOD, [f"Torch_add_{'1' * 19}_forward_input.0", 0, [],
                                              "torch.float32", [4], [1.0, 1.0, 1.0, 2.0]]])
    done = ptdbg("convert", pkl, tmp_path / "a_out", cwd=tmp_path)
    assert done.returncode == 2 and not (tmp_path / "a_out").exists()
    assert ("Line 2 of {}: 'Torch_add_1111111111111111111_forward_input.0' is not a legacy dump record: it holds a "
            "number of 19 digits (a call counter or index has at most 18).".format(pkl)) in done.stderr, done.stderr
    long = f"Torch_add_{'1' * 5000}_forward_input.0"
    pkl = legacy_dump(tmp_path / "b", [GOOD, [long, 0, [], "torch.float32", [4], [1.0, 1.0, 1.0, 2.0]]])
    done = ptdbg("convert", pkl, tmp_path / "b_out", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert f"Line 2 of {pkl}: skipped the record {long[:255]!r}... ({len(long)} characters)" in done.stdout
    assert "1" * 300 not in done.stdout + done.stderr
    assert_good_converted(converted(tmp_path / "b_out"))


# --- what reaches the terminal ----------------------------------------------------------------------------

def test_value_kinds_from_the_dump_are_escaped_when_printed(tmp_path):
    # Before: the CLI printed each dropped kind raw: ESC [2J cleared the screen, U+202E reversed the line.
    rank = tmp_path / "in"
    rank.mkdir()
    kind = "\x1b[2J\x1b]0;owned\x07\u202eevil" + "x" * 500
    data = {"Torch.add.0.forward": {"input_args": [{"type": kind, "value": 1}, {"type": "str", "value": "a"}],
                                    "input_kwargs": {}, "output": []}}
    (rank / "dump.json").write_text(json.dumps({"task": "statistics", "level": "L1", "data": data}))
    done = ptdbg("convert", rank, tmp_path / "out", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    for control in ("\x1b", "\x07", "\u202e"):
        assert control not in done.stdout + done.stderr
    assert "value(s) of type \\x1b[2J\\x1b]0;owned\\x07\\u202eevil" in done.stdout, done.stdout
    assert "x" * 100 not in done.stdout  # the kind is shown in part
    assert "1 value(s) of type str" in done.stdout
