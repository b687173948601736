"""Why a fairness target on COMPAS levels off: ψ makes the predicted probabilities fair, not the decisions.

Non-private SteFFLe on the bundled COMPAS data (s = race, demographic parity, 3 silos, seed 0) at
λ ∈ {0, 8, 20, 100}, for 20, 80 and 320 epochs (the batch of 256 stated, so that the epochs are
those given at every λ: ``"auto"`` would stretch them by min(λ, 10)). Each row: the test error and
demographic-parity difference of the decisions (``predict``: the class of the larger probability)
and the difference between the groups' mean predicted probability of the positive class (what the
ψ-term penalises: the dependence of the predicted probabilities on s). Printout:
``soft_decisions_log.txt``.

    python docs/optimisation/soft_decisions.py      # about a minute on 2 cores
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import numpy as np

import pfair

sys.path.insert(0, str(Path(__file__).resolve().parent))
import convergence as cv  # noqa: E402


def main() -> None:
    data = cv.load("compas")
    s, y = np.asarray(data.s_test), np.asarray(data.y_test)
    print("| λ | epochs | test error | DP of the decisions | DP of the probabilities |")
    print("|---|---|---|---|---|")
    for lam in (0.0, 8.0, 20.0, 100.0):
        for epochs in (20, 80, 320):
            # The batch written out (what "auto" resolves to on COMPAS's silos), so that the epochs are
            # those given at every λ, not stretched by λ (docs/optimisation.md, "A noise-free run at a large λ").
            model = pfair.SteFFLe(fairness="demographic_parity", lam=lam, epsilon=None, p_s="pooled", seed=0,
                                  epochs=epochs, batch_size=256)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                model.fit(cv.federation(data, 0))
            pred, proba = model.predict(data.X_test), model.predict_proba(data.X_test)[:, 1]
            means = [proba[s == g].mean() for g in np.unique(s)]
            print(f"| {lam:g} | {epochs} | {np.mean(pred != y):.3f} | "
                  f"{cv.violation('demographic_parity', y, pred, s):.3f} | {max(means) - min(means):.3f} |", flush=True)


if __name__ == "__main__":
    main()
