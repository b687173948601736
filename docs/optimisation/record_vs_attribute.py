"""Record mode against attribute mode at the same ε (docs/optimisation.md, section 5).

For each mode and batch size, fit SteFFLe at ε = 1 per silo on the protocol's train part
(``pfair.experiments.defaults.split``: 80 % of the training split, 3 silos), for λ in LAMS and
two noise seeds. Each mode's batch size is chosen on the validation part (the protocol's score);
the table reports that choice on the test split.

    python docs/optimisation/record_vs_attribute.py --data adult credit_card
"""

from __future__ import annotations

import argparse
import warnings

import numpy as np
import pandas as pd

import pfair
from pfair import metrics
from pfair.experiments.defaults import split

LAMS = (0.0, 2.0, 8.0)
SEEDS = (0, 1)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", nargs="+", default=["adult", "credit_card"])
    ap.add_argument("--batches", type=int, nargs="+", default=[256, 1024, 4096])
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    rows = []
    for name in args.data:
        part = split(name)
        data = pfair.datasets.load(name)
        trivial_v, trivial_t = metrics.trivial_error(part["yv"]), metrics.trivial_error(data.y_test)
        for protect in ("attribute", "record"):
            for batch in args.batches:
                for lam in LAMS:
                    for seed in SEEDS:
                        model = pfair.SteFFLe(lam=lam, epsilon=1.0, protect=protect, batch_size=batch, seed=seed,
                                              noise_seed=2000 + seed, track_history=False)
                        with warnings.catch_warnings():
                            warnings.simplefilter("ignore")
                            model.fit(part["X"], part["y"], sensitive_features=part["s"], silos=part["silos"])
                        pv, pt = model.predict(part["Xv"]), model.predict(data.X_test)
                        rows.append(dict(
                            data=name, protect=protect, batch=batch, lam=lam, seed=seed,
                            z=float(model.privacy_report_["noise_multiplier"].max()),
                            eps_spent=model.epsilon_spent_,
                            val_error=float(np.mean(pv != part["yv"])),
                            val_dp=metrics.demographic_parity_difference(part["yv"], pv, sensitive_features=part["sv"]),
                            test_error=float(np.mean(pt != data.y_test)),
                            test_dp=metrics.demographic_parity_difference(data.y_test, pt, sensitive_features=data.s_test),
                            trivial_val=trivial_v, trivial_test=trivial_t))
                print(f"{name} {protect} batch {batch} done", flush=True)
    df = pd.DataFrame(rows)
    if args.out:
        df.to_csv(args.out, index=False, float_format="%.5g")
    df["score"] = df.val_error / df.trivial_val + df.val_dp
    for (name, protect), sub in df.groupby(["data", "protect"]):
        best = sub.groupby("batch")["score"].mean().idxmin()
        sel = sub[sub.batch == best].groupby("lam")[["test_error", "test_dp", "z", "eps_spent"]].mean()
        print(f"\n{name}, protect={protect}: batch {best} (chosen on validation); test, mean of {len(SEEDS)} seeds; "
              f"constant predictor error {sub.trivial_test.iloc[0]:.4f}")
        print(sel.round(4).to_string())


if __name__ == "__main__":
    main()
