"""``PrivateThresholdOptimizer``'s margin: the target held the table's resolution below, measured.

For seven (data set, s) pairs of the bundled tables (group sizes from 146 to tens of thousands of
training records), three constraints and ``max_violation`` t ∈ {0, 0.02, 0.05, 0.1}: the exact
(bin, group, label) table of the training records (``epsilon=None``, 3 silos) and the pooled noise
std of an ε = 1 release (the fit's own ``sigma_counts``), six noise draws each. Per draw the rule is
chosen on the noisy table with ``margin`` 0 (the target on the noisy table as it is) and with the
default ``"auto"`` (its resolution, :func:`pfair.postprocessing.rate_resolution`), and its violation
and error are read on the exact table: a *miss* is a violation above t + 0.02 on the records. The
draws are split by whether the table resolves the target (resolution ≤ max(t, 0.02)) or not, where
the fit warns. Printout: ``postprocessing_margin_log.txt``.

    python docs/postprocessing_margin.py      # about two minutes on 2 cores
"""

from __future__ import annotations

import math
import os
import warnings

import numpy as np
import pandas as pd

import pfair
from pfair.postprocessing import beyond_resolution, choose_thresholds, estimated_violation, rate_resolution

PAIRS = [("adult", "sex"), ("adult", "race"), ("bank", "age"), ("compas", "race"), ("credit_card", "sex"),
         ("german", "sex"), ("law_school", "race")]
CONSTRAINTS = ("demographic_parity", "equal_opportunity", "equalized_odds")
TARGETS = (0.0, 0.02, 0.05, 0.1)
DRAWS = 6


def runs() -> pd.DataFrame:
    rows = []
    for name, sens in PAIRS:
        data = pfair.datasets.load(name, sensitive=sens)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            exact = pfair.PrivateThresholdOptimizer(epsilon=None).fit(pfair.Federation.for_dataset(data, 3, seed=0))
            private = pfair.PrivateThresholdOptimizer(epsilon=1.0, noise_seed=0).fit(
                pfair.Federation.for_dataset(data, 3, seed=0))
        table = exact.released_counts_
        sigma = math.sqrt(float(np.sum(np.square(np.asarray(private.privacy_report_["sigma_counts"])))))
        P = table / table.sum()
        for constraints in CONSTRAINTS:
            for t in TARGETS:
                for draw in range(DRAWS):
                    noisy = np.maximum(table + np.random.default_rng(draw).normal(0, sigma, table.shape), 0.0)
                    resolution, _ = rate_resolution(noisy, constraints, sigma)
                    for label, margin in (("0", 0.0), ("auto", resolution)):
                        rule = choose_thresholds(noisy, constraints=constraints, max_violation=t, margin=margin)
                        violation = estimated_violation(rule.q, table, constraints)
                        error = float((P[:, :, 0] - P[:, :, 1]).T.ravel() @ rule.q.ravel() + P[:, :, 1].sum())
                        rows.append(dict(pair=f"{name}, s = {sens}", constraints=constraints, t=t, draw=draw,
                                         margin=label, resolution=resolution,
                                         resolved=not beyond_resolution(resolution, t), violation=violation,
                                         miss=violation > t + 0.02, error=error))
    return pd.DataFrame(rows)


def main() -> None:
    df = runs()
    print("| table resolves the target | margin | rules | misses (violation on the records above t + 0.02) | "
          "mean violation − t | mean error on the records |")
    print("|---|---|---|---|---|---|")
    for resolved in (True, False):
        for label in ("0", "auto"):
            g = df[(df.resolved == resolved) & (df.margin == label)]
            print(f"| {'yes' if resolved else 'no (warned)'} | {label} | {len(g)} | {int(g.miss.sum())} | "
                  f"{(g.violation - g.t).mean():+.4f} | {g.error.mean():.4f} |")
    print("\nResolved draws by pair (misses with margin 0 → auto; mean error 0 → auto)\n")
    print("| pair | constraints | rules | misses | error |")
    print("|---|---|---|---|---|")
    ok = df[df.resolved]
    for (pair, constraints), g in ok.groupby(["pair", "constraints"], sort=False):
        a, b = g[g.margin == "0"], g[g.margin == "auto"]
        print(f"| {pair} | {constraints} | {len(a)} | {int(a.miss.sum())} → {int(b.miss.sum())} | "
              f"{a.error.mean():.4f} → {b.error.mean():.4f} |")


if __name__ == "__main__":
    os.environ.setdefault("PFAIR_PROGRESS", "0")
    main()
