"""ACL dump.json validation and the helper that writes a correct one (no torch needed: runs in the
Python 3.8 torch-free pass too, which is why it lives here and not in test/acl)."""

from __future__ import annotations

import json
import os

import pytest

from ptdbg_ascend.acl.config import load_acl_config, write_acl_dump_config
from ptdbg_ascend.errors import FileFormatError, ParameterError

pytestmark = pytest.mark.torchfree


def _write(tmp_path, content, name="dump.json"):
    path = tmp_path / name
    path.write_text(content if isinstance(content, str) else json.dumps(content), encoding="utf-8")
    return str(path)


def test_helper_writes_the_guide_example(tmp_path):
    path = str(tmp_path / "dump.json")
    config = write_acl_dump_config(path, "./dump/output")
    with open(path, encoding="utf-8") as handle:
        assert json.load(handle) == {"dump": {"dump_list": [], "dump_path": "./dump/output", "dump_mode": "all",
                                              "dump_op_switch": "on"}}
    assert config.config_path == os.path.abspath(path)
    assert (config.dump_path, config.dump_mode, config.dump_op_switch, config.dump_list) == ("./dump/output", "all", "on", [])


def test_guide_example_is_accepted(tmp_path):
    path = _write(tmp_path, '{\n "dump":\n {\n "dump_list":[],\n "dump_path":"./dump/output",\n "dump_mode":"output",\n'
                            ' "dump_op_switch":"on"\n }\n}\n')
    assert load_acl_config(path).dump_mode == "output"


@pytest.mark.parametrize("content, key, fragment", [
    ({"dump_path": "x"}, "the top level", "it must be an object with the key 'dump'"),
    ([1, 2], "the top level", "it must be an object with the key 'dump'"),
    ({"dump": []}, "dump", "it must be an object"),
    ({"dump": {"dump_path": "x", "dump_mode": "all", "dump_op_switch": "on"}}, "dump", "the keys ['dump_list'] are missing"),
    ({"dump": {"dump_list": [], "dump_path": "x", "dump_mode": "all", "dump_op_switch": "on", "dump_step": 1}}, "dump",
     "unknown keys ['dump_step']"),
    ({"dump": {"dump_list": {}, "dump_path": "x", "dump_mode": "all", "dump_op_switch": "on"}}, "dump.dump_list",
     "it must be a list"),
    ({"dump": {"dump_list": [], "dump_path": "", "dump_mode": "all", "dump_op_switch": "on"}}, "dump.dump_path",
     "it must be a non-empty directory path"),
    ({"dump": {"dump_list": [], "dump_path": "x", "dump_mode": "both", "dump_op_switch": "on"}}, "dump.dump_mode",
     "allowed: ['output', 'input', 'all']"),
    ({"dump": {"dump_list": [], "dump_path": "x", "dump_mode": "all", "dump_op_switch": "ON"}}, "dump.dump_op_switch",
     "allowed: ['on', 'off']"),
])
def test_wrong_keys_name_the_file_and_the_key(tmp_path, content, key, fragment):
    path = _write(tmp_path, content)
    with pytest.raises(FileFormatError) as raised:
        load_acl_config(path)
    message = str(raised.value)
    assert message.startswith(f"Invalid ACL dump config {path}: {key} is ")
    assert fragment in message
    assert "write_acl_dump_config writes one" in message


def test_not_json(tmp_path):
    path = _write(tmp_path, '{"dump": {"dump_list": [],')
    with pytest.raises(FileFormatError, match=fr"^The ACL dump config {path} is not valid JSON: "):
        load_acl_config(path)


def test_missing_file(tmp_path):
    path = str(tmp_path / "missing.json")
    with pytest.raises(FileFormatError, match=fr"^The ACL dump config {path} does not exist"):
        load_acl_config(path)


@pytest.mark.parametrize("value", ["./dump.yaml", 3, None])
def test_not_a_json_path(value):
    with pytest.raises(ParameterError, match=r"^Invalid dump_config="):
        load_acl_config(value)


@pytest.mark.parametrize("kwargs, parameter", [({"dump_mode": "both"}, "dump_mode"), ({"dump_op_switch": "yes"}, "dump_op_switch"),
                                               ({"dump_list": "x"}, "dump_list")])
def test_helper_refuses_bad_values(tmp_path, kwargs, parameter):
    with pytest.raises(ParameterError, match=fr"^Invalid {parameter}="):
        write_acl_dump_config(str(tmp_path / "dump.json"), "./out", **kwargs)
    assert not (tmp_path / "dump.json").exists()


def test_cli_writes_and_checks_a_dump_json(tmp_path, capsys):
    from ptdbg_ascend.cli import main

    path = str(tmp_path / "dump.json")
    assert main(["acl-config", path, "--dump-path", "./out", "--dump-mode", "output"]) == 0
    with open(path, encoding="utf-8") as handle:
        assert json.load(handle)["dump"] == {"dump_list": [], "dump_path": "./out", "dump_mode": "output",
                                             "dump_op_switch": "on"}
    assert main(["acl-config", path, "--check"]) == 0
    assert "is a valid ACL dump config: dump_path=./out, dump_mode=output, dump_op_switch=on." in capsys.readouterr().out
    broken = _write(tmp_path, {"dump": {"dump_path": "x"}}, "broken.json")
    assert main(["acl-config", broken, "--check"]) == 2
    assert capsys.readouterr().err.startswith(f"ptdbg acl-config: error: Invalid ACL dump config {broken}: dump is ")
