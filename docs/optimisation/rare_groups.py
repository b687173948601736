"""Why equalized odds does not move at ε = 1 on a table whose groups are rare inside a label's block.

A diagnostic like ``noise_sources.py``, whose scaled runs do NOT deliver their ε. On
``make_synthetic(60000, 40, dependence=3)`` (y almost equal to s) the equalized-odds blocks are the
two labels, and inside each the other group is rare (printed first: 1.4 % of the y = 0 records,
0.4 % of the y = 1 records). The non-private fit at λ = 3 takes the violation from 0.87 to about
0.26; the default private fit leaves it near 0.8. The rare group's records carry the fairness
term's pull, and their s-dependent θ-part b_i is the largest: its scale grows as p(r | block)^{-1/2}
times W's row of that group, and the adaptive clip's scale S_i (the mean over the groups under the
released proportions, docs/privacy.md, "An adaptive clip norm") is set by the common group.

The acceptance's default private fit (3 silos, seeds 0–2, equalized odds, λ ∈ {3, 20}) is run as
released; with both noise standard deviations (h_θ's and h_W's) multiplied by 10⁻³ after
calibration, with the adaptive clip and with a fixed clip of 100 (no record clipped); and as
released with fixed clips of 0.5, 2 and 8 (a larger clip clips less and adds more noise). Each row:
the last epoch's test error and violation (the model the run ends at, before the guard chooses) and
its margin below the seed's own λ = 0 model's mixing line (> 0: below); beside them the default
non-private fit's. Printout: ``rare_groups_log.txt``.

    python docs/optimisation/rare_groups.py      # about 4 minutes on 2 cores
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import numpy as np

import pfair
import pfair.privacy.calibration as calibration

sys.path.insert(0, str(Path(__file__).resolve().parent))
import convergence as cv  # noqa: E402
import noise_sources as ns  # noqa: E402

TABLE = "synthetic3"
FAIRNESS = "equalized_odds"
LAMS = (3.0, 20.0)
#: (label, factor on both noise stds, clip)
VARIANTS = (("as released (adaptive clip)", 1.0, "auto"),
            ("both noises × 0.001, adaptive clip", 1e-3, "auto"),
            ("both noises × 0.001, clip 100", 1e-3, 100.0),
            ("as released, clip 0.5", 1.0, 0.5),
            ("as released, clip 2", 1.0, 2.0),
            ("as released, clip 8", 1.0, 8.0))


def last_point(data, seed: int, **params) -> tuple[float, float]:
    model = pfair.SteFFLe(fairness=FAIRNESS, seed=seed, **params)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.fit(cv.federation(data, seed), ledgers="new", eval_set=(data.X_test, data.y_test, data.s_test))
    last = model.history_.iloc[-1]
    return float(last["test_error"]), float(last["test_equalized_odds_difference"])


def main() -> None:
    data = cv.load(TABLE)
    y, s = np.asarray(data.y_train), np.asarray(data.s_train)
    for label in np.unique(y):
        block = s[y == label]
        shares = ", ".join(f"s = {g}: {np.mean(block == g):.2%}" for g in np.unique(s))
        print(f"{TABLE}, training records with y = {label}: {block.size:,} ({shares})")
    print()
    print("| λ | run | last test error | last EO | margin below the line (mean of 3 seeds) | seeds below |")
    print("|---|---|---|---|---|---|")
    try:
        lines = ns.zero_lines(data, FAIRNESS)
        for lam in LAMS:
            runs = [("non-private (default)", None, dict(lam=lam, epsilon=None, p_s="pooled"))]
            runs += [(label, factor, dict(lam=lam, epsilon=1.0, clip=clip)) for label, factor, clip in VARIANTS]
            for label, factor, params in runs:
                calibration._core = ns._core if factor is None else ns._Scaled(factor, factor)
                points = []
                for seed in cv.SEEDS:
                    extra = {} if params["epsilon"] is None else dict(noise_seed=seed)
                    points.append(last_point(data, seed, **params, **extra))
                margins = [lines[seed].margin(e, v) for seed, (e, v) in zip(cv.SEEDS, points)]
                err, eo = np.mean(points, axis=0)
                print(f"| {lam:g} | {label} | {err:.3f} | {eo:.3f} | {np.mean(margins):+.3f} | "
                      f"{sum(m > 0 for m in margins)} of {len(margins)} |", flush=True)
    finally:
        calibration._core = ns._core


if __name__ == "__main__":
    main()
