"""A key that appears twice in one JSON object is never dropped silently: a warning naming the key, the
file and where in it for dumps (dump.json, stack.json, what compare, parse and convert read), a
FileFormatError for configuration files (config.json, the ACL dump config, compare's api_mapping file)."""

from __future__ import annotations

import json
import os

import pytest

from ptdbg_ascend.acl.config import load_acl_config
from ptdbg_ascend.comparison.api import compare
from ptdbg_ascend.comparison.parse_call import parse_lines
from ptdbg_ascend.config import load_config
from ptdbg_ascend.errors import FileFormatError, ParameterError
from ptdbg_ascend.jsonfile import ERROR, load_json

pytestmark = pytest.mark.torchfree

LEAF = ('{"type": "torch.Tensor", "dtype": "torch.float32", "shape": [2], "Max": 2.0, "Min": 1.0, "Mean": 1.5, '
        '"Norm": 2.236, "requires_grad": false}')


def dump_json(directory, duplicate_max=False, duplicate_call=False):
    """A statistics dump.json written as text (json.dumps cannot repeat a key)."""
    leaf = LEAF.replace('"Max": 2.0', '"Max": 2.0, "Max": 9.0') if duplicate_max else LEAF
    entry = '{{"input_args": [{0}], "input_kwargs": {{}}, "output": [{0}]}}'.format(leaf)
    calls = '"Torch.relu.0.forward": ' + entry
    if duplicate_call:
        calls += ', "Torch.relu.0.forward": ' + entry.replace("2.0", "3.0")
    os.makedirs(str(directory), exist_ok=True)
    path = os.path.join(str(directory), "dump.json")
    with open(path, "w") as handle:
        handle.write('{"task": "statistics", "level": "L1", "dump_data_dir": null, "data": {' + calls + '}}')
    return path


def test_dump_json_duplicate_is_a_warning_naming_key_file_and_place(tmp_path, capsys):
    npu = dump_json(tmp_path / "npu", duplicate_call=True)
    bench = dump_json(tmp_path / "bench")
    output = tmp_path / "out"
    output.mkdir()
    outcome = compare({"npu_pkl_path": npu, "bench_pkl_path": bench, "is_print_compare_log": False}, str(output))
    out = capsys.readouterr().out
    assert ("[WARNING]The dump file {} has a key that appears twice in one object: 'Torch.relu.0.forward' in data. "
            "The later value is used.".format(npu)) in out
    assert outcome.rows == 2 and outcome.first_failure is not None  # the later entry (max 3.0) is compared
    assert f"[WARNING]The dump file {bench}" not in out


def test_duplicate_inside_a_replaced_entry_is_still_named(tmp_path, capsys):
    path = dump_json(tmp_path / "npu", duplicate_max=True, duplicate_call=True)
    parse_lines(path, "Torch_relu_0_forward")
    assert ("has a key that appears twice in one object: 'Max' in an object that a later duplicate replaced; 'Max' in "
            "an object that a later duplicate replaced; 'Max' in data[\"Torch.relu.0.forward\"][\"input_args\"][0]; "
            "'Max' in data[\"Torch.relu.0.forward\"][\"output\"][0]; 'Torch.relu.0.forward' in data. The later "
            "value is used.") in capsys.readouterr().out


def test_duplicate_inside_a_kept_entry_names_its_place(tmp_path, capsys):
    path = dump_json(tmp_path / "npu", duplicate_max=True)
    lines = parse_lines(path, "Torch_relu_0_forward")
    assert "[max: 9.0]" in lines[-1]  # the later value
    assert ("'Max' in data[\"Torch.relu.0.forward\"][\"input_args\"][0]; 'Max' in data[\"Torch.relu.0.forward\"]"
            "[\"output\"][0]. The later value is used.") in capsys.readouterr().out


def test_stack_json_duplicate_is_a_warning(tmp_path, capsys):
    from ptdbg_ascend.readers.msprobe_json import read_stacks

    path = tmp_path / "stack.json"
    path.write_text('{"Torch.relu.0.forward": ["File a.py, line 1, in f,\\n x"], '
                    '"Torch.relu.0.forward": ["File b.py, line 2, in g,\\n y"]}')
    assert read_stacks(str(path))["Torch.relu.0.forward"] == (("b.py", "2", "g", "y"),)
    assert ("[WARNING]The stack file {} has a key that appears twice in one object: 'Torch.relu.0.forward' at the "
            "top level. The later value is used.".format(path)) in capsys.readouterr().out


def test_convert_warns_on_a_duplicate_in_the_dump(tmp_path, capsys):
    from ptdbg_ascend.compat.convert import convert

    source = dump_json(tmp_path / "rank", duplicate_call=True)
    convert(source, str(tmp_path / "legacy"))
    assert ("The msprobe dump file {} has a key that appears twice in one object: 'Torch.relu.0.forward' in "
            "data.".format(source)) in capsys.readouterr().out
    with open(str(tmp_path / "legacy" / "dump.pkl")) as handle:
        assert '"Torch_relu_0_forward_input.0", 0, [], "torch.float32", [2], [3.0,' in handle.read()


def test_config_json_duplicate_is_an_error(tmp_path):
    path = tmp_path / "config.json"
    path.write_text('{"task": "tensor", "dump_path": "/tmp/a", "task": "statistics"}')
    with pytest.raises(FileFormatError) as error:
        load_config(str(path))
    assert str(error.value) == ("The config file {} has a key that appears twice in one object: 'task' at the top "
                                "level. Keep one of each (JSON keeps only the last, silently).".format(path))
    path.write_text('{"task": "tensor", "tensor": {"scope": [], "list": ["relu"], "list": ["gelu"]}}')
    with pytest.raises(FileFormatError, match=r"'list' in tensor\. Keep one of each"):
        load_config(str(path))


def test_acl_dump_config_duplicate_is_an_error(tmp_path):
    path = tmp_path / "dump.json"
    path.write_text(json.dumps({"dump": {"dump_list": [], "dump_path": "/tmp/acl", "dump_mode": "all",
                                         "dump_op_switch": "on"}})[:-2] + ', "dump_mode": "output"}}')
    with pytest.raises(FileFormatError, match=r"^The ACL dump config .*dump\.json has a key that appears twice in one "
                                              r"object: 'dump_mode' in dump\. Keep one"):
        load_acl_config(str(path))


@pytest.mark.parametrize("name, text, message", [
    ("mapping.json", '{"NPU_npu_rms_norm": "Functional_rms_norm", "NPU_npu_rms_norm": "Functional_layer_norm"}',
     r"The api_mapping file .*mapping\.json has a key that appears twice in one object: 'NPU_npu_rms_norm' at the "
     r"top level"),
    ("mapping.yaml", "NPU_npu_rms_norm: Functional_rms_norm\nNPU_x: Functional_y\nNPU_npu_rms_norm: Functional_z\n",
     r"The api_mapping file .*mapping\.yaml has the key 'NPU_npu_rms_norm' twice in one mapping \(line 3\)"),
])
def test_api_mapping_file_duplicate_is_an_error(tmp_path, name, text, message):
    if name.endswith(".yaml"):
        pytest.importorskip("yaml")
    mapping = tmp_path / name
    mapping.write_text(text)
    dump = dump_json(tmp_path / "npu")
    output = tmp_path / "out"
    output.mkdir()
    with pytest.raises(FileFormatError, match=message):
        compare({"npu_pkl_path": dump, "bench_pkl_path": dump}, str(output), api_mapping=str(mapping))
    assert os.listdir(str(output)) == []


def test_load_json_without_duplicates_is_silent_and_checks_its_option(tmp_path, capsys):
    path = tmp_path / "a.json"
    path.write_text('{"a": [{"b": 1}, {"b": 2}], "c": {"b": 3}}')
    assert load_json(str(path), "dump file", duplicates=ERROR) == {"a": [{"b": 1}, {"b": 2}], "c": {"b": 3}}
    assert capsys.readouterr().out == ""
    with pytest.raises(ParameterError, match="duplicates"):
        load_json(str(path), "dump file", duplicates="ignore")
