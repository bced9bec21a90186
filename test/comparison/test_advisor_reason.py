"""The advisor's decision apart from its words: :func:`advisor.classify` on hand-made statistics rows gives the
typed reason (decision, suspect, evidence); the finding file stores it (since version 3; version 4 adds the re-run)
and still reads version 2."""

from __future__ import annotations

import json

import pytest

from ptdbg_ascend.comparison import advisor, pairs_to_rows, provenance
from ptdbg_ascend.comparison.matching import pair_rows
from ptdbg_ascend.comparison.outcome import Counts
from ptdbg_ascend.formats.records import CallRecord, TensorRecord
from ptdbg_ascend.errors import FileFormatError
from ptdbg_ascend.formats import finding as finding_file
from ptdbg_ascend.formats.reason import Decision, Reason

X = (1.0, -1.0, 0.25, 2.0)
BENCH_OUT, NPU_OUT = (3.0, -3.0, 0.75, 6.0), (30.0, -3.0, 7.5, 60.0)  # the NPU's linear output is ten times off


def call(name, *records):
    """A call of float32 tensors of shape (4,), each record as (suffix, (max, min, mean, norm))."""
    return CallRecord(name, tuple(TensorRecord(name + "_" + suffix, suffix.split(".")[0], "torch.float32", (4,),
                                               statistics, None) for suffix, statistics in records), ())


def classified(npu, bench):
    rows = provenance.carry_verdicts(pairs_to_rows.summary_rows(pair_rows(npu, bench)))
    counts = Counts.of(rows, statistics_only=True)
    return advisor.classify(rows, counts, advisor.first_failure(rows)), rows, counts


def linear(output):
    return call("Functional_linear_0_forward", ("input.0", X), ("output", output))


def relu(inputs):
    return call("Torch_relu_0_forward", ("input.0", inputs), ("output", (inputs[0], 0.0) + inputs[2:]))


def test_an_output_beyond_its_matching_inputs_is_the_cause():
    reason, _, _ = classified([linear(NPU_OUT), relu(NPU_OUT)], [linear(BENCH_OUT), relu(BENCH_OUT)])
    assert reason == Reason(Decision.COMPUTES_DIFFERENTLY, suspect="Functional_linear_0_forward",
                            record="Functional_linear_0_forward_output", line=3,
                            failing_call="Functional_linear_0_forward", statistics_only=True)
    assert reason.kind == "cause"


def test_an_input_changed_after_its_producer_matched_names_the_producer_as_evidence():
    """relu's input is linear's NPU output (same statistics), but on the bench side it differs from linear's
    output: the value changed in between, and the reason rests on linear's row (CSV line 3)."""
    reason, _, _ = classified([linear(BENCH_OUT), relu(BENCH_OUT)], [linear(BENCH_OUT), relu(NPU_OUT)])
    assert reason == Reason(Decision.CHANGED_BETWEEN, suspect="Torch_relu_0_forward",
                            record="Torch_relu_0_forward_input.0", line=4, failing_call="Torch_relu_0_forward",
                            related="Functional_linear_0_forward", related_line=3, statistics_only=True)
    assert reason.kind == "propagation"


def test_an_input_from_a_call_on_npu_only_is_traced_to_it():
    cast = call("Tensor_float_0_forward", ("input.0", BENCH_OUT), ("output", NPU_OUT))
    reason, _, _ = classified([linear(BENCH_OUT), cast, relu(NPU_OUT)], [linear(BENCH_OUT), relu(BENCH_OUT)])
    assert (reason.decision, reason.suspect, reason.via, reason.line) == (
        Decision.NPU_ONLY, "Tensor_float_0_forward", ("Tensor_float_0_forward",), 6)
    assert reason.one_sided == ("Tensor_float_0_forward (NPU only)",)


def test_nothing_failed_is_a_reason_without_suspect_and_renders_no_finding():
    reason, rows, counts = classified([linear(BENCH_OUT)], [linear(BENCH_OUT)])
    assert reason == Reason(Decision.NOTHING_FAILED, statistics_only=True)
    assert reason.kind is None
    advice, finding = advisor.diagnose(rows, counts, None)
    assert finding is None and advice.advice.startswith("All data in comparison result meets")


def test_the_finding_carries_the_reason_through_its_file():
    reason, rows, counts = classified([linear(NPU_OUT), relu(NPU_OUT)], [linear(BENCH_OUT), relu(BENCH_OUT)])
    advice, found = advisor.diagnose(rows, counts, 1)
    assert found.reason == reason and (found.call, found.kind, found.line) == ("Functional_linear_0_forward",
                                                                                "cause", 3)
    record = json.loads(finding_file.encode(found))
    assert record["version"] == 4 and record["reason"]["decision"] == "computes_differently"
    assert record["rerun"] is None  # diagnose alone does not re-run
    assert finding_file.decode(record, "f.json") == found
    with pytest.raises(FileFormatError, match="the decision 'blame' is none of"):
        finding_file.decode(dict(record, reason=dict(record["reason"], decision="blame")), "f.json")
    with pytest.raises(FileFormatError, match="the field 'reason.line' is '3', not a int or null"):
        finding_file.decode(dict(record, reason=dict(record["reason"], line="3")), "f.json")


def test_a_version_2_file_is_read_without_its_reason():
    """What compare wrote before version 3: the same fields, no ``reason``."""
    version_2 = {"format": "ptdbg_ascend.finding", "version": 2, "record": "Functional_linear_0_forward_output",
                 "line": 3, "kind": "cause", "call": "Functional_linear_0_forward", "api": "Functional_linear",
                 "user_line": None, "dtype_mismatch": None, "one_sided": ["Tensor_float_0_forward (NPU only)"],
                 "level": "error", "precision": None}
    found = finding_file.decode(version_2, "old.json")
    assert found == finding_file.Finding("Functional_linear_0_forward_output", 3, "cause",
                                         "Functional_linear_0_forward", "Functional_linear", None, None,
                                         ("Tensor_float_0_forward (NPU only)",))
    assert found.reason is None
    with pytest.raises(FileFormatError, match="old.json is not a compare finding of format 'ptdbg_ascend.finding' "
                                              "version 2: the field 'level' is missing"):
        finding_file.decode({k: v for k, v in version_2.items() if k != "level"}, "old.json")
    for version in (1, 5, 2.0, True):
        with pytest.raises(FileFormatError, match="version 4: it says format 'ptdbg_ascend.finding' version"):
            finding_file.decode(dict(version_2, version=version), "old.json")
