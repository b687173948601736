#!/usr/bin/env bash
# The comparison grid behind docs/results.md, in one command (resumable: rerun it and finished cells
# are skipped), then the summaries, figures and the generated tables of docs/results.md.
#
#   bash examples/paper_grid.sh [OUT] [extra options of python -m pfair.experiments.grid]
#   bash examples/paper_grid.sh results --dry-run                      # cells and estimated compute only
#   bash examples/paper_grid.sh results --methods central_erm,fedavg,fermi,eg --jobs 1   # a subset
#
# Grid (pfair/experiments/grid.py): Credit Card, Adult, COMPAS × demographic parity, equalized odds ×
# ε ∈ {1, 3, 9} × h ∈ {0, 0.75} × N = 3 × 15 seeds, every method with the same tuning budget (12
# configurations per setting and seed), fronts selected on a validation split and reported on test;
# plus the h and N sweeps of the paper's Fig. 2. About 5.2 core-hours: ≈ 2.6 h with --jobs 2 on an idle
# 2-core machine. Each method writes OUT/<part>/<method>/runs.csv: delete a method's directory to
# rerun it (e.g. SteFFLe, FERMI, DP-FERMI and the non-private SteFFLe after a change to SteFFLe).
set -euo pipefail
OUT=${1:-results}
shift || true
PYTHON=${PYTHON:-python}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
"$PYTHON" -m pfair.experiments.grid --out "$OUT" --jobs "${JOBS:-2}" --no-report "$@"
for arg in "$@"; do [[ "$arg" == "--dry-run" ]] && exit 0; done
"$PYTHON" "$HERE/../docs/results_tables.py" "$OUT" --write "$HERE/../docs/results.md"
