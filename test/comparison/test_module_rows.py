"""Module records from dump files written by hand (torch-free, statistics only): the names, the pairing
that never mixes a module with an API, and construct.json files from strangers (cycles, links to nowhere,
deep chains, garbage), which may change how rows are grouped but never lose a row or crash."""

from __future__ import annotations

import csv
import json
import os
from typing import Dict, List, Optional

import pytest

from ptdbg_ascend import compare
from ptdbg_ascend.comparison.matching import pair_rows
from ptdbg_ascend.formats.records import CallRecord, TensorRecord
from ptdbg_ascend.errors import CompareError
from ptdbg_ascend.formats.naming import module_to_legacy, parse_module_call
from ptdbg_ascend.readers import read_dump

pytestmark = pytest.mark.torchfree


def _leaf(value: float, shape=(2, 3)) -> dict:
    return {"type": "torch.Tensor", "dtype": "torch.float32", "shape": list(shape), "Max": value, "Min": -value,
            "Mean": value / 10, "Norm": value * 2, "requires_grad": False}


def _forward(value: float) -> dict:
    return {"input_args": [_leaf(value)], "input_kwargs": {}, "output": [_leaf(value + 1)]}


def _write_dump(directory: str, entries: Dict[str, dict], construct: Optional[object] = None,
                construct_text: Optional[str] = None) -> str:
    """A statistics dump.json of ``entries`` in ``directory`` (+ construct.json: ``construct`` as JSON, or
    ``construct_text`` as written); returns the dump.json path."""
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "dump.json"), "w") as handle:
        json.dump({"task": "statistics", "level": "mix", "dump_data_dir": None, "data": entries}, handle)
    if construct is not None or construct_text is not None:
        with open(os.path.join(directory, "construct.json"), "w") as handle:
            handle.write(construct_text if construct_text is not None else json.dumps(construct))
    return os.path.join(directory, "dump.json")


# The entries as the dump engine writes them: a module's entry when it returns, after what ran inside it.
MIX = {
    "Functional.linear.0.forward": _forward(1.0),
    "Module.block.0.Linear.forward.0": _forward(1.0),
    "Torch.tanh.0.forward": _forward(2.0),
    "Module.block.1.Tanh.forward.0": _forward(2.0),
    "Module.block.Sequential.forward.0": _forward(1.0),
    "Functional.linear.1.forward": _forward(3.0),
    "Module.head.Linear.forward.0": _forward(3.0),
}
MIX_CONSTRUCT = {
    "Module.block.Sequential.forward.0": None,
    "Module.block.0.Linear.forward.0": "Module.block.Sequential.forward.0",
    "Functional.linear.0.forward": "Module.block.0.Linear.forward.0",
    "Module.block.1.Tanh.forward.0": "Module.block.Sequential.forward.0",
    "Torch.tanh.0.forward": "Module.block.1.Tanh.forward.0",
    "Module.head.Linear.forward.0": None,
    "Functional.linear.1.forward": "Module.head.Linear.forward.0",
}
# Execution order: each module's input, what ran inside it, its output.
MIX_ORDER = [
    "Module_block.Sequential_0_forward_input.0",
    "Module_block.0.Linear_0_forward_input.0", "Functional_linear_0_forward_input.0", "Functional_linear_0_forward_output",
    "Module_block.0.Linear_0_forward_output",
    "Module_block.1.Tanh_0_forward_input.0", "Torch_tanh_0_forward_input.0", "Torch_tanh_0_forward_output",
    "Module_block.1.Tanh_0_forward_output",
    "Module_block.Sequential_0_forward_output",
    "Module_head.Linear_0_forward_input.0", "Functional_linear_1_forward_input.0", "Functional_linear_1_forward_output",
    "Module_head.Linear_0_forward_output",
]
def _names(csv_path: str) -> List[str]:
    with open(csv_path, newline="", encoding="utf-8") as handle:
        return [row["NPU Name"] for row in csv.DictReader(handle)]


def _compare(npu: str, bench: str, out: str):
    return compare({"npu_json_path": npu, "bench_json_path": bench, "is_print_compare_log": False}, out, xlsx=False)


def test_module_names_in_the_legacy_grammar():
    assert module_to_legacy("Module.layers.1.mlp.GPTNeoXMLP.forward.0") == "Module_layers.1.mlp.GPTNeoXMLP_0_forward"
    assert module_to_legacy("Module.conv1.Conv2d.backward.12") == "Module_conv1.Conv2d_12_backward"
    # a path part named like a direction, underscores and digits: parsed from the right
    assert parse_module_call("Module.forward.x_0_forward.Linear.forward.3") == ("forward.x_0_forward.Linear",
                                                                                 "forward", 3)
    for name in ("Functional.linear.0.forward",            # an API call
                 "Module.Linear.forward.0",                # no path: the root module is never hooked
                 "Module.a.Linear.forward.0.input.0",      # a leaf
                 "Module..Linear.forward.0",               # an empty path part
                 "Module.a\x1b[2J.Linear.forward.0",       # a control character
                 "Module.a.Linear.forward." + "9" * 19,    # no run counts that far (and int() of 5000 digits raises)
                 "Module.a.Linear.sideways.0", 42):
        assert parse_module_call(name) is None and (not isinstance(name, str) or module_to_legacy(name) is None)


def test_mix_rows_nest_modules_around_what_ran_inside_them(tmp_path):
    npu = _write_dump(str(tmp_path / "npu"), MIX, MIX_CONSTRUCT)
    bench = _write_dump(str(tmp_path / "bench"), MIX, MIX_CONSTRUCT)
    outcome = _compare(npu, bench, str(tmp_path / "out"))
    assert _names(outcome.csv_path) == MIX_ORDER
    assert outcome and outcome.counts.paired == len(MIX_ORDER)
    calls = {call.name: call for call in read_dump(npu)}
    assert calls["Module_block.0.Linear_0_forward"].module == "Module.block.0.Linear.forward.0"
    assert calls["Module_block.0.Linear_0_forward"].parent == "Module.block.Sequential.forward.0"
    assert calls["Functional_linear_0_forward"].module is None
    assert calls["Functional_linear_0_forward"].parent == "Module.block.0.Linear.forward.0"


def test_a_module_entry_written_early_still_closes_after_what_ran_inside_it(tmp_path):
    # GPT-NeoX's model-level backward entry comes before its layers' (it has no input needing a gradient)
    entries = {"Module.model.Net.backward.0": _forward(1.0), "Module.model.layer.Linear.backward.0": _forward(2.0)}
    construct = {"Module.model.Net.backward.0": None, "Module.model.layer.Linear.backward.0": "Module.model.Net.backward.0"}
    dump = _write_dump(str(tmp_path / "d"), entries, construct)
    outcome = _compare(dump, dump, str(tmp_path / "out"))
    assert _names(outcome.csv_path) == [
        "Module_model.Net_0_backward_input.0", "Module_model.layer.Linear_0_backward_input.0",
        "Module_model.layer.Linear_0_backward_output.0", "Module_model.Net_0_backward_output.0"]


def test_a_module_record_never_pairs_with_an_api_record_of_its_name():
    record = TensorRecord("Module_head.Linear_0_forward_output", "output", "torch.float32", (2,),
                          (1.0, 0.0, 0.5, 1.0), None)
    module = CallRecord("Module_head.Linear_0_forward", (record,), (), module="Module.head.Linear.forward.0")
    look_alike = CallRecord("Module_head.Linear_0_forward", (record,), ())  # a pkl's call: any name is an API's
    rows = pair_rows([module], [look_alike])
    assert sorted((row.npu is not None, row.bench is not None) for row in rows) == [(False, True), (True, False)]
    assert [(row.npu is not None, row.bench is not None) for row in pair_rows([module], [module])] == [(True, True)]


def test_a_crafted_pkl_named_like_a_module_does_not_pair_with_the_module(tmp_path):
    pkl = tmp_path / "look_alike.pkl"
    pkl.write_text(json.dumps(["Module_head.Linear_0_forward_input.0", 0, [], "torch.float32", [2, 3],
                               [3.0, -3.0, 0.3, 6.0]]) + "\n")
    l0 = _write_dump(str(tmp_path / "l0"), {"Module.head.Linear.forward.0": _forward(3.0)},
                     {"Module.head.Linear.forward.0": None})
    with pytest.raises(CompareError, match="holds no module records"):
        compare({"npu_json_path": l0, "bench_pkl_path": str(pkl)}, str(tmp_path / "out"), xlsx=False)
    # a mix dump's API records compare with it; its module records are left out, the look-alike stays alone
    mix = _write_dump(str(tmp_path / "mix"), MIX, MIX_CONSTRUCT)
    outcome = compare({"npu_json_path": mix, "bench_pkl_path": str(pkl), "is_print_compare_log": False},
                      str(tmp_path / "out"), xlsx=False)
    with open(outcome.csv_path, newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    assert not any(row["NPU Name"].startswith("Module_") for row in rows)
    assert [row["Bench Name"] for row in rows if row["NPU Name"] == "Nan"] == ["Module_head.Linear_0_forward_input.0"]
    assert outcome.counts.paired == 0


@pytest.mark.parametrize("construct, construct_text", [
    ({"Module.block.Sequential.forward.0": "Module.head.Linear.forward.0",       # a cycle of two
      "Module.head.Linear.forward.0": "Module.block.Sequential.forward.0"}, None),
    ({call: call for call in MIX}, None),                                      # everyone its own parent
    ({call: "Functional.linear.0.forward" for call in MIX}, None),             # an API as the parent
    ({call: 5 for call in MIX}, None),                                         # not a name
    ({call: "Module.nowhere.Linear.forward.0" for call in MIX}, None),         # a module not in the dump
    (["Module.block.Sequential.forward.0"], None),                             # not an object
    (None, '{"Module.block.Sequential.forward.0": '),                          # not JSON (cut)
    (None, "\x00\xff" * 100),                                                   # not text
])
def test_hostile_construct_json_loses_no_row(tmp_path, construct, construct_text):
    npu = _write_dump(str(tmp_path / "npu"), MIX, construct, construct_text)
    bench = _write_dump(str(tmp_path / "bench"), MIX, MIX_CONSTRUCT)
    outcome = _compare(npu, bench, str(tmp_path / "out"))
    assert sorted(_names(outcome.csv_path)) == sorted(MIX_ORDER)
    assert outcome and outcome.counts.paired == len(MIX_ORDER)


def test_a_construct_json_nested_three_thousand_deep_is_walked_without_recursion(tmp_path):
    depth = 3000  # three times Python's recursion limit
    names = [f"Module.m{i}.Linear.forward.0" for i in range(depth)]
    entries = {name: _forward(1.0) for name in reversed(names)}  # inner modules end first
    construct = {name: (names[i - 1] if i else None) for i, name in enumerate(names)}
    construct[names[0]] = names[-1]  # and a cycle through all of them
    dump = _write_dump(str(tmp_path / "d"), entries, construct)
    outcome = _compare(dump, dump, str(tmp_path / "out"))
    rows = _names(outcome.csv_path)
    assert len(rows) == 2 * depth and outcome.counts.paired == 2 * depth


def test_module_entries_the_grammar_refuses_are_skipped_with_a_warning(tmp_path, capsys):
    entries = dict(MIX)
    entries["Module.a.Linear.forward." + "9" * 5000] = _forward(1.0)
    entries["Module.a\x07.Linear.forward.0"] = _forward(1.0)
    dump = _write_dump(str(tmp_path / "d"), entries, MIX_CONSTRUCT)
    calls = read_dump(dump)
    assert len(calls) == len(MIX)
    assert capsys.readouterr().out.count("not an API or module call name") == 2


def test_the_diverging_module_of_a_deep_crafted_tree_and_the_api_inside_it(tmp_path):
    # 3000 nested modules, an API in the innermost, everything failing: one walk, not one per level
    depth = 3000
    names = [f"Module.m{i}.Linear.forward.0" for i in range(depth)]
    entries = {"Functional.linear.0.forward": _forward(1.0)}
    entries.update((name, _forward(1.0)) for name in reversed(names))
    construct = {name: (names[i - 1] if i else None) for i, name in enumerate(names)}
    construct["Functional.linear.0.forward"] = names[-1]
    npu = _write_dump(str(tmp_path / "npu"), entries, construct)
    bench = _write_dump(str(tmp_path / "bench"), {name: _forward(2.0) for name in entries}, construct)
    outcome = _compare(npu, bench, str(tmp_path / "out"))
    with open(outcome.advisor_path, encoding="utf-8") as handle:
        advice = handle.read()
    assert "Diverging module: Module.m0.Linear.forward.0 (first failing module: its input already differs, so the " \
           "difference arose before it; first failing API inside it: Functional_linear_0_forward)" in advice
