#!/usr/bin/env bash
# The README's first command: set up .venv (a CPU torch only if none is installed), then run the
# end-to-end scenario: dump a reference run and a run with a planted bf16 layer, compare them, and
# show the first API whose accuracy is not reached. Output goes to sample/out/end_to_end/ (gitignored;
# each sample writes to its own folder under sample/out/, so this one leaves the others' outputs alone).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
bash scripts/bootstrap.sh
OUT=sample/out/end_to_end
.venv/bin/python sample/end_to_end.py --out "$OUT" "$@"
echo
echo "The answer: the first line of $(ls "$OUT"/compare/advisor_*.txt) names the suspect API;"
echo "  the full table: $OUT/compare/compare_result_*.csv (and .xlsx);"
echo "  the run as one page: $OUT/compare/compare_report_*.html (open it in a browser)."
echo "To use ptdbg and this Python in your shell, activate the environment first:"
echo "  source $ROOT/.venv/bin/activate"
