"""The end of a private run: the acceptance's ε = 1 criteria under four decays of the θ step.

The default private run (a private attribute-mode fit at λ > 0 with ``batch_size="auto"`` and no
fairness target) takes ``lr_decay="auto"`` and ``decay_every="auto"`` as η_θ halved every quarter
of its epochs (``pfair.settings.PRIVATE_DECAY``, ``PRIVATE_DECAY_PERIODS``); every other fit keeps
0.8 every 10 epochs (``AUTO_DECAY``). This script reads the acceptance's 378 private fits (all nine
tables, both notions, λ ∈ {0, 1, …, 100}, seeds 0–2, the adaptive clip) under each decay and prints
the private criteria side by side, over all tables and per table:

* today's default: ``convergence_runs.csv``'s private rows;
* 0.8 every 10 epochs (the decay before, times k when the run stretches, so every half of the
  run): ``convergence_runs_decay_former.csv`` (main at 386038c);
* 0.6 every quarter: ``convergence_runs_decay06.csv`` (``convergence.py --private-only --set
  decay_every=5 lr_decay=0.6``);
* 0.5 every half: ``convergence_runs_decay_half.csv`` (``--set decay_every=10 lr_decay=0.5``).

The last two were measured with the λ = 0 fits decayed alike (``--set`` applies to every fit), so
their margins are against a λ = 0 model trained with their decay; today's and the former's λ = 0
fits both take 0.8 every 10 epochs. Printout: ``private_decay_log.txt``.

    python docs/optimisation/private_decay.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
import convergence as cv  # noqa: E402

HERE = Path(__file__).resolve().parent


def variants() -> dict[str, pd.DataFrame]:
    """The private runs of each decay, by label."""
    today = cv.load_runs(HERE / "convergence_runs.csv")
    return {"×0.8 every 10 epochs (before)": cv.load_runs(HERE / "convergence_runs_decay_former.csv"),
            "×0.6 every quarter": cv.load_runs(HERE / "convergence_runs_decay06.csv"),
            "×0.5 every half": cv.load_runs(HERE / "convergence_runs_decay_half.csv"),
            "×0.5 every quarter (default)": today[today["epsilon"] == "1"]}


def main() -> None:
    today = cv.load_runs(HERE / "convergence_runs.csv")
    nonprivate = today[today["epsilon"] == "none"]
    eg = pd.DataFrame(columns=["table", "fairness"])
    settled = {}
    for label, private in variants().items():
        c = cv.criteria(pd.concat([nonprivate, private]), eg)
        per = c["per_setting"][c["per_setting"]["epsilon"] == "1"]
        pr = c["private"]
        print(f"{label}: settled {(private['spread5'] <= 0.02).mean():.1%} of {len(private)} fits; mean violation "
              f"rising by more than 0.02 with λ in {int((per['max_rise'] > 0.02).sum())} of {len(per)} settings; "
              f"per-seed spread above 0.05 in {int((per['max_seed_spread'] > 0.05).sum())} of {len(per)}; below the "
              f"line in ≥ 5 of 6 fits at {int((pr['private_below'] >= 5).sum())} of {len(pr)} (table, λ); mean margin "
              f"{private[private.lam > 0]['below_line'].mean():+.4f}\n")
        settled[label] = private.groupby("table")["spread5"].apply(lambda v: float((v <= 0.02).mean()))
    labels = list(settled)
    print("Settled share (last five validation errors within 0.02) by table\n")
    print("| table | " + " | ".join(labels) + " |")
    print("|---" * (len(labels) + 1) + "|")
    for table in sorted(settled[labels[0]].index):
        print(f"| {table} | " + " | ".join(f"{settled[label][table]:.1%}" for label in labels) + " |")


if __name__ == "__main__":
    main()
