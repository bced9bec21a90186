"""filter_switch, dump_mode, summary_only, several windows and re-runs."""

from __future__ import annotations

import os

import numpy as np
import torch

from ptdbg_ascend import acc_cmp_dump, register_hook, set_dump_path, set_dump_switch


def _setup(tmp_path, model, name="npu_dump.pkl"):
    set_dump_path(str(tmp_path / name), dump_tag="t")
    register_hook(model, acc_cmp_dump)
    return tmp_path / "t_v1.0" / "rank0"


def test_filter_off_keeps_int_tensors_0d_and_scalars(tmp_path, dump_session, model, train, pkl_records, check_npy):
    rank_dir = _setup(tmp_path, model)
    set_dump_switch("ON", filter_switch="OFF")
    train(model, steps=1)
    x = torch.ones(3)
    x.reshape(torch.Size([3, 1]))
    set_dump_switch("OFF")
    records = {record[0]: record for record in pkl_records(rank_dir / "npu_dump.pkl")}
    assert records["Functional_cross_entropy_0_forward_input.1"][3:5] == ["torch.int64", [2]]
    assert records["Functional_cross_entropy_0_forward_output"][3:6] == [
        "torch.float32", [], records["Functional_cross_entropy_0_forward_output"][5]]
    loss = records["Functional_cross_entropy_0_forward_output"][5]
    assert loss[0] == loss[1] == loss[2] and loss[3] == abs(loss[0])
    # torch.Size argument: one scalar record per element, its shape the string "[]" as the original writes it
    assert records["Tensor_reshape_0_forward_input.1.0"][3:6] == ["<class 'int'>", "[]", [3.0, 3.0, 3.0, 3.0]]
    assert records["Tensor_reshape_0_forward_input.1.1"][5] == [1.0, 1.0, 1.0, 1.0]
    assert np.load(str(rank_dir / "npu_dump" / "Tensor_reshape_0_forward_input.1.0.npy")).item() == 3
    for name, record in records.items():
        check_npy(record, str(rank_dir / "npu_dump"))


def test_dump_mode_forward_input_only(tmp_path, dump_session, model, train, pkl_records):
    rank_dir = _setup(tmp_path, model)
    set_dump_switch("ON", dump_mode=["forward", "input"])
    train(model, steps=1)
    set_dump_switch("OFF")
    names = [record[0] for record in pkl_records(rank_dir / "npu_dump.pkl")]
    assert names and all("_forward_input." in name for name in names)


def test_dump_mode_backward(tmp_path, dump_session, model, train, pkl_records):
    rank_dir = _setup(tmp_path, model)
    set_dump_switch("ON", dump_mode="backward")
    train(model, steps=1)
    set_dump_switch("OFF")
    names = [record[0] for record in pkl_records(rank_dir / "npu_dump.pkl")]
    assert "Functional_conv2d_0_backward_input.0" in names and "Functional_linear_0_backward_output.1" in names
    assert all("_backward_" in name for name in names)


def test_summary_only_writes_no_npy(tmp_path, dump_session, model, train, pkl_records):
    rank_dir = _setup(tmp_path, model)
    set_dump_switch("ON", mode="api_stack", summary_only=True)
    train(model, steps=1)
    set_dump_switch("OFF")
    assert sorted(os.listdir(rank_dir)) == ["api_stack_npu_dump.pkl"]
    records = pkl_records(rank_dir / "api_stack_npu_dump.pkl")
    conv = [record for record in records if record[0] == "Functional_conv2d_0_forward_output"][0]
    assert conv[3] == "torch.float32" and conv[4] == [2, 4, 4, 4] and len(conv[5]) == 4


def test_two_windows_are_both_kept_and_counters_run_on(tmp_path, dump_session, model, train, pkl_records):
    rank_dir = _setup(tmp_path, model)
    set_dump_switch("ON", mode="api_list", api_list=["conv2d"])
    train(model, steps=1)
    set_dump_switch("OFF")
    train(model, steps=1)  # counted, not dumped
    set_dump_switch("ON", mode="api_list", api_list=["conv2d"])
    train(model, steps=1)
    set_dump_switch("OFF")
    names = [record[0] for record in pkl_records(rank_dir / "api_list_npu_dump.pkl")]
    calls = sorted({name.split("_forward")[0].split("_backward")[0] for name in names})
    assert calls == ["Functional_conv2d_0", "Functional_conv2d_2"]
    assert os.path.exists(rank_dir / "api_list_npu_dump" / "Functional_conv2d_0_forward_output.npy")


def test_a_new_run_over_the_same_path_overwrites(tmp_path, dump_session, model, train, pkl_records):
    rank_dir = _setup(tmp_path, model)
    set_dump_switch("ON")
    train(model, steps=2)
    set_dump_switch("OFF")
    first = len(pkl_records(rank_dir / "npu_dump.pkl"))
    dump_session.opened_files.clear()  # what a new process starts with
    dump_session.reset_counters()
    set_dump_switch("ON")
    train(model, steps=1)
    set_dump_switch("OFF")
    second = pkl_records(rank_dir / "npu_dump.pkl")
    assert 0 < len(second) < first
    assert not os.path.exists(rank_dir / "npu_dump" / "Functional_conv2d_1_forward_output.npy")


def test_directory_form_of_set_dump_path(tmp_path, dump_session, model, train, pkl_records):
    set_dump_path(str(tmp_path / "dumps"))
    register_hook(model, acc_cmp_dump, rank=3)
    set_dump_switch("ON", mode="api_stack")
    train(model, steps=1)
    set_dump_switch("OFF")
    rank_dir = tmp_path / "dumps" / "ptdbg_dump_v1.0" / "rank3"
    assert sorted(os.listdir(rank_dir)) == ["api_stack_dump", "api_stack_dump.pkl"]


def test_changes_behind_the_version_counter_are_not_hidden_by_the_statistics_cache(tmp_path, dump_session, model,
                                                                                    pkl_records):
    rank_dir = _setup(tmp_path, model)
    set_dump_switch("ON", mode="list", scope=["Torch_relu_0_forward", "Torch_relu_1_forward"])
    x = torch.ones(4)
    torch.relu(x)
    x.data.fill_(2.0)      # .data writes do not bump x's version counter
    x.numpy()[:] = 3.0     # neither do numpy views
    torch.relu(x)
    set_dump_switch("OFF")
    records = {record[0]: record for record in pkl_records(rank_dir / "list_npu_dump.pkl")}
    assert records["Torch_relu_0_forward_input.0"][5][0] == 1.0
    assert records["Torch_relu_1_forward_input.0"][5][0] == 3.0
    assert np.load(str(rank_dir / "list_npu_dump" / "Torch_relu_1_forward_input.0.npy")).tolist() == [3.0] * 4
