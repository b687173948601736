"""A private fairness target against non-private FERMI at the same test violation.

Reproduces the gap table of docs/privacy.md ("Validation inside the silos, and a fairness target
that holds"): ``python docs/optimisation/target_gap.py``. For each seed, SteFFLe with
``max_violation=t`` at the given ε (demographic parity, 3 silos, h = 0, the estimator's defaults
otherwise) returns a model with test violation v and test error e. Non-private FERMI
(``epsilon=None``, the same defaults, the same silos) is fitted over a grid of λ with the same seeds;
its *front* is the mean test error against the mean test violation over the seeds, one point per λ,
made monotone (the least error at a violation ≤ v) and read between its points by linear
interpolation. The gap of a private run is e − front(v): what the privacy costs at the violation the
run reached. A run fairer than the front's fairest point is compared with that point.
"""

from __future__ import annotations

import argparse
import warnings

import numpy as np

from pfair import Federation, SteFFLe, datasets, metrics

LAMS = (0.0, 0.5, 1.0, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 20.0, 40.0, 100.0)


def figures(model: SteFFLe, data: datasets.Dataset) -> tuple[float, float]:
    """(test demographic-parity difference, test error) of a fitted model."""
    pred = model.predict(data.X_test)
    return (float(metrics.demographic_parity_difference(data.y_test, pred, sensitive_features=data.s_test)),
            float(np.mean(pred != data.y_test)))


def front(points: list[tuple[float, float]]) -> tuple[np.ndarray, np.ndarray]:
    """The monotone front of (violation, error) points: sorted by violation, each error the least
    at that violation or below."""
    v, e = np.array(sorted(points)).T
    return v, np.minimum.accumulate(e)


def at(v_front: np.ndarray, e_front: np.ndarray, v: float) -> float:
    """The front's error at violation v (linear between its points, flat beyond its ends)."""
    return float(np.interp(v, v_front, e_front))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", default="adult")
    ap.add_argument("--epsilon", type=float, default=1.0)
    ap.add_argument("--target", type=float, default=0.04)
    ap.add_argument("--seeds", type=int, default=5)
    args = ap.parse_args()
    data = datasets.load(args.dataset)
    fed = Federation.for_dataset(data, 3, heterogeneity=0, seed=0)
    warnings.simplefilter("ignore")
    by_lam = []
    for lam in LAMS:
        runs = [figures(SteFFLe(epsilon=None, lam=lam, seed=seed).fit(fed), data) for seed in range(args.seeds)]
        by_lam.append(tuple(np.mean(runs, axis=0)))
    v_front, e_front = front(by_lam)
    print(f"Non-private FERMI on {args.dataset}, mean over {args.seeds} seeds (λ: test violation, test error): "
          + ", ".join(f"{lam:g}: {v:.3f}, {e:.4f}" for lam, (v, e) in zip(LAMS, by_lam)))
    print(f"\n| seed | test violation | test error | non-private FERMI at that violation | gap |\n|---|---|---|---|---|")
    gaps = []
    for seed in range(args.seeds):
        m = SteFFLe(epsilon=args.epsilon, max_violation=args.target, seed=seed, noise_seed=seed).fit(fed, ledgers="new")
        v, e = figures(m, data)
        ref = at(v_front, e_front, v)
        gaps.append(e - ref)
        print(f"| {seed} | {v:.3f} | {e:.4f} | {ref:.4f} | {e - ref:+.4f} |", flush=True)
    print(f"\nε = {args.epsilon:g}, t = {args.target:g}: gap {min(gaps):+.4f} … {max(gaps):+.4f}, "
          f"mean {np.mean(gaps):+.4f}")


if __name__ == "__main__":
    main()
