"""The measured table of docs/postprocessing.md: private post-processing and SteFFLe against the
mixing line, on the bundled Adult, COMPAS and Credit Card data.

    python docs/postprocessing_tables.py                                  # print the table
    python docs/postprocessing_tables.py --write docs/postprocessing.md   # and replace its generated block

For each data set, ε ∈ {1, 3} and fairness notion (demographic parity, equalized odds), over
``--seeds`` runs (seed r: the training records split into 3 homogeneous silos by
``Federation.partition(seed=r)``, each silo's noise from ``noise_seed=r`` so that the table can be
re-made bit for bit; a real fit draws secret noise):

* ``PrivateThresholdOptimizer`` at its defaults (logistic regression on the pooled x and y, 20
  score bins, ``max_violation=0``), which uses s at prediction time;
* ``SteFFLe`` at its defaults with ``max_violation=0.04``, which does not;
* the mixing line of the λ = 0 logistic regression (the post-processing's base model) on the test
  set, read at each run's test violation: the error a model that does not use s can have for free.

Every figure is on the data set's test split; "beats" counts the runs below the line.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

DATASETS = ("adult", "compas", "credit_card")
EPSILONS = (1.0, 3.0)
NOTIONS = {"demographic_parity": "demographic_parity_difference", "equalized_odds": "equalized_odds_difference"}
STEFFLE_TARGET = 0.04


def runs(seeds: int) -> pd.DataFrame:
    import pfair
    from pfair import metrics
    from pfair.references import mixing_line

    rows = []
    for name in DATASETS:
        d = getattr(pfair.datasets, f"load_{name}")()
        for seed in range(seeds):
            for eps in EPSILONS:
                for notion, metric in NOTIONS.items():
                    fed = pfair.Federation.partition(d, n_silos=3, seed=seed)
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")  # the known noise_seed, warned on every fit
                        pto = pfair.PrivateThresholdOptimizer(constraints=notion, epsilon=eps, noise_seed=seed).fit(fed)
                        steffle = pfair.SteFFLe(fairness=notion, epsilon=eps, max_violation=STEFFLE_TARGET,
                                                noise_seed=seed, seed=seed).fit(fed, ledgers="new")
                    base = pto.estimator_.predict(d.X_test)
                    line = mixing_line(d.y_test, base, sensitive_features=d.s_test, fairness=notion)
                    preds = {"post-processing (uses s)": pto.predict(d.X_test, sensitive_features=d.s_test,
                                                                     random_state=seed),
                             f"SteFFLe, max_violation={STEFFLE_TARGET:g}": steffle.predict(d.X_test)}
                    for method, pred in preds.items():
                        err = float(np.mean(pred != d.y_test))
                        vio = float(getattr(metrics, metric)(d.y_test, pred, sensitive_features=d.s_test))
                        rows.append({"data": name, "epsilon": eps, "notion": notion, "method": method, "seed": seed,
                                     "error": err, "violation": vio, "line": line.error_at(vio),
                                     "beats": line.beats(err, vio), "base_error": line.error_model,
                                     "base_violation": line.violation_model, "constant_error": line.error_constant,
                                     "sigma_counts": float(pto.privacy_report_["sigma_counts"].max())})
    return pd.DataFrame(rows)


def _span(v: pd.Series) -> str:
    return f"{v.mean():.3f} ({v.min():.3f}–{v.max():.3f})"


def table(df: pd.DataFrame) -> str:
    out = ["| data | ε | notion | method | test error | test violation | mixing line at that violation | beats the "
           "line |", "|---|---|---|---|---|---|---|---|"]
    for (name, eps, notion, method), g in df.groupby(["data", "epsilon", "notion", "method"], sort=False):
        out.append(f"| {name} | {eps:g} | {notion.replace('_', ' ')} | {method} | {_span(g['error'])} | "
                   f"{_span(g['violation'])} | {_span(g['line'])} | {int(g['beats'].sum())} of {len(g)} |")
    base = df.groupby("data", sort=False).first()
    out += ["", "| data | λ = 0 base: test error | its DP / EO difference | constant predictor's error | "
            "per-cell noise std of one silo's histogram, ε = 1 / 3 |", "|---|---|---|---|---|"]
    for name in base.index:
        g = df[df["data"] == name]
        vio = {n: g[g["notion"] == n]["base_violation"].iloc[0] for n in NOTIONS}
        sig = [g[g["epsilon"] == e]["sigma_counts"].iloc[0] for e in EPSILONS]
        out.append(f"| {name} | {base.loc[name, 'base_error']:.3f} | {vio['demographic_parity']:.3f} / "
                   f"{vio['equalized_odds']:.3f} | {base.loc[name, 'constant_error']:.3f} | "
                   f"{sig[0]:.2f} / {sig[1]:.2f} |")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--write", default=None, help="markdown file whose generated:postprocessing block to replace")
    args = parser.parse_args(argv)
    df = runs(args.seeds)
    text = table(df)
    print(text)
    if args.write:
        from pfair.experiments.report import replace_blocks

        page = Path(args.write)
        provenance = f"generated by python docs/postprocessing_tables.py --seeds {args.seeds} ({len(df)} runs)"
        page.write_text(replace_blocks(page.read_text(), {"postprocessing": text}, provenance))
    return 0


if __name__ == "__main__":
    sys.exit(main())
