"""Recording of the legacy calls and ``export_config`` (torch-free: calls are recorded by hand here; the
real legacy functions are exercised by test_export_cli.py)."""

import json
import sys

import pytest

from ptdbg_ascend import call_log, legacy
from ptdbg_ascend.call_log import LegacyCall, clear_calls, record_call, recorded_calls
from ptdbg_ascend.compat import export_config
from ptdbg_ascend.errors import DumpPathError

pytestmark = pytest.mark.torchfree


class Net:
    pass


@pytest.fixture(autouse=True)
def empty_log():
    clear_calls()
    yield
    clear_calls()


def test_record_keeps_arguments_model_class_and_hook_name():
    record_call("register_hook", {"model": Net(), "hook": legacy.overflow_check, "overflow_nums": 3,
                                  "dump_mode": "api", "dump_config": None, "rank": None})
    record_call("set_dump_switch", {"switch": "ON", "scope": ("a", "b")})
    assert recorded_calls() == (
        LegacyCall("register_hook", {"model": "Net", "hook": "overflow_check", "overflow_nums": 3,
                                     "dump_mode": "api", "dump_config": None, "rank": None}),
        LegacyCall("set_dump_switch", {"switch": "ON", "scope": ["a", "b"]}),
    )


def test_recording_failure_is_logged_never_raised(monkeypatch, capsys):
    class Broken(list):
        def append(self, item):
            raise MemoryError("no room")

    monkeypatch.setattr(call_log, "_CALLS", Broken())
    record_call("seed_all", {"seed": 1})  # must not raise
    assert "Could not record the legacy call seed_all" in capsys.readouterr().out


def test_export_config_from_the_recorded_calls(tmp_path, capsys):
    record_call("set_dump_path", {"fpath": "./out/npu_dump.pkl", "dump_tag": "ptdbg_dump"})
    record_call("register_hook", {"model": Net(), "hook": legacy.acc_cmp_dump, "overflow_nums": None,
                                  "dump_mode": "api", "dump_config": None, "rank": None})
    record_call("set_dump_switch", {"switch": "ON", "mode": "range", "scope": ["Torch_relu_0_forward",
                                    "Torch_relu_2_forward"], "api_list": None, "filter_switch": "ON",
                                    "dump_mode": None, "summary_only": True})
    target = tmp_path / "config.json"
    caveats = export_config(str(target))
    assert json.loads(target.read_text()) == {
        "task": "statistics", "dump_path": "./out", "rank": [], "step": [], "level": "L1", "seed": 1234,
        "is_deterministic": False, "enable_dataloader": False, "acl_config": "",
        "statistics": {"scope": ["Torch.relu.0.forward", "Torch.relu.2.forward"], "list": [], "data_mode": ["all"],
                       "summary_mode": "statistics"},
    }
    assert [caveat.call for caveat in caveats] == ["set_dump_switch(filter_switch='ON')", "seed_all",
                                                  "seed_all(rm_dropout=False)"]
    out = capsys.readouterr().out
    assert "Not mapped exactly: set_dump_switch(filter_switch='ON')" in out


def test_export_config_into_a_missing_directory_names_it(tmp_path):
    with pytest.raises(DumpPathError, match="does not exist"):
        export_config(str(tmp_path / "no" / "config.json"), calls=[])
    assert not (tmp_path / "no").exists()


def test_importing_the_shim_does_not_import_torch():
    import subprocess

    code = "import sys, ptdbg_ascend, ptdbg_ascend.compat; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], check=True, stdout=subprocess.PIPE, text=True).stdout
    assert out.strip() == "False"


def test_a_window_per_step_is_recorded_once(monkeypatch):
    for _ in range(1000):
        record_call("set_dump_switch", {"switch": "ON", "mode": "all"})
        record_call("set_dump_switch", {"switch": "OFF", "mode": "all"})
    record_call("seed_all", {"seed": 1})
    record_call("seed_all", {"seed": 2})
    record_call("seed_all", {"seed": 1})  # differs from the last seed_all: kept, the order matters
    assert [(c.function, c.arguments.get("switch", c.arguments.get("seed"))) for c in recorded_calls()] == [
        ("set_dump_switch", "ON"), ("set_dump_switch", "OFF"), ("seed_all", 1), ("seed_all", 2), ("seed_all", 1)]


def test_the_log_is_capped_and_the_export_says_so(monkeypatch, capsys):
    monkeypatch.setattr(call_log, "MAX_RECORDED_CALLS", 3)
    for index in range(10):
        record_call("set_dump_switch", {"switch": "ON", "mode": "list", "scope": [f"Torch_relu_{index}_forward"]})
    calls = recorded_calls()
    assert len(calls) == 4 and calls[-1].function == call_log.TRUNCATED
    assert "More than 3 different legacy calls" in capsys.readouterr().out
    from ptdbg_ascend.compat import map_calls
    assert any(caveat.call == call_log.TRUNCATED for caveat in map_calls(calls).caveats)
