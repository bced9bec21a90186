"""The summary over the ranks, on hand-written data: where each rank went bad among its collectives (read from a
compare CSV), the answer across ranks (one origin, ties, no collective, ranks not compared), the PairResult's JSON
read back from hostile files, and compare_summary_{ts}.csv cell by cell. The real 4-rank runs are in
test_cross_rank_ddp.py."""

from __future__ import annotations

import csv
import json

import pytest

from ptdbg_ascend.comparison.rank_order import Place, RankOrder, read_rank_order
from ptdbg_ascend.comparison.rank_summary import SUMMARY_COLUMNS, PairResult, cross_rank_answer, write_summary
from ptdbg_ascend.csv_cells import restore_row
from ptdbg_ascend.errors import CompareError, ParameterError

pytestmark = pytest.mark.torchfree

AR = "Distributed_all_reduce_{}_forward"


def result(rank, failure="", before=0, after="", overflow="", overflow_before=0, overflow_after="", **fields):
    values = dict(pair=f"rank{rank}-rank{rank}", rank=rank, csv_path=f"/out/compare_result_rank{rank}.csv",
                  passed=not failure, paired_forward=10, paired_backward=4, failed_forward=1 if failure else 0,
                  failed_backward=0, first_failure=failure, suspect="", kind="cause" if failure else "",
                  coverage="", npu_dump=f"/dump/rank{rank}/dump.pkl", judged=True, collectives=3,
                  collectives_before_failure=before, collective_after_failure=after, first_overflow=overflow,
                  collectives_before_overflow=overflow_before, collective_after_overflow=overflow_after)
    values.update(fields)
    return PairResult(**values)


# --- the answer across ranks ------------------------------------------------------------------------------
def test_one_rank_bad_before_the_first_collective_that_spread_it():
    results = [result(0, "Distributed_all_reduce_0_forward_output.0", 1, AR.format(1)),
               result(1, "Functional_linear_0_forward_output", 0, AR.format(0)),
               result(2, "Distributed_all_reduce_0_forward_output.0", 1, AR.format(1))]
    divergence, overflow = cross_rank_answer(results)
    assert divergence == ("First divergence across ranks: rank 1, Functional_linear_0_forward, before "
                          "Distributed_all_reduce_0_forward (collective #1) spread it to every rank")
    assert overflow == "No inf/NaN across ranks: no NPU row of the 3 compared ranks holds one"


def test_ranks_that_stayed_good_are_named_and_later_ranks_are_the_ones_it_spread_to():
    results = [result(0, "Tensor_div__3_forward_output", 4, AR.format(4)), result(1),
               result(2, "Torch_tanh_1_forward_output", 2, AR.format(2)), result(3)]
    assert cross_rank_answer(results)[0] == (
        "First divergence across ranks: rank 2, Torch_tanh_1_forward, before Distributed_all_reduce_2_forward "
        "(collective #3) spread it to rank 0; ranks 1, 3 stayed within the accuracy")


def test_one_bad_rank_and_the_others_good():
    results = [result(0), result(1, "Torch_tanh_0_forward_output", 0, AR.format(0)), result(2)]
    assert cross_rank_answer(results)[0] == (
        "First divergence across ranks: rank 1, Torch_tanh_0_forward, before Distributed_all_reduce_0_forward "
        "(collective #1); every other rank stayed within the accuracy")


def test_a_tie_names_every_rank_bad_before_the_same_collective():
    results = [result(0, "Functional_linear_2_forward_output", 1, AR.format(1)),
               result(1, "Torch_exp_0_forward_output", 1, AR.format(1)),
               result(2, "Distributed_all_reduce_1_forward_output.0", 2, AR.format(2))]
    assert cross_rank_answer(results)[0] == (
        "First divergence across ranks: no single origin: ranks 0, 1 went bad before "
        "Distributed_all_reduce_1_forward (collective #2): rank 0 at Functional_linear_2_forward; rank 1 at "
        "Torch_exp_0_forward; then rank 2")


def test_every_rank_bad_in_the_same_collective_with_good_inputs():
    results = [result(rank, "Distributed_all_reduce_0_forward_output.0", 1, AR.format(1)) for rank in range(2)]
    assert cross_rank_answer(results)[0] == (
        "First divergence across ranks: no single origin: ranks 0, 1 (every compared rank) went bad in "
        "Distributed_all_reduce_0_forward (collective #1), its inputs still good: rank 0 at "
        "Distributed_all_reduce_0_forward; rank 1 at Distributed_all_reduce_0_forward")


def test_every_rank_bad_with_no_collective_in_the_dumps():
    results = [result(rank, "Functional_linear_0_forward_output", 0, "", collectives=0) for rank in range(2)]
    assert cross_rank_answer(results)[0] == (
        "First divergence across ranks: no single origin: ranks 0, 1 (every compared rank) went bad with no "
        "collective in its dump: rank 0 at Functional_linear_0_forward; rank 1 at Functional_linear_0_forward")


def test_one_rank_bad_in_a_collective_with_good_inputs_and_a_mixed_tie():
    results = [result(0, "Distributed_all_reduce_0_forward_output.0", 1, AR.format(1)),
               result(1, "Functional_linear_1_forward_output", 2, AR.format(2)), result(2)]
    assert cross_rank_answer(results)[0] == (
        "First divergence across ranks: rank 0, Distributed_all_reduce_0_forward (collective #1), its inputs still "
        "good; then rank 1; rank 2 stayed within the accuracy")
    results[1] = result(1, "Functional_linear_1_forward_output", 1, AR.format(1))
    assert cross_rank_answer(results)[0] == (
        "First divergence across ranks: no single origin: ranks 0, 1 went bad before Distributed_all_reduce_1_forward "
        "(collective #2): rank 0 at Distributed_all_reduce_0_forward; rank 1 at Functional_linear_1_forward; rank 2 "
        "stayed within the accuracy")


def test_a_failure_after_the_last_collective():
    results = [result(0), result(1, "Functional_linear_9_forward_output", 3, "")]
    assert cross_rank_answer(results)[0] == (
        "First divergence across ranks: rank 1, Functional_linear_9_forward, after its last collective (#3): no "
        "collective followed it; every other rank stayed within the accuracy")


def test_ranks_not_compared_are_never_claimed_as_the_origin():
    results = [result(0, "Distributed_all_reduce_0_forward_output.0", 1, AR.format(1)),
               result(1, "Functional_linear_0_forward_output", 0, AR.format(0)),
               result(2, passed=False, judged=False, coverage="none of the 6 paired tensors was judged")]
    divergence, overflow = cross_rank_answer(results, {"rank3-rank3": "only in the NPU dump"})
    assert divergence == (
        "First divergence across ranks (among the compared ranks): rank 1, Functional_linear_0_forward, before "
        "Distributed_all_reduce_0_forward (collective #1) spread it to every rank; not compared in full, so it "
        "may have started there: rank3-rank3, rank2-rank2")
    assert overflow.endswith("; not compared in full, so it may have started there: rank3-rank3")


def test_every_rank_passing_with_one_not_compared_claims_nothing():
    lines = cross_rank_answer([result(0), result(1)], {"rank2-rank2": "lost: worker/process died"})
    assert lines[0] == ("No divergence across ranks: nothing failed in the 2 compared rank pairs; not compared in "
                        "full, so it may have started there: rank2-rank2")
    # a pair compared in part where nothing failed (its backward unpaired) is no proof either
    partial = result(1, passed=False, coverage="the bench dump has no backward calls: 4 NPU backward rows were never "
                                               "paired (a forward-only bench dump?)")
    assert cross_rank_answer([result(0), partial])[0] == (
        "No divergence across ranks: nothing failed in the 2 compared rank pairs; not compared in full, so it may "
        "have started there: rank1-rank1")
    assert cross_rank_answer([]) == []


def test_first_inf_nan_from_an_input_and_dotted_names_of_a_dump_json():
    results = [result(0, overflow="Functional_linear_0_forward_input.1", overflow_after=AR.format(0),
                      npu_dump="/dump/rank0/dump.json"),
               result(1, overflow="Distributed_all_reduce_0_forward_output.0", overflow_before=1,
                      overflow_after=AR.format(1), npu_dump="/dump/rank1/dump.json")]
    assert cross_rank_answer(results)[1] == (
        "First inf/NaN across ranks: rank 0, Functional.linear.0.forward (its input "
        "Functional.linear.0.forward.input.1: from data, weights or an API not dumped), before "
        "Distributed.all_reduce.0.forward (collective #1) spread it to every rank")


def test_a_thousand_ranks_are_named_eight_at_most():
    results = [result(rank, "Tensor_mul_0_forward_output", 0, AR.format(0)) for rank in range(1024)]
    line = cross_rank_answer(results)[0]
    assert "ranks 0, 1, 2, 3, 4, 5, 6, 7 and 1016 more (every compared rank) went bad before" in line
    assert line.count(" at Tensor_mul_0_forward") == 8


# --- a rank's place among its collectives, from its compare CSV -------------------------------------------
HEADER = ["NPU Name", "Bench Name", "NPU max", "NPU min", "Result"]


def write_csv(path, rows):
    with open(path, "w", newline="", encoding="utf-8") as handle:
        csv.writer(handle).writerows([HEADER] + rows)
    return str(path)


def row(name, result="pass", npu_max="1.0", npu_min="-1.0"):
    return [name, name, npu_max, npu_min, result]


def test_a_failing_collective_input_is_bad_before_that_collective(tmp_path):
    path = write_csv(tmp_path / "c.csv", [
        row("Distributed_all_reduce_0_forward_input.0"), row("Distributed_all_reduce_0_forward_output.0"),
        row("Distributed_broadcast_0_forward_input.0", "error"), row("Tensor_add_0_backward_output.0", "error"),
        row("Distributed_broadcast_0_forward_output.0", "error", "nan"),
        row("Distributed_all_reduce_1_forward_input.0")])
    assert read_rank_order(path) == RankOrder(
        failed_forward=2, failed_backward=1, collectives=3,
        failure=Place("Distributed_broadcast_0_forward_input.0", "Distributed_broadcast_0_forward", 1,
                      "Distributed_broadcast_0_forward"),
        overflow=Place("Distributed_broadcast_0_forward_output.0", "Distributed_broadcast_0_forward", 2,
                       "Distributed_all_reduce_1_forward"))


def test_a_failing_collective_output_had_good_inputs(tmp_path):
    path = write_csv(tmp_path / "c.csv", [
        row("Nan", "unmatched", "Nan", "Nan"), row("Torch_exp_0_forward_output", "pass", "inf", "Nan"),
        row("Distributed_all_reduce_0_forward_input.0"), row("Distributed_all_reduce_0_forward_output.0", "error"),
        row("Tensor_div__0_forward_output", "error")])
    order = read_rank_order(path)
    assert order.failure == Place("Distributed_all_reduce_0_forward_output.0", "Distributed_all_reduce_0_forward", 1)
    # inf in an NPU max is an overflow even where the row passed (the bench has it too); "Nan" is no value
    assert order.overflow == Place("Torch_exp_0_forward_output", "Torch_exp_0_forward", 0,
                                   "Distributed_all_reduce_0_forward")
    assert (order.collectives, order.failed_forward) == (1, 2)


def test_a_csv_without_the_columns_or_unreadable_names_its_path(tmp_path):
    bad = tmp_path / "other.csv"
    bad.write_text("a,b\n1,2\n", encoding="utf-8")
    with pytest.raises(CompareError, match=r"other\.csv is not a compare result"):
        read_rank_order(str(bad))
    with pytest.raises(CompareError, match=r"Cannot read the compare result .*missing\.csv"):
        read_rank_order(str(tmp_path / "missing.csv"))
    assert read_rank_order("") == RankOrder()


def test_a_stack_cell_longer_than_csv_default_limit_is_read(tmp_path):
    long_stack = [row("Torch_exp_0_forward_output", "error") + ["x" * 300_000]]
    path = write_csv(tmp_path / "stack.csv", long_stack)
    assert read_rank_order(path).failure.record == "Torch_exp_0_forward_output"
    assert csv.field_size_limit() == 131072  # put back


# --- the PairResult's JSON, read back from files anyone may have written ---------------------------------
def test_json_round_trip():
    original = result(3, "Functional_linear_0_forward_output", 0, AR.format(0))
    assert PairResult.from_json(json.loads(json.dumps(original.to_json())), "r.json") == original


@pytest.mark.parametrize("change, message", [
    (lambda data: [data], "it holds a JSON list, not an object"),
    (lambda data: dict(data, format="ptdbg_ascend.finding"), "it says format 'ptdbg_ascend.finding' version 1"),
    (lambda data: dict(data, version=True), "it says format 'ptdbg_ascend.pair_result' version True"),
    (lambda data: dict(data, version=2), "version 2"),
    (lambda data: {key: value for key, value in data.items() if key != "coverage"}, "the field 'coverage' is missing"),
    (lambda data: dict(data, paired_forward=True), "the field 'paired_forward' is True, not an integer"),
    (lambda data: dict(data, failed_backward=1.0), "the field 'failed_backward' is 1.0, not an integer"),
    (lambda data: dict(data, passed=1), "the field 'passed' is 1, not true or false"),
    (lambda data: dict(data, rank=-2), "the field 'rank' is -2, not from -1 to 2\\*\\*63-1"),
    (lambda data: dict(data, collectives=2 ** 64), "the field 'collectives' is 18446744073709551616, not from 0"),
    (lambda data: dict(data, first_failure="x" * 5000),
     "the field 'first_failure' has 5000 characters \\(at most 4096\\)"),
    (lambda data: dict(data, suspect=None), "the field 'suspect' is None, not a string"),
    (lambda data: dict(data, pair="../../etc"), "the pair '../../etc' is not of the form rank\\{N\\}-rank\\{M\\}"),
])
def test_hostile_json_is_refused_naming_the_file(change, message):
    data = change(result(1).to_json())
    with pytest.raises(CompareError, match=r"^/shared/rank1-rank1\.json is not a rank pair result .*" + message):
        PairResult.from_json(data, "/shared/rank1-rank1.json")


def test_of_cuts_what_from_json_would_refuse_and_checks_its_arguments(tmp_path):
    from ptdbg_ascend.comparison.outcome import CompareOutcome

    long_name = "Torch_" + "x" * 5000 + "_0_forward_output"
    path = write_csv(tmp_path / "c.csv", [row(long_name, "error")])
    outcome = CompareOutcome(path, None, None, long_name, 1)
    made = PairResult.of("rank0-rank0", 0, outcome, "/dump/rank0/dump.pkl")
    assert len(made.first_failure) == 4096 and made.first_failure.endswith("...")
    assert PairResult.from_json(made.to_json(), "r.json") == made
    with pytest.raises(ParameterError, match="pair"):
        PairResult.of("../x", 0, outcome, "")
    with pytest.raises(ParameterError, match="rank"):
        PairResult.of("rank0-rank0", True, outcome, "")


# --- compare_summary_{ts}.csv -------------------------------------------------------------------------------
def read_rows(path):
    with open(path, newline="", encoding="utf-8") as handle:
        return [restore_row(cells) for cells in csv.reader(handle)]


def test_summary_rows_by_rank_then_pairs_not_compared(tmp_path):
    results = [result(10, "=HYPERLINK(\"http://x\")_0_forward_output", 2, AR.format(2), suspect="Torch_exp_0_forward"),
               result(2, coverage="the bench dump has no backward calls: 4 NPU backward rows were never paired",
                      passed=False)]
    path = write_summary(str(tmp_path), results, {"rank7-rank7": "lost: worker/process died",
                                                  "rank3-rank3": "only in the NPU dump"}, "20260101120000")
    assert path == str(tmp_path / "compare_summary_20260101120000.csv")
    raw = (tmp_path / "compare_summary_20260101120000.csv").read_text(encoding="utf-8")
    assert "'=HYPERLINK" in raw  # never a formula in a spreadsheet
    rows = read_rows(path)
    assert tuple(rows[0]) == SUMMARY_COLUMNS
    cells = [dict(zip(rows[0], line)) for line in rows[1:]]
    assert [(c["Rank Pair"], c["NPU Rank"], c["Status"]) for c in cells] == [
        ("rank2-rank2", "2", "incomplete"), ("rank10-rank10", "10", "failed"), ("rank3-rank3", "3", "not compared"),
        ("rank7-rank7", "7", "not compared")]
    failed = cells[1]
    assert (failed["Paired Forward"], failed["Paired Backward"], failed["Failing Forward"],
            failed["Failing Backward"]) == ("10", "4", "1", "0")
    assert failed["First Failure"] == "=HYPERLINK(\"http://x\")_0_forward_output"
    assert (failed["Suspect"], failed["Kind"], failed["Collectives"], failed["Collectives Before Failure"],
            failed["Next Collective"]) == ("Torch_exp_0_forward", "cause", "3", "2", AR.format(2))
    assert failed["Compare Result"] == "/out/compare_result_rank10.csv"
    assert cells[0]["Coverage"].startswith("the bench dump has no backward calls")
    assert cells[0]["Collectives Before Failure"] == ""  # nothing failed: no place
    assert cells[3]["Not Compared"] == "lost: worker/process died" and cells[3]["First Failure"] == ""
    with pytest.raises(ParameterError, match="timestamp"):
        write_summary(str(tmp_path), results, {}, "../../x")
    # a second summary in the same second takes the next name
    again = write_summary(str(tmp_path), results, {}, "20260101120000")
    assert again == str(tmp_path / "compare_summary_20260101120000_1.csv")
