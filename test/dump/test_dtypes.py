"""Every dtype dumps without error, with statistics and npy/.pt values checked against numpy, and tensors
of special kinds (nested, sparse, quantized, meta) passed to wrapped APIs never raise."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import torch

from ptdbg_ascend import PrecisionDebugger, acc_cmp_dump, register_hook, set_dump_path, set_dump_switch

FLOAT8 = [getattr(torch, name) for name in ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz")
          if hasattr(torch, name)]
# dtype -> the numpy dtype its npy holds (doc/dump_guide.md)
NPY_DTYPES = dict([(dtype, np.float32) for dtype in FLOAT8] + [
    (torch.bfloat16, np.float32), (torch.float16, np.float16), (torch.float32, np.float32),
    (torch.float64, np.float64), (torch.complex32, np.complex64), (torch.complex64, np.complex64),
    (torch.complex128, np.complex128), (torch.bool, np.bool_), (torch.uint8, np.uint8), (torch.int8, np.int8),
    (torch.int16, np.int16), (torch.int32, np.int32), (torch.int64, np.int64)])
if hasattr(torch, "float8_e8m0fnu"):
    NPY_DTYPES[torch.float8_e8m0fnu] = np.float32


def sample(dtype):
    """A 2x3 tensor of ``dtype`` whose values are exactly representable, and its values as numpy (the copy
    the checks use: float8/bf16 widened to float32, complex32 to complex64)."""
    if dtype.is_complex:
        values = torch.tensor([[1 + 2j, -3 + 0.5j, 0.25 - 1j], [2 - 2j, 0j, -1.5 + 4j]], dtype=torch.complex64)
    elif dtype == torch.bool:
        values = torch.tensor([[True, False, True], [True, True, False]])
    elif dtype.is_floating_point:
        values = torch.tensor([[0.5, 1.0, 2.0], [4.0, 0.25, 8.0]]) if "e8m0" in str(dtype) else \
            torch.tensor([[-2.5, 0.5, 1.0], [3.0, -0.25, 1.75]])
    else:
        values = torch.tensor([[1, 2, 3], [0, 7, 5]]) * (1 if dtype == torch.uint8 else -1)
    tensor = values.to(dtype)
    wide = {torch.complex32: torch.complex64}.get(dtype, torch.float32 if dtype.is_floating_point else dtype)
    return tensor, tensor.to(wide).numpy().copy()


def expected_statistics(array):
    """[max, min, mean, norm] in float64; complex on the magnitude."""
    values = np.abs(array) if np.iscomplexobj(array) else array
    values = values.astype(np.float64).reshape(-1)
    return [values.max(), values.min(), values.mean(), np.sqrt((values * values).sum())]


def test_every_dtype_dumps_with_faithful_npy_and_statistics(tmp_path, dump_session, pkl_records):
    set_dump_path(str(tmp_path / "dtypes.pkl"), dump_tag="dtypes")
    register_hook(torch.nn.Linear(1, 1), acc_cmp_dump)
    set_dump_switch("ON", mode="all", filter_switch="OFF")
    samples = {}
    for dtype in NPY_DTYPES:
        tensor, copy = sample(dtype)
        out = torch.clone(tensor)  # a wrapped API: Torch_clone_{n}_forward
        samples[dtype] = copy
        assert out.dtype == dtype
    set_dump_switch("OFF")
    rank_dir = tmp_path / "dtypes_v1.0" / "rank0"
    outputs = [record for record in pkl_records(rank_dir / "dtypes.pkl")
               if record[0].startswith("Torch_clone_") and record[0].endswith("_forward_output")]
    assert len(outputs) == len(NPY_DTYPES)
    for record, dtype in zip(outputs, NPY_DTYPES):
        name, _, _, dtype_text, shape, statistics = record
        assert dtype_text == str(dtype) and shape == [2, 3], name
        np.testing.assert_allclose(statistics, expected_statistics(samples[dtype]), rtol=2e-6, err_msg=str(dtype))
        array = np.load(str(rank_dir / "dtypes" / (name + ".npy")), allow_pickle=False)
        assert array.dtype == NPY_DTYPES[dtype], (dtype, array.dtype)
        np.testing.assert_array_equal(array, samples[dtype], err_msg=str(dtype))


def _msprobe_clones(tmp_path, tensors):
    """``torch.clone`` of each tensor under a tensor-task PrecisionDebugger; returns (rank dir, dump.json
    "data", the names of the clone calls in order)."""
    debugger = PrecisionDebugger(task="tensor", level="L1", dump_path=str(tmp_path / "dump"))
    debugger.start()
    for tensor in tensors:
        torch.clone(tensor)
    debugger.stop()
    debugger.step()
    rank_dir = tmp_path / "dump" / "step0" / "rank"
    with open(str(rank_dir / "dump.json"), encoding="utf-8") as handle:
        data = json.load(handle)["data"]
    return rank_dir, data, [name for name in data if name.startswith("Torch.clone.")]


def test_every_dtype_in_the_msprobe_tensor_dump(tmp_path, dump_session):
    tensors = {dtype: sample(dtype) for dtype in NPY_DTYPES}
    rank_dir, data, names = _msprobe_clones(tmp_path, [tensors[dtype][0] for dtype in NPY_DTYPES])
    assert len(names) == len(NPY_DTYPES)
    for name, dtype in zip(names, NPY_DTYPES):
        tensor, copy = tensors[dtype]
        leaf = data[name]["output"][0]
        assert leaf["dtype"] == str(dtype) and leaf["shape"] == [2, 3], name
        saved = torch.load(str(rank_dir / "dump_tensor_data" / leaf["data_name"]), weights_only=True)
        assert saved.dtype == dtype and torch.equal(saved.view(torch.uint8), tensor.view(torch.uint8)), name
        expected = expected_statistics(copy)
        if dtype == torch.bool:  # msprobe: any, all
            assert [leaf["Max"], leaf["Min"]] == [True, False]
        elif dtype.is_complex:  # msprobe: max/min/mean of |x|, Norm null
            np.testing.assert_allclose([leaf["Max"], leaf["Min"], leaf["Mean"]], expected[:3], rtol=2e-6)
            assert leaf["Norm"] is None
        else:
            np.testing.assert_allclose([leaf["Max"], leaf["Min"], leaf["Mean"], leaf["Norm"]], expected, rtol=2e-6,
                                       err_msg=str(dtype))


def special_tensors():
    """Nested (strided and jagged), sparse (COO, CSR), quantized and meta tensors, each with the dense values a
    record holds (None: no values)."""
    dense = torch.tensor([[0.0, 1.5, 0.0], [-2.0, 0.0, 3.0]])
    parts = [torch.tensor([1.0, 2.0]), torch.tensor([3.0, -4.0, 5.0])]
    quantized = torch.quantize_per_tensor(torch.tensor([0.5, 1.0, -1.5]), 0.5, 4, torch.quint8)
    return [
        ("nested", torch.nested.nested_tensor(parts), np.array([1.0, 2.0, 3.0, -4.0, 5.0], np.float32)),
        ("jagged", torch.nested.nested_tensor(parts, layout=torch.jagged), np.array([1.0, 2.0, 3.0, -4.0, 5.0], np.float32)),
        ("sparse", dense.to_sparse(), dense.numpy()),
        ("csr", dense.to_sparse_csr(), dense.numpy()),
        ("quantized", quantized, quantized.dequantize().numpy()),
        ("meta", torch.ones(2, 3, device="meta"), None),
    ]


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("summary_only", [False, True])
def test_special_tensor_kinds_never_raise(tmp_path, dump_session, pkl_records, summary_only):
    set_dump_path(str(tmp_path / "kinds.pkl"), dump_tag="kinds")
    register_hook(torch.nn.Linear(1, 1), acc_cmp_dump)
    set_dump_switch("ON", mode="all", filter_switch="OFF", summary_only=summary_only)
    for _label, tensor, _values in special_tensors():
        torch.clone(tensor)
        if not tensor.is_quantized:  # torch itself has no mul for a quantized tensor
            torch.mul(tensor, 1)
    set_dump_switch("OFF")
    rank_dir = tmp_path / "kinds_v1.0" / "rank0"
    records = {record[0]: record for record in pkl_records(rank_dir / "kinds.pkl")}
    outputs = [records[f"Torch_clone_{index}_forward_output"] if
               f"Torch_clone_{index}_forward_output" in records else None for index in range(6)]
    for (label, tensor, values), record in zip(special_tensors(), outputs):
        if values is None:  # meta: not recorded at all (no values), as before
            assert record is None
            continue
        assert record[3] == str(tensor.dtype), label
        assert record[4] == list(values.shape), label
        np.testing.assert_allclose(record[5], expected_statistics(values), rtol=2e-6, err_msg=label)
        npy = rank_dir / "kinds" / (record[0] + ".npy")
        if summary_only:
            assert not os.path.exists(str(npy))
        else:
            np.testing.assert_array_equal(np.load(str(npy)), values, err_msg=label)


@pytest.mark.filterwarnings("ignore")
def test_special_tensor_kinds_in_the_msprobe_dump(tmp_path, dump_session):
    rank_dir, data, names = _msprobe_clones(tmp_path, [tensor for _label, tensor, _values in special_tensors()])
    assert len(names) == 6
    for name, (label, tensor, values) in zip(names, special_tensors()):
        leaf = data[name]["output"][0]
        assert leaf["dtype"] == str(tensor.dtype), label
        if values is None:
            assert leaf["Max"] is None, label  # a meta tensor: no values (its .pt holds none either)
            continue
        assert leaf["shape"] == list(values.shape) and leaf["tensor_kind"] in ("nested", "sparse", "quantized"), label
        np.testing.assert_allclose(leaf["Max"], values.max(), rtol=2e-6)
        saved = torch.load(str(rank_dir / "dump_tensor_data" / leaf["data_name"]), weights_only=True)
        np.testing.assert_array_equal(saved.numpy(), values, err_msg=label)
