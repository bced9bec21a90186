"""Shared test setup. Feature-specific fixtures live in each test package's own conftest."""

import os
import sys

# Keep torch from spinning all cores in a 2-core CI box while several processes run.
os.environ.setdefault("OMP_NUM_THREADS", "1")

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

# Test packages whose conftest imports torch at collection time (or, for scenarios, whose training
# subprocesses need it). Under an interpreter without torch
# (the Python 3.8 torch-free run) they are left out instead of failing collection; the torch-free tests
# elsewhere are marked `torchfree` and still run.
TORCH_ONLY_PACKAGES = ["dump", "overflow", "acl", "debugger", "interop", "scenarios"]
try:
    import importlib.util as _importlib_util

    _HAS_TORCH = _importlib_util.find_spec("torch") is not None
except (ImportError, ValueError):
    _HAS_TORCH = False
collect_ignore = [] if _HAS_TORCH else list(TORCH_ONLY_PACKAGES)


# -- a watchdog per test ----------------------------------------------------------------------------
# A test that hangs (a deadlocked subprocess, a pipe nobody writes) must fail this run with a traceback,
# not sit until the CI's global limit and lose the whole run's report. One test here takes at most about
# a minute on a loaded 2-core box; the limit leaves a wide margin. PTDBG_TEST_TIMEOUT overrides it (0: off).
import faulthandler  # noqa: E402
import threading  # noqa: E402

import pytest  # noqa: E402

TEST_TIMEOUT = float(os.environ.get("PTDBG_TEST_TIMEOUT", "600"))


def _descendants(pid):
    """Pids of every process below ``pid`` (Linux /proc; empty elsewhere)."""
    children = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as handle:
                # the command name (field 2) may hold spaces: the parent pid follows its closing paren
                parent = int(handle.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(parent, []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _give_up(nodeid, capture_manager):
    if capture_manager is not None:
        capture_manager.suspend_global_capture()  # write to the run's real stderr, not the test's capture
    sys.stderr.write("\n[watchdog] {} ran past {:.0f} s: the threads' stacks follow, then the run stops "
                     "(PTDBG_TEST_TIMEOUT sets the limit)\n".format(nodeid, TEST_TIMEOUT))
    faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
    sys.stderr.flush()
    for child in _descendants(os.getpid()):  # a hung subprocess must not keep the run's pipes open
        try:
            os.kill(child, 9)
        except OSError:
            pass
    os._exit(1)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    if TEST_TIMEOUT <= 0:
        yield
        return
    capture_manager = item.config.pluginmanager.getplugin("capturemanager")
    timer = threading.Timer(TEST_TIMEOUT, _give_up, args=(item.nodeid, capture_manager))
    timer.daemon = True
    timer.start()
    # Backstop for a hang that holds the interpreter lock (the timer thread could not run then).
    faulthandler.dump_traceback_later(TEST_TIMEOUT + 60, exit=True)
    try:
        yield
    finally:
        timer.cancel()
        faulthandler.cancel_dump_traceback_later()
