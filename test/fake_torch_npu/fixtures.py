"""Fixtures shared by the test packages: a clean dump session (no observer left behind for
the other test packages), the recording fake torch_npu, or no torch_npu at all."""

from __future__ import annotations

import sys

import pytest


def clean_session(session) -> None:
    """Remove every observer, restart the counters, forget paths (other test packages share the session)."""
    from ptdbg_ascend.dump.session import LegacyDumpSettings

    for observer in session.observers:
        session.remove_observer(observer)
        try:
            observer.close()
        except ValueError:
            pass
    session.reset_counters()
    if getattr(session, "extra_apis", False) and session.wrapped_count:
        session.ensure_wrapped(extra_apis=False)  # a test's opt-in to the extra APIs ends with the test
    session.opened_files.clear()
    session.legacy = LegacyDumpSettings()


@pytest.fixture
def session(monkeypatch):
    from ptdbg_ascend.dump.session import get_session

    monkeypatch.delenv("ASCEND_WORK_PATH", raising=False)
    current = get_session()
    clean_session(current)
    yield current
    clean_session(current)


@pytest.fixture
def fake_npu(monkeypatch):
    """``fake_npu(support_inf_nan=True, with_enable_overflow=True)`` installs a fresh recording fake
    ``torch_npu`` (sys.modules and the tool's device cache) and returns it."""
    from fake_torch_npu import make_fake_torch_npu

    from ptdbg_ascend import device

    def install(**options):
        module = make_fake_torch_npu(**options)
        monkeypatch.setitem(sys.modules, "torch_npu", module)
        monkeypatch.setitem(device._NPU_STATE, "module", module)
        return module

    yield install
    sys.setprofile(None)


@pytest.fixture
def no_npu(monkeypatch):
    from ptdbg_ascend import device

    monkeypatch.setitem(device._NPU_STATE, "module", None)
