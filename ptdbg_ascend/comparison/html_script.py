"""The HTML report's script: draws the chart (plain SVG), the module tree and the paged, searchable table from
the JSON the page embeds (``<script type="application/json" id="report-data">``, see :mod:`html_report`).

Every text from the dumps reaches the page through ``textContent`` or an attribute, never as markup, and the
page's Content-Security-Policy admits this script by its hash only (:mod:`html_page`): a record name that holds
``<img onerror=...>`` stays text. No library, nothing fetched: the page opens from a mail attachment.
"""

SCRIPT = r"""
(function () {
"use strict";
var data = JSON.parse(document.getElementById("report-data").textContent);
var SVG = "http://www.w3.org/2000/svg";
var GRADES = data.grades, ERROR = GRADES.indexOf("error"), WARNING = GRADES.indexOf("warning");
var UNJUDGED = [GRADES.indexOf("unmatched"), GRADES.indexOf("not compared")];
var FIRST = data.answer.line;  // the CSV line of the first failing row, or null
function el(tag, cls, text) {
  var node = document.createElement(tag);
  if (cls) { node.className = cls; }
  if (text !== undefined && text !== null) { node.textContent = String(text); }
  return node;
}
function sv(tag, attrs, text) {
  var node = document.createElementNS(SVG, tag);
  Object.keys(attrs).forEach(function (key) { node.setAttribute(key, String(attrs[key])); });
  if (text !== undefined) { node.textContent = String(text); }
  return node;
}
function clear(node) { while (node.firstChild) { node.removeChild(node.firstChild); } }
function fmt(value) {
  if (value === null || value === undefined) { return ""; }
  if (typeof value === "string") { return value; }
  var size = Math.abs(value);
  if (value === 0) { return "0"; }
  return (size >= 1e5 || size < 1e-3) ? value.toExponential(2) : String(+value.toPrecision(4));
}
function unjudged(code) { return UNJUDGED.indexOf(code) >= 0; }

// -- the table (first: the chart and the tree jump into it) -------------------------------------------
var table = (function () {
  var box = document.getElementById("rows-table"), spec = data.table, rows = spec.rows;
  var byLine = {}, haystacks = null, shown = rows, page = 0, focus = null;
  rows.forEach(function (row) { byLine[row[0]] = row; });
  var search = el("input", "search"), filter = el("select"), pager = el("span", "pager");
  search.type = "search"; search.placeholder = "search names, messages, stacks";
  search.setAttribute("aria-label", "search the rows");
  [["error", "failing rows (error)"], ["warning", "warnings"], ["unjudged", "not compared / unmatched"],
   ["all", "every row listed"]].forEach(function (item) {
    var option = el("option", null, item[1]); option.value = item[0]; filter.appendChild(option);
  });
  filter.value = rows.some(function (row) { return row[3] === ERROR; }) ? "error" : "all";
  var previous = el("button", null, "\u2039 previous"), next = el("button", null, "next \u203a");
  var controls = el("div", "controls");
  [search, filter, previous, pager, next].forEach(function (node) { controls.appendChild(node); });
  var grid = el("table", "rows"), head = el("tr"), body = el("tbody");
  spec.headers.forEach(function (name) { head.appendChild(el("th", null, name)); });
  var thead = el("thead"); thead.appendChild(head); grid.appendChild(thead); grid.appendChild(body);
  var scroll = el("div", "scroll"); scroll.appendChild(grid);
  box.appendChild(controls); box.appendChild(scroll);
  function text(row) { return [row[0], row[1], row[2] || "", row[14], row[15] === null ? "" : spec.stacks[row[15]]]
    .join("\n").toLowerCase(); }
  function kept(row) {
    var wanted = filter.value;
    return wanted === "all" || (wanted === "error" && row[3] === ERROR) || (wanted === "warning" && row[3] === WARNING)
      || (wanted === "unjudged" && unjudged(row[3]));
  }
  function cell(tr, value, cls) { var td = el("td", cls, value); tr.appendChild(td); return td; }
  function statistics(values) { return values ? values.map(fmt).join(" / ") : ""; }
  function draw() {
    var pages = Math.max(1, Math.ceil(shown.length / data.page_rows));
    page = Math.min(Math.max(page, 0), pages - 1);
    clear(body);
    shown.slice(page * data.page_rows, (page + 1) * data.page_rows).forEach(function (row) {
      var tr = el("tr", "g" + row[3]);
      if (row[0] === FIRST) { tr.classList.add("first-failure-row"); }
      if (row[0] === focus) { tr.classList.add("focus"); }
      tr.setAttribute("data-line", row[0]);
      cell(tr, row[0], "num");
      var names = cell(tr, row[1], "name");
      if (row[2]) { names.appendChild(el("div", "bench", "bench: " + row[2])); }
      cell(tr, GRADES[row[3]], "grade");
      [row[4], row[5], row[6], row[7], row[8]].forEach(function (value) { cell(tr, fmt(value), "num"); });
      cell(tr, row[9] + (row[10] && row[10] !== row[9] ? " / " + row[10] : ""));
      cell(tr, row[11]);
      var stats = cell(tr, statistics(row[12]), "stats");
      if (row[13]) { stats.appendChild(el("div", "bench", statistics(row[13]))); }
      cell(tr, row[14], "message");
      var stack = cell(tr, "", "stack");
      if (row[15] !== null) {
        var details = el("details"); details.appendChild(el("summary", null, "stack"));
        details.appendChild(el("pre", null, spec.stacks[row[15]])); stack.appendChild(details);
      }
      body.appendChild(tr);
    });
    pager.textContent = "page " + (page + 1) + " of " + pages + " \u00b7 " + shown.length + " rows";
    previous.disabled = page === 0; next.disabled = page >= pages - 1;
  }
  function apply() {
    var words = search.value.trim().toLowerCase();
    if (words && haystacks === null) { haystacks = rows.map(text); }
    shown = rows.filter(function (row, index) {
      return kept(row) && (!words || haystacks[index].indexOf(words) >= 0);
    });
    page = 0; draw();
  }
  search.addEventListener("input", apply);
  filter.addEventListener("change", apply);
  previous.addEventListener("click", function () { page -= 1; draw(); });
  next.addEventListener("click", function () { page += 1; draw(); });
  apply();
  return {
    row: function (line) { return byLine[line]; },
    show: function (line) {  // the page holding a CSV line, the row marked
      if (!byLine[line]) { return; }
      focus = line; search.value = ""; if (!kept(byLine[line])) { filter.value = "all"; }
      apply(); page = Math.floor(shown.indexOf(byLine[line]) / data.page_rows); draw();
      box.scrollIntoView();
    },
    find: function (words) { search.value = words; filter.value = "all"; apply(); box.scrollIntoView(); }
  };
})();

// -- the chart: error / allowed along the call sequence, log axis, 1 = the limit ---------------------
function drawChart(box, series, direction) {
  var lines = series.lines, shares = series.shares, codes = series.codes;
  if (!lines.length) { box.appendChild(el("p", "note", "No " + direction + " rows.")); return; }
  var floor = data.chart.floor, ceiling = data.chart.ceiling, view = [series.lo, series.hi + 1];
  var width = Math.max(600, box.clientWidth || 1000), height = 320;
  var left = 84, right = 16, top = 22, plotBottom = height - 100, noRatio = height - 78, lane = height - 60;
  var svg = sv("svg", {width: width, height: height, "class": "chart", role: "img",
                       "aria-label": direction + " rows: error / allowed along the CSV lines"});
  var readout = el("div", "readout", "\u00a0");
  box.appendChild(svg); box.appendChild(readout);
  function x(line) { return left + (line - view[0]) / (view[1] - view[0]) * (width - left - right); }
  function lineAt(px) { return view[0] + (px - left) / (width - left - right) * (view[1] - view[0]); }
  function y(share) {
    var value = share === "inf" ? ceiling : Math.min(Math.max(share, floor), ceiling);
    var span = Math.log10(ceiling) - Math.log10(floor);
    return top + (Math.log10(ceiling) - Math.log10(value)) / span * (plotBottom - top);
  }
  function axes() {
    for (var decade = Math.log10(floor); decade <= Math.log10(ceiling) + 1e-9; decade += 1) {
      var at = y(Math.pow(10, decade));
      svg.appendChild(sv("line", {x1: left, x2: width - right, y1: at, y2: at,
                                  "class": decade === 0 ? "limit" : "grid"}));
      svg.appendChild(sv("text", {x: left - 6, y: at + 4, "class": "tick", "text-anchor": "end"},
                         fmt(Math.pow(10, decade))));
    }
    svg.appendChild(sv("text", {x: width - right, y: y(1) - 4, "class": "tick", "text-anchor": "end"}, "allowed (1)"));
    svg.appendChild(sv("text", {x: left - 6, y: noRatio + 4, "class": "tick", "text-anchor": "end"}, "no ratio"));
    svg.appendChild(sv("text", {x: left - 6, y: lane + 4, "class": "tick", "text-anchor": "end"}, "not compared"));
    var span = view[1] - view[0], step = Math.pow(10, Math.floor(Math.log10(Math.max(span / 6, 1))));
    step *= span / step > 30 ? 5 : span / step > 12 ? 2 : 1;
    for (var tick = Math.ceil(view[0] / step) * step; tick <= view[1]; tick += step) {
      svg.appendChild(sv("text", {x: x(tick), y: height - 34, "class": "tick", "text-anchor": "middle"}, tick));
    }
    svg.appendChild(sv("text", {x: left + (width - left - right) / 2, y: height - 10, "class": "axis",
                                "text-anchor": "middle"}, "CSV line (call order)"));
    svg.appendChild(sv("text", {x: 14, y: (top + plotBottom) / 2, "class": "axis", "text-anchor": "middle",
                                transform: "rotate(-90 14 " + (top + plotBottom) / 2 + ")"}, "error / allowed"));
  }
  function point(index) {
    var code = codes[index], share = shares[index], at;
    if (unjudged(code)) { at = lane; } else if (share === null) { at = noRatio; } else { at = y(share); }
    var size = code === ERROR ? 3.5 : 2.5, px = x(lines[index]);
    if (unjudged(code)) {
      return sv("path", {d: "M" + (px - size) + " " + (at - size) + "l" + 2 * size + " " + 2 * size + "m0 " +
                         (-2 * size) + "l" + (-2 * size) + " " + 2 * size, "class": "mark g" + code});
    }
    return sv(share === "inf" ? "rect" : "circle", share === "inf" ?
      {x: px - size, y: at - size, width: 2 * size, height: 2 * size, "class": "mark g" + code} :
      {cx: px, cy: at, r: size, "class": "mark g" + code});
  }
  function marker() {
    var index = lines.indexOf(FIRST);
    if (index < 0 || FIRST < view[0] || FIRST > view[1]) { return; }
    var px = x(FIRST), at = shares[index] === null ? noRatio : y(shares[index]);
    svg.appendChild(sv("line", {x1: px, x2: px, y1: top, y2: lane + 6, "class": "first-guide"}));
    var diamond = sv("path", {d: "M" + px + " " + (at - 9) + "l9 9l-9 9l-9 -9z", "class": "first-failure",
                              "data-line": FIRST});
    diamond.appendChild(sv("title", {}, "first failure: " + data.answer.record + " (CSV line " + FIRST + ")"));
    svg.appendChild(diamond);
    var label = sv("text", {x: Math.min(px + 12, width - right - 4), y: Math.max(at - 12, top + 10),
                            "class": "first-label", "text-anchor": px > width * 0.7 ? "end" : "start"},
                   "first failure: " + data.answer.record);
    svg.appendChild(label);
  }
  function render() {
    clear(svg); axes();
    var group = sv("g", {"class": "points"});
    for (var index = 0; index < lines.length; index += 1) {
      if (lines[index] >= view[0] && lines[index] <= view[1]) { group.appendChild(point(index)); }
    }
    svg.appendChild(group); marker();
  }
  function nearest(px) {
    var line = lineAt(px), best = -1;
    for (var index = 0; index < lines.length; index += 1) {
      if (best < 0 || Math.abs(lines[index] - line) < Math.abs(lines[best] - line)) { best = index; }
    }
    return best;
  }
  function zoom(factor, around) {
    if (!isFinite(around)) { around = (view[0] + view[1]) / 2; }
    var full = series.hi + 1 - series.lo, span = Math.min(full, Math.max(10, (view[1] - view[0]) * factor));
    var start = around - (around - view[0]) * span / (view[1] - view[0]);
    start = Math.min(Math.max(start, series.lo), series.lo + full - span);
    view = [start, start + span]; render();
  }
  var dragging = null, dragged = false;  // a click that ends a drag is no click on a row
  svg.addEventListener("wheel", function (event) {
    event.preventDefault(); zoom(event.deltaY < 0 ? 0.7 : 1 / 0.7, lineAt(event.offsetX));
  }, {passive: false});
  svg.addEventListener("mousedown", function (event) { dragging = [event.offsetX, view.slice()]; dragged = false; });
  window.addEventListener("mouseup", function () { dragging = null; });
  svg.addEventListener("mousemove", function (event) {
    if (dragging) {
      dragged = dragged || Math.abs(event.offsetX - dragging[0]) > 3;
      var shift = (dragging[0] - event.offsetX) / (width - left - right) * (dragging[1][1] - dragging[1][0]);
      var span = dragging[1][1] - dragging[1][0], start = Math.min(Math.max(dragging[1][0] + shift, series.lo),
                                                                   series.hi + 1 - span);
      view = [start, start + span]; render(); return;
    }
    var index = nearest(event.offsetX), row = table.row(lines[index]);
    readout.textContent = "CSV line " + lines[index] + " \u00b7 " + GRADES[codes[index]] +
      (shares[index] === null ? "" : " \u00b7 " + fmt(shares[index]) + " of the allowed error") +
      (row ? " \u00b7 " + row[1] : "");
  });
  svg.addEventListener("dblclick", function () { view = [series.lo, series.hi + 1]; render(); });
  svg.addEventListener("click", function (event) {
    if (!dragged) { table.show(lines[nearest(event.offsetX)]); }
  });
  var buttons = el("div", "controls");
  [["\u2212", function () { zoom(1 / 0.5, (view[0] + view[1]) / 2); }],
   ["+", function () { zoom(0.5, (view[0] + view[1]) / 2); }],
   ["whole run", function () { view = [series.lo, series.hi + 1]; render(); }]].forEach(function (item) {
    var button = el("button", null, item[0]); button.addEventListener("click", item[1]); buttons.appendChild(button);
  });
  if (lines.indexOf(FIRST) >= 0) {
    var go = el("button", null, "zoom to the first failure");
    go.addEventListener("click", function () {  // 100 rows around it
      view = [series.lo, series.hi + 1]; zoom(100 / (series.hi + 1 - series.lo), FIRST);
    });
    buttons.appendChild(go);
  }
  box.insertBefore(buttons, svg);
  render();
}

// -- the module tree, coloured by where the divergence starts -----------------------------------------
function drawTree(box, tree) {
  var nodes = tree.nodes, children = nodes.map(function () { return []; }), roots = [], open = {};
  nodes.forEach(function (node, index) { (node[1] >= 0 ? children[node[1]] : roots).push(index); });
  [tree.first_failure, tree.suspect].forEach(function (index) {
    while (index !== null && index !== undefined && index >= 0) { open[index] = true; index = nodes[index][1]; }
  });
  function state(node) {
    if (node[6] !== null && node[6] === FIRST) { return "start"; }
    return node[4] > 0 ? "fail" : node[5] > 0 ? "nc" : "pass";
  }
  function label(index) {
    var node = nodes[index], span = el("span", "node st-" + state(node));
    span.appendChild(el("span", "swatch"));
    span.appendChild(el("span", "label " + node[2], node[0]));
    var counts = node[3] + " rows" + (node[4] ? ", " + node[4] + " failing" : "") +
      (node[5] ? ", " + node[5] + " not compared" : "");
    span.appendChild(el("span", "counts", counts));
    if (index === tree.first_failure) { span.appendChild(el("span", "badge first", "first failure")); }
    if (index === tree.suspect) { span.appendChild(el("span", "badge suspect", "suspect")); }
    if (node[6] !== null && node[6] === FIRST && index !== tree.first_failure) {
      span.appendChild(el("span", "badge start", "divergence starts inside"));
    }
    if (node[7]) { span.title = node[7]; }
    if (node[2] === "call") {
      span.classList.add("link");
      span.addEventListener("click", function () { table.find(node[0]); });
    }
    return span;
  }
  function build(index, depth) {
    var item = el("li"), kids = children[index];
    if (!kids.length && !nodes[index][8]) { item.appendChild(label(index)); return item; }
    var details = el("details"), summary = el("summary"), list = el("ul");
    details.open = !!open[index] || depth < 1;
    summary.appendChild(label(index)); details.appendChild(summary);
    kids.forEach(function (kid) { list.appendChild(build(kid, depth + 1)); });
    if (nodes[index][8]) { list.appendChild(el("li", "more", "+ " + nodes[index][8] + " more not shown")); }
    details.appendChild(list); item.appendChild(details);
    return item;
  }
  var list = el("ul", "tree");
  roots.forEach(function (index) { list.appendChild(build(index, 0)); });
  box.appendChild(list);
}

// -- "#selftest": every control used once, as a person would (the browser test reads data-selftest) -----
function selftest() {
  var svg = document.querySelector("svg.chart"), rect = svg.getBoundingClientRect();
  var at = {clientX: rect.left + rect.width / 2, clientY: rect.top + rect.height / 2, bubbles: true};
  svg.dispatchEvent(new WheelEvent("wheel", Object.assign({deltaY: -100, cancelable: true}, at)));
  svg.dispatchEvent(new MouseEvent("mousedown", at));
  svg.dispatchEvent(new MouseEvent("mousemove", Object.assign({}, at, {clientX: at.clientX + 40})));
  window.dispatchEvent(new MouseEvent("mouseup", at));
  svg.dispatchEvent(new MouseEvent("mousemove", at));
  svg.dispatchEvent(new MouseEvent("dblclick", at));
  svg.dispatchEvent(new MouseEvent("click", at));
  var filter = document.querySelector("#rows-table select");
  filter.value = "all"; filter.dispatchEvent(new Event("change"));  // the most pages: next is enabled
  Array.prototype.forEach.call(document.querySelectorAll(".controls button"), function (button) { button.click(); });
  var search = document.querySelector("input.search");
  search.value = "forward"; search.dispatchEvent(new Event("input"));
  ["warning", "unjudged", "all", "error"].forEach(function (value) {
    filter.value = value; filter.dispatchEvent(new Event("change"));
  });
  Array.prototype.forEach.call(document.querySelectorAll("span.link"), function (node) { node.click(); });
  if (FIRST !== null) { table.show(FIRST); }
  document.body.setAttribute("data-selftest", "ok");
}

try {
  drawChart(document.getElementById("chart-forward"), data.chart.forward, "forward");
  drawChart(document.getElementById("chart-backward"), data.chart.backward, "backward");
  var treeBox = document.getElementById("tree-box");
  if (data.tree) { drawTree(treeBox, data.tree); }
  document.body.setAttribute("data-rendered", "yes");
  if (window.location.hash === "#selftest") { selftest(); }
} catch (error) {
  document.body.setAttribute("data-rendered", "failed");
  throw error;
}
})();
"""
