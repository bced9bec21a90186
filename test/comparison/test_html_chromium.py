"""The HTML report in a real browser: Debian's ``chromium``, headless. The README's sample (two runs of
``sample/legacy_train.py``, one with its planted bfloat16 layer) is compared and the page rendered: no console
message, the suspect's name and the SVG charts in the DOM, the planted layer marked on the chart and in the tree,
and a screenshot saved (``tmp_path``, and ``$PTDBG_TEST_ARTIFACTS`` when set). Skipped, saying why, where
chromium or torch (for the two runs) is absent."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import time
from html.parser import HTMLParser
from typing import Dict, List, Tuple

import pytest

from ptdbg_ascend.comparison.api import compare

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CHROMIUM = shutil.which("chromium")
HOSTILE = "</script><img src=x onerror=alert(1)>"
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no chromium on PATH (Debian: apt-get install chromium)")


def render(page: str, tmp_path, screenshot: str = "", selftest: bool = False) -> Tuple[str, List[str]]:
    """``(the DOM after the page's script ran, the console lines chromium logged)``; with ``screenshot``, also a
    1280-pixel-wide PNG of the page there; with ``selftest``, the page uses each of its controls once first
    (zoom, pan, search, filter, pages, the tree's links: ``#selftest``)."""
    url = "file://" + os.path.abspath(page)
    dom_url = url + ("#selftest" if selftest else "")
    base = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-extensions",
            f"--user-data-dir={tmp_path / 'chromium-profile'}", "--enable-logging=stderr", "--v=0"]
    done = subprocess.run(base + ["--dump-dom", dom_url], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    console = [line for line in done.stderr.splitlines() if ":CONSOLE" in line]
    if screenshot:
        shot = subprocess.run(base + ["--window-size=1280,2200", "--hide-scrollbars", f"--screenshot={screenshot}",
                                      url], capture_output=True, text=True, timeout=60)
        assert shot.returncode == 0, shot.stderr[-2000:]
        console += [line for line in shot.stderr.splitlines() if ":CONSOLE" in line]
    return done.stdout, console


class Elements(HTMLParser):
    """Every element of a DOM as ``(tag, attributes, its text including its children's)``."""

    def __init__(self, dom: str) -> None:
        super().__init__()
        self.found: List[Tuple[str, Dict[str, str], List[str]]] = []
        self.open: List[int] = []
        self.feed(dom)

    def handle_starttag(self, tag, attrs):
        self.found.append((tag, {name: value or "" for name, value in attrs}, []))
        if tag not in ("meta", "br", "input", "img", "link"):
            self.open.append(len(self.found) - 1)

    def handle_endtag(self, tag):
        while self.open:
            if self.found[self.open.pop()][0] == tag:
                break

    def handle_data(self, data):
        for index in self.open:
            self.found[index][2].append(data)

    def where(self, tag: str = "", **attrs: str) -> List[Tuple[Dict[str, str], str]]:
        """``(attributes, text)`` of the elements of ``tag`` (any: "") whose attributes contain ``attrs``
        (``class_`` is a class among the element's classes)."""
        wanted = dict(attrs)
        classes = wanted.pop("class_", None)
        return [(found, "".join(text)) for name, found, text in self.found
                if (not tag or name == tag) and all(found.get(k) == v for k, v in wanted.items())
                and (classes is None or classes in found.get("class", "").split())]


def keep(path: str) -> None:
    """Copy a screenshot into the CI's artifacts folder, when there is one."""
    folder = os.environ.get("PTDBG_TEST_ARTIFACTS")
    if folder:
        os.makedirs(folder, exist_ok=True)
        shutil.copy(path, folder)


@pytest.fixture(scope="module")
def sample_report(tmp_path_factory):
    """The README's runs A (planted bfloat16 layer) and B, and their compare's HTML report."""
    if importlib.util.find_spec("torch") is None:
        pytest.skip("torch is not installed: the README's two sample runs need it")
    root = tmp_path_factory.mktemp("readme_sample")
    dumps = {}
    for side, flags in (("npu", ["--bf16-layer"]), ("gpu", [])):
        (root / side).mkdir()
        done = subprocess.run([sys.executable, os.path.join(ROOT, "sample", "legacy_train.py")] + flags,
                              cwd=str(root / side), capture_output=True, text=True, timeout=180,
                              env=dict(os.environ, PYTHONPATH=ROOT))
        assert done.returncode == 0, done.stderr[-2000:]
        dumps[side] = str(root / side / "ptdbg_dump_v1.0" / "rank0" / "api_stack_dump")
    outcome = compare({"npu_pkl_path": dumps["npu"] + ".pkl", "bench_pkl_path": dumps["gpu"] + ".pkl",
                       "npu_dump_data_dir": dumps["npu"], "bench_dump_data_dir": dumps["gpu"],
                       "is_print_compare_log": False}, str(root / "output"), stack_mode=True)
    return outcome


def test_chromium_renders_the_sample_with_the_planted_layer_marked(sample_report, tmp_path):
    outcome = sample_report
    assert outcome.finding.call == "Functional_linear_1_forward"  # the README's answer
    screenshot = str(tmp_path / "compare_report_readme_sample.png")
    dom, console = render(outcome.html_path, tmp_path, screenshot)
    assert console == []  # no error, no warning, not even a log line
    elements = Elements(dom)
    assert elements.where("body", **{"data-rendered": "yes"})  # the script ran to its end
    ((_, suspect),) = elements.where("dd", id="suspect")
    assert suspect.startswith("Functional_linear_1_forward (Cause: ")
    charts = elements.where("svg", class_="chart")
    assert len(charts) == 2 and elements.where("circle", class_="mark")
    # The planted layer's output is the first failure, marked on the forward chart at its CSV line.
    ((marker, title),) = elements.where("path", class_="first-failure")
    assert marker["data-line"] == str(outcome.finding.line) == "27"
    assert title == "first failure: Functional_linear_1_forward_output (CSV line 27)"
    assert [text for _, text in elements.where("text", class_="first-label")] == [
        "first failure: Functional_linear_1_forward_output"]
    forward = elements.where("div", id="chart-forward")[0][1]
    assert "first failure: Functional_linear_1_forward_output" in forward
    # In the tree: the planted call where the divergence starts, badged as the first failure and the suspect.
    starts = [text for _, text in elements.where("span", class_="st-start")]
    planted = [text for text in starts if text.startswith("Functional_linear_1_forward")]
    assert planted and "first failure" in planted[0] and "suspect" in planted[0], starts
    assert any(text.startswith("forward  legacy_train.py:72") for text in starts), starts  # its code line
    # The table opens on the failing rows, the first failure first.
    rows = elements.where("tr", class_="first-failure-row")
    assert len(rows) == 1 and rows[0][0]["data-line"] == "27"
    # Every control used once (zoom, pan, search, filters, pages, the tree's links): no console message either.
    dom, console = render(outcome.html_path, tmp_path, selftest=True)
    assert console == [] and Elements(dom).where("body", **{"data-selftest": "ok"})
    with open(screenshot, "rb") as handle:
        assert handle.read(8) == b"\x89PNG\r\n\x1a\n"
    assert os.path.getsize(screenshot) > 20000  # a drawn page, not a blank one
    keep(screenshot)


def test_chromium_keeps_hostile_names_as_text(hostile_compare, tmp_path):
    outcome, call = hostile_compare(HOSTILE)
    dom, console = render(outcome.html_path, tmp_path)
    assert console == []
    elements = Elements(dom)
    assert elements.where("body", **{"data-rendered": "yes"})
    assert not elements.where("img") and len(elements.where("script")) == 2  # nothing injected
    assert elements.where("dd", id="suspect")[0][1].startswith(call)  # the name, as text
    assert any(text == f"{call}_output" for _, text in elements.where("td", class_="name"))


def test_chromium_draws_a_100000_row_report_and_uses_its_controls(tmp_path):
    """The downsampled chart, the 2,000 listed rows over 10 pages, the tree of 40 layers: drawn, and every
    control used once (next page included), without a console message, in a few seconds."""
    from ptdbg_ascend.comparison import advisor, html_report
    from ptdbg_ascend.comparison.outcome import Counts

    spec = importlib.util.spec_from_file_location("bench_html_report", os.path.join(ROOT, "bench",
                                                                                     "bench_html_report.py"))
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    rows = bench.synthetic_rows(100_000)
    counts = Counts.of(rows)
    failing = advisor.first_failure(rows)
    advice, _ = advisor.diagnose(rows, counts, failing)
    path = html_report.write_html_report(str(tmp_path / "compare_report_big.html"), rows, counts, advice, failing,
                                         html_report.ReportFiles("compare_result_big.csv"))
    started = time.perf_counter()
    dom, console = render(path, tmp_path, selftest=True)
    assert time.perf_counter() - started < 20
    assert console == []
    elements = Elements(dom)
    assert elements.where("body", **{"data-rendered": "yes", "data-selftest": "ok"})
    assert len(elements.where("path", class_="first-failure")) == 1
    assert len(elements.where("tr", class_="focus")) == 1  # table.show() found the first failure's row


def test_chromium_shows_the_index_page_over_the_ranks(tmp_path):
    """compare_distributed's page: static, styled by its hash, hostile names as text, no console message."""
    from ptdbg_ascend.comparison import html_index
    from ptdbg_ascend.comparison.outcome import CompareOutcome, Counts
    from ptdbg_ascend.formats.finding import Finding

    counts = Counts(rows=9, paired=9, compared=9, passed=8, warnings=0, failed=1, not_compared=0, unmatched=0,
                    npu_only=0, bench_only=0)
    finding = Finding(f"Torch_{HOSTILE}_0_forward_output", 5, "cause", f"Torch_{HOSTILE}_0_forward", "Torch_x", None,
                      None, ())
    outcome = CompareOutcome("compare_result_r.csv", None, None, finding.record, 9, finding, counts, (), "r.html")
    path = html_index.write_index(str(tmp_path), ["rank3-rank3"], [outcome], "not compared: rank1 only in the NPU dump")
    dom, console = render(path, tmp_path)
    assert console == []
    elements = Elements(dom)
    assert not elements.where("img") and not elements.where("script")
    ((_, headline),) = elements.where("p", class_="verdict")
    assert headline.startswith(f"rank3-rank3 fails first: first failure Torch_{HOSTILE}_0_forward_output (line 5)")
    assert elements.where("a", href="r.html")
