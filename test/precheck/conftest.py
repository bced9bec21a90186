"""Fixtures of the pre-check runner tests: the reference model (``precheck_model.py``) dumped once per
test session, in subprocesses (a fresh interpreter each: the planted gelu must be in place before the
debugger wraps the APIs, and the dumps must not share this process's dump session)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
MODEL_SCRIPT = os.path.join(HERE, "precheck_model.py")
REPO = os.path.dirname(os.path.dirname(HERE))
if HERE not in sys.path:  # precheck_model (the planted gelu) for the tests of this directory
    sys.path.insert(0, HERE)


def subprocess_env():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([REPO, HERE] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


@pytest.fixture(scope="session")
def model_dumps(tmp_path_factory):
    """``{"clean": dump.json, "planted": dump.json, "statistics": dump.json}`` of one training step of the
    reference model: task tensor (clean and with the planted gelu) and task statistics."""
    root = tmp_path_factory.mktemp("precheck_dumps")
    jobs = {"clean": ("tensor", []), "planted": ("tensor", ["--planted"]), "statistics": ("statistics", [])}
    processes = {}
    for name, (task, extra) in jobs.items():
        processes[name] = subprocess.Popen([sys.executable, MODEL_SCRIPT, str(root / name), task] + extra,
                                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=subprocess_env())
    paths = {}
    for name, process in processes.items():
        output = process.communicate(timeout=120)[0].decode(errors="replace")
        assert process.returncode == 0, output
        paths[name] = str(root / name / "step0" / "rank" / "dump.json")
        assert os.path.isfile(paths[name]), output
    return paths


@pytest.fixture
def child_env():
    """The environment of a subprocess that imports ptdbg_ascend and precheck_model."""
    return subprocess_env()


@pytest.fixture
def planted_gelu(monkeypatch):
    """The planted inaccurate gelu active in this process (as it was while the planted dump was made)."""
    import torch

    from precheck_model import planted_gelu as planted

    monkeypatch.setattr(torch.nn.functional, "gelu", planted)
    return planted
