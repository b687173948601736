"""A noise-free run at a large λ: how long it trains (``pfair.settings.LAMBDA_STRETCH_CAP``).

Under the scaled θ step (``η_θ / max(1, λ/λ_c)``) a non-private fit at λ = 100 moves its loss a
hundred times more slowly than at λ = 1; with the epochs of λ ≤ λ_c its run ends before it has
minimised ``L + λ ψ̄``. ``batch_size="auto"`` now multiplies a noise-free run's epochs and decay
period by ``k_λ = min(λ/λ_c, cap)``. This script compares three caps on the acceptance's non-private
fits (``convergence.py``: every table × {demographic parity, equalized odds} × λ ∈ {0, 1, 3, 8, 20,
40, 100} × seeds 0–2):

* cap 1, the run before the stretch (20 epochs at every λ): ``convergence_runs_nonprivate_20.csv``;
* cap 10 (the default): the non-private rows of ``convergence_runs.csv``;
* cap 100 (``k_λ = λ``: 2,000 epochs at λ = 100): ``convergence_runs_lambda_full.csv``.

For each: the acceptance's non-private criteria (``convergence.criteria``), the mean seconds of a
fit per λ, and per table and notion the mean test error and violation at λ ≥ 8. Printout:
``lambda_stretch_log.txt``.

    python docs/optimisation/lambda_stretch.py --run 100   # the cap-100 runs (about 80 min on 2 cores)
    python docs/optimisation/lambda_stretch.py --tables-only
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import pandas as pd

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import convergence as cv  # noqa: E402

VARIANTS = {1: cv.NONPRIVATE_20, 10: cv.RUNS, 100: HERE / "convergence_runs_lambda_full.csv"}


def run(cap: int) -> None:
    """The acceptance's non-private fits with ``LAMBDA_STRETCH_CAP = cap``, appended to its CSV."""
    import pfair.settings

    before = pfair.settings.LAMBDA_STRETCH_CAP
    pfair.settings.LAMBDA_STRETCH_CAP = float(cap)
    path = VARIANTS[cap]
    try:
        for name in cv.TABLES:
            done = pd.read_csv(path) if path.exists() else pd.DataFrame(columns=["table"])
            if name not in set(done["table"]):
                df = cv.run_table(name, cv.SEEDS, cv.NOTIONS, cv.LAMS, [None])
                df.to_csv(path, mode="a", header=not path.exists(), index=False)
    finally:
        pfair.settings.LAMBDA_STRETCH_CAP = before


def nonprivate(cap: int) -> pd.DataFrame:
    runs = cv.load_runs(VARIANTS[cap])
    return runs[runs["epsilon"] == "none"]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", type=int, choices=[1, 100], default=None, help="run this cap's fits first")
    ap.add_argument("--tables-only", action="store_true", help="read the CSVs and print (the default)")
    args = ap.parse_args(argv)
    if args.run is not None:
        run(args.run)
    eg = pd.read_csv(cv.EG)
    runs = {cap: nonprivate(cap) for cap in VARIANTS}
    print("Non-private acceptance fits; epochs and decay period × min(λ, cap) (λ_c = 1)\n")
    print("| cap | settled | rising > 0.02 | spread > 0.05 | last returned (worst) | fairlearn's points within 0.01 "
          "| returned the constant |")
    print("|---|---|---|---|---|---|---|")
    for cap, r in runs.items():
        c = cv.criteria(r, eg)
        ps, fr = c["per_setting"], c["front"]
        n = int(ps["n_fits"].sum())
        settled = float((ps["settled"] * ps["n_fits"]).sum() / n)
        print(f"| {cap} | {settled:.1%} | {int((ps['max_rise'] > 0.02).sum())} of {len(ps)} | "
              f"{int((ps['max_seed_spread'] > 0.05).sum())} of {len(ps)} | {ps['last_returned'].min():.0%} | "
              f"{int((fr['gap'] <= 0.01).sum())} of {len(fr)} | {int(cv.returned_constant(r).sum())} of {n} |")
    print("\nMean seconds a fit, by λ (the machine's load varies: compare within a column)\n")
    lams = sorted(runs[1]["lam"].unique())
    print("| cap | " + " | ".join(f"λ = {lam:g}" for lam in lams) + " |")
    print("|---|" + "---|" * len(lams))
    for cap, r in runs.items():
        sec = r.groupby("lam")["seconds"].mean()
        print(f"| {cap} | " + " | ".join(f"{sec[lam]:.1f}" for lam in lams) + " |")
    print("\nMean test error / violation over seeds 0–2, by cap\n")
    print("| table | fairness | λ | " + " | ".join(f"cap {cap}" for cap in runs) + " |")
    print("|---|---|---|" + "---|" * len(runs))
    means = {cap: r.groupby(["table", "fairness", "lam"])[["error", "violation"]].mean() for cap, r in runs.items()}
    for (table, fairness, lam) in means[1].index:
        if lam < 8:
            continue
        cells = [f"{m.loc[(table, fairness, lam), 'error']:.3f} / {m.loc[(table, fairness, lam), 'violation']:.3f}"
                 for m in means.values()]
        print(f"| {table} | {fairness} | {lam:g} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    os.environ.setdefault("PFAIR_PROGRESS", "0")
    main()
