"""The docs run: every fenced code block of README.md and doc/*.md is marked, and the runnable ones run.

Marker convention (an HTML comment, invisible on GitHub, on the line right before the opening fence):

* ``<!-- run -->`` or ``<!-- run: KEY=VALUE ... -->``: the block runs and must do what the text says.
  Keys (values shell-quoted, keys may repeat):
  ``exit=N`` the expected exit status (default 0); ``prints=TEXT`` a text the output contains;
  ``creates=GLOB`` a file the block leaves in the working folder; ``fixture=model`` prepends to a python
  block a small CPU model with ``model``, ``optimizer``, ``steps``, ``loader``, ``x``, ``y``, ``loss_fn`` and
  ``train_one_step(batch=None)`` (what the guides call "your" objects); ``needs=FEATURE`` a feature of the
  code side of issue 21 that is not merged yet: when the block fails, the test records an expected failure
  instead (drop the key once merged).
* ``<!-- no-run: REASON -->``: never run; the reason is required (NPU only, output shown, a fragment...).

An unmarked block fails the test. The blocks of one file run in order in one temporary folder (holding a
copy of ``sample/``), as a user following the page would: later blocks use what earlier ones wrote. Python
blocks run with this interpreter, shell blocks with ``bash -e -o pipefail`` and this interpreter's folder
(the venv's ``ptdbg``) first on PATH.
"""

from __future__ import annotations

import glob
import os
import re
import shlex
import shutil
import subprocess
import sys
from typing import Dict, List, NamedTuple, Tuple

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = ["README.md"] + sorted(os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, "doc", "*.md")))
MARKER = re.compile(r"^<!--\s*(run|no-run)\s*(?::\s*(.*?))?\s*-->\s*$")
FENCE = re.compile(r"^(\s*)```(\S*)\s*$")
RUN_KEYS = {"exit", "prints", "creates", "fixture", "needs"}
BLOCK_TIMEOUT_S = 180

MODEL_FIXTURE = '''\
import torch
import torch.nn as nn
import torch.nn.functional as F
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 4))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
steps = 2
loader = [(torch.randn(4, 8), torch.randn(4, 4)) for _ in range(steps)]
x, y = loader[0]
loss_fn = F.mse_loss


def train_one_step(batch=None):
    x, y = batch if batch is not None else loader[0]
    optimizer.zero_grad()
    loss = F.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
    return loss


'''


class Block(NamedTuple):
    doc: str
    line: int           # the line of the opening fence, 1-based
    lang: str
    body: str
    run: bool
    options: Dict[str, List[str]]  # run: key -> values; no-run: {"reason": [text]}

    @property
    def where(self) -> str:
        return f"{self.doc}:{self.line}"


def parse_blocks(doc: str) -> Tuple[List[Block], List[str]]:
    """The fenced blocks of ``doc`` (relative to the root) and the problems with their markers."""
    lines = open(os.path.join(ROOT, doc), encoding="utf-8").read().split("\n")
    blocks, problems, i = [], [], 0
    while i < len(lines):
        fence = FENCE.match(lines[i])
        if not fence:
            i += 1
            continue
        end = i + 1
        while end < len(lines) and not re.match(r"^\s*```\s*$", lines[end]):
            end += 1
        indent = len(fence.group(1))
        body = "\n".join(line[indent:] for line in lines[i + 1:end]) + "\n"
        where = f"{doc}:{i + 1}"
        marker = MARKER.match(lines[i - 1].strip()) if i > 0 else None
        if marker is None:
            problems.append("{}: code block without a <!-- run --> or <!-- no-run: reason --> marker on the line "
                            "before it".format(where))
        elif marker.group(1) == "no-run":
            if not (marker.group(2) or "").strip():
                problems.append(f"{where}: <!-- no-run: --> needs a reason")
            blocks.append(Block(doc, i + 1, fence.group(2), body, False, {"reason": [marker.group(2) or ""]}))
        else:
            options: Dict[str, List[str]] = {}
            for item in shlex.split(marker.group(2) or ""):
                key, _, value = item.partition("=")
                if key not in RUN_KEYS or not value:
                    problems.append(f"{where}: unknown or empty run option {item!r}")
                options.setdefault(key, []).append(value)
            if fence.group(2) not in ("bash", "sh", "python"):
                problems.append(f"{where}: a run block must be ```bash or ```python, not {fence.group(2)!r}")
            blocks.append(Block(doc, i + 1, fence.group(2), body, True, options))
        i = end + 1
    return blocks, problems


def test_every_block_is_marked_run_or_no_run():
    problems = [problem for doc in DOCS for problem in parse_blocks(doc)[1]]
    assert not problems, "\n".join(problems)


def _run_block(block: Block, workdir: str, index: int) -> Tuple[int, str]:
    env = dict(os.environ)
    bindir = os.path.dirname(sys.executable)
    env["PATH"] = bindir + os.pathsep + env.get("PATH", "")
    env["VIRTUAL_ENV"] = os.path.dirname(bindir)
    env.pop("PYTHONPATH", None)
    if block.lang == "python":
        source = (MODEL_FIXTURE if "model" in block.options.get("fixture", []) else "") + block.body
        path = os.path.join(workdir, f"_doc_block_{index}.py")
        command = [sys.executable, path]
    else:
        source = block.body
        path = os.path.join(workdir, f"_doc_block_{index}.sh")
        command = ["bash", "-e", "-o", "pipefail", path]
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(source)
    result = subprocess.run(command, cwd=workdir, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, timeout=BLOCK_TIMEOUT_S)
    return result.returncode, result.stdout


def _check(block: Block, workdir: str, code: int, output: str) -> List[str]:
    """What the block did against what its marker says it does."""
    failures = []
    expected = int(block.options.get("exit", ["0"])[0])
    if code != expected:
        failures.append(f"exit status {code} (expected {expected})")
    for text in block.options.get("prints", []):
        if text not in output:
            failures.append(f"the output does not contain {text!r}")
    for pattern in block.options.get("creates", []):
        if not glob.glob(os.path.join(workdir, pattern)):
            failures.append(f"no file {pattern} in the working folder")
    return failures


@pytest.mark.parametrize("doc", [doc for doc in DOCS if any(b.run for b in parse_blocks(doc)[0])])
def test_runnable_blocks_do_what_the_text_says(doc, tmp_path):
    """Runs ``doc``'s run blocks in order in one folder and checks their exit status, output and files."""
    workdir = str(tmp_path)
    shutil.copytree(os.path.join(ROOT, "sample"), os.path.join(workdir, "sample"),
                    ignore=shutil.ignore_patterns("out", "__pycache__"))
    # README step 1 (`source .venv/bin/activate`) activates the environment this test runs in.
    os.symlink(os.path.dirname(os.path.dirname(sys.executable)), os.path.join(workdir, ".venv"))
    failures, pending = [], []
    for index, block in enumerate(b for b in parse_blocks(doc)[0] if b.run):
        code, output = _run_block(block, workdir, index)
        problems = _check(block, workdir, code, output)
        if problems and block.options.get("needs"):
            pending.append(f"{block.where} (needs {', '.join(block.options['needs'])})")
        elif problems:
            failures.append("{}: {}\n--- block ---\n{}--- output (last 3000 chars) ---\n{}".format(
                block.where, "; ".join(problems), block.body, output[-3000:]))
    assert not failures, "\n\n".join(failures)
    if pending:
        pytest.xfail("blocks waiting for the code side of issue 21: " + "; ".join(pending))
