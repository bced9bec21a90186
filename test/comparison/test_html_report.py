"""compare's HTML report (``compare_report_{tail}.html``): where it is written, what its embedded data says (the
suspect, the first failure, forward and backward apart, rows not compared as such), ``html=False`` /
``--no-html``, the ``_1`` rule, hostile names kept as text, and its size at 10^5 rows. The page rendered in a
real browser: ``test_html_chromium.py``."""

from __future__ import annotations

import csv
import html
import importlib.util
import json
import os
import re
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pytest

from ptdbg_ascend.comparison import html_index, html_page, html_report
from ptdbg_ascend.comparison.api import compare

pytestmark = pytest.mark.torchfree

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GRADES = list(html_report.GRADES)
HOSTILE = "</script><img src=x onerror=alert(1)>"
DATA = re.compile(r'<script type="application/json" id="report-data">(.*?)</script>', re.DOTALL)


def embedded(path):
    """The JSON the page embeds (what its script draws)."""
    with open(path, encoding="utf-8") as handle:
        found = DATA.search(handle.read())
    assert found is not None, path
    return json.loads(found.group(1))


def csv_lines(path):
    """CSV line (header = 1) -> the row as a dict."""
    with open(path, newline="", encoding="utf-8") as handle:
        return {line: row for line, row in enumerate(csv.DictReader(handle), 2)}


@pytest.fixture
def report_dumps(legacy_dump, model_calls):
    """NPU and bench dumps of the small model, forward and backward: the NPU's Functional_linear_0_forward
    planted, an extra cast on the NPU only (one-sided rows), and a call whose bench tensors are missing (rows
    not compared)."""
    npu, bench = legacy_dump("npu"), legacy_dump("bench")
    for dump, kwargs in ((npu, {"planted": "Functional_linear_0_forward", "extra_cast": True}), (bench, {})):
        calls = model_calls(**kwargs)
        for call, tensors in calls:
            dump.add_call(call, tensors)
        grad = np.ones((2, 3), dtype=np.float32)
        dump.add_call("Tensor___mul___0_backward", [("input.0", grad), ("output.0", grad * 2)])
        dump.add_call("Torch_relu_0_backward", [("input.0", grad * 2), ("output.0", grad)])
        dump.add_call("Torch_tanh_0_backward", [("input.0", grad), ("output.0", grad * 0.5)], save=dump is npu)
    return npu, bench


def test_the_page_lies_beside_the_csv_with_its_tail_as_a_0640_file(report_dumps, output_dir):
    npu, bench = report_dumps
    outcome = compare(npu.param(bench), output_dir)
    tail = os.path.basename(outcome.csv_path)[len("compare_result_"):-len(".csv")]
    assert os.path.basename(outcome.html_path) == f"compare_report_{tail}.html"
    assert os.path.dirname(outcome.html_path) == os.path.dirname(outcome.csv_path) == output_dir
    assert os.stat(outcome.html_path).st_mode & 0o777 == 0o640


def test_the_data_names_the_suspect_and_the_first_failure_forward_and_backward_apart(report_dumps, output_dir):
    npu, bench = report_dumps
    outcome = compare(npu.param(bench), output_dir)
    data = embedded(outcome.html_path)
    rows = csv_lines(outcome.csv_path)
    assert (data["format"], data["version"], data["rows"]) == ("ptdbg_ascend.html_report", 1, outcome.rows)
    answer = data["answer"]
    assert answer["suspect"] == outcome.finding.call == "Functional_linear_0_forward"
    assert answer["record"] == outcome.first_failure == "Functional_linear_0_forward_output"
    assert answer["line"] == outcome.finding.line and rows[answer["line"]]["NPU Name"] == answer["record"]
    # (the Python 3.8 run has no torch: the re-run is then "not_run" and says so)
    expected = "reproduced" if importlib.util.find_spec("torch") is not None else "not_run: torch is not installed"
    assert answer["status"] == "failed" and answer["rerun"].startswith(expected)
    # the advisor's Re-run line once, after the suspect (the finding's verdict is not added a second time)
    with open(outcome.html_path, encoding="utf-8") as handle:
        page = handle.read()
    answer_markup = page[page.index("<dl"):page.index("</dl>")]
    assert answer_markup.count("Re-run") == 1 and "<dt>Re-run</dt>" in answer_markup
    forward, backward = data["chart"]["forward"], data["chart"]["backward"]
    assert forward["lines"] and backward["lines"]
    assert all("_forward_" in rows[line]["NPU Name"] for line in forward["lines"])
    assert all("_backward_" in (rows[line]["NPU Name"] + rows[line]["Bench Name"]) for line in backward["lines"])
    assert sorted(forward["lines"] + backward["lines"]) == sorted(rows)  # every row drawn, once
    assert not forward["downsampled"] and forward["first_line"] == answer["line"]
    at = forward["lines"].index(answer["line"])
    assert forward["codes"][at] == GRADES.index("error") and forward["shares"][at] > 1
    assert float(rows[answer["line"]]["Share Of Allowed"]) == pytest.approx(forward["shares"][at], rel=1e-3)
    listed = {row[0]: row for row in data["table"]["rows"]}
    assert listed[answer["line"]][1] == answer["record"] and listed[answer["line"]][3] == GRADES.index("error")
    with open(outcome.html_path, encoding="utf-8") as handle:
        page = handle.read()
    assert '<dd class="suspect" id="suspect">Functional_linear_0_forward (Cause: ' in page  # the answer, static


def test_rows_not_compared_are_drawn_and_listed_as_not_compared_never_as_a_pass(report_dumps, output_dir):
    npu, bench = report_dumps
    outcome = compare(npu.param(bench), output_dir)
    data = embedded(outcome.html_path)
    rows = csv_lines(outcome.csv_path)
    unjudged = {line for line, row in rows.items() if row["Result"] in ("not compared", "unmatched")}
    assert {rows[line]["Result"] for line in unjudged} == {"not compared", "unmatched"}  # both kinds are here
    drawn = {}
    for series in (data["chart"]["forward"], data["chart"]["backward"]):
        drawn.update({line: (share, code) for line, share, code in zip(series["lines"], series["shares"],
                                                                       series["codes"])})
    for line in unjudged:
        share, code = drawn[line]
        assert GRADES[code] == rows[line]["Result"] and share is None, (line, rows[line]["NPU Name"])
    listed = {row[0]: row for row in data["table"]["rows"]}
    assert unjudged <= set(listed) and {GRADES[listed[line][3]] for line in unjudged} == {"not compared", "unmatched"}


def test_html_false_and_no_html_write_no_page(report_dumps, output_dir, tmp_path):
    npu, bench = report_dumps
    outcome = compare(npu.param(bench), output_dir, html=False)
    assert outcome.html_path is None and not [name for name in os.listdir(output_dir) if name.endswith(".html")]
    out = tmp_path / "cli_out"
    result = subprocess.run([sys.executable, "-m", "ptdbg_ascend.cli", "compare", npu.pkl, bench.pkl, str(out),
                             "--npu-dump-data-dir", npu.data_dir, "--bench-dump-data-dir", bench.data_dir,
                             "--no-html", "--quiet"], capture_output=True, text=True, timeout=120,
                            env=dict(os.environ, PYTHONPATH=ROOT))
    assert result.returncode == 1, result.stderr  # the planted failure
    names = os.listdir(str(out))
    assert any(name.endswith(".csv") for name in names) and not any(name.endswith(".html") for name in names), names


def test_a_page_of_that_name_moves_every_report_to_the_next_tail(report_dumps, output_dir, monkeypatch):
    import ptdbg_ascend.comparison.run as run

    npu, bench = report_dumps
    monkeypatch.setattr(run.time, "strftime", lambda fmt, *args: "20240101120000")
    taken = os.path.join(output_dir, "compare_report_20240101120000.html")
    with open(taken, "w") as handle:
        handle.write("someone's page")
    outcome = compare(npu.param(bench), output_dir)
    assert os.path.basename(outcome.csv_path) == "compare_result_20240101120000_1.csv"
    assert os.path.basename(outcome.html_path) == "compare_report_20240101120000_1.html"
    with open(taken) as handle:
        assert handle.read() == "someone's page"  # never replaced
    second = compare(npu.param(bench), output_dir)
    assert os.path.basename(second.html_path) == "compare_report_20240101120000_2.html"


def test_hostile_names_and_stack_lines_stay_text(hostile_compare):
    outcome, call = hostile_compare(HOSTILE)
    assert outcome.finding.call == call  # the hostile call is the suspect
    with open(outcome.html_path, encoding="utf-8") as handle:
        page = handle.read()
    assert page.count("<script") == 2 and page.count("</script>") == 2  # the data's and the code's, nothing more
    assert "<img" not in page and html.escape(call, quote=True) in page  # escaped in the static answer
    data = embedded(outcome.html_path)
    assert data["answer"]["suspect"] == call
    assert f"{call}_output" in [row[1] for row in data["table"]["rows"]]
    assert any(HOSTILE in stack for stack in data["table"]["stacks"])
    assert any(HOSTILE in node[7] for node in data["tree"]["nodes"])  # a frame's code line, in its tooltip
    assert "script-src 'sha256-" in html.unescape(page) and "unsafe-inline" not in page


def test_the_json_in_the_page_cannot_close_its_script_element():
    value = {"name": HOSTILE + "&\u2028", "inf": "inf"}
    text = html_page.script_json(value)
    assert "<" not in text and ">" not in text and "&" not in text and "\u2028" not in text
    assert json.loads(text) == value
    with pytest.raises(ValueError):
        html_page.script_json({"share": float("inf")})  # JSON has no infinity: the report encodes it as "inf"


def test_the_rerun_verdict_is_shown_only_when_the_finding_carries_one():
    from ptdbg_ascend.comparison.answer_text import Advice
    from ptdbg_ascend.comparison.outcome import Counts

    finding = SimpleNamespace(call="Functional_linear_1_forward", kind="cause", precision=None)
    body = ("Suspect API: Functional_linear_1_forward (Cause: its output differs)",
            "First failure: Relative error 3.51e-02 > 7.7e-03 allowed",
            "Compared: 93 of 93 paired tensors (2 failing)")
    advice = Advice("27", "Functional_linear_1_forward_output", "Check its kernel.", body, finding)
    counts = Counts(rows=93, paired=93, compared=93, passed=91, warnings=2, failed=2, not_compared=0, unmatched=0,
                    npu_only=0, bench_only=0)
    lines, _ = html_report.answer_lines(advice, counts)
    assert [label for label, _ in lines] == ["Suspect", "First failure", "Next step", "Coverage"]
    assert dict(lines)["First failure"].startswith("Functional_linear_1_forward_output (CSV line 27): Relative error")
    rerun = {"verdict": "reproduced", "ratio": 4.5, "reason": "the NPU's inputs give the NPU's output on CPU"}
    lines, _ = html_report.answer_lines(advice._replace(finding=SimpleNamespace(**vars(finding), rerun=rerun)), counts)
    assert [label for label, _ in lines] == ["Suspect", "First failure", "Re-run", "Next step", "Coverage"]
    assert dict(lines)["Re-run"] == ("reproduced (4.5 x the allowed error): the NPU's inputs give the NPU's output "
                                     "on CPU")


def _bench_module():
    spec = importlib.util.spec_from_file_location("bench_html_report", os.path.join(ROOT, "bench",
                                                                                     "bench_html_report.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_run_of_100000_rows_stays_under_the_size_bound(tmp_path):
    from ptdbg_ascend.comparison import advisor
    from ptdbg_ascend.comparison.outcome import Counts

    rows = _bench_module().synthetic_rows(100_000)
    counts = Counts.of(rows)
    failing = advisor.first_failure(rows)
    advice, _ = advisor.diagnose(rows, counts, failing)
    path = html_report.write_html_report(str(tmp_path / "compare_report_big.html"), rows, counts, advice, failing,
                                         html_report.ReportFiles("compare_result_big.csv"))
    assert os.path.getsize(path) < 2 * 2 ** 20  # doc/compare_guide.md: under 2 MB at 10^5 rows
    data = embedded(path)
    forward, backward = data["chart"]["forward"], data["chart"]["backward"]
    assert forward["rows"] + backward["rows"] == 100_000 and forward["downsampled"] and backward["downsampled"]
    assert max(len(forward["lines"]), len(backward["lines"])) <= html_report.MAX_CHART_POINTS
    assert failing + 2 in forward["lines"]  # the first failure survives the downsampling
    # every bucket's failure is kept: each failing row's bucket shows an error point
    failing_lines = [line for line, row in enumerate(rows, 2) if row.failed and line < 2 + forward["rows"]]
    drawn_errors = [line for line, code in zip(forward["lines"], forward["codes"]) if code == GRADES.index("error")]
    bucket = -(-forward["rows"] // (html_report.MAX_CHART_POINTS // 2))
    assert {(line - 2) // bucket for line in failing_lines} == {(line - 2) // bucket for line in drawn_errors}
    table = data["table"]
    assert len(table["rows"]) <= html_report.MAX_TABLE_ROWS and table["failing"] == counts.failed
    assert len(data["tree"]["nodes"]) <= 2000


def test_the_index_page_names_the_rank_that_fails_first_and_keeps_names_as_text():
    from ptdbg_ascend.formats.finding import Finding

    finding = Finding("Torch_relu_0_forward_output", 40, "cause", "Torch_relu_0_forward", "Torch_relu", None, None, ())
    early = Finding(f"Torch_{HOSTILE}_0_forward_output", 12, "cause", f"Torch_{HOSTILE}_0_forward", "Torch_x", None,
                    None, ())
    outcomes = [html_index_outcome(None, None), html_index_outcome(finding, "a.html"),
                html_index_outcome(early, "b.html")]
    assert html_index.first_failing(outcomes) == 2
    page = html_index.index_markup(["rank0-rank0", "rank1-rank1", "rank2-rank2"], outcomes, "")
    assert "<img" not in page and "rank2-rank2 fails first: " in page
    assert '<a href="b.html">b.html</a>' in page and page.count('<tr class="first">') == 1


def html_index_outcome(finding, html_path):
    from ptdbg_ascend.comparison.outcome import CompareOutcome, Counts

    counts = Counts(rows=10, paired=10, compared=10, passed=10 - bool(finding), warnings=0, failed=int(bool(finding)),
                    not_compared=0, unmatched=0, npu_only=0, bench_only=0)
    return CompareOutcome("compare_result_x.csv", None, None, finding.record if finding else None, 10, finding, counts,
                          (), html_path)


def _module_dump(directory, tanh_output):
    """A statistics dump.json at level mix (two blocks of a Sequential, then a head) with its construct.json."""
    def leaf(value):
        return {"type": "torch.Tensor", "dtype": "torch.float32", "shape": [2, 3], "Max": value, "Min": -value,
                "Mean": value / 10, "Norm": value * 2, "requires_grad": False}

    def call(value, output=None):
        return {"input_args": [leaf(value)], "input_kwargs": {},
                "output": [leaf(value + 1 if output is None else output)]}

    entries = {"Functional.linear.0.forward": call(1.0), "Module.block.0.Linear.forward.0": call(1.0),
               "Torch.tanh.0.forward": call(2.0, tanh_output), "Module.block.1.Tanh.forward.0": call(2.0, tanh_output),
               "Module.block.Sequential.forward.0": call(1.0, tanh_output), "Functional.linear.1.forward": call(3.0),
               "Module.head.Linear.forward.0": call(3.0)}
    construct = {"Module.block.Sequential.forward.0": None,
                 "Module.block.0.Linear.forward.0": "Module.block.Sequential.forward.0",
                 "Functional.linear.0.forward": "Module.block.0.Linear.forward.0",
                 "Module.block.1.Tanh.forward.0": "Module.block.Sequential.forward.0",
                 "Torch.tanh.0.forward": "Module.block.1.Tanh.forward.0",
                 "Module.head.Linear.forward.0": None, "Functional.linear.1.forward": "Module.head.Linear.forward.0"}
    os.makedirs(directory)
    with open(os.path.join(directory, "dump.json"), "w") as handle:
        json.dump({"task": "statistics", "level": "mix", "dump_data_dir": None, "data": entries}, handle)
    with open(os.path.join(directory, "construct.json"), "w") as handle:
        json.dump(construct, handle)
    return os.path.join(directory, "dump.json")


def test_the_tree_of_a_module_dump_follows_construct_json_to_where_the_divergence_starts(tmp_path, output_dir):
    npu = _module_dump(str(tmp_path / "npu"), tanh_output=9.0)  # tanh planted: its output differs
    bench = _module_dump(str(tmp_path / "bench"), tanh_output=3.0)
    outcome = compare({"npu_json_path": npu, "bench_json_path": bench, "is_print_compare_log": False}, output_dir)
    data = embedded(outcome.html_path)
    tree = data["tree"]
    assert tree["source"] == "construct.json" and tree["total"] == len(tree["nodes"]) == 7
    nodes = tree["nodes"]

    def path(index):
        names = []
        while index >= 0:
            names.append(nodes[index][0])
            index = nodes[index][1]
        return names[::-1]

    first = tree["first_failure"]
    assert path(first) == ["Module.block.Sequential.forward.0", "Module.block.1.Tanh.forward.0",
                           "Torch_tanh_0_forward"], outcome.first_failure
    line = data["answer"]["line"]
    assert nodes[first][6] == line and nodes[first][2] == "call"  # the divergence starts at this call's row
    starts = [path(index)[-1] for index, node in enumerate(nodes) if node[6] == line]
    assert starts == ["Module.block.Sequential.forward.0", "Module.block.1.Tanh.forward.0", "Torch_tanh_0_forward"]
    head = [node for node in nodes if node[0] == "Module.head.Linear.forward.0"][0]
    assert head[4] == 0 and head[3] == 4  # its input and output and those of the linear inside it: passing
