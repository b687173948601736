"""The defaults protocol's step and batch, re-checked under the scaled θ step (docs/optimisation.md).

The defaults (``lr_theta`` 0.5, 20 epochs, batch 1024 private / 256 non-private) were chosen by
``python -m pfair.experiments.defaults`` when the θ step was constant in λ. With
``theta_step="scaled"`` the step at λ is ``lr_theta / (1 + λ)``, so the protocol's λ ∈ {1, 2, 8}
see a smaller step than they did. This script re-runs the protocol's stage 1 (same splits,
regimes, λ, seeds and score: validation error over the constant predictor's plus the validation
demographic-parity violation, mean over seeds, λ and then data sets) on the neighbourhood of the
defaults: ``lr_theta`` ∈ {0.5, 1, 2} × batch ∈ {256, 1024} at 20 epochs, clip 0.25, lr_w 0.5,
radius 2. Printout: ``docs/optimisation/defaults_recheck_log.txt``.

    python docs/optimisation/defaults_recheck.py
"""

from __future__ import annotations

import argparse
import time

from pfair.experiments.defaults import BASE1, run_stage, scores, split

DATASETS = ["adult", "bank", "census_kdd", "compas", "credit_card", "german", "law_school"]
SPACE = [dict(batch_size=b, lr_theta=lr, epochs=20) for b in (256, 1024) for lr in (0.5, 1.0, 2.0)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--datasets", nargs="+", default=DATASETS)
    args = ap.parse_args()
    t0 = time.time()
    parts = [split(name) for name in args.datasets]
    df = run_stage(parts, SPACE, {"private": BASE1, "non-private": BASE1}, "recheck")
    table = scores(df, ["batch_size", "lr_theta"])
    print("\n| batch | lr_theta | score (non-private) | score (private) |")
    print("|---|---|---|---|")
    for (b, lr), r in table.iterrows():
        print(f"| {b} | {lr:g} | {r['non-private']:.3f} | {r['private']:.3f} |")
    for regime in ("private", "non-private"):
        (b, lr) = table[regime].idxmin()
        print(f"best {regime}: batch {b}, lr_theta {lr:g} (score {table[regime].min():.3f})")
    print(f"{len(df)} rows, {time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
