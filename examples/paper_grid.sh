#!/usr/bin/env bash
# The grids behind docs/results.md (the settings of Gupta et al. 2024, §5: N = 3, 40 epochs, batch 256,
# 6 values of λ in [0, 2]).
# Resumable: rerun the script and finished cells are skipped. Usage: bash examples/paper_grid.sh [OUT]
set -euo pipefail
OUT=${1:-results}
PFAIR=${PFAIR:-pfair}
METHODS=steffle,pfld,fedavg,central_erm,fermi,nonprivate_steffle
for ds in credit_card adult compas; do
  for fairness in demographic_parity equalized_odds; do
    "$PFAIR" sweep --no-progress --dataset "$ds" --fairness "$fairness" --methods "$METHODS" --epsilon 1 3 9 \
      --heterogeneity 0 0.75 --silos 3 --lam 0:2:6 --seeds 5 --out "$OUT/paper"
  done
done
# Fig. 2: heterogeneity h ∈ [0, 0.9] (N = 3) and silo count N ∈ [1, 12] (h = 0 and 0.75), ε = 1.
"$PFAIR" sweep --no-progress --dataset credit_card --methods steffle --epsilon 1 --heterogeneity 0:0.9:10 --silos 3 \
  --lam 0:2:6 --seeds 5 --out "$OUT/fig2"
"$PFAIR" sweep --no-progress --dataset credit_card --methods steffle --epsilon 1 --heterogeneity 0 0.75 \
  --silos 1 2 3 4 6 8 10 12 --lam 0:2:6 --seeds 5 --out "$OUT/fig2"
"$PFAIR" summary "$OUT/paper"
"$PFAIR" plot "$OUT/paper"
"$PFAIR" plot "$OUT/fig2"
