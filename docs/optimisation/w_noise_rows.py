"""h_W's noise row by row against the same noise on every row, at ε = 1 (measured, not adopted).

A private fit in attribute mode noises h_W with one standard deviation on every row, sized by the
two rarest groups of a block: Δ_W = (2/m)(1/ρ₁ + 1/ρ₂)^{1/2}. Row (b, r) of h_W is the public
2 p(r|b)^{-1/2} times an unscaled per-group sum whose sensitivity is √2/m whatever the groups, so
noise in proportion to each row's own p(r|b)^{-1/2} is private at the same noise multiplier
(docs/privacy.md, "Noise on h_W row by row"; ``pfair.settings.W_NOISE_ROWS``): less noise on the
common groups' rows, up to √2 times more on the rarest one's. Two measurements:

1. attributes the acceptance does not use, with a rare group (COMPAS by sex, German by age, Credit
   Card by age and by marriage, Bank by age and in three bins, Adult by race, COMPAS with every
   race category): default fits at ε = 1 under demographic parity and equalized odds, λ ∈ {1, 3,
   8, 20}, seeds 0–2, 3 silos as ``convergence.py`` makes them, each noise; the test violation,
   the error, and the margin below the seed's λ = 0 mixing line (a private λ = 0 fit sends no
   h_W: the same model under both);
2. the acceptance's private fits with the rows (``convergence.py --private-only --no-eg --w-noise
   rows --runs docs/optimisation/convergence_runs_w_rows.csv``), scored beside today's.

    python docs/optimisation/w_noise_rows.py > docs/optimisation/w_noise_rows_log.txt   # ~8 min on 2 cores

Fits go to ``w_noise_rows.csv`` beside this script (an interrupted run resumes by attribute).
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

import pfair
import pfair.settings
from pfair.references import mixing_line

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import convergence as cv  # noqa: E402

RUNS = HERE / "w_noise_rows.csv"
ACCEPTANCE_ROWS = HERE / "convergence_runs_w_rows.csv"
ATTRIBUTES = [("compas", "sex"), ("german", "age"), ("credit_card", "age"), ("credit_card", "marriage"),
              ("bank", "age"), ("bank", "age3"), ("adult", "race"), ("compas", "race_all")]
LAMS = [1.0, 3.0, 8.0, 20.0]
NOISES = ("isotropic", "rows")


def fit(data, fed, fairness: str, lam: float, seed: int, noise: str) -> np.ndarray:
    """The test predictions of the default private fit with h_W's noise ``noise``."""
    before, pfair.settings.W_NOISE_ROWS = pfair.settings.W_NOISE_ROWS, noise == "rows"
    try:
        model = pfair.SteFFLe(fairness=fairness, lam=lam, epsilon=1.0, seed=seed, noise_seed=seed)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model.fit(fed, ledgers="new")
        return model.predict(data.X_test)
    finally:
        pfair.settings.W_NOISE_ROWS = before


def run_attribute(name: str, sensitive: str) -> pd.DataFrame:
    data = pfair.datasets.load(name, sensitive=sensitive)
    shares = np.sort(np.bincount(data.s_train) / len(data.s_train))
    out = []
    for fairness in cv.NOTIONS:
        for seed in cv.SEEDS:
            fed = cv.federation(data, seed)
            zero = fit(data, fed, fairness, 0.0, seed, "isotropic")
            line = mixing_line(data.y_test, zero, sensitive_features=data.s_test, fairness=fairness)
            for lam in LAMS:
                for noise in NOISES:
                    pred = fit(data, fed, fairness, lam, seed, noise)
                    err = float(np.mean(pred != data.y_test))
                    vio = cv.violation(fairness, data.y_test, pred, data.s_test)
                    out.append(dict(attribute=f"{name} by {sensitive}", rarest=shares[0], fairness=fairness,
                                    seed=seed, lam=lam, noise=noise, error=err, violation=vio,
                                    margin=line.margin(err, vio)))
    return pd.DataFrame(out)


def attribute_table(runs: pd.DataFrame) -> str:
    """Per attribute and notion, over λ and seeds: means of violation, error and margin, the fits
    below their line (of 12), and the largest per-seed range of the violation at one λ."""
    rows = ["| attribute | rarest group | fairness | violation | test error | margin below the line | "
            "fits below (of 12) | largest spread |", "|---|---|---|---|---|---|---|---|"]
    for (attr, fairness), g in runs.groupby(["attribute", "fairness"], sort=False):
        cell = {}
        for noise, h in g.groupby("noise"):
            spread = h.groupby("lam")["violation"].agg(lambda v: v.max() - v.min()).max()
            cell[noise] = (h["violation"].mean(), h["error"].mean(), h["margin"].mean(), int((h["margin"] > 0).sum()),
                           spread)
        i, r = cell["isotropic"], cell["rows"]
        rows.append(f"| {attr} | {g['rarest'].iloc[0]:.4f} | {fairness} | {i[0]:.3f} → {r[0]:.3f} | "
                    f"{i[1]:.3f} → {r[1]:.3f} | {i[2]:+.4f} → {r[2]:+.4f} | {i[3]} → {r[3]} | "
                    f"{i[4]:.3f} → {r[4]:.3f} |")
    return "\n".join(rows)


def lambda_table(runs: pd.DataFrame) -> str:
    """The mean test violation at each λ, isotropic → rows."""
    rows = ["| attribute | fairness | " + " | ".join(f"λ = {lam:g}" for lam in LAMS) + " |",
            "|---|---|" + "---|" * len(LAMS)]
    for (attr, fairness), g in runs.groupby(["attribute", "fairness"], sort=False):
        m = g.groupby(["lam", "noise"])["violation"].mean()
        rows.append(f"| {attr} | {fairness} | "
                    + " | ".join(f"{m[(lam, 'isotropic')]:.3f} → {m[(lam, 'rows')]:.3f}" for lam in LAMS) + " |")
    return "\n".join(rows)


def acceptance(path: Path) -> str:
    """The acceptance's criteria with its private fits replaced by those in ``path``."""
    today = cv.load_runs(cv.RUNS)
    with_rows = pd.concat([today[today["epsilon"] == "none"], cv.load_runs(path)], ignore_index=True)
    eg = pd.read_csv(cv.EG)
    lines = []
    for label, runs in (("Today's (one std on every row)", today), ("Row by row", with_rows)):
        text = cv.summary(cv.criteria(runs, eg)).splitlines()
        private = [line for line in text if line.startswith(("ε = 1", "Each"))]
        lines += [f"{label}:", ""] + [f"    {line}" for line in private if line] + [""]
    return "\n".join(lines).rstrip()


def main() -> None:
    for name, sensitive in ATTRIBUTES:
        done = pd.read_csv(RUNS) if RUNS.exists() else pd.DataFrame(columns=["attribute"])
        if f"{name} by {sensitive}" not in set(done["attribute"]):
            run_attribute(name, sensitive).to_csv(RUNS, mode="a", header=not RUNS.exists(), index=False)
    runs = pd.read_csv(RUNS)
    print("Attributes with a rare group, ε = 1, isotropic → rows (means over λ ∈ {1, 3, 8, 20} and seeds 0–2):")
    print()
    print(attribute_table(runs))
    print()
    print("Mean test violation by λ, isotropic → rows:")
    print()
    print(lambda_table(runs))
    print()
    print("The acceptance's private fits (convergence.py), scored with today's non-private fits:")
    print()
    print(acceptance(ACCEPTANCE_ROWS) if ACCEPTANCE_ROWS.exists() else "(not run)")


if __name__ == "__main__":
    main()
