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
fit per λ, and per table and notion the mean test error and violation at λ ≥ 8. Then caps 1 and 10
on five settings the acceptance does not use, standing in for a user's tables (``HELDOUT`` of
``target_dual_step.py`` but census-KDD: Adult with s = race, COMPAS and Law School with s = sex,
``make_synthetic(20000, 20, dependence=1.5, seed=7)`` and ``make_synthetic(8000, 10, dependence=2.5,
seed=3)``; λ ∈ {0, 3, 8, 20, 100}, both notions, seeds 0–2, each fit against its seed's λ = 0
mixing line; runs in ``lambda_stretch_heldout.csv``). Printout: ``lambda_stretch_log.txt``.

    python docs/optimisation/lambda_stretch.py --run 100   # the cap-100 runs (about 80 min on 2 cores)
    python docs/optimisation/lambda_stretch.py --heldout   # the held-out runs (about 4 min)
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
HELDOUT_RUNS = HERE / "lambda_stretch_heldout.csv"
HELDOUT_SETTINGS = ["adult, s = race", "compas, s = sex", "law_school, s = sex", "synthetic 20k, d = 1.5",
                    "synthetic 8k, d = 2.5"]
HELDOUT_LAMS = [0.0, 3.0, 8.0, 20.0, 100.0]


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


def run_heldout() -> None:
    """Caps 1 and 10 on the held-out settings (non-private), appended to :data:`HELDOUT_RUNS`."""
    import pfair.settings
    from target_dual_step import HELDOUT

    before = pfair.settings.LAMBDA_STRETCH_CAP
    try:
        for name in HELDOUT_SETTINGS:
            data = HELDOUT[name]()
            for cap in (1.0, 10.0):
                pfair.settings.LAMBDA_STRETCH_CAP = cap
                rows = []
                for fairness in cv.NOTIONS:
                    for seed in cv.SEEDS:
                        line = None
                        for lam in HELDOUT_LAMS:
                            r = cv.fit_one(data, fairness, lam, None, seed)
                            pred = r.pop("pred")
                            if lam == 0:
                                line = cv.mixing_line(data.y_test, pred, sensitive_features=data.s_test,
                                                      fairness=fairness)
                            r["below_line"] = line.margin(r["error"], r["violation"])
                            rows.append(dict(setting=name, cap=cap, fairness=fairness, seed=seed, lam=lam, **r))
                pd.DataFrame(rows).to_csv(HELDOUT_RUNS, mode="a", header=not HELDOUT_RUNS.exists(), index=False)
    finally:
        pfair.settings.LAMBDA_STRETCH_CAP = before


def heldout_tables() -> None:
    """Print the held-out comparison: per cap, the settings whose mean violation rises by more than
    0.02 between two λ, the fits below their λ = 0 mixing line and the mean margin (λ > 0), the fits
    that returned the constant predictor and the seconds of all fits; then per setting and notion
    the mean test error / violation at λ ≥ 8."""
    runs = pd.read_csv(HELDOUT_RUNS)
    print("\nHeld-out settings, non-private, λ ∈ {0, 3, 8, 20, 100}, seeds 0–2\n")
    print("| cap | rising > 0.02 | below the line (λ > 0) | mean margin (λ > 0) | returned the constant | seconds |")
    print("|---|---|---|---|---|---|")
    for cap, g in runs.groupby("cap"):
        means = g.groupby(["setting", "fairness", "lam"])["violation"].mean()
        rising = 0
        groups = list(means.groupby(level=[0, 1]))
        for _, v in groups:
            v = v.sort_index().to_numpy()
            rising += max(v[j] - v[i] for i in range(len(v)) for j in range(i + 1, len(v))) > 0.02
        pos = g[g["lam"] > 0]
        print(f"| {cap:g} | {rising} of {len(groups)} | {int((pos['below_line'] > 0).sum())} of {len(pos)} | "
              f"{pos['below_line'].mean():+.3f} | {int((g['selected'] == 0).sum())} | {g['seconds'].sum():.0f} |")
    print("\n| setting | fairness | λ | cap 1 | cap 10 |")
    print("|---|---|---|---|---|")
    means = runs.groupby(["setting", "fairness", "lam", "cap"])[["error", "violation"]].mean()
    for (setting, fairness, lam), _ in means.groupby(level=[0, 1, 2]):
        if lam < 8:
            continue
        cells = [f"{means.loc[(setting, fairness, lam, cap), 'error']:.3f} / "
                 f"{means.loc[(setting, fairness, lam, cap), 'violation']:.3f}" for cap in (1.0, 10.0)]
        print(f"| {setting} | {fairness} | {lam:g} | " + " | ".join(cells) + " |")


def nonprivate(cap: int) -> pd.DataFrame:
    runs = cv.load_runs(VARIANTS[cap])
    return runs[runs["epsilon"] == "none"]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", type=int, choices=[1, 100], default=None, help="run this cap's fits first")
    ap.add_argument("--heldout", action="store_true", help="run the held-out settings' fits first")
    ap.add_argument("--tables-only", action="store_true", help="read the CSVs and print (the default)")
    args = ap.parse_args(argv)
    if args.run is not None:
        run(args.run)
    if args.heldout:
        run_heldout()
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
    heldout_tables()


if __name__ == "__main__":
    os.environ.setdefault("PFAIR_PROGRESS", "0")
    main()
