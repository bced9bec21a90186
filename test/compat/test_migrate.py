"""``ptdbg migrate``: the legacy calls become PrecisionDebugger + start/stop, everything else stays byte for byte."""

import json
import os

import pytest

pytest.importorskip("libcst")

from ptdbg_ascend.cli import main as ptdbg_main  # noqa: E402
from ptdbg_ascend.compat.migrate import migrate_file, migrate_source  # noqa: E402
from ptdbg_ascend.errors import FileFormatError, ParameterError  # noqa: E402

pytestmark = pytest.mark.torchfree

GUIDE_SCRIPT = '''\
import torch
from ptdbg_ascend import *

# fix the seeds first (same weights on both devices)
seed_all(mode=True)
set_dump_path("./npu_dump/npu_dump.pkl", dump_tag='all')
model   =  build_model( )   # odd spacing is kept
register_hook(model, acc_cmp_dump)
for step, batch in enumerate(loader):
    if step == 0:
        set_dump_switch("ON", mode="api_stack", filter_switch="OFF")  # first step only
    loss = model(batch).sum();  loss.backward()
    if step == 0:
        set_dump_switch("OFF")
compare_later = compare  # compare is not a dump call: untouched
'''

GUIDE_MIGRATED = '''\
import torch
from ptdbg_ascend import *

# fix the seeds first (same weights on both devices)
debugger = PrecisionDebugger(config_path="./config.json")
model   =  build_model( )   # odd spacing is kept
for step, batch in enumerate(loader):
    if step == 0:
        debugger.start()  # first step only
    loss = model(batch).sum();  loss.backward()
    if step == 0:
        debugger.stop()
compare_later = compare  # compare is not a dump call: untouched
'''


def test_guide_script_is_rewritten_and_the_rest_kept_byte_for_byte():
    migration = migrate_source(GUIDE_SCRIPT, "train.py")
    assert migration.ok
    assert migration.new_source == GUIDE_MIGRATED
    config = migration.mapping.config
    assert (config["task"], config["level"], config["dump_path"]) == ("tensor", "L1", "./npu_dump")
    assert (config["seed"], config["is_deterministic"]) == (1234, True)
    assert migration.diff().startswith("--- a/train.py\n+++ b/train.py\n")


def test_explicit_imports_are_updated_and_seed_all_kept_when_used_again():
    source = (
        "from ptdbg_ascend import seed_all, set_dump_path, register_hook, acc_cmp_dump, set_dump_switch, compare\n"
        "def main(model):\n"
        "    set_dump_path('./d/npu.pkl')\n"
        "    register_hook(model, acc_cmp_dump)\n"
        "    seed_all(7)\n"
        "    set_dump_switch('ON', mode='list', scope=['Functional_conv2d_0_forward'], filter_switch='OFF')\n"
        "    model()\n"
        "    set_dump_switch('OFF')\n"
    )
    migration = migrate_source(source, "t.py")
    assert migration.new_source == (
        "from ptdbg_ascend import PrecisionDebugger, seed_all, compare\n"
        "def main(model):\n"
        "    debugger = PrecisionDebugger(config_path=\"./config.json\")\n"
        "    seed_all(7)\n"
        "    debugger.start()\n"
        "    model()\n"
        "    debugger.stop()\n"
    )
    assert migration.mapping.config["tensor"]["list"] == ["Functional.conv2d.0.forward"]
    assert migration.mapping.config["seed"] == 7


def test_module_alias_and_overflow_check():
    source = (
        "import ptdbg_ascend as pd\n"
        "pd.register_hook(net, pd.overflow_check, overflow_nums=3)\n"
        "pd.set_overflow_check_switch('ON')\n"
        "train()\n"
        "pd.set_overflow_check_switch('OFF')\n"
    )
    migration = migrate_source(source, "t.py")
    assert migration.new_source == (
        "import ptdbg_ascend as pd\n"
        "debugger = pd.PrecisionDebugger(config_path=\"./config.json\")\n"
        "debugger.start()\n"
        "train()\n"
        "debugger.stop()\n"
    )
    assert migration.mapping.config["overflow_check"]["overflow_nums"] == 3


def test_model_may_be_any_expression_but_the_hook_must_be_a_marker():
    good = "from ptdbg_ascend import *\nregister_hook(build()[0], hook=acc_cmp_dump)\nset_dump_switch('ON')\n"
    assert migrate_source(good).ok
    bad = "from ptdbg_ascend import *\nregister_hook(net, my_hook)\n"
    assert [str(issue) for issue in migrate_source(bad, "t.py").issues] == [
        "t.py:2: register_hook(...): hook my_hook is not acc_cmp_dump or overflow_check"]


def test_existing_debugger_name_is_not_shadowed():
    source = "from ptdbg_ascend import *\ndebugger = 1\nset_dump_path('./a.pkl')\nset_dump_switch('ON')\n"
    assert migrate_source(source).new_source == (
        "from ptdbg_ascend import *\ndebugger = 1\n"
        "ptdbg_debugger = PrecisionDebugger(config_path=\"./config.json\")\nptdbg_debugger.start()\n")


def test_what_cannot_be_rewritten_is_flagged_with_file_and_line():
    source = (
        "from ptdbg_ascend import *\n"          # 1
        "def setup(model, names):\n"            # 2
        "    register_hook(model, acc_cmp_dump)\n"   # 3
        "    set_dump_switch('ON', mode='list', scope=names)\n"  # 4
        "def train():\n"                        # 5
        "    ok = set_dump_switch('OFF')\n"     # 6
        "set_dump_path(path)\n"                 # 7
    )
    migration = migrate_source(source, "train.py")
    assert not migration.ok
    assert migration.new_source == source
    assert [str(issue) for issue in migration.issues] == [
        "train.py:4: set_dump_switch(...): argument names is not a literal, so the config cannot be computed from it",
        "train.py:6: set_dump_switch(...) is used inside an expression; only a statement of its own can be rewritten",
        "train.py:7: set_dump_path(...): argument path is not a literal, so the config cannot be computed from it",
    ]


def test_calls_spread_over_functions_are_flagged():
    source = ("from ptdbg_ascend import *\n"
              "def a(m):\n    register_hook(m, acc_cmp_dump)\n"
              "def b():\n    set_dump_switch('ON')\n")
    migration = migrate_source(source, "s.py")
    assert [(issue.line, "several functions" in issue.message) for issue in migration.issues] == [(5, True)]


def test_not_python_is_a_clear_error():
    with pytest.raises(FileFormatError, match=r"notes.txt:2:\d+: not valid Python"):
        migrate_source("from ptdbg_ascend import *\nthis is : not python(\n", "notes.txt")


def test_missing_script_names_the_parameter(tmp_path):
    with pytest.raises(ParameterError, match="script"):
        migrate_file(str(tmp_path / "nope.py"))


def test_cli_dry_run_prints_the_diff_and_writes_nothing(tmp_path, capsys):
    script = tmp_path / "train.py"
    script.write_text(GUIDE_SCRIPT)
    assert ptdbg_main(["migrate", str(script)]) == 0
    out = capsys.readouterr().out
    assert "-set_dump_switch(\"OFF\")" not in out  # the OFF call was indented
    assert "+        debugger.stop()\n" in out
    assert "Dry run: nothing written" in out
    assert script.read_text() == GUIDE_SCRIPT
    assert os.listdir(str(tmp_path)) == ["train.py"]


def test_cli_write_writes_script_and_config(tmp_path, capsys):
    script = tmp_path / "train.py"
    script.write_text(GUIDE_SCRIPT)
    assert ptdbg_main(["migrate", str(script), "--write"]) == 0
    assert script.read_text() == GUIDE_MIGRATED
    config = json.loads((tmp_path / "config.json").read_text())
    assert config == {
        "task": "tensor", "dump_path": "./npu_dump", "rank": [], "step": [], "level": "L1", "seed": 1234,
        "is_deterministic": True, "enable_dataloader": False, "acl_config": "",
        "tensor": {"scope": [], "list": [], "data_mode": ["all"], "backward_input": [], "file_format": "npy"},
    }
    out = capsys.readouterr().out
    assert "dump_tag" in out  # the caveats are listed


def test_cli_write_refuses_when_something_cannot_be_rewritten(tmp_path, capsys):
    script = tmp_path / "train.py"
    source = "from ptdbg_ascend import *\nset_dump_path(p)\nset_dump_switch('ON')\n"
    script.write_text(source)
    assert ptdbg_main(["migrate", str(script), "--write"]) == 1
    err = capsys.readouterr().err
    assert f"{script}:2: set_dump_path(...): argument p is not a literal" in err
    assert "Nothing was written" in err
    assert script.read_text() == source
    assert os.listdir(str(tmp_path)) == ["train.py"]


def test_cli_output_and_config_options(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(GUIDE_SCRIPT)
    assert ptdbg_main(["migrate", str(script), "--write", "-o", str(tmp_path / "new.py"),
                       "--config", str(tmp_path / "cfg.json")]) == 0
    assert script.read_text() == GUIDE_SCRIPT
    assert f"PrecisionDebugger(config_path=\"{tmp_path / 'cfg.json'}\")" in (tmp_path / "new.py").read_text()
    assert json.loads((tmp_path / "cfg.json").read_text())["task"] == "tensor"


def test_script_without_legacy_calls_is_left_alone(tmp_path, capsys):
    script = tmp_path / "plain.py"
    script.write_text("print('hi')\n")
    assert ptdbg_main(["migrate", str(script), "--write"]) == 0
    assert "nothing to migrate" in capsys.readouterr().out
    assert os.listdir(str(tmp_path)) == ["plain.py"]


def test_crlf_line_endings_and_tabs_are_kept():
    source = "from ptdbg_ascend import *\r\nseed_all()\r\nif True:\r\n\tset_dump_switch('ON')\r\n\tx = 1\r\n"
    assert migrate_source(source).new_source == (
        "from ptdbg_ascend import *\r\ndebugger = PrecisionDebugger(config_path=\"./config.json\")\r\n"
        "if True:\r\n\tdebugger.start()\r\n\tx = 1\r\n")


# --- what reaches the terminal ----------------------------------------------------------------------------

TERMINAL_ATTACK = "\x1b[2J\x1b]0;owned\x07"
HOSTILE_SCRIPT = (
    "from ptdbg_ascend import *\n"
    "seed_all()  # " + TERMINAL_ATTACK + "\n"
    "set_dump_path('./dump/npu.pkl')  # \u202eyp.niart\n"
    "set_dump_switch('ON')  # done\x08\x08\x08\x08PWNED\x0cpage\n"
    "x = 1\t# a tab\r\n"
    "set_dump_switch('OFF')\n"
)


def _on_terminal(*args):
    import sys

    from terminal_screen import run_on_terminal

    return run_on_terminal([sys.executable, "-m", "ptdbg_ascend.cli"] + list(args))


def test_cli_diff_shows_the_script_text_escaped_and_writes_it_exact(tmp_path):
    """The diff of a script holding escape sequences, a bidi override, backspaces and a form feed: the
    terminal shows them as text, one diff line per line of the file; the migrated file keeps every byte."""
    script = tmp_path / "train.py"
    script.write_bytes(HOSTILE_SCRIPT.encode("utf-8"))
    shown = _on_terminal("migrate", str(script), "--write", "-o", str(tmp_path / "new.py"),
                         "--config", str(tmp_path / "cfg.json"))
    assert shown.returncode == 0, shown.lines
    assert shown.controls == [], shown.lines  # nothing of the script acts on the terminal
    diff = shown.lines[:shown.lines.index("")]
    assert diff[0] == "--- a/train.py" and diff[1] == "+++ b/train.py"
    assert diff[3:] == [
        " from ptdbg_ascend import *",
        "-seed_all()  # \\x1b[2J\\x1b]0;owned\\x07",
        "-set_dump_path('./dump/npu.pkl')  # \\u202eyp.niart",
        "-set_dump_switch('ON')  # done\\x08\\x08\\x08\\x08PWNED\\x0cpage",
        f"+debugger = PrecisionDebugger(config_path=\"{tmp_path / 'cfg.json'}\")  # \\x1b[2J\\x1b]0;owned\\x07",
        "+debugger.start()  # done\\x08\\x08\\x08\\x08PWNED\\x0cpage",
        " x = 1\t# a tab\\x0d",  # a tab kept; the file's own CR (of its CRLF line end) shown, not obeyed
        "-set_dump_switch('OFF')",
        "+debugger.stop()",
    ]
    written = (tmp_path / "new.py").read_bytes().decode("utf-8")
    assert written == HOSTILE_SCRIPT.replace(
        "seed_all()", f"debugger = PrecisionDebugger(config_path=\"{tmp_path / 'cfg.json'}\")").replace(
        "set_dump_path('./dump/npu.pkl')  # \u202eyp.niart\n", "").replace(
        "set_dump_switch('ON')", "debugger.start()").replace("set_dump_switch('OFF')", "debugger.stop()")


def test_cli_issues_show_the_script_text_escaped(tmp_path):
    script = tmp_path / "train.py"
    source = ("from ptdbg_ascend import *\nset_dump_path(os.path.join('" + TERMINAL_ATTACK + "', out))\n"
              "set_dump_switch('ON', mode='list', scope=[\n    name])\n")
    script.write_text(source)
    shown = _on_terminal("migrate", str(script), "--write")
    assert shown.returncode == 1, shown.lines
    assert shown.controls == [], shown.lines
    assert shown.lines[:3] == [
        "{}:2: set_dump_path(...): argument os.path.join('\\x1b[2J\\x1b]0;owned\\x07', out) is not a literal, so "
        "the config cannot be computed from it (cannot rewrite)".format(script),
        "{}:3: set_dump_switch(...): argument [\\x0a    name] is not a literal, so the config cannot be computed "
        "from it (cannot rewrite)".format(script),  # one issue, one line
        "Nothing was written: fix or rewrite these lines by hand, then run ptdbg migrate again."]
    assert script.read_text() == source


def test_migrate_file_keeps_crlf_line_ends_byte_for_byte(tmp_path):
    """A Windows script: its CRLF line ends (and a lone CR inside a comment) are kept in the file written."""
    script = tmp_path / "train.py"
    source = b"from ptdbg_ascend import *\r\nseed_all()\r\nif True:\r\n\tset_dump_switch('ON')\r\n\tx = 1  # a\r\n"
    script.write_bytes(source)
    migrate_file(str(script), write=True)
    assert script.read_bytes() == (b"from ptdbg_ascend import *\r\ndebugger = PrecisionDebugger(config_path="
                                   b"\"./config.json\")\r\nif True:\r\n\tdebugger.start()\r\n\tx = 1  # a\r\n")
