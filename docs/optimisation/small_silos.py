"""A noise-free run on small silos: does it reach the model its loss defines? (docs/optimisation.md,
"A run's rounds on small tables").

For tables whose silos make few rounds an epoch (German: three silos of 225 training records, one
full-batch round an epoch; Bank, UCI's sample of 4,521 records: four; COMPAS: six;
``make_synthetic(3000, 20, silos=3, dependence=D, seed=1)`` for D = 1, 2, 3: three), the default λ = 0 fit without privacy (3 silos, seeds 0–2) under
``ROUNDS_PER_EPOCH_FLOOR`` = F for F = 1 (no floor: the rule before it), 8, 16 (today's) and 32:
the rounds its run makes, its log loss on the training split and its test error, against
scikit-learn's logistic regression on the pooled training split (``C=1e4``: the unpenalised
optimum; the silos hold out a tenth for validation, so a fit's loss cannot quite reach it).

    python docs/optimisation/small_silos.py        # about a minute on 2 cores; printout small_silos_log.txt
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import log_loss

import pfair
import pfair.settings

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import convergence as cv  # noqa: E402

FLOORS = (1, 8, 16, 32)
SEEDS = (0, 1, 2)


def load(name: str):
    if name.startswith("small"):
        return pfair.datasets.make_synthetic(3000, 20, silos=3, dependence=float(name[len("small"):]), seed=1)
    return pfair.datasets.load(name)


def main() -> None:
    today = pfair.settings.ROUNDS_PER_EPOCH_FLOOR
    print(f"λ = 0, no privacy, 3 silos; mean over seeds {', '.join(map(str, SEEDS))}; training loss: log loss on the "
          f"training split (the fit trains on nine tenths of it); F = {today} is today's floor\n")
    print("| table | records | features | rule | rounds | training loss | test error |")
    print("|---|---|---|---|---|---|---|")
    for name in ("german", "bank", "compas", "small1", "small2", "small3"):
        data = load(name)
        X, y = data.X_train, data.y_train
        lr = LogisticRegression(C=1e4, max_iter=20_000).fit(X, y)
        size = f"{len(y) + len(data.y_test):,} | {X.shape[1]}"
        print(f"| {name} | {size} | logistic regression | — | {log_loss(y, lr.predict_proba(X)):.4f} | "
              f"{np.mean(lr.predict(data.X_test) != data.y_test):.4f} |")
        for floor in FLOORS:
            pfair.settings.ROUNDS_PER_EPOCH_FLOOR = floor
            losses, errors, rounds = [], [], []
            for seed in SEEDS:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    m = pfair.SteFFLe(epsilon=None, lam=0.0, p_s="pooled", seed=seed).fit(cv.federation(data, seed))
                losses.append(log_loss(y, m.predict_proba(X)))
                errors.append(np.mean(m.predict(data.X_test) != data.y_test))
                rounds.append(int(m.n_rounds_))
            rule = "none (before)" if floor == 1 else f"F = {floor}" + (" (today)" if floor == today else "")
            print(f"| {name} | {size} | {rule} | {int(np.mean(rounds))} | {np.mean(losses):.4f} | "
                  f"{np.mean(errors):.4f} |", flush=True)
    pfair.settings.ROUNDS_PER_EPOCH_FLOOR = today


if __name__ == "__main__":
    main()
