"""The end of a private run: the acceptance's ε = 1 criteria under decays of the θ step.

The default private run (a private attribute-mode fit at λ > 0 with ``batch_size="auto"`` and no
fairness target) takes ``lr_decay="auto"`` and ``decay_every="auto"`` as η_θ times
``pfair.settings.PRIVATE_DECAY`` every ``1/PRIVATE_DECAY_PERIODS`` of its epochs; every other fit
keeps 0.8 every 10 epochs (``AUTO_DECAY``). This script reads the acceptance's 378 private fits (all
nine tables, both notions, λ ∈ {0, 1, …, 100}, seeds 0–2, the adaptive clip) under each decay and
prints the private criteria side by side, over all tables and per table:

* today's default: ``convergence_runs.csv``'s private rows;
* 0.8 every 10 epochs (the decay before, times k when the run stretches, so every half of the
  run): ``convergence_runs_decay_former.csv`` (main at 386038c);
* ``factor`` every ``1/periods`` of the run: ``convergence_runs_decay_<factor>_<periods>.csv``, made
  by ``--run FACTOR PERIODS`` (the rule's two constants set to them; the λ = 0 fits keep 0.8 every
  10 epochs, as the rule has it), except 0.6 every quarter and 0.5 every half, which were run with
  ``convergence.py --private-only --set decay_every=5 lr_decay=0.6`` (and ``decay_every=10
  lr_decay=0.5``) before the rule existed: their λ = 0 fits decay alike, so their margins are
  against λ = 0 models of their own.

A fit whose guard handed back an earlier epoch (``NotBetterThanConstantWarning``: its last model was
shown no better than the constant) returns a model near its λ = 0 model, on its mixing line up to
a few records; the printout also counts the settings below the line without them. Printout:
``private_decay_log.txt``.

    python docs/optimisation/private_decay.py                 # the comparison from the CSVs
    python docs/optimisation/private_decay.py --run 0.5 5     # one more candidate, ~5 min on 2 cores
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

import pfair.settings

sys.path.insert(0, str(Path(__file__).resolve().parent))
import convergence as cv  # noqa: E402

HERE = Path(__file__).resolve().parent
TABLES = ["adult", "compas", "credit_card", "bank", "german", "law_school", "synthetic1", "synthetic2", "synthetic3"]
LAMS = [0.0, 1.0, 3.0, 8.0, 20.0, 40.0, 100.0]
#: (factor, periods) of the candidates beside the default, in the printout's order.
CANDIDATES = [(0.6, 4), (0.5, 2), (0.5, 4), (0.5, 5), (0.4, 5), (0.3, 4)]
#: How the printout names a decay period of ``1/periods`` of the run.
PART = {2: "half", 4: "quarter", 5: "fifth"}


def path_of(factor: float, periods: int) -> Path:
    return HERE / f"convergence_runs_decay_{factor:g}_{periods}.csv"


def run(factor: float, periods: int) -> None:
    """The acceptance's private fits with the rule's constants set to ``factor`` and ``periods``."""
    before = pfair.settings.PRIVATE_DECAY, pfair.settings.PRIVATE_DECAY_PERIODS
    pfair.settings.PRIVATE_DECAY, pfair.settings.PRIVATE_DECAY_PERIODS = factor, periods
    try:
        runs = pd.concat([cv.run_table(name, cv.SEEDS, cv.NOTIONS, LAMS, [1.0]) for name in TABLES])
    finally:
        pfair.settings.PRIVATE_DECAY, pfair.settings.PRIVATE_DECAY_PERIODS = before
    runs.to_csv(path_of(factor, periods), index=False)


def variants() -> dict[str, pd.DataFrame]:
    """The private runs of each decay, by label."""
    today = cv.load_runs(HERE / "convergence_runs.csv")
    out = {"×0.8 every 10 epochs (before)": cv.load_runs(HERE / "convergence_runs_decay_former.csv")}
    for factor, periods in CANDIDATES:
        out[f"×{factor:g} every {PART[periods]}"] = cv.load_runs(path_of(factor, periods))
    default = f"×{pfair.settings.PRIVATE_DECAY:g} every {PART[pfair.settings.PRIVATE_DECAY_PERIODS]} (default)"
    out[default] = today[today["epsilon"] == "1"]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", nargs=2, metavar=("FACTOR", "PERIODS"), default=None)
    args = ap.parse_args()
    if args.run:
        run(float(args.run[0]), int(args.run[1]))
    nonprivate = cv.reference_nonprivate()  # the non-private fits the decay was chosen against
    eg = pd.DataFrame(columns=["table", "fairness"])
    settled = {}
    for label, private in variants().items():
        c = cv.criteria(pd.concat([nonprivate, private]), eg)
        per = c["per_setting"][c["per_setting"]["epsilon"] == "1"]
        pr = c["private"]
        print(f"{label}: settled {(private['spread5'] <= 0.02).mean():.1%} of {len(private)} fits; mean violation "
              f"rising by more than 0.02 with λ in {int((per['max_rise'] > 0.02).sum())} of {len(per)} settings; "
              f"per-seed spread above 0.05 in {int((per['max_seed_spread'] > 0.05).sum())} of {len(per)}; below the "
              f"line in ≥ 5 of 6 fits at {int((pr['private_below'] >= 5).sum())} of {len(pr)} (table, λ) "
              f"({int(cv.returned_constant(private).sum())} fits returned the constant predictor); mean margin "
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
