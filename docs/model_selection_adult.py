"""The table of docs/model_selection.md, "Measured on Adult": one fit at the defaults against a
PrivateSearch over the default grid, both at epsilon = 1 per silo (the search's epsilon covers all
its candidates), lambda = 1 and with max_violation = 0.04, three partition seeds, secret noise (so a
rerun gives other figures of the same spread).

    python docs/model_selection_adult.py
"""

from __future__ import annotations

import warnings

import pfair
from pfair import metrics
from pfair.model_selection import PrivateSearch, default_grid


def main() -> None:
    warnings.simplefilter("ignore")
    data = pfair.datasets.load_adult()

    def scores(model) -> str:
        r = metrics.fairness_report(data.y_test, model.predict(data.X_test), sensitive_features=data.s_test)
        return f"{r['test_error']:.3f} | {r['demographic_parity_difference']:.3f}"

    print("| setting | seed | one fit: test error | DP | search: test error | DP | chosen | search's ε |")
    print("|---|---:|---:|---:|---:|---:|---|---:|")
    for label, kw in (("lam = 1", {}), ("max_violation = 0.04", {"max_violation": 0.04})):
        for seed in range(3):
            fed = pfair.Federation.partition(data, n_silos=3, heterogeneity=0.0, by="age", seed=seed)
            one = pfair.SteFFLe(epsilon=1.0, seed=seed, **kw).fit(fed, ledgers="new")
            est = pfair.SteFFLe(epsilon=1.0, seed=seed, **kw)
            search = PrivateSearch(est, default_grid(est, fed.sizes)).fit(fed, ledgers="new")
            chosen = ", ".join(f"{k}={v}" for k, v in search.best_params_.items())
            print(f"| {label} | {seed} | {scores(one)} | {scores(search)} | {chosen} | {search.epsilon_spent_:.3f} |")


if __name__ == "__main__":
    main()
