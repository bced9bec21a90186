"""The CPU overflow scenario end to end: a real model whose third step overflows in ``torch.exp``."""

from __future__ import annotations

import os
import re

import numpy as np
import pytest
import torch

from ptdbg_ascend import compare, overflow_check, parse, register_hook, set_dump_path, set_overflow_check_switch

NAME = re.compile(r"^Overflow_info_\d{8}_\d{6}_(\d+)\.pkl$")


def _overflow_files(rank_dir):
    """{k: pkl file name} of the overflow dumps in a rank dir."""
    found = {}
    for entry in os.listdir(rank_dir):
        match = NAME.match(entry)
        if match:
            found[int(match.group(1))] = entry
    return found


def test_third_overflow_stops_training_with_the_legacy_message(tmp_path, session, no_npu, exp_net, train_exp, exp_input,
                                                               pkl_records):
    with torch.no_grad():
        received = exp_net.fc(exp_input(2))  # what Torch_exp_2 receives
    set_dump_path(str(tmp_path / "dump_path" / "npu_dump.pkl"))
    register_hook(exp_net, overflow_check, overflow_nums=3)
    with pytest.raises(ValueError) as raised:
        train_exp(exp_net, steps=4)
    rank_dir = tmp_path / "dump_path" / "ptdbg_dump_v1.0" / "rank0"
    files = _overflow_files(rank_dir)
    assert sorted(files) == [1, 2, 3]
    third = os.path.join(str(rank_dir), files[3])
    assert str(raised.value) == f"[overflow 3 times]: dump file is saved in '{third}'."
    # each pkl has its npy dir of the same name, nothing else is written
    assert sorted(os.listdir(rank_dir)) == sorted(list(files.values()) + [name[:-4] for name in files.values()])

    # 1: the forward of torch.exp at step 2 (inputs 0..1 were fine): stack line first, then input, output
    first = pkl_records(rank_dir / files[1])
    assert [line[0] for line in first] == ["Torch_exp_2_forward_stack_info", "Torch_exp_2_forward_input.0",
                                           "Torch_exp_2_forward_output"]
    frames = first[0][1]
    assert frames[0][0] == os.path.join(os.path.dirname(__file__), "conftest.py")
    assert frames[0][2:] == ["forward", "return torch.exp(self.fc(x)).mean()"]
    assert all(line[1] == 101 and line[2] == [] for line in first[1:])
    assert first[1][3:5] == ["torch.float32", [2, 4]]
    output_stats = first[2][5]
    assert output_stats[0] == float("inf") and output_stats[3] == float("inf")
    npy_dir = rank_dir / files[1][:-4]
    saved_input = np.load(str(npy_dir / "Torch_exp_2_forward_input.0.npy"), allow_pickle=False)
    np.testing.assert_array_equal(saved_input, received.numpy())
    saved_output = np.load(str(npy_dir / "Torch_exp_2_forward_output.npy"), allow_pickle=False)
    assert np.isinf(saved_output).any()
    np.testing.assert_array_equal(saved_output, torch.exp(received).numpy())

    # 2: mean of an inf tensor (its 0-d output is left out by filter_switch "ON")
    second = pkl_records(rank_dir / files[2])
    assert [line[0] for line in second] == ["Tensor_mean_2_forward_stack_info", "Tensor_mean_2_forward_input.0"]
    # 3: the backward of torch.exp: grad * exp(x) = inf; incoming gradient 1/8 each, then the produced one
    third_lines = pkl_records(third)
    assert [line[0] for line in third_lines] == ["Torch_exp_2_backward_stack_info", "Torch_exp_2_backward_input.0",
                                                 "Torch_exp_2_backward_output.0"]
    assert third_lines[1][5][:3] == [0.125, 0.125, 0.125]
    assert third_lines[2][5][0] == float("inf")


def test_default_stops_at_the_first_overflow(tmp_path, session, no_npu, exp_net, train_exp, capsys):
    set_dump_path(str(tmp_path / "npu_dump.pkl"), dump_tag="ovf")
    register_hook(exp_net, overflow_check)
    with pytest.raises(ValueError, match=r"^\[overflow 1 times\]: dump file is saved in '.*_1\.pkl'\.$"):
        train_exp(exp_net, steps=4)
    files = _overflow_files(str(tmp_path / "ovf_v1.0" / "rank0"))
    assert list(files) == [1]
    log = capsys.readouterr().out
    assert "[overflow 1 times]: module name :'Torch_exp_2_forward' is overflow and dump file is saved in" in log


def test_minus_one_never_stops_and_counts_every_overflow(tmp_path, session, no_npu, exp_net, train_exp, pkl_records):
    set_dump_path(str(tmp_path))
    register_hook(exp_net, overflow_check, overflow_nums=-1, rank=3)
    train_exp(exp_net, steps=5, overflow_steps=(1, 3))  # two bad steps, 4 overflowing calls each
    files = _overflow_files(str(tmp_path / "ptdbg_dump_v1.0" / "rank3"))
    assert sorted(files) == [1, 2, 3, 4, 5, 6, 7, 8]
    names = [pkl_records(tmp_path / "ptdbg_dump_v1.0" / "rank3" / files[k])[0][0] for k in sorted(files)]
    per_step = ["Torch_exp_{}_forward_stack_info", "Tensor_mean_{}_forward_stack_info",
                "Torch_exp_{}_backward_stack_info", "Functional_linear_{}_backward_stack_info"]  # inf gradients reach the weights
    assert names == [name.format(1) for name in per_step] + [name.format(3) for name in per_step]


def test_switch_window_and_filter_off(tmp_path, session, no_npu, exp_net, exp_input, pkl_records):
    set_dump_path(str(tmp_path))
    register_hook(exp_net, overflow_check, overflow_nums=-1)
    set_overflow_check_switch("OFF")
    exp_net(exp_input(0, overflow_steps=(0,))).backward()  # overflows, but the check is off
    rank_dir = tmp_path / "ptdbg_dump_v1.0" / "rank0"
    assert not rank_dir.exists()
    set_overflow_check_switch("ON", filter_switch="OFF")
    exp_net(exp_input(1, overflow_steps=(1,)))
    set_overflow_check_switch("OFF")
    files = _overflow_files(str(rank_dir))
    assert sorted(files) == [1, 2]
    mean = pkl_records(rank_dir / files[2])
    # filter OFF: the 0-d output of mean is recorded too
    assert [line[0] for line in mean] == ["Tensor_mean_1_forward_stack_info", "Tensor_mean_1_forward_input.0",
                                          "Tensor_mean_1_forward_output"]
    assert mean[2][3:5] == ["torch.float32", []]


def test_set_dump_path_after_register_hook_is_honoured(tmp_path, session, no_npu, exp_net, train_exp):
    register_hook(exp_net, overflow_check)
    set_dump_path(str(tmp_path / "later" / "x.pkl"), dump_tag="late")
    with pytest.raises(ValueError):
        train_exp(exp_net, steps=3)
    assert list(_overflow_files(str(tmp_path / "later" / "late_v1.0" / "rank0"))) == [1]


def test_no_dump_path_stops_with_a_path_error_at_the_first_overflow(session, no_npu, exp_net, train_exp, capsys):
    from ptdbg_ascend.errors import DumpPathError

    register_hook(exp_net, overflow_check)
    assert "No dump path is set" in capsys.readouterr().out
    with pytest.raises(DumpPathError, match="set_dump_path"):
        train_exp(exp_net, steps=3)


def test_fp16_overflow_and_saturation_but_not_float32_masks(tmp_path, session, no_npu, pkl_records):
    set_dump_path(str(tmp_path))
    register_hook(torch.nn.Identity(), overflow_check, overflow_nums=-1)
    big = torch.full((2, 2), 300.0, dtype=torch.float16)
    torch.matmul(big, big)  # 180000 > 65504: inf in float16
    torch.clamp(torch.ones(3, dtype=torch.bfloat16), max=1.0) * torch.finfo(torch.bfloat16).max  # saturated
    mask = torch.zeros(4).masked_fill(torch.tensor([True, False, False, True]), torch.finfo(torch.float32).min)
    torch.softmax(mask, dim=0)  # a float32 mask value is not an overflow
    torch.tensor([1.0, 2.0], dtype=torch.float64).sum()
    set_overflow_check_switch("OFF")
    rank_dir = tmp_path / "ptdbg_dump_v1.0" / "rank0"
    names = [pkl_records(rank_dir / name)[0][0] for _, name in sorted(_overflow_files(str(rank_dir)).items())]
    assert names == ["Torch_matmul_0_forward_stack_info", "Tensor___mul___0_forward_stack_info"]


def test_overflow_pkl_is_readable_by_parse_and_compare(tmp_path, session, no_npu, exp_net, train_exp, capsys):
    set_dump_path(str(tmp_path))
    register_hook(exp_net, overflow_check)
    with pytest.raises(ValueError):
        train_exp(exp_net, steps=3)
    rank_dir = tmp_path / "ptdbg_dump_v1.0" / "rank0"
    pkl = os.path.join(str(rank_dir), _overflow_files(str(rank_dir))[1])
    capsys.readouterr()
    parse(pkl, "Torch_exp_2_forward")
    printed = capsys.readouterr().out
    assert "Trace back(Torch_exp_2_forward)" in printed
    assert 'line 22, in forward' in printed and "return torch.exp(self.fc(x)).mean()" in printed
    # parse shows the statistics of overflow records (compare, as the original, does not use them)
    assert "[Torch_exp_2_forward_output][dtype: torch.float32][shape: [2, 4]][max: inf]" in printed
    # compare the overflow dump with itself: the npy data are compared (statistics of dump_step 101 are not)
    out = tmp_path / "compare"
    out.mkdir()
    compare({"npu_pkl_path": pkl, "bench_pkl_path": pkl, "npu_dump_data_dir": pkl[:-4], "bench_dump_data_dir": pkl[:-4]},
            str(out), auto_analyze=False)
    csv = [name for name in os.listdir(str(out)) if name.endswith(".csv")]
    assert len(csv) == 1
    import pandas

    table = pandas.read_csv(str(out / csv[0]))
    assert list(table["NPU Name"]) == ["Torch_exp_2_forward_input.0", "Torch_exp_2_forward_output"]


def test_registering_again_replaces_the_check_and_restarts_the_count(tmp_path, session, no_npu, exp_net, train_exp):
    set_dump_path(str(tmp_path))
    register_hook(exp_net, overflow_check, overflow_nums=5)
    train_exp(exp_net, steps=3)  # 4 overflows at step 2: below the limit
    register_hook(exp_net, overflow_check, overflow_nums=1)
    with pytest.raises(ValueError, match=r"^\[overflow 1 times\]: .*_1\.pkl'\.$") as raised:
        train_exp(exp_net, steps=3)  # its third step overflows again: the new check counts from 1
    with open(str(raised.value).split("'")[1], encoding="utf-8") as handle:
        assert handle.readline().startswith('["Torch_exp_5_forward_stack_info"')  # API counters go on
    pkls = [name for name in os.listdir(str(tmp_path / "ptdbg_dump_v1.0" / "rank0")) if name.endswith(".pkl")]
    assert len(pkls) == 5  # a new _1 in the same second does not overwrite the old _1
    from ptdbg_ascend.overflow.observer import OverflowObserver

    assert len([item for item in session.observers if isinstance(item, OverflowObserver)]) == 1
