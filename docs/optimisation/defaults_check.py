"""The acceptance check of the defaults: every bundled data set, 3 silos (a fixed random
assignment of the training split), every other setting at its default, at ε = 1 per silo and
without privacy, λ in LAMS, three seeds (batch order, and the noise when private); test error
against the constant predictor and DP violation per λ. Reporting only: nothing here is selected
on the test split (the defaults come from ``pfair.experiments.defaults`` on validation splits).

    python docs/optimisation/defaults_check.py --out docs/optimisation/defaults_check.csv
    python docs/optimisation/defaults_check.py --adult-grid --out docs/optimisation/defaults_adult_grid.csv

``--adult-grid``: non-private Adult at λ = 0, the same silos and seeds, over the protocol's stage-1
grid of batch size × ``lr_theta`` × epochs; prints the defaults' mean test error against the best
grid point's (issue: "within 0.005 test error of the best batch/step setting").
"""

from __future__ import annotations

import argparse
import warnings

import numpy as np
import pandas as pd

import pfair
from pfair import metrics
from pfair.validation import training_sizes

LAMS = (0.0, 1.0, 4.0, 16.0)
SEEDS = (0, 1, 2)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", nargs="+", default=None)
    ap.add_argument("--epsilons", nargs="+", default=["1", "none"], help="per-silo ε values; none = non-private")
    ap.add_argument("--out", default=None)
    ap.add_argument("--set", nargs="*", default=[], help="extra settings name=value (floats)")
    ap.add_argument("--adult-grid", action="store_true", help="non-private Adult at λ = 0 over the stage-1 grid")
    args = ap.parse_args()
    if args.adult_grid:
        return adult_grid(args.out)
    extra = {k: float(v) for k, v in (item.split("=") for item in args.set)}
    rows = []
    for name in args.data or pfair.datasets.list_datasets():
        data = pfair.datasets.load(name)
        silos = np.random.default_rng(0).integers(0, 3, size=data.X_train.shape[0])
        for eps_text in args.epsilons:
            epsilon = None if eps_text == "none" else float(eps_text)
            for lam in LAMS:
                for seed in SEEDS:
                    noise = {} if epsilon is None else {"noise_seed": 3000 + seed}
                    model = pfair.SteFFLe(lam=lam, epsilon=epsilon, seed=seed, track_history=False, **noise, **extra)
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        model.fit(data.X_train, data.y_train, sensitive_features=data.s_train, silos=silos)
                        # the batch the fit ran: "auto" resolved for the silos' training shares
                        train = training_sizes(np.bincount(silos), model.validation_share)
                        batch = model.settings().for_sizes(train).batch_size
                    pred = model.predict(data.X_test)
                    rows.append(dict(data=name, epsilon=eps_text, lam=lam, seed=seed, batch_size=batch,
                                     test_error=float(np.mean(pred != data.y_test)),
                                     demographic_parity_difference=metrics.demographic_parity_difference(
                                         data.y_test, pred, sensitive_features=data.s_test),
                                     trivial=metrics.trivial_error(data.y_test)))
        df = pd.DataFrame(rows)
        print(df[df.data == name].groupby(["epsilon", "lam"])[["batch_size", "test_error",
                                                              "demographic_parity_difference", "trivial"]]
              .mean().round(4).rename_axis([name, "lam"]).to_string(), flush=True)
    if args.out:
        pd.DataFrame(rows).to_csv(args.out, index=False, float_format="%.5g")


def adult_grid(out: str | None) -> None:
    """Non-private Adult, λ = 0: test error at the defaults and at every stage-1 grid point."""
    from pfair.experiments.defaults import STAGE1, grid
    from pfair.settings import SteFFLeSettings
    from pfair.validation import training_sizes

    data = pfair.datasets.load("adult")
    silos = np.random.default_rng(0).integers(0, 3, size=data.X_train.shape[0])
    rows = []
    # Each silo holds out validation_share of its records: the batch fits in the rest.
    smallest = int(min(training_sizes(np.bincount(silos), SteFFLeSettings().validation_share)))
    for cfg in [{}] + grid(STAGE1):
        if cfg:  # as the protocol does: a batch larger than a silo's training share is capped to it
            cfg = {**cfg, "batch_size": min(cfg["batch_size"], smallest)}
        for seed in SEEDS:
            model = pfair.SteFFLe(lam=0.0, epsilon=None, seed=seed, track_history=False, **cfg)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                model.fit(data.X_train, data.y_train, sensitive_features=data.s_train, silos=silos)
                st = model.settings().for_sizes(np.bincount(silos))
            rows.append(dict(config="grid" if cfg else "defaults", batch_size=st.batch_size, lr_theta=st.lr_theta,
                             epochs=st.epochs, seed=seed,
                             test_error=float(np.mean(model.predict(data.X_test) != data.y_test))))
    df = pd.DataFrame(rows)
    mean = df.groupby(["config", "batch_size", "lr_theta", "epochs"])["test_error"].mean()

    def point(key: tuple) -> str:
        return f"batch {int(key[0])}, lr_theta {float(key[1]):g}, {int(key[2])} epochs"

    default, best = mean.loc["defaults"], mean.loc["grid"]
    print(f"defaults ({point(default.index[0])}): test error {default.iloc[0]:.4f}; best grid point "
          f"({point(best.idxmin())}): {best.min():.4f}; gap {default.iloc[0] - best.min():.4f} "
          f"(mean of {len(SEEDS)} seeds)")
    if out:
        df.to_csv(out, index=False, float_format="%.5g")


if __name__ == "__main__":
    main()
