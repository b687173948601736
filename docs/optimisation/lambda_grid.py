"""Final test error, DP violation, ‖θ‖, ‖W‖ and fraction predicted positive after ``--epochs``
non-private epochs, for a fine λ grid and both W steps (the paper's ``λ η_W`` and the normalised
``η_W``). Writes a CSV and, with ``--plot``, the figure of docs/optimisation.md.

    python docs/optimisation/lambda_grid.py --data adult credit_card --epochs 10 \\
        --out docs/optimisation/lambda_grid.csv --plot docs/figures/lambda_cliff.png
"""

from __future__ import annotations

import argparse
import warnings

import numpy as np
import pandas as pd

import pfair
from pfair import metrics


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", nargs="+", default=["adult", "credit_card"])
    ap.add_argument("--lams", type=float, nargs="+", default=list(np.arange(0, 10.01, 0.5)))
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None)
    ap.add_argument("--plot", default=None)
    args = ap.parse_args()
    rows = []
    for name in args.data:
        data = pfair.datasets.load(name)
        fed = pfair.Federation.partition(data, 3, heterogeneity=0.0, seed=args.seed)
        for w_step in ("paper", "normalised"):
            for lam in args.lams:
                # The defaults of the time of the analysis (batch 256, η_W = 0.5), pinned.
                model = pfair.SteFFLe(lam=float(lam), epochs=args.epochs, seed=args.seed, w_step=w_step,
                                      batch_size=256, lr_w=0.5, lr_theta=0.25, w_radius=2.0)
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    model.fit(fed)
                pred = model.predict(data.X_test)
                rep = metrics.fairness_report(data.y_test, pred, sensitive_features=data.s_test)
                rows.append(dict(data=name, w_step=w_step, lam=float(lam), test_error=rep["test_error"],
                                 demographic_parity_difference=rep["demographic_parity_difference"], theta_norm=float(np.linalg.norm(model.theta_)),
                                 w_norm=float(np.linalg.norm(model.W_)),
                                 positive=float(np.mean(pred == model.classes_[1])),
                                 trivial=metrics.trivial_error(data.y_test)))
                r = rows[-1]
                print(f"{name:12s} {w_step:10s} λ={lam:5.2f} err={r['test_error']:.4f} dp={r['demographic_parity_difference']:.4f} "
                      f"|θ|={r['theta_norm']:.2f} |W|={r['w_norm']:.2f} pos={r['positive']:.3f}", flush=True)
    df = pd.DataFrame(rows)
    if args.out:
        df.to_csv(args.out, index=False, float_format="%.5g")
    if args.plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, axes = plt.subplots(2, len(args.data), figsize=(4.5 * len(args.data), 5.5), squeeze=False, sharex=True)
        for c, name in enumerate(args.data):
            sub = df[df.data == name]
            for w_step, style in (("paper", "o--"), ("normalised", "s-")):
                s = sub[sub.w_step == w_step]
                axes[0, c].plot(s.lam, s.test_error, style, ms=3, label=f"W step: {w_step}")
                axes[1, c].plot(s.lam, s.demographic_parity_difference, style, ms=3, label=f"W step: {w_step}")
            axes[0, c].axhline(sub.trivial.iloc[0], color="grey", lw=0.8, ls=":", label="constant predictor")
            axes[0, c].set_title(f"{name} (non-private, {args.epochs} epochs)")
            axes[0, c].set_ylabel("test error")
            axes[1, c].set_ylabel("DP violation")
            axes[1, c].set_xlabel("λ")
        axes[0, 0].legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(args.plot, dpi=110)


if __name__ == "__main__":
    main()
