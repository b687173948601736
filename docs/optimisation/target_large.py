"""A fairness target at ε = 1 on a large table whose dense features carry s: the former rule against today's.

``make_synthetic(171000, 40, silos=3, dependence=1.5, seed=0)`` (about 45,000 training records a
silo), demographic parity, targets 0.05 and 0.1, seeds 0 and 1, ε = 1: the target's former rule
(batch 1,024, ``lr_theta`` 2.0, the fixed clip 0.25, the step ×0.8 every 10 epochs: a stated batch
runs exactly that) against ``batch_size="auto"`` (today's: the stretched private run with the
adaptive clip and the quarterly decay; docs/optimisation.md, "A fairness target's run"). Each row:
the returned model's test error and violation, its margin below the seed's private λ = 0 model's
mixing line (> 0: below), the λ it ended at and whether the fit warned that the target was not met.
Printout: ``target_large_log.txt``.

    python docs/optimisation/target_large.py      # about 2 minutes on 2 cores
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import numpy as np

import pfair
from pfair.exceptions import ConvergenceWarning
from pfair.references import mixing_line

sys.path.insert(0, str(Path(__file__).resolve().parent))
import convergence as cv  # noqa: E402

FAIRNESS = "demographic_parity"
RULES = (("former (1024, step 2.0, clip 0.25)", dict(batch_size=1024, lr_theta=2.0)), ("today (auto)", {}))


def main() -> None:
    data = pfair.datasets.make_synthetic(171000, 40, silos=3, dependence=1.5, seed=0)
    print("| seed | target | rule | test error | test DP | margin below the line | λ at the end | warned |")
    print("|---|---|---|---|---|---|---|---|")
    for seed in (0, 1):
        zero = cv.fit_one(data, FAIRNESS, 0.0, 1.0, seed)
        line = mixing_line(data.y_test, zero.pop("pred"), sensitive_features=data.s_test, fairness=FAIRNESS)
        for target in (0.05, 0.1):
            for label, kw in RULES:
                model = pfair.SteFFLe(fairness=FAIRNESS, max_violation=target, epsilon=1.0, seed=seed,
                                      noise_seed=seed, **kw)
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    model.fit(cv.federation(data, seed))
                pred = model.predict(data.X_test)
                err = float(np.mean(pred != data.y_test))
                v = cv.violation(FAIRNESS, data.y_test, pred, data.s_test)
                warned = any(issubclass(w.category, ConvergenceWarning) for w in caught)
                print(f"| {seed} | {target:g} | {label} | {err:.3f} | {v:.3f} | {line.margin(err, v):+.3f} | "
                      f"{model.lam_:.1f} | {'yes' if warned else 'no'} |", flush=True)


if __name__ == "__main__":
    main()
