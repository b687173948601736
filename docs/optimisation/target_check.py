"""max_violation on the bundled data: the test violation and error of the returned model over seeds.

Reproduces the table of docs/privacy.md ("Validation inside the silos, and a fairness target that
holds"): ``python docs/optimisation/target_check.py``. Demographic parity, target 0.04, 3 silos
(h = 0, the data set's train split), the estimator's defaults otherwise; the seed drives the batch
order, the held-out share and (``noise_seed``) the noise. Each row: the range over seeds of the test
set's demographic-parity difference and error of the model the fit returned, the constant
predictor's test error, and how many fits warned that no checkpoint met the target or beat the
constant predictor.
"""

from __future__ import annotations

import argparse
import json
import warnings

import numpy as np

from pfair import Federation, SteFFLe, datasets, metrics
from pfair.exceptions import ConvergenceWarning


def run(name: str, eps: float | None, seed: int, target: float, **kw: object) -> tuple[float, float, bool]:
    """(test violation, test error, warned) of one fit."""
    data = datasets.load(name)
    fed = Federation.for_dataset(data, 3, heterogeneity=0, seed=0)
    extra = dict(epsilon=eps, noise_seed=seed) if eps is not None else dict(epsilon=None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        m = SteFFLe(max_violation=target, seed=seed, **extra, **kw).fit(fed, ledgers="new" if eps else None)
    pred = m.predict(data.X_test)
    warned = any(issubclass(w.category, ConvergenceWarning) for w in caught)
    return (metrics.demographic_parity_difference(data.y_test, pred, sensitive_features=data.s_test),
            float(np.mean(pred != data.y_test)), warned)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--target", type=float, default=0.04)
    ap.add_argument("--datasets", nargs="+", default=["adult", "compas", "credit_card"])
    ap.add_argument("--epsilons", nargs="+", default=["none", "3", "1"])
    ap.add_argument("--params", default="{}", help="JSON of SteFFLe parameters to override (default: none)")
    args = ap.parse_args()
    kw = json.loads(args.params)
    print("| data | ε | test violation | test error | constant predictor | warned |\n|---|---|---|---|---|---|")
    for name in args.datasets:
        data = datasets.load(name)
        constant = metrics.trivial_error(data.y_test)
        for e in args.epsilons:
            eps = None if e == "none" else float(e)
            r = [run(name, eps, seed, args.target, **kw) for seed in range(args.seeds)]
            v, err = np.array([x[0] for x in r]), np.array([x[1] for x in r])
            print(f"| {name} | {e} | {v.min():.3f} – {v.max():.3f} | {err.min():.3f} – {err.max():.3f} | "
                  f"{constant:.3f} | {sum(x[2] for x in r)} of {len(r)} |", flush=True)


if __name__ == "__main__":
    main()
