"""Do DeepSteFFLe's min-max iterates cycle as SteFFLe's did, and does the scaled θ step settle them?

``DeepSteFFLe``'s θ step was constant in λ until this script and ``deep_theta_step.py`` measured
the scaled one (docs/deep.md, "The θ step"). This script measures its per-epoch validation error, non-private and at
ε = 1, for an MLP (``mlp(d, 2)``, d-64-2, tanh) at its defaults otherwise, with the constant and
the scaled θ step, on Adult (s = sex) and on the acceptance's synthetic table whose features carry s
(``make_synthetic(60000, 40, silos=3, dependence=2, seed=0)``), at λ ∈ {1, 8, 40}, seed 0, 10
epochs. Per fit: the validation errors, the spread of the last five, and the test error and
demographic-parity difference of the returned model. Printout:
``docs/optimisation/deep_dynamics_log.txt``; runs: ``deep_dynamics.csv``.

    python docs/optimisation/deep_dynamics.py        # ~15 min on 2 cores
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import torch

import pfair
from pfair.torch import DeepSteFFLe
from pfair.settings import deep_batch_size
from pfair.torch.models import mlp

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import convergence as cv  # noqa: E402  (the acceptance's tables and federations)

TABLES = ("synthetic2", "adult")
LAMS = (1.0, 8.0, 40.0)
STEPS = ("constant", "scaled")
EPSILONS = (None, 1.0)
EPOCHS = 10


def one(data, lam: float, step: str, epsilon: float | None, seed: int = 0) -> dict:  # noqa: ANN001
    fed = cv.federation(data, seed)
    silos = np.concatenate([np.full(len(s), j) for j, s in enumerate(fed.silos)])
    X = np.concatenate([np.asarray(s.X) for s in fed.silos])
    y = np.concatenate([fed.classes_[s.y] for s in fed.silos])
    s_ = np.concatenate([fed.groups_[s.s] for s in fed.silos])
    kw = dict(epsilon=None) if epsilon is None else dict(epsilon=epsilon, noise_seed=seed)
    # The batch stated (the "auto" batch for these silos): a run of EPOCHS epochs with either step. With
    # "auto", a non-private fit under the scaled step would run min(λ, 10) times the epochs
    # (resolve_deep_defaults; deep_theta_step.py measures that run).
    batch = deep_batch_size(fed.sizes)
    model = DeepSteFFLe(mlp(data.n_features, 2), lam=lam, theta_step=step, epochs=EPOCHS, batch_size=batch,
                        init_seed=seed, seed=seed, device="cpu", **kw)
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.fit(X, y, sensitive_features=s_, silos=silos)
    val = model.history_["validation_error"].dropna().to_numpy()
    pred = model.predict(data.X_test)
    return dict(lam=lam, theta_step=step, epsilon="none" if epsilon is None else epsilon,
                validation_errors=" ".join(f"{v:.3f}" for v in val), spread5=float(np.ptp(val[-5:])),
                test_error=float(np.mean(pred != data.y_test)),
                test_dp=float(pfair.metrics.demographic_parity_difference(data.y_test, pred, sensitive_features=data.s_test)),
                seconds=time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tables", nargs="+", default=list(TABLES))
    ap.add_argument("--out", default=str(HERE / "deep_dynamics.csv"))
    args = ap.parse_args()
    torch.set_num_threads(1)
    rows = []
    for name in args.tables:
        data = cv.load(name)
        for epsilon in EPSILONS:
            for lam in LAMS:
                for step in STEPS:
                    r = dict(table=name, **one(data, lam, step, epsilon))
                    rows.append(r)
                    print(f"{name} eps={r['epsilon']} lam={lam:g} {step:<8} spread5={r['spread5']:.3f} "
                          f"test {r['test_error']:.4f} / DP {r['test_dp']:.3f}  val: {r['validation_errors']} "
                          f"({r['seconds']:.0f} s)", flush=True)
                    pd.DataFrame(rows).to_csv(args.out, index=False)


if __name__ == "__main__":
    main()
