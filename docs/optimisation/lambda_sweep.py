"""Non-private λ sweep of SteFFLe: per-epoch test error, violation, θ/W norms and the fraction
predicted positive. Used for the analysis in docs/optimisation.md.

    python docs/optimisation/lambda_sweep.py --data adult --lams 0 1 2 3 4 5 6 8 10 --epochs 6
"""

from __future__ import annotations

import argparse
import warnings

import numpy as np

import pfair
from pfair import metrics


def run(data, lam: float, epochs: int, seed: int = 0, **kw):
    fed = pfair.Federation.partition(data, 3, heterogeneity=0.0, seed=seed)
    rows = []
    # The defaults of the time of the analysis (batch 256, η_W = 0.5, the paper's W step), pinned;
    # --set overrides them.
    params = dict(batch_size=256, lr_w=0.5, lr_theta=0.25, w_radius=2.0, w_step="paper")
    params.update(kw)
    model = pfair.SteFFLe(lam=lam, epochs=epochs, seed=seed, **params)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.fit(fed, eval_set=(data.X_test, data.y_test, data.s_test))
    h = model.history_
    for ep, r in h.iterrows():
        rows.append(dict(epoch=ep, test_error=r["test_error"], dp=r["test_demographic_parity_difference"], theta=r["theta_norm"],
                         w=r["w_norm"]))
    pred = model.predict(data.X_test)
    pos = float(np.mean(pred == model.classes_[1]))
    return rows, pos, model


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="adult")
    ap.add_argument("--lams", type=float, nargs="+", default=[0, 1, 2, 3, 4, 5, 6, 8, 10])
    ap.add_argument("--epochs", type=int, default=6)
    ap.add_argument("--set", nargs="*", default=[], help="extra estimator settings name=value")
    args = ap.parse_args()
    kw = {}
    for item in args.set:
        k, v = item.split("=")
        kw[k] = None if v == "None" else (v if v.isalpha() else float(v) if "." in v or "e" in v else int(v))
    # e.g. --set w_step=normalised
    data = pfair.datasets.load(args.data)
    print(f"{args.data}: trivial error {metrics.trivial_error(data.y_test):.4f}  settings {kw}")
    for lam in args.lams:
        rows, pos, _ = run(data, lam, args.epochs, **kw)
        traj = " ".join(f"{r['test_error']:.3f}/{r['dp']:.3f}/{r['theta']:.1f}" for r in rows)
        print(f"lam={lam:5g} pos={pos:.3f} w={rows[-1]['w']:.2f} | err/dp/|θ| per epoch: {traj}")


if __name__ == "__main__":
    main()
