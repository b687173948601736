"""What a huge λ does under the default (scaled) θ step: the figures of docs/optimisation.md,
section 2, behind ``pfair.settings.LAM_SCALED_LIMIT`` and its warning.

Non-private SteFFLe at its defaults on the bundled Adult data (3 silos, ``Federation.for_dataset``
with h = 0, seed 0), λ ∈ {100, 400, 1,000, 10⁹}: test error and demographic-parity difference of the
returned model, the epochs it ran and the warnings it gave. Printout: ``huge_lambda_log.txt``.

    python docs/optimisation/huge_lambda.py > docs/optimisation/huge_lambda_log.txt   # ~30 s
"""

from __future__ import annotations

import warnings

import numpy as np

import pfair

LAMS = (100.0, 400.0, 1000.0, 1e9)


def main() -> None:
    data = pfair.datasets.load("adult")
    fed = pfair.Federation.for_dataset(data, 3, heterogeneity=0.0, seed=0)
    print(f"Adult, non-private, defaults, seed 0; constant predictor's test error "
          f"{pfair.metrics.trivial_error(data.y_test):.3f}\n")
    print("| λ | epochs | test error | DP | warnings |")
    print("|---|---|---|---|---|")
    for lam in LAMS:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            model = pfair.SteFFLe(epsilon=None, lam=lam, seed=0).fit(fed)
        pred = model.predict(data.X_test)
        dp = pfair.metrics.demographic_parity_difference(data.y_test, pred, sensitive_features=data.s_test)
        kinds = ", ".join(sorted({type(w.message).__name__ for w in caught} - {"NonPrivateFitWarning"}))
        print(f"| {lam:g} | {len(model.history_)} | {np.mean(pred != data.y_test):.3f} | {dp:.3f} | {kinds or '-'} |")


if __name__ == "__main__":
    main()
