"""How much of a private fit's fairness gap is the clip norm's, and how much the noise's.

At λ = 8, seed 0, for a table whose features carry s (``make_synthetic(60000, 40, silos=3,
dependence=2, seed=0)``, the acceptance's synthetic 2) and for Adult, under demographic parity and
equalized odds: the test error and violation of a default SteFFLe fit with ``clip`` ∈ {0.25 (the
default), 1, 4} at ε ∈ {10⁴, 10, 3, 1} per silo (ε = 10⁴: the clipping alone, the noise negligible)
beside the non-private fit (nothing clipped) and the margin below the λ = 0 model's mixing line
(positive: below it, better than mixing the λ = 0 model with the constant predictor). Then, at the
non-private λ = 8 solution, the quantiles over the training records of the s-free bound
B_i = ‖x̃_i‖ · max_s ‖J_i (2 p_s^{-1/2} W[s, :])‖ of ‖b_i‖ (docs/privacy.md, "What leaves a silo"),
which is what a clip norm cuts. Printout: ``docs/optimisation/clip_bias_log.txt``.

    python docs/optimisation/clip_bias.py      # ~1 min on 2 cores
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import convergence as cv  # noqa: E402  (the acceptance's tables, federations and fits)

from pfair.references import mixing_line  # noqa: E402

LAM = 8.0
CLIPS = (0.25, 1.0, 4.0)
EPSILONS = (1e4, 10.0, 3.0, 1.0)


def bound_quantiles(model, data, fairness: str) -> tuple[float, float]:
    """Median and 90th percentile of B_i over the training records (binary labels, l = 2: one
    free logit, so J_i u = f_i (1 − f_i)(u_1 − u_0) with f_i = P(y = 1 | x_i)). Record i's block is
    its label under equalized odds and the single block under demographic parity; B_i takes the
    max over the groups s of that block, so it does not read s_i."""
    X = data.X_train.toarray() if hasattr(data.X_train, "toarray") else np.asarray(data.X_train, dtype=float)
    x_norm = np.sqrt(1.0 + np.sum(X * X, axis=1))  # x̃ = (x, 1)
    f = model.predict_proba(X)[:, 1]
    W = np.asarray(model.W_, dtype=float)
    W = W.reshape((-1,) + W.shape[-2:])  # (blocks, groups, classes)
    p = np.asarray(model.group_proportions_, dtype=float).reshape(W.shape[0], W.shape[1])
    u = (2.0 / np.sqrt(p) * np.abs(W[:, :, 1] - W[:, :, 0])).max(axis=1)  # per block, max over s
    block = np.asarray(data.y_train, dtype=int) if fairness == "equalized_odds" else np.zeros(X.shape[0], dtype=int)
    b = x_norm * f * (1.0 - f) * u[block]
    return float(np.quantile(b, 0.5)), float(np.quantile(b, 0.9))


def main() -> None:
    warnings.simplefilter("ignore")
    print(f"λ = {LAM:g}, seed 0; margin > 0: below the λ = 0 model's mixing line\n")
    print("| table | fairness | clip | ε | test error | violation | margin |")
    print("|---|---|---|---|---|---|---|")
    quantiles = []
    for name in ("synthetic2", "adult"):
        data = cv.load(name)
        for fairness in ("demographic_parity", "equalized_odds"):
            cv.EXTRA.clear()
            base = cv.fit_one(data, fairness, 0.0, None, 0)
            line = mixing_line(data.y_test, base.pop("pred"), sensitive_features=data.s_test, fairness=fairness)
            r = cv.fit_one(data, fairness, LAM, None, 0)
            r.pop("pred")
            print(f"| {name} | {fairness} | none | none | {r['error']:.3f} | {r['violation']:.3f} | "
                  f"{line.margin(r['error'], r['violation']):+.3f} |")
            for clip in CLIPS:
                for eps in EPSILONS:
                    cv.EXTRA.clear()
                    cv.EXTRA["clip"] = clip
                    r = cv.fit_one(data, fairness, LAM, eps, 0)
                    r.pop("pred")
                    print(f"| {name} | {fairness} | {clip:g} | {eps:g} | {r['error']:.3f} | {r['violation']:.3f} | "
                          f"{line.margin(r['error'], r['violation']):+.3f} |", flush=True)
            import pfair

            model = pfair.SteFFLe(fairness=fairness, lam=LAM, p_s="pooled", seed=0)
            model.fit(cv.federation(data, 0))
            quantiles.append((name, fairness, *bound_quantiles(model, data, fairness)))
    cv.EXTRA.clear()
    print("\nB_i at the non-private λ = 8 solution:\n")
    print("| table | fairness | median | 90th percentile |")
    print("|---|---|---|---|")
    for name, fairness, q50, q90 in quantiles:
        print(f"| {name} | {fairness} | {q50:.2f} | {q90:.2f} |")


if __name__ == "__main__":
    main()
