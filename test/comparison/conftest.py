"""Hand-written dumps for the compare tests (torch-free): legacy pkl + npy, msprobe dump.json."""

from __future__ import annotations

import json
import os
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import pytest

STACK = [["/work/train.py", "42", "forward", "x = self.conv(x)"], ["/work/train.py", "90", "<module>", "model(x)"]]


def _stats(array: np.ndarray) -> list:
    if array.size == 0 or array.dtype == np.bool_:
        return [[], [], [], "Nan"]
    if array.ndim == 0:
        value = array.item()
        return [value, value, value, "Nan"]
    data = array.astype(np.float64)
    return [float(data.max()), float(data.min()), float(data.mean()), float(np.sqrt((data * data).sum()))]


class LegacyDump:
    """Writes ``{root}/{stem}.pkl`` and ``{root}/{stem}/{name}.npy``; ``add_call`` takes
    ``[(suffix, array[, dtype])]`` with suffixes such as ``input.0`` or ``output``."""

    def __init__(self, root: str, stem: str = "api_stack_dump", stack: bool = True) -> None:
        self.root = root
        self.stem = stem
        self.stack = stack
        self.pkl = os.path.join(root, stem + ".pkl")
        self.data_dir = os.path.join(root, stem)
        os.makedirs(self.data_dir, exist_ok=True)
        open(self.pkl, "w").close()

    def add_call(self, call: str, tensors: Sequence[Tuple], save: bool = True) -> LegacyDump:
        with open(self.pkl, "a") as handle:
            for item in tensors:
                suffix, array = item[0], np.asarray(item[1])
                dtype = item[2] if len(item) > 2 else "torch." + str(array.dtype).replace("bool", "bool")
                name = f"{call}_{suffix}"
                handle.write(json.dumps([name, 0, [], dtype, list(array.shape), _stats(array)]) + "\n")
                if save:
                    np.save(os.path.join(self.data_dir, name + ".npy"), array)
            if self.stack:
                frames = self.stack if isinstance(self.stack, list) else STACK  # a list: these frames
                handle.write(json.dumps([call + "_stack_info", frames]) + "\n")
        return self

    def param(self, bench: LegacyDump, data: bool = True) -> Dict[str, object]:
        param = {"npu_pkl_path": self.pkl, "bench_pkl_path": bench.pkl, "is_print_compare_log": False}
        if data:
            param.update(npu_dump_data_dir=self.data_dir, bench_dump_data_dir=bench.data_dir)
        return param


@pytest.fixture
def legacy_dump(tmp_path):
    """``legacy_dump("npu")`` -> a LegacyDump under tmp_path/npu."""
    def make(side: str, stem: str = "api_stack_dump", stack: bool = True) -> LegacyDump:
        return LegacyDump(str(tmp_path / side), stem, stack)
    return make


@pytest.fixture
def output_dir(tmp_path):
    path = tmp_path / "output"
    path.mkdir()
    return str(path)


def _model_calls(planted: Optional[str] = None, extra_cast: bool = False) -> List[Tuple[str, list]]:
    """A small conv -> relu -> linear forward as calls; ``planted`` names the call whose output is perturbed
    (and whose perturbation propagates to the next input)."""
    rng = np.random.RandomState(0)
    x = rng.randn(2, 3).astype(np.float32)
    w = rng.randn(3, 3).astype(np.float32)
    calls = []
    conv = x @ w
    if planted == "Functional_linear_0_forward":
        conv = conv + np.float32(0.5) * np.sign(conv)
    calls.append(("Functional_linear_0_forward", [("input.0", x), ("input.1", w), ("output", conv)]))
    if extra_cast:
        calls.append(("Tensor_float_0_forward", [("input.0", conv), ("output", conv)]))
    relu = np.maximum(conv, 0)
    calls.append(("Torch_relu_0_forward", [("input.0", conv), ("output", relu)]))
    out = relu * np.float32(2)
    calls.append(("Tensor___mul___0_forward", [("input.0", relu), ("output", out)]))
    return calls


def make_ranks(tmp_path, model_calls, side, ranks, planted_rank=None, repeat=None):
    """``{tmp_path}/{side}/ptdbg_dump_v1.0/rank{r}`` for each of ``ranks``: the small model's calls (the planted
    rank's linear output perturbed); ``repeat`` ``{rank: n}``: that rank holds the model's calls n times (a bigger,
    slower rank). Returns the tag directory."""
    tag = tmp_path / side / "ptdbg_dump_v1.0"
    for rank in ranks:
        dump = LegacyDump(str(tag / f"rank{rank}"), f"api_stack_{os.path.basename(side)}_dump")
        planted = "Functional_linear_0_forward" if rank == planted_rank else None
        for step in range((repeat or {}).get(rank, 1)):
            for call, tensors in model_calls(planted=planted):
                dump.add_call(call.replace("_0_", f"_{step}_"), tensors)
    return str(tag)


@pytest.fixture
def rank_dumps(tmp_path, model_calls):
    """``rank_dumps(side, ranks, planted_rank=None, repeat=None)``: :func:`make_ranks` under tmp_path."""
    return lambda side, ranks, planted_rank=None, repeat=None: make_ranks(tmp_path, model_calls, side, ranks,
                                                                        planted_rank, repeat)


@pytest.fixture
def statistics_ranks(tmp_path):
    """``statistics_ranks(side, ranks, slow_rank, slow_calls)``: statistics-only legacy dumps (pkl lines, no npy)
    under ``{tmp_path}/{side}/ptdbg_dump_v1.0``, 3 calls a rank and ``slow_calls`` in ``slow_rank`` (a rank that
    takes seconds to compare); returns the tag directory."""
    def make(side: str, ranks, slow_rank: int, slow_calls: int) -> str:
        tag = os.path.join(str(tmp_path), side, "ptdbg_dump_v1.0")
        for rank in ranks:
            rank_dir = os.path.join(tag, f"rank{rank}")
            os.makedirs(rank_dir)
            with open(os.path.join(rank_dir, f"api_stack_{side}_dump.pkl"), "w") as handle:
                for call in range(slow_calls if rank == slow_rank else 3):
                    for suffix in ("input.0", "output"):
                        handle.write(json.dumps([f"Torch_relu_{call}_forward_{suffix}", 0, [], "torch.float32",
                                                 [2, 3], [1.0 + rank, -1.0, 0.25, 2.0]]) + "\n")
        return tag
    return make


@pytest.fixture
def model_calls():
    """The function ``(planted=None, extra_cast=False) -> [(call, [(suffix, array)])]``."""
    return _model_calls


@pytest.fixture
def two_dumps(legacy_dump, model_calls):
    """``(npu, bench)`` LegacyDumps of the small model; kwargs go to model_calls for the NPU side."""
    def make(stack: bool = True, **npu_kwargs):
        npu, bench = legacy_dump("npu", stack=stack), legacy_dump("bench", stack=stack)
        for call, tensors in model_calls(**npu_kwargs):
            npu.add_call(call, tensors)
        for call, tensors in model_calls():
            bench.add_call(call, tensors)
        return npu, bench
    return make



@pytest.fixture
def hostile_compare(legacy_dump, output_dir):
    """``(hostile) -> (outcome, call)``: a statistics-only compare whose one call (failing, so the suspect) is named
    ``Torch_{hostile}_0_forward`` and whose stack line is ``hostile`` (text that would inject markup if a page
    wrote it unescaped: the HTML report's escaping tests)."""
    from ptdbg_ascend.comparison.api import compare

    def make(hostile: str):
        frames = [["/work/train.py", "7", "forward", hostile], ["/work/train.py", "9", "<module>", "main()"]]
        npu, bench = legacy_dump("npu", stack=frames), legacy_dump("bench", stack=frames)
        call = f"Torch_{hostile}_0_forward"
        x = np.arange(6, dtype=np.float32).reshape(2, 3)
        npu.add_call(call, [("input.0", x), ("output", x * 3)], save=False)
        bench.add_call(call, [("input.0", x), ("output", x * 2)], save=False)
        return compare(npu.param(bench, data=False), output_dir, stack_mode=True), call
    return make
