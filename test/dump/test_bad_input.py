"""Every argument of the dump functions: wrong values fail with a message naming parameter and value."""

from __future__ import annotations

import os

import pytest
import torch

from ptdbg_ascend import acc_cmp_dump, register_hook, seed_all, set_dump_path, set_dump_switch
from ptdbg_ascend.errors import CallOrderError, DumpPathError, ParameterError


@pytest.mark.parametrize("kwargs, parameter", [
    (dict(switch="on"), "switch"),
    (dict(switch="ON", mode="module"), "mode"),
    (dict(switch="ON", mode="range", scope=["Tensor_add_1_forward"]), "scope"),
    (dict(switch="ON", mode="list", scope=[]), "scope"),
    (dict(switch="ON", mode="list", scope="Tensor_add_1_forward"), "scope"),
    (dict(switch="ON", mode="list", scope=["conv2d"]), "scope"),
    (dict(switch="ON", mode="stack", scope=["Tensor_add_1", "Tensor_add_2", "Tensor_add_3"]), "scope"),
    (dict(switch="ON", mode="api_list", api_list=[]), "api_list"),
    (dict(switch="ON", mode="api_list", api_list=[3]), "api_list"),
    (dict(switch="ON", mode="all", scope=["Tensor_add_1_forward"]), "scope"),
    (dict(switch="ON", filter_switch=True), "filter_switch"),
    (dict(switch="ON", dump_mode="forwards"), "dump_mode"),
    (dict(switch="ON", dump_mode=[]), "dump_mode"),
    (dict(switch="ON", summary_only="yes"), "summary_only"),
])
def test_set_dump_switch_rejects(dump_session, kwargs, parameter):
    with pytest.raises(ParameterError) as info:
        set_dump_switch(**kwargs)
    assert info.value.parameter == parameter
    assert repr(info.value.value) in str(info.value)


def test_switch_on_before_register_hook(tmp_path, dump_session):
    set_dump_path(str(tmp_path / "a.pkl"))
    with pytest.raises(CallOrderError, match="register_hook"):
        set_dump_switch("ON")


def test_register_hook_before_set_dump_path_works(tmp_path, dump_session, model, train):
    register_hook(model, acc_cmp_dump)
    set_dump_path(str(tmp_path / "a.pkl"))
    set_dump_switch("ON")
    train(model, steps=1)
    set_dump_switch("OFF")
    assert os.path.exists(tmp_path / "ptdbg_dump_v1.0" / "rank0" / "a.pkl")


def test_no_path_at_all(dump_session, model, monkeypatch):
    monkeypatch.delenv("ASCEND_WORK_PATH", raising=False)
    register_hook(model, acc_cmp_dump)
    with pytest.raises(DumpPathError, match="ASCEND_WORK_PATH"):
        set_dump_switch("ON")


def test_set_dump_path_rejects(tmp_path, dump_session):
    a_file = tmp_path / "file"
    a_file.write_text("x")
    with pytest.raises(DumpPathError, match="is a file"):
        set_dump_path(str(a_file))
    with pytest.raises(DumpPathError, match="is a file"):
        set_dump_path(str(a_file / "x.pkl"))
    os.symlink(str(tmp_path), str(tmp_path / "link"))
    with pytest.raises(DumpPathError, match="symlink"):
        set_dump_path(str(tmp_path / "link" / "x.pkl"))
    (tmp_path / "dir.pkl").mkdir()
    with pytest.raises(DumpPathError, match="is a directory"):
        set_dump_path(str(tmp_path / "dir.pkl"))
    with pytest.raises(ParameterError, match="fpath"):
        set_dump_path(42)
    with pytest.raises(ParameterError, match="dump_tag"):
        set_dump_path(str(tmp_path / "x.pkl"), dump_tag="a/b")
    if os.geteuid() != 0:
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        with pytest.raises(DumpPathError, match="not writable"):
            set_dump_path(str(locked / "x.pkl"))
    assert not os.path.exists(tmp_path / "ptdbg_dump_v1.0")  # nothing half-written


@pytest.mark.parametrize("kwargs, parameter", [
    (dict(rank=-1), "rank"),
    (dict(rank="0"), "rank"),
    (dict(overflow_nums=3), "overflow_nums"),
    (dict(dump_mode="model"), "dump_mode"),
    (dict(dump_mode="api", dump_config="dump.json"), "dump_config"),
])
def test_register_hook_rejects(dump_session, model, kwargs, parameter):
    with pytest.raises(ParameterError) as info:
        register_hook(model, acc_cmp_dump, **kwargs)
    assert info.value.parameter == parameter


def test_register_hook_needs_a_module(dump_session):
    with pytest.raises(ParameterError, match="model"):
        register_hook("not a model", acc_cmp_dump)


def test_acl_is_delegated(dump_session, model, monkeypatch):
    import sys
    import types

    calls = []
    fake = types.ModuleType("ptdbg_ascend.acl.api")
    fake.register_acl_dump = lambda session, dump_config, rank: calls.append(("register", dump_config, rank))
    fake.configure_acl_switch = lambda session, switch, scope, filter_switch: calls.append((switch, scope, filter_switch))
    monkeypatch.setitem(sys.modules, "ptdbg_ascend.acl.api", fake)
    import ptdbg_ascend.acl

    monkeypatch.setattr(ptdbg_ascend.acl, "api", fake, raising=False)
    register_hook(model, acc_cmp_dump, dump_mode="acl", dump_config="./dump.json", rank=1)
    set_dump_switch("ON", mode="acl", scope=["Tensor_permute_1_forward"], filter_switch="OFF")
    assert calls == [("register", "./dump.json", 1), ("ON", ["Tensor_permute_1_forward"], "OFF")]


@pytest.mark.parametrize("kwargs, parameter", [
    (dict(seed="1"), "seed"), (dict(seed=-1), "seed"), (dict(seed=2 ** 32), "seed"), (dict(seed=True), "seed"),
    (dict(mode=1), "mode"), (dict(rm_dropout=None), "rm_dropout"),
])
def test_seed_all_rejects(kwargs, parameter):
    with pytest.raises(ParameterError) as info:
        seed_all(**kwargs)
    assert info.value.parameter == parameter


def test_seed_all_fixes_generators():
    import random

    import numpy as np

    seed_all(seed=7)
    first = (random.random(), np.random.rand(), torch.rand(1).item(), os.environ["PYTHONHASHSEED"])
    seed_all(seed=7)
    assert (random.random(), np.random.rand(), torch.rand(1).item(), os.environ["PYTHONHASHSEED"]) == first
    assert first[3] == "7" and torch.backends.cudnn.deterministic and not torch.backends.cudnn.benchmark
    seed_all(seed=7, mode=True)
    try:
        assert torch.are_deterministic_algorithms_enabled()
    finally:
        seed_all(seed=7, mode=False)


def test_rm_dropout_forces_p_zero_and_dropout_is_still_dumped(tmp_path, dump_session, pkl_records, monkeypatch):
    import torch.nn.functional as functional

    for name in ("dropout", "dropout1d", "dropout2d", "dropout3d", "alpha_dropout", "feature_alpha_dropout"):
        if hasattr(functional, name):
            monkeypatch.setitem(functional.__dict__, name, getattr(functional, name))  # restored after the test
    layer = torch.nn.Dropout(0.9)
    set_dump_path(str(tmp_path / "d.pkl"))
    register_hook(layer, acc_cmp_dump)
    seed_all(rm_dropout=True)
    set_dump_switch("ON", filter_switch="OFF")
    out = layer(torch.ones(64))
    set_dump_switch("OFF")
    assert torch.equal(out, torch.ones(64))
    records = {r[0]: r for r in pkl_records(tmp_path / "ptdbg_dump_v1.0" / "rank0" / "d.pkl")}
    assert records["Functional_dropout_0_forward_input.1"][5][0] == 0.0  # p recorded as 0
