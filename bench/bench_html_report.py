"""Benchmark of compare's HTML report (``compare_report_*.html``): its size and the seconds it takes, against the
CSV that every compare writes of the same rows, on synthetic compare rows (no dump is read):

    python3 bench/bench_html_report.py                  # 10^5 and 10^6 rows
    python3 bench/bench_html_report.py --rows 100000    # one size
    python3 bench/bench_html_report.py --rows 100000 --compare 300000   # and the page's part of a real compare

Each run's rows: forward calls of three records then as many backward calls, under 40 layers' stack frames;
0.1 % of the rows fail (beyond their allowance), 0.1 % are not compared, 0.5 % are one-sided. Prints, per size,
the HTML's bytes and seconds, the CSV's bytes and seconds (``reports.table_of`` + ``write_csv``), and the
ratio. ``synthetic_rows`` is also what the size test uses (test/comparison/test_html_report.py).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys
import tempfile
import time
from typing import List, Optional

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from ptdbg_ascend.comparison import advisor, columns, html_report, reports  # noqa: E402
from ptdbg_ascend.comparison.matching import RowPair  # noqa: E402
from ptdbg_ascend.comparison.metrics import Metrics, Status  # noqa: E402
from ptdbg_ascend.comparison.outcome import Counts  # noqa: E402
from ptdbg_ascend.comparison.rows import CompareRow  # noqa: E402
from ptdbg_ascend.comparison.tolerances import Tolerance  # noqa: E402
from ptdbg_ascend.comparison.verdicts import ERROR, NOT_COMPARED, PASS, RESULT_UNMATCHED, WARNING, Judgement  # noqa
from ptdbg_ascend.formats.records import CallRecord, TensorRecord  # noqa: E402

APIS = ("Functional_linear", "Functional_gelu", "Functional_layer_norm", "Tensor___add__", "Torch_matmul")
LAYERS = 40
TOLERANCE = Tolerance(rtol=1e-6, atol=1e-9, exact=False, precision="torch.float32")


def _stack(call_number: int) -> tuple:
    layer = call_number % LAYERS
    return (("/work/model.py", str(100 + call_number % 7), "forward", "x = self.proj(x)"),
            ("/work/model.py", str(200 + layer), "forward", f"x = self.layers[{layer}](x)"),
            ("/work/train.py", "42", "main", "loss = model(batch).sum()"),
            ("/work/train.py", "90", "<module>", "main()"))


def _row(record: TensorRecord, call: CallRecord, first: bool, rng: random.Random) -> CompareRow:
    draw = rng.random()
    if draw < 0.005:  # one-sided: no bench partner
        return CompareRow(RowPair(record, None, call, None, first), Judgement(RESULT_UNMATCHED, None, None, ""))
    pair = RowPair(record, record, call, call, first)
    if draw < 0.006:
        return CompareRow(pair, Judgement(NOT_COMPARED, None, None, ""), TOLERANCE, Metrics(Status.NOT_READ),
                          "Nan", ("The npy file of bench is not found.",))
    share = 10 ** rng.uniform(-3, -0.05) if draw >= 0.007 else 10 ** rng.uniform(0.1, 3)
    grade = ERROR if share > 1 else (WARNING if share > 0.25 else PASS)
    metrics = Metrics(Status.COMPARED, cosine=1 - share * 1e-7, max_abs_err=share * 1e-6, error_norm=share * 1e-6,
                      bench_norm=1.0, scale=1.0, size=4096, euclidean_relative_distance=share * 1e-6)
    message = (f"Relative error {share * 1e-6:.2e} > 1.0e-06 allowed for float32; would pass with rtol >= "
               f"{share * 1e-6:.2e}.") if grade == ERROR else ""
    judgement = Judgement(grade, share * 1e-6, share * 1e-6 if grade == ERROR else None, message, share)
    return CompareRow(pair, judgement, TOLERANCE, metrics, "Yes", (message,) if message else ())


def synthetic_rows(count: int, seed: int = 0) -> List[CompareRow]:
    """``count`` compare rows: the first half forward calls (input.0, input.1, output), the rest backward."""
    rng = random.Random(seed)
    rows: List[CompareRow] = []
    counters: dict = {}
    call_number = 0
    while len(rows) < count:
        direction = "forward" if len(rows) < count // 2 else "backward"
        api = APIS[call_number % len(APIS)]
        number = counters[(api, direction)] = counters.get((api, direction), -1) + 1
        name = f"{api}_{number}_{direction}"
        records = tuple(TensorRecord(f"{name}_{side}", side.split(".")[0], "torch.float32", (64, 64),
                                     (1.0, -1.0, 0.0, 64.0), None) for side in ("input.0", "input.1", "output"))
        call = CallRecord(name, records, _stack(call_number) if direction == "forward" else ())
        for position, record in enumerate(records[:count - len(rows)]):
            rows.append(_row(record, call, position == 0, rng))
        call_number += 1
    return rows


def measure(count: int, directory: str) -> dict:
    rows = synthetic_rows(count)
    counts = Counts.of(rows)
    failing = advisor.first_failure(rows)
    advice, _ = advisor.diagnose(rows, counts, failing)
    column_names = columns.full_columns(False)
    start = time.perf_counter()
    csv_path = os.path.join(directory, f"compare_result_{count}.csv")
    reports.write_csv(csv_path, column_names, reports.table_of(rows, column_names, False))
    csv_seconds = time.perf_counter() - start
    start = time.perf_counter()
    html_path = html_report.write_html_report(os.path.join(directory, f"compare_report_{count}.html"), rows, counts,
                                              advice, failing, html_report.ReportFiles(os.path.basename(csv_path)))
    html_seconds = time.perf_counter() - start
    return {"rows": count, "html_bytes": os.path.getsize(html_path), "html_s": html_seconds,
            "csv_bytes": os.path.getsize(csv_path), "csv_s": csv_seconds}


def write_pkl(path: str, calls: int, planted: Optional[int]) -> None:
    """A statistics-only legacy dump of ``calls`` forward calls (two inputs, one output), with stack lines;
    call ``planted``'s output statistics are off by 5 %."""
    with open(path, "w") as handle:
        for number in range(calls):
            name = f"{APIS[number % len(APIS)]}_{number // len(APIS)}_forward"
            for side in ("input.0", "input.1", "output"):
                scale = 1.05 if (number == planted and side == "output") else 1.0
                handle.write(json.dumps([f"{name}_{side}", 0, [], "torch.float32", [64, 64],
                                         [1.0 * scale, -1.0 * scale, 0.01 * scale, 64.0 * scale]]) + "\n")
            handle.write(json.dumps([f"{name}_stack_info", [list(frame) for frame in _stack(number)]]) + "\n")


def measure_compare(rows: int, directory: str) -> dict:
    """A real statistics-only ``compare`` of ``rows`` rows, and the part of its time spent writing the page (timed
    inside the same call, so a busy machine slows both alike). Statistics only is the cheapest compare there is
    (no tensor file read): the page's share is the largest it can be."""
    from ptdbg_ascend.comparison import run
    from ptdbg_ascend.comparison.api import compare

    calls = rows // 3
    npu, bench = os.path.join(directory, "npu.pkl"), os.path.join(directory, "bench.pkl")
    write_pkl(npu, calls, planted=calls // 2)
    write_pkl(bench, calls, planted=None)
    spent = []
    write = run.html_report.write_html_report

    def timed(*args, **kwargs):
        begin = time.perf_counter()
        try:
            return write(*args, **kwargs)
        finally:
            spent.append(time.perf_counter() - begin)

    run.html_report.write_html_report = timed
    try:
        start = time.perf_counter()
        compare({"npu_pkl_path": npu, "bench_pkl_path": bench, "is_print_compare_log": False},
                os.path.join(directory, "out"), xlsx=False)
        total = time.perf_counter() - start
    finally:
        run.html_report.write_html_report = write
    return {"rows": calls * 3, "total": total, "page": spent[0]}


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, action="append", help="rows of one run (repeatable; default 1e5 and 1e6)")
    parser.add_argument("--compare", type=int, metavar="ROWS", help="also time a real statistics-only compare of "
                        "ROWS rows and the page's part of it")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as directory:
        if args.compare:
            found = measure_compare(args.compare, directory)
            print("{rows:>9} rows, statistics-only compare: {total:.2f} s, of which the page {page:.2f} s "
                  "({share:.1%})".format(share=found["page"] / found["total"], **found))
        for count in args.rows or [10 ** 5, 10 ** 6]:
            found = measure(count, directory)
            print("{rows:>9} rows: html {html_kb:8.0f} KB in {html_s:6.2f} s; csv {csv_mb:7.1f} MB in {csv_s:6.2f} s; "
                  "html / csv time {ratio:.2f}".format(html_kb=found["html_bytes"] / 1024,
                                                         csv_mb=found["csv_bytes"] / 2 ** 20,
                                                         ratio=found["html_s"] / found["csv_s"] if found["csv_s"] else
                                                         math.nan, **found))
    return 0


if __name__ == "__main__":
    sys.exit(main())
