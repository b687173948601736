"""The batch and step of a private fit that sends ψ, chosen on validation splits at the λ a user picks.

The defaults protocol (``python -m pfair.experiments.defaults``, docs/optimisation.md section 4)
scored private fits at λ ∈ {1, 2, 8}, with the θ step constant in λ. Under the scaled step
(section 7) θ's step at λ is ``lr_theta / max(1, λ)``, and in a private fit the fairness term's
noise, not the dynamics, becomes what limits it (section 7, "What the dynamics do not fix"). In
attribute mode ε depends on how many rounds a record is in (one an epoch), not on the batch size m,
while the noise on a batch mean falls as 1/m: over an epoch the noise on θ's path grows as
√(n/m)·σ/m·η and its drift as (n/m)·η, so their ratio improves as √m when the step η grows with m
(Goyal et al., "Accurate, Large Minibatch SGD", 2017, for the linear scaling of the step with the
batch). This script scores the private regime on the protocol's validation splits (the same score:
validation error over the constant predictor's plus the validation demographic-parity violation,
mean over seeds and λ, then over data sets) over batch ∈ {1024, 4096, 16384} × lr_theta ∈
{0.5, 1, 2, 4, 8} at λ ∈ {1, 2, 8, 40}, on the bundled tables and on three synthetic tables whose
features carry s strongly (``make_synthetic(60000, 40, silos=3, dependence=D, seed=1)``: another
draw than the acceptance's seed 0). Printout: ``docs/optimisation/private_defaults_log.txt``; runs:
``private_defaults.csv``.

    python docs/optimisation/private_defaults.py            # ~20 min on 2 cores
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import pandas as pd

from pfair.experiments.defaults import BASE1, N_SILOS, SEEDS, evaluate, split

HERE = Path(__file__).resolve().parent
DATASETS = ["adult", "bank", "census_kdd", "compas", "credit_card", "german", "law_school",
            "synthetic1", "synthetic2", "synthetic3"]
BATCHES = (1024, 4096, 16384)
STEPS = (0.5, 1.0, 2.0, 4.0, 8.0)
LAMS = (1.0, 2.0, 8.0, 40.0)


def part(name: str, n: int = 60000, d: int = 40) -> dict:
    """The protocol's split of a bundled table, or a synthetic table's 80/20 split of its training
    part (``make_synthetic(n, d, silos=3, dependence=D, seed=1)`` for ``synthetic<D>``)."""
    if not name.startswith("synthetic"):
        return split(name)
    import pfair

    data = pfair.datasets.make_synthetic(n, d, silos=N_SILOS, dependence=float(name[len("synthetic"):]), seed=1)
    rng = np.random.default_rng(0)
    idx = rng.permutation(data.X_train.shape[0])
    va, tr = idx[: idx.size // 5], idx[idx.size // 5:]
    X, y, s = data.X_train, data.y_train, data.s_train
    return dict(name=name, X=X[tr], y=y[tr], s=s[tr], silos=rng.integers(0, N_SILOS, size=tr.size),
                Xv=X[va], yv=y[va], sv=s[va])


def capped(p: dict) -> int:
    """The largest batch the protocol's ``evaluate`` runs on these silos (their smallest training share)."""
    from pfair.settings import SteFFLeSettings
    from pfair.validation import training_sizes

    sizes = np.bincount(p["silos"], minlength=N_SILOS)
    return int(min(training_sizes(sizes, SteFFLeSettings().validation_share)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--datasets", nargs="+", default=DATASETS)
    ap.add_argument("--out", default=str(HERE / "private_defaults.csv"))
    ap.add_argument("--table-only", action="store_true", help="read --out and print the table")
    args = ap.parse_args()
    if args.table_only:
        df = pd.read_csv(args.out)
        df["score"] = df["val_error"] / df["trivial"] + df["val_dp"]
        table(df)
        return
    t0 = time.time()
    rows = []
    for name in args.datasets:
        p = part(name)
        done: dict = {}
        for batch in BATCHES:
            for lr in STEPS:
                for lam in LAMS:
                    for seed in SEEDS:
                        # A batch capped to the same silo size is the same run: fitted once, listed
                        # under every batch it stands for.
                        key = (min(batch, capped(p)), lr, lam, seed)
                        if key not in done:
                            done[key] = evaluate(p, lam, seed, 1.0, **BASE1, batch_size=batch, lr_theta=lr, epochs=20)
                        rows.append(dict(data=name, batch_size=batch, lr_theta=lr, lam=lam, seed=seed, **done[key]))
        print(f"  {name}: {len(done)} fits ({time.time() - t0:.0f} s)", flush=True)
        pd.DataFrame(rows).to_csv(args.out, index=False)
    df = pd.DataFrame(rows)
    df["score"] = df["val_error"] / df["trivial"] + df["val_dp"]
    table(df)
    print(f"{len(df)} rows, {time.time() - t0:.0f} s")


#: The defaults this script checks (``AUTO_BATCH_PRIVATE`` and ``lr_theta``'s default).
CURRENT = (1024, 0.5)


def table(df: pd.DataFrame) -> None:
    """Per configuration: its score on each data set (mean over λ and seeds), the mean over data
    sets, and its difference from :data:`CURRENT` with the standard error of that mean difference
    over the data sets (paired: same data set, λ and seed)."""
    per = df.groupby(["batch_size", "lr_theta", "data"])["score"].mean().reset_index()
    tab = per.pivot_table(index=["batch_size", "lr_theta"], columns="data", values="score")
    diff = tab.sub(tab.loc[CURRENT], axis=1)
    tab["mean"] = tab.mean(axis=1)
    tab["vs default"] = diff.mean(axis=1)
    tab["se"] = diff.std(axis=1, ddof=1) / np.sqrt(diff.shape[1])
    print("| batch | lr_theta | " + " | ".join(tab.columns) + " |")
    print("|---|---|" + "---|" * len(tab.columns))
    for (b, lr), r in tab.iterrows():
        print(f"| {b} | {lr:g} | " + " | ".join(f"{v:+.3f}" if c in ("vs default",) else f"{v:.3f}" for c, v in r.items()) + " |")
    b, lr = tab["mean"].idxmin()
    print(f"best: batch {b}, lr_theta {lr:g} (score {tab['mean'].min():.3f}; the default {tab.loc[CURRENT, 'mean']:.3f}; "
          f"difference {tab.loc[(b, lr), 'vs default']:+.3f} ± {tab.loc[(b, lr), 'se']:.3f} s.e.)")


if __name__ == "__main__":
    main()
