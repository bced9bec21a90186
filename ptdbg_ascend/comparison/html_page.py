"""The HTML report's page: the style, the skeleton, the data embedded as JSON, and the answer written as static
markup (so it reads even where scripts are blocked, e.g. a mail client's preview).

Nothing from a dump becomes markup: static text goes through :func:`html.escape` (quotes included), the JSON is
made safe inside its ``<script>`` by :func:`script_json` (``<``, ``>``, ``&`` as ``\\u003c``...: no ``</script>``
can close it), and the script only ever sets ``textContent``. The Content-Security-Policy allows nothing to be
fetched and admits the page's own script and style by their SHA-256 only, so even an injected
``<img onerror=...>`` could not run. Torch-free.
"""

from __future__ import annotations

import base64
import hashlib
import json
from html import escape
from typing import Any, Iterator, List, Optional, Sequence, Tuple

from ptdbg_ascend.comparison.html_script import SCRIPT

STYLE = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0 auto;max-width:1280px;
padding:12px 20px;color:#1b1b1b;background:#fff}
h1{font-size:20px;margin:4px 0 2px}h2{font-size:16px;margin:22px 0 6px;border-bottom:1px solid #ddd}
.sub{color:#555;font-size:12px}code,pre,.name,.label{font-family:ui-monospace,Menlo,Consolas,monospace}
.answer{border-left:6px solid #888;padding:8px 14px;background:#f7f7f7;margin-top:10px}
.answer.failed{border-color:#c00000;background:#fff3f3}.answer.passed{border-color:#4f8a10;background:#f3fbf0}
.answer.incomplete,.answer.warning{border-color:#bf8f00;background:#fffaea}
.verdict{font-size:17px;font-weight:600;margin:2px 0 8px}
dl{display:grid;grid-template-columns:max-content 1fr;gap:3px 14px;margin:0}dt{font-weight:600;color:#444}
dd{margin:0;overflow-wrap:anywhere}dd.suspect{font-weight:600}pre{white-space:pre-wrap;overflow-wrap:anywhere}
.files a{margin-right:12px}.note{color:#555}
.controls{margin:4px 0;display:flex;gap:6px;align-items:center;flex-wrap:wrap}
button,select,input{font:inherit;font-size:13px}input.search{width:320px}
svg.chart{display:block;border:1px solid #e3e3e3;background:#fff;cursor:crosshair;user-select:none}
.grid{stroke:#eee}.limit{stroke:#333;stroke-dasharray:6 4}.tick{font-size:11px;fill:#555}.axis{font-size:12px;fill:#333}
.mark.g0{fill:#70ad47}.mark.g1{fill:#bf8f00}.mark.g2{fill:#c00000}
.mark.g3,.mark.g4{stroke:#888;fill:none;stroke-width:1.4}
.first-failure{fill:#c00000;stroke:#000;stroke-width:1.5}.first-guide{stroke:#c00000;stroke-dasharray:3 3}
.first-label{font-size:12px;font-weight:600;fill:#7a0000}.readout{font-size:12px;color:#333;min-height:18px}
.legend span{margin-right:14px}.dot{display:inline-block;width:10px;height:10px;border-radius:5px;margin-right:4px}
.dot.g0{background:#70ad47}.dot.g1{background:#bf8f00}.dot.g2{background:#c00000}
ul.tree,ul.tree ul{list-style:none;padding-left:18px;margin:0}ul.tree{padding-left:0}
.node{display:inline-flex;gap:6px;align-items:center}
.swatch{width:11px;height:11px;border-radius:2px;display:inline-block}
.st-start .swatch{background:#7a0000}.st-fail .swatch{background:#f08080}.st-pass .swatch{background:#70ad47}
.st-nc .swatch{background:#aaa}.st-start .label{font-weight:700;color:#7a0000}.counts{color:#666;font-size:12px}
.badge{font-size:11px;padding:0 5px;border-radius:8px;color:#fff;background:#7a0000}.badge.suspect{background:#333}
.link{cursor:pointer}.more{color:#777;font-style:italic}
table.rows{border-collapse:collapse;width:100%;font-size:12px}table.rows th,table.rows td{border:1px solid #e3e3e3;
padding:3px 5px;vertical-align:top;text-align:left}table.rows th{background:#f0f0f0;position:sticky;top:0}
td.num{text-align:right;white-space:nowrap}td.message{min-width:240px;max-width:420px}td.stats{white-space:nowrap}
td.name{overflow-wrap:anywhere;min-width:180px}.scroll{overflow-x:auto}
tr.g2 td.grade{color:#c00000;font-weight:600}tr.g1 td.grade{color:#8a6700}tr.g3 td.grade,tr.g4 td.grade{color:#666}
tr.first-failure-row{background:#ffd9d9}tr.focus{outline:2px solid #1a5fb4}.bench{color:#666}
"""

TITLE = "ptdbg_ascend compare report"
NO_SCRIPT = ("The chart, the module tree and the table need JavaScript, which is blocked here; the answer above "
             "is complete, and the CSV beside this file holds every row.")


def _sha256(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode("ascii") + "'"


def content_policy(script: Optional[str], style: str) -> str:
    """The page's Content-Security-Policy: nothing fetched, no form, no base; only this script and style run."""
    scripts = _sha256(script) if script is not None else "'none'"
    return (f"default-src 'none'; script-src {scripts}; style-src {_sha256(style)}; img-src 'none'; "
            "base-uri 'none'; form-action 'none'")


def script_json(value: Any) -> str:
    """``value`` as JSON that can sit inside ``<script type="application/json">``: ``<``, ``>`` and ``&`` (and
    the two JavaScript line separators) escaped as ``\\uXXXX``, so no text from a dump can end the element.
    NaN and infinities are refused (``ValueError``): JSON has none, the caller encodes them."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    for char, code in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"), ("\u2028", "\\u2028"),
                       ("\u2029", "\\u2029")):
        text = text.replace(char, code)
    return text


def text(value: object) -> str:
    """Text from anywhere, safe between tags and inside a quoted attribute."""
    return escape(str(value), quote=True)


def answer_markup(status: str, verdict: str, lines: Sequence[Tuple[str, str]], notes: Sequence[str],
                  links: Sequence[Tuple[str, str]]) -> str:
    """The answer section: the verdict, then ``(label, text)`` lines (the first one "Suspect" is marked with
    ``class="suspect"`` and ``id="suspect"``), the advisor's other lines folded, and links to the files beside."""
    parts = [f'<section id="answer" class="answer {text(status)}"><p class="verdict">{text(verdict)}</p><dl>']
    for label, value in lines:
        marked = ' class="suspect" id="suspect"' if label == "Suspect" else ""
        parts.append(f"<dt>{text(label)}</dt><dd{marked}>{text(value)}</dd>")
    parts.append("</dl>")
    if notes:
        parts.append("<details><summary>More from the advisor</summary><pre>{}</pre></details>".format(
            text("\n".join(notes))))
    if links:
        parts.append('<p class="files">Files beside this page: ' + "".join(
            f'<a href="{text(href)}">{text(label)}</a>' for label, href in links) + "</p>")
    parts.append("</section>")
    return "".join(parts)


def page(subtitle: str, answer: str, data: Any, sizes: str, tree_note: str) -> Iterator[str]:
    """The whole page as chunks (the data's JSON is the big one): header, the static ``answer`` markup, the
    chart, tree and table boxes the script fills, ``tree_note`` (where the tree comes from, or why there is
    none), ``sizes`` (what was embedded of how much) and the script."""
    head: List[str] = [
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">",
        f'<meta http-equiv="Content-Security-Policy" content="{text(content_policy(SCRIPT, STYLE))}">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{text(TITLE)}</title><style>{STYLE}</style></head><body>",
        f'<h1>{text(TITLE)}</h1><div class="sub">{text(subtitle)}</div>', answer,
        f'<noscript><p class="note">{text(NO_SCRIPT)}</p></noscript>',
        '<h2 id="chart">Error relative to what each row was allowed, along the call sequence</h2>',
        '<p class="note legend"><span><i class="dot g0"></i>pass</span><span><i class="dot g1"></i>warning</span>'
        '<span><i class="dot g2"></i>error</span>'
        '<span>&times; not compared (never a pass)</span><span>&#9670; first failure</span>'
        '<span>wheel: zoom, drag: pan, double-click: the whole run, click: the row in the table</span></p>',
        '<h3>Forward</h3><div id="chart-forward" class="chart-box"></div>',
        '<h3>Backward</h3><div id="chart-backward" class="chart-box"></div>',
        f'<h2 id="tree">Module tree</h2><p class="note">{text(tree_note)}</p><div id="tree-box"></div>',
        '<h2 id="rows">Failing rows</h2><div id="rows-table"></div>',
        f'<p class="note" id="sizes">{text(sizes)}</p>',
        '<script type="application/json" id="report-data">',
    ]
    yield from head
    yield script_json(data)
    yield f"</script><script>{SCRIPT}</script></body></html>\n"
