"""The acceptance check of the defaults: every bundled data set, ε = 1 per silo, 3 silos (a
fixed random assignment of the training split), every other setting at its default, λ in LAMS,
three noise seeds; test error against the constant predictor and DP violation per λ. Reporting
only: nothing here is selected on the test split (the defaults come from
``pfair.experiments.defaults`` on validation splits).

    python docs/optimisation/defaults_check.py --out docs/optimisation/defaults_check.csv
"""

from __future__ import annotations

import argparse
import warnings

import numpy as np
import pandas as pd

import pfair
from pfair import metrics

LAMS = (0.0, 1.0, 4.0, 16.0)
SEEDS = (0, 1, 2)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", nargs="+", default=None)
    ap.add_argument("--out", default=None)
    ap.add_argument("--set", nargs="*", default=[], help="extra settings name=value (floats)")
    args = ap.parse_args()
    extra = {k: float(v) for k, v in (item.split("=") for item in args.set)}
    rows = []
    for name in args.data or pfair.datasets.list_datasets():
        data = pfair.datasets.load(name)
        silos = np.random.default_rng(0).integers(0, 3, size=data.X_train.shape[0])
        for lam in LAMS:
            for seed in SEEDS:
                model = pfair.SteFFLe(lam=lam, epsilon=1.0, seed=seed, noise_seed=3000 + seed, track_history=False,
                                      **extra)
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    model.fit(data.X_train, data.y_train, sensitive_features=data.s_train, silos=silos)
                pred = model.predict(data.X_test)
                rows.append(dict(data=name, lam=lam, seed=seed, test_error=float(np.mean(pred != data.y_test)),
                                 demographic_parity_difference=metrics.demographic_parity_difference(data.y_test, pred,
                                                                                   sensitive_features=data.s_test),
                                 trivial=metrics.trivial_error(data.y_test)))
        df = pd.DataFrame(rows)
        print(df[df.data == name].groupby("lam")[["test_error", "demographic_parity_difference", "trivial"]].mean().round(4)
              .rename_axis(name).to_string(), flush=True)
    if args.out:
        pd.DataFrame(rows).to_csv(args.out, index=False, float_format="%.5g")


if __name__ == "__main__":
    main()
