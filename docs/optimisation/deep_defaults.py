"""Validation protocol of ``DeepSteFFLe``'s defaults (step size, batch, epochs) on Adult.

The MLP ``pfair.torch.models.mlp(d, 2)`` (d-64-2, tanh) on Adult's *training* data only: a seeded
80/20 split of it into a training and a validation part (the test split is never read). Each
candidate is fitted for ``--epochs`` epochs on the training part in one silo, for every seed of
``--seeds``, in three settings:

* ``nonprivate`` — ε = None, λ = 0;
* ``eps1``       — ε = 1, λ = 0 (attribute mode: with λ = 0 no part depends on s, so only the
  release of p_s is charged; the loss gradient is sent exactly);
* ``eps1_lam4``  — ε = 1, λ = 4 (the noised, clipped ψ parts; reported, not used to choose).

and its validation error (mean over seeds) is printed and appended as CSV rows to
``docs/optimisation/deep_defaults.csv``. The defaults are the candidate with the lowest mean
validation error over ``nonprivate`` and ``eps1``. Run (about 3 min on 2 cores):

    python docs/optimisation/deep_defaults.py [--epochs 5] [--seeds 0,1]
"""

from __future__ import annotations

import argparse
import csv
import itertools
import time
import warnings
from pathlib import Path

import numpy as np
import torch

import pfair
from pfair.torch import DeepSteFFLe
from pfair.torch.models import mlp

OUT = Path(__file__).with_name("deep_defaults.csv")
#: (lr_theta, batch_size) candidates.
GRID = list(itertools.product([0.25, 0.5, 1.0, 2.0], [128, 256, 512]))
SETTINGS = {"nonprivate": dict(epsilon=None, lam=0.0), "eps1": dict(epsilon=1.0, lam=0.0),
            "eps1_lam4": dict(epsilon=1.0, lam=4.0)}


def split(seed: int = 0) -> tuple:
    data = pfair.datasets.load_adult()
    rng = np.random.default_rng(seed)
    idx = rng.permutation(len(data.y_train))
    cut = int(0.8 * idx.size)
    tr, va = idx[:cut], idx[cut:]
    X, y, s = data.X_train, data.y_train, data.s_train
    return (X[tr], y[tr], s[tr]), (X[va], y[va], s[va]), data.n_features


def validation_error(train: tuple, val: tuple, d: int, *, seed: int, epochs: int, **kw) -> float:
    X, y, s = train
    model = DeepSteFFLe(mlp(d, 2), epochs=epochs, init_seed=seed, noise_seed=seed if kw.get("epsilon") else None,
                        p_s=[0.33, 0.67], track_history=False, device="cpu", **kw)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.fit(X, y, sensitive_features=s)
    return 1.0 - model.score(val[0], val[1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--seeds", default="0,1")
    ap.add_argument("--settings", default=",".join(SETTINGS))
    ap.add_argument("--grid", default=None, help="lr:batch,lr:batch,... (default: the module's GRID)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    seeds = [int(v) for v in args.seeds.split(",")]
    grid = GRID if args.grid is None else [(float(a), int(b)) for a, b in (g.split(":") for g in args.grid.split(","))]
    train, val, d = split()
    const = 1.0 - max(np.mean(val[1]), 1 - np.mean(val[1]))
    print(f"validation: {len(val[1])} records, constant predictor error {const:.3f}")
    new = not OUT.exists()
    with OUT.open("a", newline="") as fh:
        w = csv.writer(fh)
        if new:
            w.writerow(["setting", "lr_theta", "batch_size", "epochs", "seed", "val_error", "seconds"])
        for name in args.settings.split(","):
            for lr, batch in grid:
                errs = []
                for seed in seeds:
                    t0 = time.perf_counter()
                    err = validation_error(train, val, d, seed=seed, epochs=args.epochs, lr_theta=lr,
                                           batch_size=batch, **SETTINGS[name])
                    errs.append(err)
                    w.writerow([name, lr, batch, args.epochs, seed, f"{err:.4f}", f"{time.perf_counter() - t0:.1f}"])
                fh.flush()
                print(f"{name:10s} lr_theta={lr:<5g} batch={batch:<4d} val error {np.mean(errs):.4f} "
                      f"({' '.join(f'{e:.4f}' for e in errs)})", flush=True)


if __name__ == "__main__":
    main()
