"""Tensor files whose size lies (issue 17, item 3, on the compare side): a reader learns a tensor's bytes from
the file's header before allocating it, and refuses a file that declares more than it holds or more than a
tensor may take; a compare meeting such a file writes that row's reason and compares the rest."""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from ptdbg_ascend.fs.confined import load_tensor


def refused():
    from ptdbg_ascend.fs.tensor_files import TensorFileRefused

    return TensorFileRefused


def npy_header_only(path, shape, dtype="<f8"):
    """An .npy whose header declares ``shape`` but which holds 16 bytes of data."""
    header = f"{{'descr': '{dtype}', 'fortran_order': False, 'shape': {tuple(shape)}, }}"
    header += " " * (63 - (10 + len(header)) % 64) + "\n"
    with open(path, "wb") as handle:
        handle.write(b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header.encode("latin1"))
        handle.write(bytes(16))


@pytest.mark.torchfree
def test_npy_declaring_more_than_it_holds_or_may_take(tmp_path):
    small = tmp_path / "small.npy"
    np.save(str(small), np.arange(6, dtype=np.float32).reshape(2, 3))
    assert load_tensor(str(small), max_bytes=24).tolist() == [[0, 1, 2], [3, 4, 5]]
    with pytest.raises(refused(), match=r"small\.npy declares an array of shape \(2, 3\) \(24 B\), over "
                                                r"the 23 B a tensor may take here"):
        load_tensor(str(small), max_bytes=23)
    liar = tmp_path / "liar.npy"
    npy_header_only(str(liar), (2 ** 31,))  # 16 GiB declared in a 100-byte file
    with pytest.raises(refused(), match=r"liar\.npy declares 16\.0 GiB of data but holds 16 B: truncated "
                                                r"or crafted"):
        load_tensor(str(liar), max_bytes=2 ** 50)
    with pytest.raises(refused(), match=r"over the 1\.0 GiB a tensor may take"):
        load_tensor(str(liar), max_bytes=2 ** 30)
    objects = tmp_path / "objects.npy"
    np.save(str(objects), np.array([{"a": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(refused(), match="holds Python objects; it is not unpickled"):
        load_tensor(str(objects))


def test_pt_archives_are_sized_before_they_are_loaded(tmp_path):
    torch = pytest.importorskip("torch")
    stride0 = tmp_path / "stride0.pt"
    torch.save(torch.zeros(1).expand(2 ** 31), str(stride0))
    assert os.path.getsize(str(stride0)) < 4096
    with pytest.raises(refused(), match=r"holds a tensor of shape \(2147483648,\) \(8\.0 GiB once copied\)"):
        load_tensor(str(stride0), max_bytes=2 ** 30)
    legacy = tmp_path / "legacy.pt"
    torch.save(torch.ones(2), str(legacy), _use_new_zipfile_serialization=False)
    with pytest.raises(refused(), match="is not a zip-format .pt file"):
        load_tensor(str(legacy))
    from tensor_bombs import deflated_pt

    bomb = tmp_path / "bomb.pt"
    bomb.write_bytes(deflated_pt(256 * 1024 ** 2))
    assert os.path.getsize(str(bomb)) < 2 * 1024 ** 2
    with pytest.raises(refused(), match=r"bomb\.pt unpacks to 256\.0 MiB, over the 1\.0 MiB"):
        load_tensor(str(bomb), max_bytes=1024 ** 2)
    good = tmp_path / "good.pt"
    torch.save(torch.arange(3.0), str(good))
    assert load_tensor(str(good), max_bytes=1024).tolist() == [0.0, 1.0, 2.0]


@pytest.mark.skipif(shutil.which("prlimit") is None, reason="needs prlimit (util-linux)")
def test_compare_of_a_stride0_bomb_under_a_memory_cap_is_a_row_message(tmp_path):
    torch = pytest.importorskip("torch")
    roots = {}
    for side in ("npu", "bench"):
        root = tmp_path / side
        (root / "dump_tensor_data").mkdir(parents=True)
        torch.save(torch.zeros(1).expand(2 ** 31), str(root / "dump_tensor_data" / "bomb.pt"))
        torch.save(torch.arange(4.0), str(root / "dump_tensor_data" / "good.pt"))
        leaf = {"type": "torch.Tensor", "dtype": "torch.float32", "Max": 0.0, "Min": 0.0, "Mean": 0.0, "Norm": 0.0,
                "requires_grad": False}
        entries = {"Torch.relu.0.forward": {"input_args": [], "input_kwargs": {},
                                            "output": [dict(leaf, shape=[2 ** 31], data_name="bomb.pt")]},
                   "Torch.relu.1.forward": {"input_args": [], "input_kwargs": {},
                                            "output": [dict(leaf, shape=[4], Max=3.0, Mean=1.5, Norm=3.74,
                                                            data_name="good.pt")]}}
        (root / "dump.json").write_text(json.dumps({"task": "tensor", "level": "L1", "data": entries}))
        roots[side] = str(root / "dump.json")
    out = tmp_path / "out"
    out.mkdir()
    process = subprocess.run(["prlimit", f"--as={3 * 1024 ** 3}", sys.executable, "-m", "ptdbg_ascend.cli",
                              "compare", roots["npu"], roots["bench"], str(out), "--quiet"],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=300)
    output = process.stdout.decode(errors="replace")
    assert "Traceback" not in output and "MemoryError" not in output, output
    (report,) = (name for name in os.listdir(str(out)) if name.endswith(".csv"))
    with open(str(out / report), newline="") as handle:
        rows = {row["NPU Name"]: row for row in csv.DictReader(handle)}
    assert rows["Torch_relu_0_forward_output"]["Result"] == "not compared"
    assert "8.0 GiB once copied" in rows["Torch_relu_0_forward_output"]["Err_message"]
    assert rows["Torch_relu_1_forward_output"]["Result"] == "pass"


def test_reader_module_stays_torch_free():
    """tensor_files imports torch only to read a .pt (the compare side runs without torch)."""
    code = ("import sys, ptdbg_ascend.fs.tensor_files, ptdbg_ascend.memory; "
            "print('torch' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", code], stdout=subprocess.PIPE, timeout=60)
    assert result.stdout.decode().strip() == "False"
    from ptdbg_ascend.fs import tensor_files

    assert tensor_files.MAX_MEMBERS == 4096


@pytest.mark.torchfree
@pytest.mark.parametrize("limit, loads", [("1K", False), ("1M", True)])
def test_the_read_limit_is_set_by_an_environment_variable(tmp_path, limit, loads):
    """Compare, parse and convert read with the default limit (a quarter of the memory available) unless
    PTDBG_MAX_TENSOR_BYTES says otherwise: a user with a legitimately huge tensor can raise it."""
    array = tmp_path / "two_kib.npy"
    np.save(str(array), np.zeros(256, dtype=np.float64))
    code = ("from ptdbg_ascend.fs.confined import load_tensor\n"
            "try:\n    print(load_tensor({!r}).shape)\nexcept ValueError as error:\n    print(error)".format(str(array)))
    env = dict(os.environ, PTDBG_MAX_TENSOR_BYTES=limit)
    output = subprocess.run([sys.executable, "-c", code], stdout=subprocess.PIPE, env=env, timeout=60).stdout.decode()
    if loads:
        assert output.strip() == "(256,)"
    else:
        assert "over the 1.0 KiB a tensor may take here (if this machine has the memory: --memory-budget for " \
               "run-ut, PTDBG_MAX_TENSOR_BYTES=16G for compare, parse and convert)" in output, output
