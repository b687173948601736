"""A sensitive attribute of many groups, some rare: at ε = 1, more λ need not mean a smaller gap.

The acceptance (``convergence.py``) runs binary attributes (``rare_groups.py``: a group rare inside
an equalized-odds block of one of them). Here the bundled tables with an attribute of four to six
groups, some of them rare: Adult by race (5 groups, the rarest 0.8 % and 1.0 % of the records),
COMPAS by race with every category (6, the rarest 0.3 % and 0.4 %), Credit Card by education (4,
the rarest 1.6 %), and Bank by age in five bins (the rarest 4.3 %) beside them. For each, default SteFFLe fits under demographic parity
(3 silos, seeds 0–2, λ ∈ {0, 1, 3, 8, 20}), non-private and at ε = 1, as ``convergence.py`` fits
them; the violation is the largest gap between any two groups' positive rates
(``pfair.metrics.demographic_parity_difference``), on the test split. Then, on Adult by race at
ε = 1, the diagnostic of ``noise_sources.py``: the same fits with h_W's or h_θ's noise standard
deviation multiplied by 10⁻³ after calibration (these runs do NOT deliver their ε; they say which
noise is at work).

    python docs/optimisation/many_groups.py      # about 5 minutes on 2 cores

Printout: ``many_groups_log.txt`` (docs/optimisation.md, "What the dynamics do not fix").
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import numpy as np

import pfair
import pfair.privacy.calibration as calibration
from pfair import _core
from pfair.references import mixing_line

sys.path.insert(0, str(Path(__file__).resolve().parent))
import convergence as cv  # noqa: E402
from noise_sources import _Scaled  # noqa: E402

TABLES = {"adult by race": ("adult", "race"), "compas by race_all": ("compas", "race_all"),
          "credit_card by education": ("credit_card", "education"), "bank by age5": ("bank", "age5")}
LAMS = (0.0, 1.0, 3.0, 8.0, 20.0)
FAIRNESS = "demographic_parity"
#: (label, factor on h_θ's noise std, factor on h_W's): the diagnostic on Adult by race at ε = 1.
DIAGNOSTIC = (("as released", 1.0, 1.0), ("h_W's noise × 0.001", 1.0, 1e-3), ("h_θ's noise × 0.001", 1e-3, 1.0))
DIAGNOSTIC_LAMS = (3.0, 8.0)


def fit(data, fed, lam: float, epsilon: float | None, seed: int) -> np.ndarray:
    """The predictions on the test split of the default fit (the model the fit returns)."""
    kw = dict(p_s="pooled") if epsilon is None else dict(noise_seed=seed)
    model = pfair.SteFFLe(fairness=FAIRNESS, lam=lam, epsilon=epsilon, seed=seed, **kw)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.fit(fed, ledgers="new")
    return model.predict(data.X_test)


def row(data, preds: list[np.ndarray], lines: list) -> tuple[float, float, int]:
    """Mean test error and violation over the seeds, and how many seeds lie below their line."""
    err = [float(np.mean(p != data.y_test)) for p in preds]
    vio = [cv.violation(FAIRNESS, data.y_test, p, data.s_test) for p in preds]
    below = sum(line.margin(e, v) > 0 for line, e, v in zip(lines, err, vio))
    return float(np.mean(err)), float(np.mean(vio)), below


def main() -> None:
    print("| table | smallest groups | regime | " + " | ".join(f"λ = {lam:g}" for lam in LAMS) + " |")
    print("|---|---|---|" + "---|" * len(LAMS))
    for label, (name, sensitive) in TABLES.items():
        data = pfair.datasets.load(name, sensitive=sensitive)
        shares = np.sort(np.bincount(data.s_train) / len(data.s_train))
        feds = [cv.federation(data, seed) for seed in cv.SEEDS]
        for epsilon in (None, 1.0):
            zero = [fit(data, fed, 0.0, epsilon, seed) for seed, fed in zip(cv.SEEDS, feds)]
            lines = [mixing_line(data.y_test, p, sensitive_features=data.s_test, fairness=FAIRNESS) for p in zero]
            cells = []
            for lam in LAMS:
                preds = zero if lam == 0 else [fit(data, fed, lam, epsilon, seed) for seed, fed in zip(cv.SEEDS, feds)]
                err, vio, below = row(data, preds, lines)
                cells.append(f"{vio:.3f} / {err:.3f}" + ("" if lam == 0 else f" ({below})"))
            print(f"| {label} | {shares[0]:.4f}, {shares[1]:.4f} | {'ε = 1' if epsilon else 'non-private'} | "
                  + " | ".join(cells) + " |", flush=True)
    print()
    print("Adult by race at ε = 1, h_θ's or h_W's noise scaled after calibration (not private):")
    print()
    print("| noise | " + " | ".join(f"λ = {lam:g}" for lam in DIAGNOSTIC_LAMS) + " |")
    print("|---|" + "---|" * len(DIAGNOSTIC_LAMS))
    data = pfair.datasets.load("adult", sensitive="race")
    feds = [cv.federation(data, seed) for seed in cv.SEEDS]
    zero = [fit(data, fed, 0.0, 1.0, seed) for seed, fed in zip(cv.SEEDS, feds)]
    lines = [mixing_line(data.y_test, p, sensitive_features=data.s_test, fairness=FAIRNESS) for p in zero]
    try:
        for name, theta, w in DIAGNOSTIC:
            calibration._core = _Scaled(theta, w)
            cells = []
            for lam in DIAGNOSTIC_LAMS:
                err, vio, below = row(data, [fit(data, fed, lam, 1.0, seed) for seed, fed in zip(cv.SEEDS, feds)], lines)
                cells.append(f"{vio:.3f} / {err:.3f} ({below})")
            print(f"| {name} | " + " | ".join(cells) + " |", flush=True)
    finally:
        calibration._core = _core


if __name__ == "__main__":
    main()
