"""Fixtures of the ACL tests (shared with the overflow tests) and a dump.json writer."""

from __future__ import annotations

import pytest

from fake_torch_npu.fixtures import fake_npu, no_npu, session  # noqa: F401 - fixtures


@pytest.fixture
def dump_json(tmp_path):
    """A correct dump.json under tmp_path (operator files would go to tmp_path/acl_out)."""
    from ptdbg_ascend.acl import write_acl_dump_config

    path = tmp_path / "dump.json"
    write_acl_dump_config(str(path), str(tmp_path / "acl_out"))
    return str(path)
