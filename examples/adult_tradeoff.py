"""Fairness/accuracy trade-off of SteFFLe on UCI Adult (N = 3 silos, h = 0), non-private and ε = 1.

Prints a Markdown table of mean test error, demographic parity and equalized odds difference over
seeds for each λ; the figures in docs/results.md come from this script:

    python examples/adult_tradeoff.py --seeds 3
"""

from __future__ import annotations

import argparse

import numpy as np

import pfair
from pfair import metrics


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--lams", type=float, nargs="+", default=[0.0, 0.5, 1.0, 1.5, 2.0])
    ap.add_argument("--epsilons", type=str, nargs="+", default=["none", "1"])
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--lr-theta", type=float, default=0.25)
    args = ap.parse_args()
    data = pfair.datasets.load_adult()
    trivial = metrics.trivial_error(data.y_test)
    print(f"Adult: {data.X_train.shape[0]} training / {data.X_test.shape[0]} test records; trivial error {trivial:.4f}; "
          f"batch {args.batch_size}, lr_theta {args.lr_theta}\n")
    print("| ε | λ | test error | demographic_parity_difference | equalized_odds_difference | max ε spent |")
    print("|---|---|---|---|---|---|")
    for eps_text in args.epsilons:
        eps = None if eps_text == "none" else float(eps_text)
        for lam in args.lams:
            rows = []
            for seed in range(args.seeds):
                fed = pfair.Federation.partition(data, 3, heterogeneity=0.0, by="age", seed=seed)
                model = pfair.SteFFLe(lam=lam, epsilon=eps, seed=seed, batch_size=args.batch_size,
                                      lr_theta=args.lr_theta, track_history=False).fit(fed)
                r = metrics.fairness_report(data.y_test, model.predict(data.X_test), sensitive_features=data.s_test)
                spent = model.epsilon_spent_ if eps is not None else float("nan")
                rows.append((r["test_error"], r["demographic_parity_difference"], r["equalized_odds_difference"], spent))
            m = np.mean(rows, axis=0)
            sd = np.std(rows, axis=0)
            spent = "—" if eps is None else f"{m[3]:.4f}"
            print(f"| {eps_text} | {lam:g} | {m[0]:.4f} ± {sd[0]:.4f} | {m[1]:.4f} ± {sd[1]:.4f} | "
                  f"{m[2]:.4f} ± {sd[2]:.4f} | {spent} |")


if __name__ == "__main__":
    main()
