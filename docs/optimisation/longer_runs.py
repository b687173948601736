"""A private fit's run length: the acceptance's ε = 1 criteria before and after ``batch_size="auto"`` stretched the run.

Reads the acceptance's private runs of the stretched run (``convergence_runs_fixedclip.csv``: a
private attribute-mode fit at λ > 0 resolves ``batch_size="auto"`` to min(8192, smallest silo's
training records) and multiplies ``lr_theta``, ``epochs`` and ``decay_every`` by batch / 1024; the
fixed clip of 0.25 of its time, before the adaptive clip became the default) and the same
fits at the former defaults (``convergence_runs_short.csv``: batch min(1024, smallest silo), 20
epochs, ``lr_theta`` 0.5, decay every 10: the private runs ``convergence.py`` made on main b0b7230,
the last commit before the stretch), and prints, side by side, where the non-private point of a λ is at least 0.02 below its mixing
line: how many of the 6 private fits lie below their own λ = 0 model's line, and their mean margin;
then the other private criteria over the tables where that criterion applies. Printout:
``docs/optimisation/longer_runs_log.txt``.

    python docs/optimisation/longer_runs.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
import convergence as cv  # noqa: E402

HERE = Path(__file__).resolve().parent


def main() -> None:
    nonprivate = cv.reference_nonprivate()  # the non-private fits the run length was chosen against
    default = pd.concat([nonprivate, cv.load_runs(HERE / "convergence_runs_short.csv")])  # the former defaults
    # The stretched run with the clip of its time (0.25): the adaptive clip that followed it has its
    # own comparison (clip_quantile.py), so that this one keeps measuring the run length alone.
    longer = cv.load_runs(HERE / "convergence_runs_fixedclip.csv")
    tables = sorted(set(longer["table"]))
    eg = pd.DataFrame(columns=["table", "fairness"])
    crit = {}
    for name, private in (("default", default[default["epsilon"] == "1"]), ("longer", longer)):
        runs = pd.concat([nonprivate, private])
        crit[name] = cv.criteria(runs[runs["table"].isin(tables)], eg)
    a, b = crit["default"]["private"], crit["longer"]["private"]
    both = a.merge(b, on=["table", "lam", "np_below"], suffixes=("_default", "_longer"))
    margin = {name: (runs.assign(lam=runs["lam"].astype(float)).groupby(["table", "lam"])["below_line"].mean())
              for name, runs in (("default", default[default["epsilon"] == "1"]), ("longer", longer))}
    print("ε = 1; fits below their λ = 0 model's mixing line (of 6) and their mean margin, where the non-private "
          "point is ≥ 0.02 below its line\n")
    print("| table | λ | non-private below | former: below | former: margin | today: below | today: margin |")
    print("|---|---|---|---|---|---|---|")
    for _, r in both.iterrows():
        key = (r["table"], float(r["lam"]))
        print(f"| {r['table']} | {r['lam']:g} | {r['np_below']:.3f} | {int(r['private_below_default'])} | "
              f"{margin['default'][key]:+.3f} | {int(r['private_below_longer'])} | {margin['longer'][key]:+.3f} |")
    for name in ("default", "longer"):
        pr = crit[name]["private"]
        per = crit[name]["per_setting"]
        per = per[per["epsilon"] == "1"]
        private = default[default["epsilon"] == "1"] if name == "default" else longer
        private = private[private["table"].isin(tables)]
        settled = float((private["spread5"] <= 0.02).mean())
        label = "former (batch 1,024, 20 epochs)" if name == "default" else "stretched (batch up to 8,192; clip 0.25)"
        print(f"\n{label}: {int((pr['private_below'] >= 5).sum())} of {len(pr)} (table, λ) below the line in ≥ 5 of 6 fits; "
              f"settled {settled:.1%} of {len(private)} fits; mean violation rising by more than 0.02 with λ in "
              f"{int((per['max_rise'] > 0.02).sum())} of {len(per)} settings; per-seed spread above 0.05 in "
              f"{int((per['max_seed_spread'] > 0.05).sum())} of {len(per)}; mean seconds a fit {private['seconds'].mean():.1f}")


if __name__ == "__main__":
    main()
