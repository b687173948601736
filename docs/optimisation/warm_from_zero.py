"""A private fit warm-started from its noise-free λ = 0 model: the acceptance's criteria side by side.

In attribute mode a private fit at λ = 0 sends exact s-free sums only (its rounds carry no noise and
release nothing about s), so a private fit at λ > 0 could first train that model and start its
noisy run from it, at no cost in ε: θ would start where the loss puts it along the directions the
fairness term leaves free, instead of travelling there under the loss's pull, which the scaled θ
step divides by λ; and starting from that model shrunk (θ times a factor: its directions, with the
predictions less confident) keeps more of a cold start's leverage for the fairness term. This
script reads the acceptance's 378 private fits three times and prints the acceptance's summary and
its private (table, λ) counts for each, with the non-private fits as they are:

* today's default: ``convergence_runs.csv``;
* warm-started: ``convergence_runs_warm.csv``, made by ``convergence.py --private-only
  --warm-from-zero --runs convergence_runs_warm.csv`` (each private fit at λ > 0 after the private
  λ = 0 fit of its table, seed and notion, with ``warm_start=True``; its λ = 0 fits are today's);
* warm-started from θ × 0.1: ``convergence_runs_warm_0.1.csv``, the same with ``--warm-shrink 0.1``;

and the mean test error and violation per λ on four tables. Printout: ``warm_from_zero_log.txt``.

    python docs/optimisation/warm_from_zero.py          # the comparison from the CSVs
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import convergence as cv  # noqa: E402


VARIANTS = (("today", None), ("warm", "convergence_runs_warm.csv"), ("warm ×0.1", "convergence_runs_warm_0.1.csv"))


def main() -> None:
    cv.compare_variants(VARIANTS, ["adult", "bank", "compas", "synthetic2"])


if __name__ == "__main__":
    main()
