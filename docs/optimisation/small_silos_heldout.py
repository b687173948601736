"""The floor of an epoch's rounds on tables the acceptance does not use (docs/optimisation.md, "A
run's rounds on small tables"): Adult, Law School and Credit Card subsampled to 2,380 training
records (seed 0; the size of a held-out mortgage table), German with s = age and COMPAS with s = sex,
3 silos drawn at random per seed, non-private, demographic parity, λ ∈ {0, 1, 3, 8, 20}, seeds 0–2,
under ``ROUNDS_PER_EPOCH_FLOOR`` = 1 (the rule before it) and 16 (today's). Per table and rule: the
λ = 0 model's test error and violation against scikit-learn's logistic regression (``lr``), the λ = 20
model's, and the gap of SteFFLe's front (the lower hull of its mean points over λ and the constant
predictor) above fairlearn's ExponentiatedGradient at bounds 0.01, 0.02, 0.05 and 0.1, at
fairlearn's violation (negative: SteFFLe below).

    python docs/optimisation/small_silos_heldout.py    # about 10 minutes on 2 cores; printout small_silos_heldout_log.txt
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
from sklearn.linear_model import LogisticRegression

import pfair
import pfair.settings
from pfair.experiments.reference import ExponentiatedGradientLR

sys.path.insert(0, str(Path(__file__).resolve().parent))
import convergence as cv  # noqa: E402

warnings.simplefilter("ignore")


def sub(name: str, sens: str | None, n: int | None, seed: int = 0) -> SimpleNamespace:
    """A bundled table's splits, its training split subsampled to ``n`` records (None: whole)."""
    d0 = pfair.datasets.load(name, sensitive=sens) if sens else pfair.datasets.load(name)
    d = SimpleNamespace(X_test=d0.X_test, y_test=d0.y_test, s_test=d0.s_test,
                        X_train=d0.X_train, y_train=d0.y_train, s_train=d0.s_train)
    if n is None:
        return d
    idx = np.sort(np.random.default_rng(seed).choice(len(d.y_train), size=n, replace=False))
    d.X_train, d.y_train, d.s_train = d.X_train[idx], d.y_train[idx], d.s_train[idx]
    return d


#: label → (bundled table, sensitive attribute or None for its default, training records or None: whole).
SETTINGS = {"adult 2380 sex": ("adult", None, 2380), "law 2380 race": ("law_school", None, 2380),
            "credit 2380 sex": ("credit_card", None, 2380), "german age": ("german", "age", None),
            "compas sex": ("compas", "sex", None)}
LAMS = [0.0, 1.0, 3.0, 8.0, 20.0]
BOUNDS = [0.01, 0.02, 0.05, 0.1]
FAIRNESS = "demographic_parity"


def main() -> None:
    today = pfair.settings.ROUNDS_PER_EPOCH_FLOOR
    for label, (name, sens, n) in SETTINGS.items():
        d = sub(name, sens, n)
        lr = LogisticRegression(max_iter=5000).fit(d.X_train, d.y_train)
        lr_err = np.mean(lr.predict(d.X_test) != d.y_test)
        const = pfair.metrics.trivial_error(d.y_test)
        eg = []
        for b in BOUNDS:
            m = ExponentiatedGradientLR(fairness=FAIRNESS, difference_bound=b).fit(
                d.X_train, d.y_train, sensitive_features=d.s_train)
            p = m.predict(d.X_test)
            eg.append((np.mean(p != d.y_test), cv.violation(FAIRNESS, d.y_test, p, d.s_test)))
        for floor in (1, today):
            pfair.settings.ROUNDS_PER_EPOCH_FLOOR = floor
            pts = []
            for lam in LAMS:
                es, vs = [], []
                for seed in (0, 1, 2):
                    silos = np.random.default_rng(seed).integers(0, 3, size=len(d.y_train))
                    m = pfair.SteFFLe(epsilon=None, lam=lam, p_s="pooled", seed=seed).fit(
                        d.X_train, d.y_train, sensitive_features=d.s_train, silos=silos)
                    p = m.predict(d.X_test)
                    es.append(np.mean(p != d.y_test))
                    vs.append(cv.violation(FAIRNESS, d.y_test, p, d.s_test))
                pts.append(dict(lam=lam, error=np.mean(es), violation=np.mean(vs)))
            P = pd.DataFrame(pts)
            gaps = [cv.hull_error_at(P, v, const) - e for e, v in eg]
            print(f"{label:16s} floor={floor:2d} lr={lr_err:.3f} const={const:.3f} lam0={P.error[0]:.3f}/"
                  f"{P.violation[0]:.3f} lam20={P.error.iloc[-1]:.3f}/{P.violation.iloc[-1]:.3f} EG gaps "
                  + " ".join(f"{g:+.3f}" for g in gaps), flush=True)
        pfair.settings.ROUNDS_PER_EPOCH_FLOOR = today


if __name__ == "__main__":
    main()
