"""A private fit warm-started from its noise-free λ = 0 model: the acceptance's criteria side by side.

In attribute mode a private fit at λ = 0 sends exact s-free sums only (its rounds carry no noise and
release nothing about s), so a private fit at λ > 0 could first train that model and start its
noisy run from it, at no cost in ε: θ would start where the loss puts it along the directions the
fairness term leaves free, instead of travelling there under the loss's pull, which the scaled θ
step divides by λ. This script reads the acceptance's 378 private fits twice and prints the
acceptance's summary and its private (table, λ) counts for each, with the non-private fits as they
are:

* today's default: ``convergence_runs.csv``;
* warm-started: ``convergence_runs_warm.csv``, made by ``convergence.py --private-only
  --warm-from-zero --runs convergence_runs_warm.csv`` (each private fit at λ > 0 after the private
  λ = 0 fit of its table, seed and notion, with ``warm_start=True``; its λ = 0 fits are today's).

and the mean test violation per λ where the two differ most. Printout: ``warm_from_zero_log.txt``.

    python docs/optimisation/warm_from_zero.py          # the comparison from the CSVs
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import convergence as cv  # noqa: E402


def main() -> None:
    today = cv.load_runs(HERE / "convergence_runs.csv")
    warm = pd.concat([today[today["epsilon"] == "none"], cv.load_runs(HERE / "convergence_runs_warm.csv")])
    eg = pd.read_csv(cv.EG)
    crit = {name: cv.criteria(runs, eg) for name, runs in (("today", today), ("warm-started", warm))}
    for name, tables in crit.items():
        print(f"## {name}\n\n{cv.summary(tables)}\n")
    pr = crit["today"]["private"].merge(crit["warm-started"]["private"], on=["table", "lam"],
                                        suffixes=(" today", " warm"))
    cols = ["table", "lam", "private_below today", "private_below warm", "private_constant today",
            "private_constant warm"]
    print("private fits below their λ = 0 mixing line, of 6, where the non-private point is ≥ 0.02 below its line\n")
    print(cv.markdown(pr[cols].rename(columns=lambda c: c.replace("private_", "")), floats="{:g}"))
    means = {name: runs[runs["epsilon"] == "1"].groupby(["table", "fairness", "lam"])[["error", "violation"]].mean()
             for name, runs in (("today", today), ("warm", warm))}
    both = means["today"].reset_index().merge(means["warm"].reset_index(), on=["table", "fairness", "lam"],
                                              suffixes=(" today", " warm"))
    pick = both[both["table"].isin(["adult", "bank", "compas", "synthetic2"])].copy()
    pick["lam"] = pick["lam"].map("{:g}".format)
    print("\nε = 1, mean test error and violation over seeds 0–2\n")
    print(cv.markdown(pick))


if __name__ == "__main__":
    main()
