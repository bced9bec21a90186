"""A real model trained 2 steps under each mode; the files are checked record by record."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

from ptdbg_ascend import acc_cmp_dump, register_hook, set_dump_path, set_dump_switch
from ptdbg_ascend.version import __version__


def _dump(tmp_path, model, train, **switch):
    set_dump_path(str(tmp_path / "dump_path" / "npu_dump.pkl"), dump_tag="all")
    register_hook(model, acc_cmp_dump)
    set_dump_switch("ON", **switch)
    train(model)
    set_dump_switch("OFF")
    return tmp_path / "dump_path" / "all_v1.0" / "rank0"


def test_mode_all_records_forward_backward_and_npy(tmp_path, dump_session, model, train, pkl_records, check_npy):
    rank_dir = _dump(tmp_path, model, train)
    assert sorted(os.listdir(rank_dir)) == ["npu_dump", "npu_dump.pkl"]
    records = pkl_records(rank_dir / "npu_dump.pkl")
    names = [record[0] for record in records]
    for expected in [
        "Functional_conv2d_0_forward_input.0", "Functional_conv2d_0_forward_input.1", "Functional_conv2d_0_forward_input.2",
        "Functional_conv2d_0_forward_output", "Functional_conv2d_0_backward_input.0",
        "Functional_conv2d_0_backward_output.1", "Functional_conv2d_0_backward_output.2",
        "Torch_relu_0_forward_output", "Torch_relu_0_backward_output.0",
        "Functional_leaky_relu_0_forward_input.0", "Tensor_flatten_0_forward_output",
        "Functional_linear_0_backward_output.0", "Functional_linear_0_backward_output.1",
        "Functional_conv2d_1_forward_input.0",  # the second step
        "Functional_cross_entropy_1_forward_input.0",
    ]:
        assert expected in names, expected
    # the image does not require grad: no gradient w.r.t. input 0 of the first conv
    assert "Functional_conv2d_0_backward_output.0" not in names
    # filter ON: 0-d loss and the int64 target are not recorded; no stack lines in mode all
    assert "Functional_cross_entropy_0_forward_output" not in names
    assert "Functional_cross_entropy_0_forward_input.1" not in names
    assert not any(name.endswith("_stack_info") for name in names)
    assert "Functional_conv2d_2_forward_input.0" not in names
    # forward records of a call come in input, output order, right after the API returned
    start = names.index("Functional_conv2d_0_forward_input.0")
    assert names[start:start + 4] == ["Functional_conv2d_0_forward_input.0", "Functional_conv2d_0_forward_input.1",
                                      "Functional_conv2d_0_forward_input.2", "Functional_conv2d_0_forward_output"]
    by_name = {record[0]: record for record in records}
    assert by_name["Functional_conv2d_0_forward_input.0"][3:5] == ["torch.float32", [2, 3, 6, 6]]
    assert by_name["Functional_conv2d_0_backward_output.1"][4] == [4, 3, 3, 3]  # the weight gradient
    assert len(names) == len(set(names))
    for record in records:
        check_npy(record, str(rank_dir / "npu_dump"))
    assert len(os.listdir(rank_dir / "npu_dump")) == len(records)


def test_backward_values_are_the_real_gradients(tmp_path, dump_session, model, train, pkl_records):
    rank_dir = _dump(tmp_path, model, lambda net: train(net, steps=1))
    npy = lambda name: np.load(str(rank_dir / "npu_dump" / (name + ".npy")))  # noqa: E731
    # linear: y = x W^T + b; dL/dW = g^T x with g the gradient arriving at the output
    grad_out = npy("Functional_linear_0_backward_input.0")
    x = npy("Functional_linear_0_forward_input.0")
    np.testing.assert_allclose(npy("Functional_linear_0_backward_output.1"), grad_out.T @ x, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(npy("Functional_linear_0_backward_output.2"), grad_out.sum(0), rtol=1e-5, atol=1e-7)
    # relu passes the gradient where its input was positive
    relu_in = npy("Torch_relu_0_forward_input.0")
    np.testing.assert_allclose(npy("Torch_relu_0_backward_output.0"),
                               npy("Torch_relu_0_backward_input.0") * (relu_in > 0), rtol=1e-6)


def test_mode_api_stack_writes_a_stack_line_per_call(tmp_path, dump_session, model, train, pkl_records):
    rank_dir = _dump(tmp_path, model, train, mode="api_stack")
    assert sorted(os.listdir(rank_dir)) == ["api_stack_npu_dump", "api_stack_npu_dump.pkl"]
    records = pkl_records(rank_dir / "api_stack_npu_dump.pkl")
    stacks = {record[0]: record[1] for record in records if record[0].endswith("_stack_info")}
    assert "Functional_conv2d_0_forward_stack_info" in stacks
    assert "Functional_conv2d_0_backward_stack_info" in stacks
    names = [record[0] for record in records]
    # the stack line follows the call's tensor records
    assert names.index("Functional_conv2d_0_forward_stack_info") == names.index("Functional_conv2d_0_forward_output") + 1
    frames = stacks["Functional_conv2d_0_forward_stack_info"]
    assert all(len(frame) == 4 and isinstance(frame[1], str) for frame in frames)
    files = [frame[0] for frame in frames]
    assert not any(os.sep + "ptdbg_ascend" + os.sep in name for name in files)  # none of the tool's frames
    assert files[0].endswith(os.path.join("torch", "nn", "modules", "conv.py"))  # innermost first
    assert any(name.endswith("conftest.py") and frame[2] == "forward" for name, frame in zip(files, frames))


def test_mode_list_whole_name_matching(tmp_path, dump_session, model, train, pkl_records):
    rank_dir = _dump(tmp_path, model, train, mode="list", scope=["Functional_conv2d_1_forward", "Torch_relu_0"])
    names = [record[0] for record in pkl_records(rank_dir / "list_npu_dump.pkl")]
    assert {name for name in names if name.endswith("_stack_info")} == {
        "Functional_conv2d_1_forward_stack_info", "Torch_relu_0_forward_stack_info", "Torch_relu_0_backward_stack_info"}
    assert all(name.startswith(("Functional_conv2d_1_forward", "Torch_relu_0_")) for name in names)
    assert "Functional_conv2d_1_forward_output" in names and "Torch_relu_0_backward_input.0" in names


def test_mode_range_is_inclusive(tmp_path, dump_session, model, train, pkl_records):
    rank_dir = _dump(tmp_path, model, train, mode="range",
                     scope=["Torch_relu_1_forward", "Functional_linear_1_forward"])
    names = [record[0] for record in pkl_records(rank_dir / "range_npu_dump.pkl")]
    calls = [name[: -len("_stack_info")] for name in names if name.endswith("_stack_info")]
    assert calls == ["Torch_relu_1_forward", "Functional_leaky_relu_1_forward", "Tensor_flatten_1_forward",
                     "Functional_linear_1_forward"]
    assert os.path.isdir(rank_dir / "range_npu_dump")


def test_mode_stack_writes_only_stacks(tmp_path, dump_session, model, train, pkl_records):
    rank_dir = _dump(tmp_path, model, train, mode="stack", scope=["Functional_linear_0_forward"])
    assert sorted(os.listdir(rank_dir)) == ["stack_npu_dump.pkl"]
    records = pkl_records(rank_dir / "stack_npu_dump.pkl")
    assert [record[0] for record in records] == ["Functional_linear_0_forward_stack_info"]


def test_mode_api_list_selects_by_api_name(tmp_path, dump_session, model, train, pkl_records, check_npy):
    rank_dir = _dump(tmp_path, model, train, mode="api_list", api_list=["relu"])
    records = pkl_records(rank_dir / "api_list_npu_dump.pkl")
    calls = sorted({record[0].split("_forward")[0].split("_backward")[0] for record in records})
    assert calls == ["Torch_relu_0", "Torch_relu_1"]  # leaky_relu is another API
    for record in records:
        check_npy(record, str(rank_dir / "api_list_npu_dump"))


def test_large_tensors_get_their_statistics_from_the_npy_copy(tmp_path, dump_session, pkl_records, check_npy):
    """Tensors of 64K elements and more (float32, bf16) are reduced by the writer thread from the array
    it saves; a tensor recorded twice (output, then the next call's input) shares the file and numbers,
    and an in-place change after recording does not reach them."""
    register_hook(torch.nn.Identity(), acc_cmp_dump, extra_apis=True)  # Tensor.to: an extra API
    set_dump_path(str(tmp_path / "npu_dump.pkl"), dump_tag="big")
    generator = torch.Generator().manual_seed(2)
    x = torch.randn(300, 300, generator=generator) * 5 + 1  # 90,000 elements
    set_dump_switch("ON", mode="api_stack")
    y = torch.relu(x)
    z = torch.add(y, 2.0)  # y again, unchanged: a hard link and the same statistics
    y.mul_(-1)  # changed after both calls: their recorded values stay the ones seen
    half = torch.nn.functional.gelu(x.to(torch.bfloat16))
    set_dump_switch("OFF")
    rank_dir = tmp_path / f"big_v{__version__}" / "rank0"
    records = pkl_records(rank_dir / "api_stack_npu_dump.pkl")
    names = [record[0] for record in records]
    assert names == [
        "Torch_relu_0_forward_input.0", "Torch_relu_0_forward_output", "Torch_relu_0_forward_stack_info",
        "Torch_add_0_forward_input.0", "Torch_add_0_forward_output", "Torch_add_0_forward_stack_info",
        # in-place: the input is recorded after the change, like the output (-1 is a filtered scalar)
        "Tensor_mul__0_forward_input.0", "Tensor_mul__0_forward_output", "Tensor_mul__0_forward_stack_info",
        "Tensor_to_0_forward_input.0", "Tensor_to_0_forward_output", "Tensor_to_0_forward_stack_info",
        "Functional_gelu_0_forward_input.0", "Functional_gelu_0_forward_output", "Functional_gelu_0_forward_stack_info",
    ]
    tensors = {record[0]: record for record in records if not record[0].endswith("_stack_info")}
    for record in tensors.values():
        check_npy(record, str(rank_dir / "api_stack_npu_dump"))
    relu_out = torch.relu(x).double().numpy()
    assert tensors["Torch_relu_0_forward_output"][5] == pytest.approx(
        [relu_out.max(), relu_out.min(), relu_out.mean(), np.linalg.norm(relu_out)], rel=2e-6)
    assert tensors["Torch_add_0_forward_input.0"][5] == tensors["Torch_relu_0_forward_output"][5]
    assert tensors["Tensor_mul__0_forward_output"][5][:2] == pytest.approx([-relu_out.min(), -relu_out.max()])
    npy_dir = rank_dir / "api_stack_npu_dump"
    assert os.stat(npy_dir / "Torch_add_0_forward_input.0.npy").st_ino == os.stat(npy_dir / "Torch_relu_0_forward_output.npy").st_ino
    assert tensors["Functional_gelu_0_forward_output"][3] == "torch.bfloat16"
    assert z.shape == half.shape == (300, 300)
