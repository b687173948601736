"""W's step in a private fit at the λ a user picks, chosen on validation splits.

Under the scaled θ step (docs/optimisation.md, section 7) θ moves at η_θ / max(1, λ), while W's
normalised step stays η_W whatever λ. Without noise a fast W only helps (it tracks its best
response W*(θ) more closely). With noise it also carries the noise of the W release into the
fairness term: W's stationary jitter around W*(θ) grows as √η_W · σ_W, while the distance it
must track per round shrinks with θ's step. This script scores, on the validation splits of
``private_defaults.py`` (the protocol's score: validation error over the constant predictor's plus
the validation violation; mean over seeds 0–2 and λ, then over the data sets), private fits at
ε = 1 whose W step in noisy rounds is η_W / max(1, λ)^a for a ∈ {0 (today), 1/2, 1}, at
λ ∈ {1, 2, 8, 40}, under demographic parity and equalized odds. Printout:
``docs/optimisation/private_w_step_log.txt``; runs: ``private_w_step.csv``.

    python docs/optimisation/private_w_step.py        # ~10 min on 2 cores
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from private_defaults import DATASETS, part  # noqa: E402

from pfair.experiments.defaults import SEEDS  # noqa: E402

LAMS = (1.0, 2.0, 8.0, 40.0)
POWERS = (0.0, 0.5, 1.0)
NOTIONS = ("demographic_parity", "equalized_odds")
LR_W = 0.5  # SteFFLe's default lr_w


def evaluate(p: dict, lam: float, seed: int, fairness: str, power: float) -> dict:
    import pfair
    from pfair import metrics
    from pfair.references import FAIRNESS_METRICS

    model = pfair.SteFFLe(lam=lam, epsilon=1.0, seed=seed, noise_seed=1000 + seed, fairness=fairness,
                          track_history=False, lr_w=LR_W / max(1.0, lam) ** power)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.fit(p["X"], p["y"], sensitive_features=p["s"], silos=p["silos"])
    pred = model.predict(p["Xv"])
    v = getattr(metrics, FAIRNESS_METRICS[fairness])(p["yv"], pred, sensitive_features=p["sv"])
    return dict(val_error=float(np.mean(pred != p["yv"])), val_violation=float(v),
                trivial=float(metrics.trivial_error(p["yv"])))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--datasets", nargs="+", default=DATASETS)
    ap.add_argument("--out", default=str(HERE / "private_w_step.csv"))
    ap.add_argument("--table-only", action="store_true")
    args = ap.parse_args()
    if not args.table_only:
        t0 = time.time()
        rows = []
        for name in args.datasets:
            p = part(name)
            for fairness in NOTIONS:
                for lam in LAMS:
                    for seed in SEEDS:
                        for power in POWERS:
                            # At λ ≤ 1 every power gives the same step: fitted once.
                            if lam <= 1.0 and power != POWERS[0]:
                                r = dict(rows[-1])
                                r["power"] = power
                                rows.append(r)
                                continue
                            rows.append(dict(data=name, fairness=fairness, lam=lam, seed=seed, power=power,
                                             **evaluate(p, lam, seed, fairness, power)))
            print(f"  {name}: {time.time() - t0:.0f} s", flush=True)
            pd.DataFrame(rows).to_csv(args.out, index=False)
    table(pd.read_csv(args.out))


def table(df: pd.DataFrame) -> None:
    df = df.assign(score=df["val_error"] / df["trivial"] + df["val_violation"])
    per = df.groupby(["fairness", "power", "lam", "data"])["score"].mean().reset_index()
    for fairness, g in per.groupby("fairness"):
        tab = g.pivot_table(index="power", columns="lam", values="score", aggfunc="mean")
        base = g[g.power == 0.0].set_index(["lam", "data"])["score"]
        diff = g.set_index(["lam", "data"]).groupby("power")["score"].apply(lambda s: s - base)
        by_data = diff.groupby(level=["power", "data"]).mean()
        tab["mean"] = g.groupby("power")["score"].mean()
        tab["vs a = 0"] = by_data.groupby(level="power").mean()
        tab["s.e."] = by_data.groupby(level="power").std(ddof=1) / np.sqrt(by_data.groupby(level="power").size())
        tab["tables better"] = (by_data < 0).groupby(level="power").sum()
        print(f"\n{fairness}: score by the power a of η_W / max(1, λ)^a (columns: λ; mean over data sets)\n")
        print("| a | " + " | ".join(f"λ = {c:g}" if isinstance(c, float) else str(c) for c in tab.columns) + " |")
        print("|---|" + "---|" * len(tab.columns))
        for a, r in tab.iterrows():
            cells = [f"{v:+.3f}" if c == "vs a = 0" else (f"{int(v)}" if c == "tables better" else f"{v:.3f}")
                     for c, v in r.items()]
            print(f"| {a:g} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
