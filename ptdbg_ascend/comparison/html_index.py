"""``compare_distributed``'s index page, ``compare_index_{timestamp}.html``: one row per rank pair (its verdict,
first failure, suspect, counts, and links to its own HTML report and CSV), the rank that fails first named on
top, and the ranks that were not compared.

"Fails first" is the rank pair whose first failing row comes earliest in the call sequence (the smallest CSV
line: the ranks of one job run the same calls), the lower rank on a tie. The page is static markup, no script
(every text through :func:`html.escape`), with a Content-Security-Policy that fetches nothing. Torch-free.
"""

from __future__ import annotations

import os
import time
from typing import List, Optional, Sequence, Tuple

from ptdbg_ascend.comparison.html_page import STYLE, content_policy, text
from ptdbg_ascend.comparison.outcome import CompareOutcome
from ptdbg_ascend.fs.reports import claim_report
from ptdbg_ascend.errors import DumpWriteError
from ptdbg_ascend.formats.layout import COMPARE_INDEX_STEM, HTML_SUFFIX

TITLE = "ptdbg_ascend compare_distributed report"
HEADERS = ("rank pair", "result", "first failure (CSV line)", "suspect", "failing", "compared / paired", "report")
INDEX_STYLE = STYLE + "table.ranks{border-collapse:collapse}table.ranks td,table.ranks th{border:1px solid #ddd;" \
    "padding:4px 8px;text-align:left}tr.first{background:#ffd9d9;font-weight:600}"


def first_failing(outcomes: Sequence[CompareOutcome]) -> Optional[int]:
    """Index of the rank pair whose first failure comes earliest in the call sequence (None: none failed)."""
    failed = [(_line(outcome), index) for index, outcome in enumerate(outcomes) if outcome.first_failure is not None]
    return min(failed)[1] if failed else None


def _line(outcome: CompareOutcome) -> float:
    finding = outcome.finding
    return float(finding.line) if finding is not None and finding.record == outcome.first_failure else float("inf")


def _cells(pair: str, outcome: CompareOutcome) -> List[Tuple[str, Optional[str]]]:
    """``(text, link)`` per column of one rank pair."""
    finding, counts = outcome.finding, outcome.counts
    first = "" if outcome.first_failure is None else outcome.first_failure + (
        f" ({finding.line})" if finding is not None and finding.record == outcome.first_failure else "")
    warning = ", warning" if finding is not None and finding.level != "error" else ""
    suspect = "" if finding is None else f"{finding.call} ({finding.kind}{warning})"
    failing = "" if counts is None else str(counts.failed)
    compared = "" if counts is None else f"{counts.compared} / {counts.paired}"
    report = outcome.html_path or outcome.csv_path
    return [(pair, None), (outcome.status, None), (first, None), (suspect, None), (failing, None), (compared, None),
            (os.path.basename(report), os.path.basename(report))]


def index_markup(pairs: Sequence[str], outcomes: Sequence[CompareOutcome], not_compared: str) -> str:
    """The page: the rank that fails first (or that none failed), a row per rank pair, what was not compared."""
    first = first_failing(outcomes)
    if first is not None:
        status, headline = "failed", f"{pairs[first]} fails first: {outcomes[first]}"
    elif not_compared or any(not outcome for outcome in outcomes):
        status = "incomplete"
        headline = "No compared rank failed, but part of the run was not compared" + (
            f" ({not_compared})" if not_compared else "")
    else:
        status = "passed"
        headline = "Every rank pair passed: every compared tensor is within what its precision explains"
    rows = []
    for index, (pair, outcome) in enumerate(zip(pairs, outcomes)):
        cells = "".join(f'<td><a href="{text(link)}">{text(value)}</a></td>' if link else f"<td>{text(value)}</td>"
                        for value, link in _cells(pair, outcome))
        rows.append(f'<tr class="{"first" if index == first else text(outcome.status)}">{cells}</tr>')
    return "".join([
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">",
        f'<meta http-equiv="Content-Security-Policy" content="{text(content_policy(None, INDEX_STYLE))}">',
        f"<title>{text(TITLE)}</title><style>{INDEX_STYLE}</style></head><body>",
        f'<h1>{text(TITLE)}</h1><section id="answer" class="answer {status}"><p class="verdict">{text(headline)}</p>'
        f'{"<p>" + text(not_compared) + "</p>" if not_compared else ""}</section>',
        '<h2>Ranks</h2><table class="ranks"><thead><tr>',
        "".join(f"<th>{text(name)}</th>" for name in HEADERS), "</tr></thead><tbody>", "".join(rows),
        "</tbody></table></body></html>\n"])


def write_index(output_path: str, pairs: Sequence[str], outcomes: Sequence[CompareOutcome],
                not_compared: str = "") -> str:
    """Write ``compare_index_{timestamp}.html`` in ``output_path`` (``_1``, ``_2``... when taken: never replacing a
    page), 0640; returns its path. ``pairs``: the rank pair names (``"rank0-rank0"``) of ``outcomes``;
    ``not_compared``: the line naming the ranks not compared (default "": none).
    Raises :class:`~ptdbg_ascend.errors.DumpWriteError` naming the path."""
    page = index_markup(pairs, outcomes, not_compared)
    stamp = time.strftime("%Y%m%d%H%M%S", time.localtime())
    _, path, handle = claim_report(output_path, stamp, (), COMPARE_INDEX_STEM, HTML_SUFFIX, "the HTML index")
    try:
        with handle:
            handle.write(page)
    except OSError as error:
        raise DumpWriteError(f"Cannot write the HTML index {path}: {error}") from None
    return path
