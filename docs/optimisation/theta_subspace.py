"""Does projecting a silo's noised θ-part on its own top principal directions help at ε = 1?

``theta_subspace=r`` (docs/privacy.md, "A public subspace for h_θ") keeps the noise per direction
and removes it from all but r directions of x̃ = [x, 1], at the price of the fairness gradient
outside them. Scored as the acceptance of section 7 scores a private fit: the margin of its test
(error, violation) below the mixing line of its own non-private λ = 0 model (positive: below,
better than mixing that model with the constant predictor). Tables: synthetic dependence 1 and 2
(40 dense features that carry s), Adult (102 one-hot and numeric) and COMPAS; λ ∈ {3, 8, 20};
demographic parity and equalized odds; seeds 0 and 1; clip ∈ {0.25 (the default), 1};
r ∈ {none, 1, 4, 16}. Printout: ``docs/optimisation/theta_subspace_log.txt``.

    python docs/optimisation/theta_subspace.py      # ~20 min on 2 cores
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
import convergence as cv  # noqa: E402  (the acceptance's tables, federations and fits)

from pfair.references import mixing_line  # noqa: E402

TABLES = ("synthetic1", "synthetic2", "adult", "compas")
LAMS = (3.0, 8.0, 20.0)
CLIPS = (0.25, 1.0)
RANKS = (None, 1, 4, 16)
SEEDS = (0, 1)
NOTIONS = ("demographic_parity", "equalized_odds")


def runs() -> pd.DataFrame:
    rows = []
    for name in TABLES:
        data = cv.load(name)
        for fairness in NOTIONS:
            for seed in SEEDS:
                cv.EXTRA.clear()
                ref = cv.fit_one(data, fairness, 0.0, None, seed)
                line = mixing_line(data.y_test, ref.pop("pred"), sensitive_features=data.s_test, fairness=fairness)
                for lam in LAMS:
                    for clip in CLIPS:
                        for r in RANKS:
                            cv.EXTRA.clear()
                            cv.EXTRA["clip"] = clip
                            if r is not None:
                                cv.EXTRA["theta_subspace"] = r
                            res = cv.fit_one(data, fairness, lam, 1.0, seed)
                            res.pop("pred")
                            rows.append(dict(table=name, fairness=fairness, seed=seed, lam=lam, clip=clip,
                                             r="none" if r is None else str(r), error=res["error"],
                                             violation=res["violation"],
                                             margin=line.margin(res["error"], res["violation"])))
    return pd.DataFrame(rows)


def main() -> None:
    warnings.simplefilter("ignore")
    df = runs()
    df.to_csv(Path(__file__).with_name("theta_subspace.csv"), index=False)
    print("ε = 1; margin > 0: below the λ = 0 model's mixing line; mean over λ ∈ {3, 8, 20}, both notions and "
          "seeds 0-1 (12 fits a cell); 'below' counts the fits with margin > 0\n")
    print("| table | clip | r | mean margin | below |")
    print("|---|---|---|---|---|")
    order = {"none": 0, "1": 1, "4": 4, "16": 16}
    for (name, clip, r), g in sorted(df.groupby(["table", "clip", "r"]),
                                      key=lambda kv: (TABLES.index(kv[0][0]), kv[0][1], order[kv[0][2]])):
        print(f"| {name} | {clip:g} | {r} | {g['margin'].mean():+.3f} | {int(np.sum(g['margin'] > 0))} of {len(g)} |")


if __name__ == "__main__":
    main()
