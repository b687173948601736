"""Validation protocol of ``DeepSteFFLe``'s defaults: the batch and step-size rule, on two networks.

Validation data only, never test data. Each data set's *training* split is cut once (seed 0) into
80 % train and 20 % validation; the train part goes to 3 silos (record i in silo i mod 3), the
paper's N = 3. Two models, both with their data's own shape:

* ``mlp``  — ``pfair.torch.models.mlp(d, 2)`` (d-64-2, tanh) on Adult (sex), 9,045 records a silo;
* ``cnn``  — ``SmallCNN(1, 10, width=8)`` on the 8×8 digits (ink-mass tercile), 359 records a silo.

A candidate is a *rule*, not one number, since the two sets differ 25-fold in size:
``batch = min(256, max(16, n_min // R))`` records per silo and round (at least R rounds per epoch
of the smallest silo n_min) and ``lr_theta = c · batch / 256`` (the linear scaling rule, step c
at a batch of 256), 5 epochs, for R ∈ {8, 16, 32} and c ∈ {0.5, 1, 2}. Settings:

* ``nonprivate`` — ε = None, λ = 0. At ε = 1, λ = 0 (attribute mode) no part depends on s and the
  loss gradient is sent exactly, so a private fit is this fit, bit for bit (docs/results.md shows
  it); it is not run twice;
* ``eps1_lam1``  — ε = 1, λ = 1 (the clipped, noised ψ parts; reported, not used to choose).

Score of a candidate: the mean over the two models of (mean validation error over seeds) /
(constant predictor's validation error) in ``nonprivate``. A candidate is admissible only if no
seed of either model *collapsed* (validation error above 0.9 times the constant predictor's). The
defaults are the admissible candidate with the lowest score. Every fit is appended to
``docs/optimisation/deep_defaults.csv``; the summary is printed (``deep_defaults_log.txt``). Run
(about 10 min on 2 shared cores; ``--summary`` prints the scores of the fits in the CSV again):

    python docs/optimisation/deep_defaults.py [--seeds-mlp 0,1] [--seeds-cnn 0,1,2,3] \\
        [--settings nonprivate,eps1_lam1] > docs/optimisation/deep_defaults_log.txt
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
from pfair.torch import DeepSteFFLe, load_digits_fair
from pfair.torch.models import SmallCNN, mlp

OUT = Path(__file__).with_name("deep_defaults.csv")
#: (R: least rounds per epoch, c: step at a batch of 256) candidates.
GRID = list(itertools.product([8, 16, 32], [0.5, 1.0, 2.0]))
SETTINGS = {"nonprivate": dict(epsilon=None, lam=0.0), "eps1_lam1": dict(epsilon=1.0, lam=1.0)}
N_SILOS, EPOCHS, CAP, FLOOR = 3, 5, 256, 16


def split(name: str) -> dict:
    """The train/validation split of a data set's training part, and its model."""
    if name == "mlp":
        data = pfair.datasets.load_adult()
        make, shape = (lambda: mlp(data.n_features, 2)), None
    else:
        data = load_digits_fair()
        make, shape = (lambda: SmallCNN(1, 10, width=8)), (1, 8, 8)
    rng = np.random.default_rng(0)
    idx = rng.permutation(len(data.y_train))
    cut = int(0.8 * idx.size)
    tr, va = idx[:cut], idx[cut:]
    X, y, s = data.X_train, data.y_train, data.s_train
    const = 1.0 - np.max(np.bincount(y[va])) / va.size
    return dict(train=(X[tr], y[tr], s[tr]), val=(X[va], y[va]), make=make, shape=shape, k=data.n_groups,
                const=float(const), smallest=int(np.min(np.bincount(np.arange(tr.size) % N_SILOS))))


def rule(smallest: int, R: int, c: float) -> tuple[int, float]:
    """``(batch, lr_theta)`` of the candidate (R, c) for a smallest silo of ``smallest`` records."""
    batch = min(CAP, max(FLOOR, smallest // R), smallest)
    return batch, c * batch / CAP


def validation_error(part: dict, *, seed: int, batch: int, lr: float, epsilon: float | None, lam: float) -> float:
    X, y, s = part["train"]
    kw = {} if epsilon is None else dict(epsilon=epsilon, noise_seed=seed, p_s=[1.0 / part["k"]] * part["k"])
    model = DeepSteFFLe(part["make"](), input_shape=part["shape"], epochs=EPOCHS, batch_size=batch, lr_theta=lr,
                        lam=lam, init_seed=seed, seed=seed, track_history=False, device="cpu",
                        **({"epsilon": None} | kw))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.fit(X, y, sensitive_features=s, silos=np.arange(y.size) % N_SILOS)
    return 1.0 - model.score(*part["val"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds-mlp", default="0,1")
    ap.add_argument("--seeds-cnn", default="0,1,2,3")
    ap.add_argument("--settings", default=",".join(SETTINGS))
    ap.add_argument("--summary", action="store_true", help="only the scores of the fits in the CSV")
    args = ap.parse_args()
    torch.set_num_threads(1)
    seeds = {"mlp": [int(v) for v in args.seeds_mlp.split(",")], "cnn": [int(v) for v in args.seeds_cnn.split(",")]}
    parts = {name: split(name) for name in seeds}
    if args.summary:
        summary({name: part["const"] for name, part in parts.items()})
        return
    for name, part in parts.items():
        print(f"{name}: {part['train'][1].size} train / {part['val'][1].size} validation records, smallest silo "
              f"{part['smallest']}, constant predictor's validation error {part['const']:.4f}", flush=True)
    done: dict[tuple, float] = {}  # (setting, model, batch, lr, seed) -> error: a rule may repeat a fit
    new = not OUT.exists()
    with OUT.open("a", newline="") as fh:
        w = csv.writer(fh)
        if new:
            w.writerow(["setting", "model", "R", "c", "batch_size", "lr_theta", "epochs", "seed", "val_error",
                        "seconds"])
        for setting in args.settings.split(","):
            for (R, c), name in itertools.product(GRID, seeds):
                part = parts[name]
                batch, lr = rule(part["smallest"], R, c)
                errs = []
                for seed in seeds[name]:
                    key = (setting, name, batch, lr, seed)
                    t0 = time.perf_counter()
                    if key not in done:
                        done[key] = validation_error(part, seed=seed, batch=batch, lr=lr, **SETTINGS[setting])
                    errs.append(done[key])
                    w.writerow([setting, name, R, c, batch, f"{lr:.6g}", EPOCHS, seed, f"{done[key]:.4f}",
                                f"{time.perf_counter() - t0:.1f}"])
                fh.flush()
                print(f"{setting:10s} {name} R={R:<2d} c={c:<3g} batch={batch:<3d} lr_theta={lr:<7.4g} val error "
                      f"{np.mean(errs):.4f} ({' '.join(f'{e:.4f}' for e in errs)})", flush=True)
    if "nonprivate" in args.settings.split(","):
        summary({name: part["const"] for name, part in parts.items()})


def summary(const: dict[str, float]) -> None:
    """The score of every candidate from the ``nonprivate`` fits of the CSV, and the choice."""
    import pandas as pd

    runs = pd.read_csv(OUT)
    runs = runs[runs["setting"] == "nonprivate"]
    print("\nscore (mean over models of validation error / constant's; * = a seed collapsed):")
    best = None
    for R, c in GRID:
        sel = runs[(runs["R"] == R) & (runs["c"] == c)]
        errs = {name: sel.loc[sel["model"] == name, "val_error"].to_numpy() for name in const}
        score = float(np.mean([np.mean(e) / const[n] for n, e in errs.items()]))
        collapsed = any(max(e) > 0.9 * const[n] for n, e in errs.items())
        print(f"  R={R:<2d} c={c:<3g} score {score:.4f}{' *' if collapsed else ''}")
        if not collapsed and (best is None or score < best[0]):
            best = (score, R, c)
    if best is not None:
        print(f"chosen: R={best[1]}, c={best[2]:g} (score {best[0]:.4f})")


if __name__ == "__main__":
    main()
