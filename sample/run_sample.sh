#!/usr/bin/env bash
# The README's first command: set up .venv (a CPU torch only if none is installed), then run the
# end-to-end scenario: dump a reference run and a run with a planted bf16 layer, compare them, and
# show the first API whose accuracy is not reached. Output goes to sample/out/ (gitignored).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
bash scripts/bootstrap.sh
.venv/bin/python sample/end_to_end.py --out sample/out "$@"
