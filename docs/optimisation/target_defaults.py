"""The run of a private fit with a fairness target, chosen on validation splits (docs/optimisation.md).

A fit with ``max_violation`` ends at a λ of about 5 on Adult, above the λ ∈ {1, 2, 8} the defaults
protocol scores its private regime at, and the noise on the fairness term grows with λ while the
noise on a batch mean falls as 1/m (shuffled epochs cost the same ε at any batch). This script
scores the batch and step of target fits the way the defaults protocol scores everything else: on
the protocol's validation split of each bundled data set (``pfair.experiments.defaults.split``,
never the test split) and of two synthetic tables whose dense features carry s
(``private_defaults.part``: ``make_synthetic(60000, 40, dependence=D)``, an 80/20 split of its
training part), ε = 1 per silo, seeds 0-2, the score being ``validation error / constant
predictor's error + max(0, validation violation − t)`` (accuracy, with the target's excess
charged), mean over seeds and then over data sets.

The candidates: a fixed batch (1024, 2048, 4096) and step (0.5 to 4), which run 20 epochs with the
fixed clip norm 0.25 and the step ×0.8 every 10 epochs (what a stated batch runs), against
``batch_size="auto"`` (the row ``auto``): today's default, the private run a fixed λ takes, stretched
to its batch (up to 8,192; ``lr_theta``, epochs and decay period times batch / 1024), with the
adaptive clip and the step ×0.4 every quarter of the run. Before this comparison ``"auto"`` meant
batch 1024 at step 2.0 for a target (the row ``1024 | 2``).

    python docs/optimisation/target_defaults.py                                  # DP, t = 0.04
    python docs/optimisation/target_defaults.py --fairness equalized_odds --target 0.05

Printouts: ``target_defaults_log.txt`` (demographic parity) and ``target_defaults_eo_log.txt``.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

from pfair import SteFFLe, metrics

sys.path.insert(0, str(Path(__file__).resolve().parent))
from private_defaults import part  # noqa: E402

CONFIGS = [dict(batch_size=b, lr_theta=lr) for b in (1024, 2048, 4096) for lr in (0.5, 1.0, 2.0, 4.0)]
#: The package's default (``batch_size="auto"``, every other setting at its default).
AUTO = dict(batch_size="auto", lr_theta="auto")
METRICS = {"demographic_parity": metrics.demographic_parity_difference,
           "equalized_odds": metrics.equalized_odds_difference}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", nargs="+", default=["adult", "compas", "credit_card", "law_school", "bank",
                                                   "synthetic1", "synthetic2"])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--fairness", default="demographic_parity", choices=sorted(METRICS))
    ap.add_argument("--target", type=float, default=0.04)
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    rows = []
    for name in args.data:
        p = part(name)
        sizes = np.bincount(p["silos"])
        for cfg in [*CONFIGS, AUTO]:
            for seed in range(args.seeds):
                kw = {} if cfg is AUTO else dict(batch_size=int(min(cfg["batch_size"], 0.9 * sizes.min())),
                                                 lr_theta=cfg["lr_theta"])
                m = SteFFLe(epsilon=1.0, fairness=args.fairness, max_violation=args.target, seed=seed,
                            noise_seed=1000 + seed, track_history=False, **kw)
                m.fit(p["X"], p["y"], sensitive_features=p["s"], silos=p["silos"])
                pred = m.predict(p["Xv"])
                err = float(np.mean(pred != p["yv"]))
                v = METRICS[args.fairness](p["yv"], pred, sensitive_features=p["sv"])
                rows.append(dict(data=name, batch_size=str(cfg["batch_size"]), lr_theta=str(cfg["lr_theta"]),
                                 seed=seed, val_error=err, val_v=v,
                                 score=err / metrics.trivial_error(p["yv"]) + max(0.0, v - args.target)))
        print(f"  {name} done", flush=True)
    df = pd.DataFrame(rows)
    per = df.groupby(["batch_size", "lr_theta", "data"], sort=False)[["score", "val_error", "val_v"]].mean()
    table = per["score"].unstack("data")[args.data]
    table["mean"] = table.mean(axis=1)
    base = table.loc[("auto", "auto")]
    diff = table[args.data].sub(base[args.data], axis=1)
    table["vs auto"] = diff.mean(axis=1)
    table["s.e."] = diff.std(axis=1, ddof=1) / np.sqrt(len(args.data))
    print(f"{args.fairness}, t = {args.target:g}, ε = 1, seeds 0-{args.seeds - 1}: score (lower is better)\n")
    print("| batch | lr_theta | " + " | ".join(args.data) + " | mean score | vs auto | s.e. |")
    print("|---|---|" + "---|" * (len(args.data) + 3))
    for (b, lr), r in table.iterrows():
        print(f"| {b} | {lr} | " + " | ".join(f"{r[c]:.3f}" for c in args.data)
              + f" | {r['mean']:.3f} | {r['vs auto']:+.3f} | {r['s.e.']:.3f} |")
    best = table["mean"].idxmin()
    print(f"\nbest: batch_size {best[0]}, lr_theta {best[1]} (mean score {table['mean'].min():.3f}; auto "
          f"{base['mean']:.3f})")


if __name__ == "__main__":
    main()
