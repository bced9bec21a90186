"""Helpers of the scenario tests (imported by conftest.py and test_scenarios.py): dumping both sides of a
scenario with ``train_scenario.py`` in their own processes, reading a pkl, locating the planted call.

No torch import here: the training runs in subprocesses and the comparison needs numpy only.
"""

from __future__ import annotations

import glob
import json
import math
import os
import re
import subprocess
import sys
import threading
import time
from typing import Dict, List, NamedTuple, Optional

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "train_scenario.py")
RUN_TIMEOUT_S = 120
# <API>_<counter>_<forward|backward>[_<input|output>[.k]]: the API may itself end in "_" (Tensor_relu_).
RECORD = re.compile(r"^(?P<api>.+?)_(?P<index>\d+)_(?P<direction>forward|backward)(?:_(?P<side>input|output)(?:\.\d+)*)?$")


class Side(NamedTuple):
    """One side's dump: ``pkl`` and its npy directory ``data_dir``; ``log`` its stdout + stderr."""

    pkl: str
    data_dir: str
    log: str


class Dumps(NamedTuple):
    """Both sides of one scenario; ``plant`` is the npu run's plant.json (None for an unplanted run)."""

    name: str
    root: str
    npu: Side
    bench: Side
    plant: Optional[dict]

    def param(self) -> Dict[str, object]:
        return {"npu_pkl_path": self.npu.pkl, "bench_pkl_path": self.bench.pkl,
                "npu_dump_data_dir": self.npu.data_dir, "bench_dump_data_dir": self.bench.data_dir,
                "is_print_compare_log": False}


def _side_paths(directory: str, side: str) -> Side:
    pkls = glob.glob(os.path.join(directory, "ptdbg_dump_v*", "rank0", "api_stack_{}_dump.pkl".format(side)))
    assert len(pkls) == 1, "expected one api_stack pkl under {}, found {}".format(directory, pkls)
    data_dir = pkls[0][: -len(".pkl")]
    assert os.path.isdir(data_dir), data_dir
    return Side(pkls[0], data_dir, "")


# The bench run a scenario compares against, when it is another scenario's: scale, every_fifth and
# equal_runs train the same clean model on the bench side, so one bench dump serves the three.
BENCH_OF = {"every_fifth": "scale", "equal_runs": "scale"}
POLL_S = 0.05


def uses(*names):
    """Decorator naming the scenarios a test reads, so the runner can dump them ahead of the test."""

    def mark(function):
        function.scenarios = names
        return function

    return mark


def runs_of(name: str):
    """``((script scenario, "npu"), (script scenario, "bench"))``: the two runs a scenario compares."""
    return (name, "npu"), (BENCH_OF.get(name, name), "bench")


class Runner:
    """Runs ``train_scenario.py`` once per (scenario, side), at most ``jobs`` processes at a time (one per
    run: the dump wraps torch globally). A background thread dumps the runs in the order the selected
    tests need them, ahead of the tests; :meth:`dumps` moves a scenario's runs to the front and waits."""

    def __init__(self, root: str, planned: List[str], jobs: int = 2, steps: int = 2) -> None:
        self.root, self.jobs, self.steps = root, jobs, steps
        self.queue: List[tuple] = []
        self.running: Dict[tuple, tuple] = {}
        self.finished: Dict[tuple, object] = {}  # (return code or "timeout")
        for name in planned:
            self._enqueue(runs_of(name), front=False)
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, name="scenario-runner", daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        while True:
            with self.lock:
                self._fill()
            if self.stop.wait(POLL_S):
                return

    def _enqueue(self, keys, front: bool) -> None:
        keys = [key for key in keys if key not in self.finished and key not in self.running]
        if front:
            self.queue = keys + [key for key in self.queue if key not in keys]
        else:
            self.queue += [key for key in keys if key not in self.queue]

    def out_dir(self, key) -> str:
        return os.path.join(self.root, key[0], key[1])

    def _fill(self) -> None:
        """Collect the finished runs (killing one past RUN_TIMEOUT_S), start queued ones in free slots."""
        for key, (process, log, started) in list(self.running.items()):
            if process.poll() is None and time.time() - started > RUN_TIMEOUT_S:
                process.kill()
                process.wait()
                self.finished[key] = "timeout"
            elif process.poll() is not None:
                self.finished[key] = process.returncode
            else:
                continue
            log.close()
            del self.running[key]
        while self.queue and len(self.running) < self.jobs:
            key = self.queue.pop(0)
            out = self.out_dir(key)
            os.makedirs(out)
            log = open(out + ".log", "w")
            command = [sys.executable, SCRIPT, "--scenario", key[0], "--side", key[1], "--out", out,
                       "--steps", str(self.steps)]
            process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=self.root)
            self.running[key] = (process, log, time.time())

    def _log(self, key) -> str:
        with open(self.out_dir(key) + ".log", encoding="utf-8", errors="replace") as handle:
            return handle.read()

    def dumps(self, name: str) -> Dumps:
        """Both dumps of scenario ``name`` (moving its runs to the front of the queue and waiting)."""
        keys = runs_of(name)
        with self.lock:
            self._enqueue(keys, front=True)
            self._fill()
        while True:
            with self.lock:
                if all(key in self.finished for key in keys):
                    break
            time.sleep(POLL_S)
        sides = {}
        for key in keys:
            status, log = self.finished[key], self._log(key)
            if status == "timeout":
                pytest.fail("{} ({} side) ran past {} s:\n{}".format(key[0], key[1], RUN_TIMEOUT_S, log[-3000:]))
            assert status == 0, "{} ({} side) failed:\n{}".format(key[0], key[1], log[-3000:])
            # set_dump_path(<out>/<side>_dump.pkl) -> <out>/ptdbg_dump_v*/rank0/api_stack_<side>_dump.pkl + npy dir
            sides[key[1]] = _side_paths(self.out_dir(key), key[1])._replace(log=log)
        plant = None
        plant_path = os.path.join(self.out_dir(keys[0]), "plant.json")
        if os.path.exists(plant_path):
            with open(plant_path, encoding="utf-8") as handle:
                plant = json.load(handle)
        return Dumps(name, self.root, sides["npu"], sides["bench"], plant)

    def close(self) -> None:
        """Stop the thread and the runs still going (ones a failure or a test selection left unused)."""
        self.stop.set()
        self.thread.join()
        self.queue = []
        for process, log, _ in self.running.values():
            process.kill()
            process.wait()
            log.close()
        self.running = {}


def read_pkl(path: str):
    """``(records, stacks)``: the tensor records ``[name, step, [], dtype, shape, stats]`` in file order and
    ``{call name: stack}`` (stack lines are ``[<call>_stack_info, [[file, line, function, code], ...]]``)."""
    records, stacks = [], {}
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            item = json.loads(line)
            if len(item) == 2 and item[0].endswith("_stack_info"):
                stacks[item[0][: -len("_stack_info")]] = item[1]
            else:
                records.append(item)
    return records, stacks


def call_order(records) -> List[str]:
    """Call names (``Functional_linear_1_forward``) in the order of their first record."""
    order, seen = [], set()
    for record in records:
        match = RECORD.match(record[0])
        assert match, record[0]
        call = record[0][: match.end("direction")]
        if call not in seen:
            seen.add(call)
            order.append(call)
    return order


def planted_call(dumps: Dumps) -> str:
    """The npu call name whose forward output is the planted one: ``<api>_<n>_forward`` with the
    recorded shape and max/min (the plant's own call index need not be the tool's counter)."""
    plant = dumps.plant
    assert plant, "the npu run of {} wrote no plant.json:\n{}".format(dumps.name, dumps.npu.log[-3000:])
    records, _ = read_pkl(dumps.npu.pkl)
    pattern = re.compile(r"^{}_(\d+)_forward_output$".format(re.escape(plant["api"])))
    hits = []
    for name, _step, _reserved, dtype, shape, stats in (r for r in records if len(r) == 6):
        if pattern.match(name) and shape == plant["shape"] and dtype == plant["dtype"] \
                and _close(stats[0], plant["max"]) and _close(stats[1], plant["min"]):
            hits.append(name[: -len("_output")])
    assert len(hits) == 1, "the planted {} output ({}) is in the npu dump {} times: {}".format(
        plant["api"], plant, len(hits), hits)
    return hits[0]


def _close(value, expected) -> bool:
    return isinstance(value, (int, float)) and math.isclose(value, expected, rel_tol=1e-6, abs_tol=1e-7)


def parse_user_line(user_line: str):
    """``"/abs/path/file.py:57  x = self.fc(x)"`` -> ``(path, 57, "x = self.fc(x)")``."""
    match = re.match(r"^(?P<path>.+?):(?P<line>\d+)\s+(?P<code>.*)$", user_line or "")
    assert match, "user_line {!r} is not '<file>:<line>  <code>'".format(user_line)
    return match.group("path"), int(match.group("line")), match.group("code")


def plant_site_line(scenario: str) -> int:
    """The line of train_scenario.py marked ``# plant site: <scenario>``."""
    with open(SCRIPT, encoding="utf-8") as handle:
        lines = [n for n, text in enumerate(handle, 1) if text.rstrip().endswith("# plant site: " + scenario)]
    assert len(lines) == 1, (scenario, lines)
    return lines[0]
