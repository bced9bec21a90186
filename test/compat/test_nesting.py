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
    # constructs that go on across a comma (before: a comma reset the count, and libcst crashed at ~3170)
    "lambda with parameters": "x = " + "lambda a, b: " * 5000 + "1\n",
    "lambda with a default and stars": "x = " + "lambda x=0, *y, **z: " * 6000 + "1\n",
    "lambda in a dict value": "x = {1: " + "lambda a, b: " * 5000 + "1}\n",
    "lambda as an annotation": "x: " + "lambda a, b: " * 5000 + "1 = 1\n",
    "comprehension with tuple targets": "x = [a " + "for a, b in c " * 3000 + "]\n",
    # inside an f-string's replacement field (Python < 3.12 keeps the f-string in one token)
    "f-string field calls": "x = f'{x" + "()" * 3000 + "}'\n",
    "f-string field subscripts": "x = f'{x" + "[0]" * 3000 + "}'\n",
    "f-string field adjacent strings": "x = f'{" + '"a" ' * 3000 + "}'\n",
    "adjacent f-strings": "x = (" + "f'a' " * 3000 + ")\n",
}
# case patterns: libcst's parser takes time exponential in their nesting (a mapping pattern 11 deep: 23 s)
DEEP_PATTERNS = {
    "mapping": "match x:\n    case " + "{1: " * 14 + "a" + "}" * 14 + ":\n        pass\n",
    "sequence": "match x:\n    case " + "[a, " * 24 + "a" + "]" * 24 + ":\n        pass\n",
    "group": "match x:\n    case " + "(" * 24 + "a" + ")" * 24 + ":\n        pass\n",
    "class keyword": "match x:\n    case " + "A(x=" * 24 + "a" + ")" * 24 + ":\n        pass\n",
    "mapping of sequences": "match x:\n    case " + "{1: [" * 8 + "a" + "]}" * 8 + " if y:\n        pass\n",
}


def run_cli(*args, cwd):
    return subprocess.run([sys.executable, "-m", "ptdbg_ascend.cli"] + list(args), cwd=str(cwd),
                          capture_output=True, text=True, timeout=120)


# --- the measure --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("source, depth, line", [
    ("x = 1\n", 0, 0),
    ("x = ((1))\n", 2, 1),
    ("x = a + b + c\n", 2, 1),  # (a + b) + c
    ("x = [a + b, c + d]\n", 2, 1),  # a comma starts a new operand: siblings, not nested
    ("x = f(g(h(1)))\n", 6, 1),  # each call: its target and its brackets
    ("x = a.b.c()\n", 4, 1),
    ("x = 'a' 'b' 'c'\n", 2, 1),
    ("x = f'{((a))}'\n", 6, 1),  # inside a replacement field: the field and each of its tokens
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
        assert done.stderr.startswith(f"ptdbg migrate: error: {script}:")
        assert ": nested more than 500 levels deep (each bracket, call, chained operator, lambda or conditional " \
               "counts one); deeper scripts crash libcst's parser" in done.stderr
    assert script.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["train.py"]


@pytest.mark.parametrize("kind", sorted(DEEP_PATTERNS))
def test_migrate_refuses_a_deeply_nested_case_pattern_at_once(kind, tmp_path):
    """Not a crash but a hang: libcst would take minutes to hours on these few hundred bytes."""
    pytest.importorskip("libcst")
    script = tmp_path / "train.py"
    script.write_text(LEGACY_CALLS + "y = 1\n" + DEEP_PATTERNS[kind])
    before = script.read_bytes()
    try:
        done = subprocess.run([sys.executable, "-m", "ptdbg_ascend.cli", "migrate", "--write", str(script)],
                              cwd=str(tmp_path), capture_output=True,
                              text=True, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail(f"ptdbg migrate still ran after 60 s on a {kind} pattern")
    assert done.returncode == 2, (done.returncode, done.stderr[-500:])
    assert done.stderr == ("ptdbg migrate: error: {}:6: a case pattern nested more than {} levels deep (each "
                           "bracket counts one, a mapping two); libcst's parser takes time exponential in it, so "
                           "ptdbg migrate does not parse it. Nothing was written: match the inner parts in a nested "
                           "match statement.\n".format(script, nesting.MAX_PATTERN_NESTING))
    assert script.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["train.py"]


def test_migrate_names_the_line_of_the_deep_expression(tmp_path):
    pytest.importorskip("libcst")
    script = tmp_path / "train.py"
    script.write_text(LEGACY_CALLS + "y = 2\n" + DEEP["not"])
    done = run_cli("migrate", str(script), cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.startswith(f"ptdbg migrate: error: {script}:5: nested more than 500")


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


# --- what the limit lets through, libcst parses -------------------------------------------------------------

# each construct that recurses in libcst's parser, grown by repeating one piece n times
GROWING = {
    "brackets": lambda n: "x = " + "(" * n + "1" + ")" * n + "\n",
    "lists with commas": lambda n: "x = " + "[1, " * n + "1" + "]" * n + "\n",
    "calls": lambda n: "x = " + "f(" * n + "1" + ")" * n + "\n",
    "keyword calls": lambda n: "x = " + "f(a=" * n + "1" + ")" * n + "\n",
    "call chain": lambda n: "x = f" + "(a, b)" * n + "\n",
    "subscript chain": lambda n: "x = y" + "[a, b]" * n + "\n",
    "attributes": lambda n: "x = y" + ".a" * n + "\n",
    "not": lambda n: "x = " + "not " * n + "1\n",
    "unary": lambda n: "x = " + "-+~" * n + "1\n",
    "operators": lambda n: "x = " + "1 + " * n + "1\n",
    "power": lambda n: "x = " + "2 ** " * n + "2\n",
    "lambda": lambda n: "x = " + "lambda: " * n + "1\n",
    "lambda with parameters": lambda n: "x = " + "lambda a, b: " * n + "1\n",
    "lambda with a default and stars": lambda n: "x = " + "lambda x=0, *y, **z: " * n + "1\n",
    "lambda defaults": lambda n: "x = " + "lambda x=" * n + "0" + ": 0" * n + "\n",
    "lambda in a dict value": lambda n: "x = {1: " + "lambda a, b: " * n + "1}\n",
    "lambda then conditional": lambda n: "x = " + "lambda a, b: a if b else " * n + "1\n",
    "conditional": lambda n: "x = " + "1 if y else " * n + "1\n",
    "walrus": lambda n: "x = " + "(a := " * n + "1" + ")" * n + "\n",
    "adjacent strings": lambda n: "x = (" + "'a' " * n + ")\n",
    "adjacent f-strings": lambda n: "x = (" + "f'a' " * n + ")\n",
    "comprehension clauses": lambda n: "x = [a " + "for a in c " * n + "]\n",
    "comprehension tuple targets": lambda n: "x = [a " + "for a, b in c " * n + "]\n",
    "comprehension conditions": lambda n: "x = [a for a in b " + "if c " * n + "]\n",
    "f-string field calls": lambda n: "x = f'{x" + "()" * n + "}'\n",
    "f-string field subscripts": lambda n: "x = f'{x" + "[0]" * n + "}'\n",
    "f-string field attributes": lambda n: "x = f'{x" + ".a" * n + "}'\n",
    "f-string field adjacent strings": lambda n: "x = f'{" + '"a" ' * n + "}'\n",
    "f-string field lambdas": lambda n: "x = f'{(" + "lambda a, b: " * n + "1)}'\n",
    "dotted import": lambda n: "import a" + ".a" * n + "\n",
    "elif chain": lambda n: "if a:\n    pass\n" + "elif a:\n    pass\n" * n,
    "class pattern": lambda n: "match x:\n    case " + "A(" * n + ")" * n + ":\n        pass\n",
}
PATTERNS = {
    "mapping pattern": lambda n: "match x:\n    case " + "{1: " * n + "a" + "}" * n + ":\n        pass\n",
    "sequence pattern": lambda n: "match x:\n    case " + "[a, " * n + "a" + "]" * n + ":\n        pass\n",
    "group pattern": lambda n: "match x:\n    case " + "(" * n + "a" + ")" * n + ":\n        pass\n",
    "tuple pattern": lambda n: "match x:\n    case " + "(a, " * n + "a" + ")" * n + ":\n        pass\n",
    "class keyword pattern": lambda n: "match x:\n    case " + "A(x=" * n + "a" + ")" * n + ":\n        pass\n",
    "mapping of sequences": lambda n: "match x:\n    case " + "{1: [" * n + "a" + "]}" * n + ":\n        pass\n",
    "mapping of classes": lambda n: "match x:\n    case " + "{1: A(x=" * n + "a" + ")}" * n + ":\n        pass\n",
}
GROWN_CAP = 8000  # beyond every crash measured (about 3170 for a lambda, the first to crash when uncounted)
PARSE_ALL = """
import sys, time, libcst
for path in sys.argv[1:]:
    print(path, flush=True)
    started = time.time()
    try:
        libcst.parse_module(open(path, encoding="utf-8").read())
    except (libcst.ParserSyntaxError, RecursionError) as error:  # a clear error is fine: not a crash, not a hang
        print("  refused:", type(error).__name__, flush=True)
    print("  {:.2f} s".format(time.time() - started), flush=True)
"""


def deepest_accepted(grow, fits):
    """The largest n (up to GROWN_CAP) for which ``fits(grow(n))``: what the limit lets through."""
    if fits(grow(GROWN_CAP)):
        return GROWN_CAP
    low, high = 1, GROWN_CAP  # fits(grow(low)), not fits(grow(high))
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if fits(grow(middle)) else (low, middle)
    return low


def accepted(source):
    try:
        nesting.measure(source, limit=nesting.MAX_NESTING, pattern_limit=nesting.MAX_PATTERN_NESTING)
    except (nesting.TooDeep, SyntaxError, __import__("tokenize").TokenError):
        return False
    return True


def test_the_deepest_script_the_limits_accept_parses_in_libcst_without_crash_or_hang(tmp_path):
    """For every construct that recurses in libcst's parser, the deepest script the limits let through:
    libcst parses it (or refuses it with an exception) in one child process that must neither die
    (SIGSEGV: a construct the measure undercounts) nor take more than a few seconds per script."""
    pytest.importorskip("libcst")
    paths = []
    for number, (kind, grow) in enumerate(sorted(dict(GROWING, **PATTERNS).items())):
        n = deepest_accepted(grow, accepted)
        assert n < GROWN_CAP, f"{kind}: {n} pieces are still accepted"
        path = tmp_path / f"{number:02d}.py"
        path.write_text(LEGACY_CALLS + grow(n))
        paths.append((str(path), kind, n))
    done = subprocess.run([sys.executable, "-c", PARSE_ALL] + [path for path, _, _ in paths],
                          capture_output=True, text=True, timeout=400)
    names = {path: f"{kind} x {n}" for path, kind, n in paths}
    shown = "\n".join(names.get(line, line) for line in done.stdout.splitlines())
    assert done.returncode == 0, f"libcst died ({done.returncode}) on the last one:\n{shown}"
    seconds = [float(line.split()[0]) for line in done.stdout.splitlines() if line.endswith(" s")]
    assert len(seconds) == len(paths) and max(seconds) < 20, shown


@pytest.mark.parametrize("source, depth, line", [
    ("x = lambda a, b: lambda c, d: 1\n", 2, 1),  # the parameters' commas do not end the lambdas
    ("x = lambda a, b=c + d: 1\n", 2, 1),
    ("x = (lambda: 1, lambda: 2)\n", 2, 1),  # a comma after the body ends it: two siblings
    ("x = [a for a, b in c for d, e in f]\n", 5, 1),  # the targets' commas do not end the comprehension
    ("x = {a: b for a, b in c}\n", 3, 1),
    ("for a, b in c:\n    x = 1\n", 2, 1),
    ("x = f'{y()()}'\n", 6, 1),  # a field counts each of its tokens
    ("x = f'{y:>{width}}'\n", 7, 1),  # the format spec's field too
    ("x = (f'a' f'b' f'c')\n", 3, 1),
])
def test_measure_counts_what_goes_on_across_a_comma_and_inside_fields(source, depth, line):
    assert nesting.measure(source) == (depth, line)


@pytest.mark.parametrize("source, depth, line", [
    ("match x:\n    case [a, (b, c)]:\n        pass\n", 2, 2),
    ("match x:\n    case {'k': [a]} if y:\n        pass\n", 3, 2),  # a mapping counts two
    ("match x:\n    case A(b=[c]) | {1: d}:\n        pass\n", 2, 2),
    ("case = {1: {2: {3: [4]}}}\n", 0, 0),  # an assignment to a name case: no pattern
    ("case[{1: {2: 3}}] = lambda: 0\n", 0, 0),
    ("match x:\n    case 1: y = [[[[[1]]]]]\n", 0, 0),  # the body after the colon is not the pattern
])
def test_measure_patterns_weighs_each_bracket_of_a_case_pattern(source, depth, line):
    assert nesting.measure_patterns(source) == (depth, line)


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
