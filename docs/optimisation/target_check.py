"""max_violation on Adult's training data: final violation, error and λ per ε over seeds.

Reproduces the table of docs/privacy.md ("The violation release of max_violation"):
``python docs/optimisation/target_check.py --seeds 6``. Demographic parity, target 0.05, 3 silos
(h = 0), 40 epochs, ``max_violation_epsilon_share=0.2``, the estimator's other defaults; the seed
drives the partition's batch order and (``noise_seed``) the noise.
"""

from __future__ import annotations

import argparse
import warnings

import numpy as np

from pfair import Federation, SteFFLe, datasets, metrics


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=6)
    ap.add_argument("--target", type=float, default=0.05)
    ap.add_argument("--epsilons", nargs="+", default=["none", "8", "3", "1"])
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    fed = Federation.for_dataset(datasets.load("adult"), 3, heterogeneity=0, seed=0)
    X, y, s = fed.pooled()
    print(f"constant predictor error: {metrics.trivial_error(y):.3f}")
    print("| ε | final violation | error | λ_ |\n|---|---|---|---|")
    for e in args.epsilons:
        eps = None if e == "none" else float(e)
        rows = []
        for seed in range(args.seeds):
            kw = dict(epsilon=eps, noise_seed=seed, max_violation_epsilon_share=0.2) if eps else {}
            m = SteFFLe(max_violation=args.target, epochs=40, seed=seed, **kw).fit(fed, ledgers="new") if eps else \
                SteFFLe(max_violation=args.target, epochs=40, seed=seed, epsilon=None).fit(fed)
            pred = m.predict(X)
            rows.append((metrics.demographic_parity_difference(y, pred, sensitive_features=s),
                         float(np.mean(pred != y)), m.lam_))
        r = np.array(rows)
        print(f"| {e} | {r[:, 0].min():.3f} – {r[:, 0].max():.3f} | {r[:, 1].min():.3f} – {r[:, 1].max():.3f} | "
              f"{r[:, 2].min():.2f} – {r[:, 2].max():.2f} |", flush=True)


if __name__ == "__main__":
    main()
