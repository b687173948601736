"""The price of decentralisation: SteFFLe on N silos against DP-FERMI on the pooled data, at equal
records per round, and non-private FERMI as the ceiling.

Reproduces the table of docs/results.md ("The price of decentralisation"):
``python docs/decentralisation.py``. Adult, demographic parity, N = 3 homogeneous silos (h = 0).
SteFFLe draws a batch of m records in each silo per round; DP-FERMI (one silo holding every record,
central DP with respect to s) draws N·m records per round, so both average the same records into a
step and run the same rounds. ε = 1 per silo (DP-FERMI: ε = 1 for the pooled data set), the
defaults otherwise; the seed drives the batches, the held-out share and the noise. Each row: mean
test error and demographic-parity difference over the seeds, at each λ.
"""

from __future__ import annotations

import argparse
import warnings

import numpy as np

from pfair import Federation, SteFFLe, datasets, metrics
from pfair.baselines import DPFERMI, FERMI


def fit_row(make, fed: Federation, data, seeds: int) -> tuple[float, float]:
    """Mean (test error, test DP difference) of ``make(seed)`` fitted on ``fed`` over ``seeds``."""
    out = []
    for seed in range(seeds):
        est = make(seed)
        m = est.fit(fed, ledgers="new") if est.epsilon is not None else est.fit(fed)
        pred = m.predict(data.X_test)
        out.append((float(np.mean(pred != data.y_test)),
                    metrics.demographic_parity_difference(data.y_test, pred, sensitive_features=data.s_test)))
    return tuple(np.mean(out, axis=0))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--lams", type=float, nargs="+", default=[0.0, 1.0, 2.0, 4.0])
    ap.add_argument("--silos", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=1024, help="records per silo per round (m)")
    ap.add_argument("--epsilon", type=float, default=1.0)
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    data = datasets.load("adult")
    fed = Federation.for_dataset(data, args.silos, heterogeneity=0, seed=0)
    n, m = args.silos, args.batch_size
    print(f"Adult, N = {n} silos, m = {m} per silo per round (DP-FERMI: {n * m} pooled), ε = {args.epsilon:g}, "
          f"{args.seeds} seeds; constant predictor {metrics.trivial_error(data.y_test):.4f}\n")
    print("| λ | SteFFLe error | SteFFLe DP | DP-FERMI error | DP-FERMI DP | FERMI error | FERMI DP |")
    print("|---|---|---|---|---|---|---|")
    for lam in args.lams:
        common = dict(lam=lam)
        steffle = fit_row(lambda s: SteFFLe(epsilon=args.epsilon, batch_size=m, seed=s, noise_seed=s, **common),
                          fed, data, args.seeds)
        dpfermi = fit_row(lambda s: DPFERMI(epsilon=args.epsilon, batch_size=n * m, seed=s, noise_seed=s, **common),
                          fed, data, args.seeds)
        fermi = fit_row(lambda s: FERMI(batch_size=n * m, seed=s, **common), fed, data, args.seeds)
        print(f"| {lam:g} | {steffle[0]:.4f} | {steffle[1]:.4f} | {dpfermi[0]:.4f} | {dpfermi[1]:.4f} | "
              f"{fermi[0]:.4f} | {fermi[1]:.4f} |", flush=True)


if __name__ == "__main__":
    main()
