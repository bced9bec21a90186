"""Scripts nested too deeply for the parsers: ``ptdbg migrate`` refuses them before libcst's native parser
(which dies with SIGSEGV on them) sees them, ``ptdbg export-config`` before running them; both exit 2 with
one line. The depth is measured from the tokens (``compat/nesting.py``)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from ptdbg_ascend.compat import nesting

pytestmark = pytest.mark.torchfree

LEGACY_CALLS = "from ptdbg_ascend import *\nset_dump_path('./dump/npu.pkl')\nset_dump_switch('ON')\n"
# each nests 3000 levels deep, in its own way (3000 brackets: exit 139 inside libcst before this check)
DEEP = {
    "brackets": "x = " + "(" * 3000 + "1" + ")" * 3000 + "\n",
    "lists": "x = " + "[" * 3000 + "1" + "]" * 3000 + "\n",
    "calls": "x = " + "f(" * 3000 + "1" + ")" * 3000 + "\n",
    "not": "x = " + "not " * 3000 + "1\n",
    "unary minus": "x = " + "-" * 3000 + "1\n",
    "lambda": "x = " + "lambda: " * 3000 + "1\n",
    "conditional": "x = " + "1 if y else " * 3000 + "1\n",
    "operators": "x = " + "1 + " * 3000 + "1\n",
    "attributes": "x = y" + ".a" * 3000 + "\n",
    "call chain": "x = f" + "()" * 3000 + "\n",
    "adjacent strings": "x = (" + "'a' " * 3000 + ")\n",
    "f-string field": "x = f'{" + "-" * 3000 + "1}'\n",
    "elif chain": "if a:\n    pass\n" + "elif a:\n    pass\n" * 3000,
}


def run_cli(*args, cwd):
    return subprocess.run([sys.executable, "-m", "ptdbg_ascend.cli"] + list(args), cwd=str(cwd),
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, timeout=120)


# --- the measure --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("source, depth, line", [
    ("x = 1\n", 0, 0),
    ("x = ((1))\n", 2, 1),
    ("x = a + b + c\n", 2, 1),  # (a + b) + c
    ("x = [a + b, c + d]\n", 2, 1),  # a comma starts a new operand: siblings, not nested
    ("x = f(g(h(1)))\n", 6, 1),  # each call: its target and its brackets
    ("x = a.b.c()\n", 4, 1),
    ("x = 'a' 'b' 'c'\n", 2, 1),
    ("x = f'{((a))}'\n", 3, 1),  # inside a replacement field
    ("x = f'{{not a field}}'\n", 0, 0),
    ("\nif a:\n    if b:\n        x = (1)\n", 5, 4),  # two blocks (2 each) and a bracket
    ("if a:\n  pass\nelif b:\n  pass\nelif c:\n  x = 1\n", 4, 6),  # two elifs, then the block
    ("if a:\n  pass\nelif b:\n  pass\nif c:\n  x = 1\n", 3, 4),  # a new if ends the chain
])
def test_measure_counts_each_level(source, depth, line):
    assert nesting.measure(source) == (depth, line)


def test_measure_stops_at_the_first_point_beyond_the_limit():
    source = "a = 1\nb = " + "(" * 10 + "1" + ")" * 10 + "\n"
    with pytest.raises(nesting.TooDeep) as caught:
        nesting.measure(source, limit=5)
    assert caught.value.nesting == (6, 2)


@pytest.mark.parametrize("kind", sorted(DEEP))
def test_every_kind_of_deep_nesting_is_over_the_limit(kind):
    with pytest.raises((nesting.TooDeep, SyntaxError, __import__("tokenize").TokenError)):
        nesting.measure(DEEP[kind], limit=nesting.MAX_NESTING)  # Python >= 3.12 refuses 200 brackets itself


def test_the_repository_itself_is_far_under_the_limit():
    import glob
    import os

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    paths = glob.glob(os.path.join(root, "ptdbg_ascend", "**", "*.py"), recursive=True)
    paths += glob.glob(os.path.join(root, "compat", "*.py"))
    assert len(paths) > 50
    deepest = max(nesting.measure(open(path, encoding="utf-8").read()).depth for path in paths)
    assert 10 < deepest < nesting.MAX_NESTING // 5


# --- ptdbg migrate ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", sorted(DEEP))
def test_migrate_refuses_a_deep_script_with_one_line(kind, tmp_path):
    pytest.importorskip("libcst")
    script = tmp_path / "train.py"
    script.write_text(LEGACY_CALLS + DEEP[kind])
    before = script.read_bytes()
    done = run_cli("migrate", "--write", str(script), cwd=tmp_path)
    assert done.returncode == 2, (done.returncode, done.stderr[-500:])  # not 139: libcst never saw it
    assert done.stderr.count("\n") == 1, done.stderr
    if "not valid Python (too many nested parentheses)" not in done.stderr:  # Python >= 3.12's own tokenizer
        assert done.stderr.startswith("ptdbg migrate: error: {}:".format(script))
        assert ": nested more than 500 levels deep (each bracket, call, chained operator, lambda or conditional " \
               "counts one); deeper scripts crash libcst's parser" in done.stderr
    assert script.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["train.py"]


def test_migrate_names_the_line_of_the_deep_expression(tmp_path):
    pytest.importorskip("libcst")
    script = tmp_path / "train.py"
    script.write_text(LEGACY_CALLS + "y = 2\n" + DEEP["not"])
    done = run_cli("migrate", str(script), cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.startswith("ptdbg migrate: error: {}:5: nested more than 500".format(script))


def test_migrate_reports_libcst_running_out_of_recursion_under_the_limit(tmp_path):
    pytest.importorskip("libcst")
    script = tmp_path / "train.py"
    script.write_text(LEGACY_CALLS + "x = " + "[" * 450 + "1" + "]" * 450 + "\n")  # within 500: libcst tries
    done = run_cli("migrate", str(script), cwd=tmp_path)
    if done.returncode == 0:  # a libcst whose Python side copes: then the rewrite is there
        assert "debugger.start()" in done.stdout
        return
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.endswith("nested too deeply for the parser (libcst ran out of Python recursion); nothing "
                                "was written. Split the deepest expression into several statements.\n") or \
        "not valid Python (too many nested parentheses)" in done.stderr


def test_migrate_still_rewrites_a_script_with_deep_but_allowed_nesting(tmp_path):
    pytest.importorskip("libcst")
    script = tmp_path / "train.py"
    script.write_text(LEGACY_CALLS + "x = " + "(" * 150 + "1" + ")" * 150 + "\n")
    done = run_cli("migrate", str(script), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "+debugger.start()" in done.stdout


# --- ptdbg export-config --------------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["brackets", "not", "lambda"])  # Python 3.8 compiles 3000 "+" chained
def test_export_config_refuses_a_script_python_cannot_compile(kind, tmp_path):
    script = tmp_path / "train.py"
    script.write_text(LEGACY_CALLS + DEEP[kind])
    done = run_cli("export-config", "-o", "cfg.json", "train.py", cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    stderr = done.stderr
    if sys.version_info < (3, 9) and stderr.startswith("s_push: parser stack overflow\n"):
        stderr = stderr[len("s_push: parser stack overflow\n"):]  # Python 3.8's parser prints this itself
    assert stderr.count("\n") == 1, done.stderr
    assert stderr.startswith("ptdbg export-config: error: train.py")
    assert "the script was not run and nothing was written." in done.stderr
    assert ("nested too deeply for Python's compiler" in done.stderr
            or "not valid Python (too many nested parentheses)" in done.stderr), done.stderr
    assert not (tmp_path / "cfg.json").exists() and not (tmp_path / "dump").exists()
