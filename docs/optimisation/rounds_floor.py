"""A floor on the rounds of a whole noise-free run, scored on the protocol's validation splits
(docs/optimisation.md, "A run's rounds on small tables": what was adopted is a floor on the rounds
of an epoch, ``pfair.settings.ROUNDS_PER_EPOCH_FLOOR``, chosen by ``small_silos.py``).

The non-private defaults (20 epochs at a batch of 256, the step ×0.8 every 10 epochs) were chosen
on tables whose silos make 30 to 50 rounds an epoch; on a table of a few thousand records a silo
makes 1 to 6, so 20 epochs are 20 to 120 steps. The candidate: a run whose rounds carry no noise
(non-private, or private at λ = 0 in attribute mode) takes at least F rounds, its ``epochs`` and
``decay_every`` multiplied by the smallest integer k that makes ``k · epochs · R`` at least F
(R = ⌈mean silo training size / batch⌉, ``pfair.protocol.plan.rounds_per_epoch``), step and batch
unchanged. This script scores it the way the protocol scores a default
(``pfair.experiments.defaults``: validation error over the constant predictor's plus the validation
demographic-parity violation, mean over seeds 0–2 and λ ∈ {0, 1, 2, 8, 40}, then over tables;
non-private) for F = 0 (none: the rule before the floor of an epoch's rounds), 300, 1,000 and 3,000, on the protocol's splits of the
bundled tables and on three small synthetic tables, ``make_synthetic(3000, 20, silos=3,
dependence=D, seed=1)`` for D = 1, 2, 3 (a few thousand records, as many tables a user brings are).
Printout: ``docs/optimisation/rounds_floor_log.txt``; runs: ``rounds_floor.csv``.

    python docs/optimisation/rounds_floor.py            # ~6 min on 2 cores
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd

import pfair.settings
from pfair.experiments.defaults import N_SILOS
from pfair.protocol.plan import rounds_per_epoch
from pfair.settings import THETA_STEP_LAMBDA, SteFFLeSettings
from pfair.validation import training_sizes

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from private_defaults import part as synthetic_part  # noqa: E402
from run_length import scan, score_tables  # noqa: E402

TABLES = ["adult", "bank", "census_kdd", "compas", "credit_card", "german", "law_school", "small1", "small2", "small3"]
FLOORS = (0, 300, 1000, 3000)
LAMS = (0.0, 1.0, 2.0, 8.0, 40.0)


def part(name: str) -> dict:
    """The protocol's split of a bundled table, or ``small<D>``: ``make_synthetic(3000, 20, silos=3,
    dependence=D, seed=1)``'s, split as the protocol splits the other synthetic tables."""
    if name.startswith("small"):
        return synthetic_part("synthetic" + name[len("small"):], n=3000, d=20)
    return synthetic_part(name)


#: These floors were measured on top of the rule before :data:`pfair.settings.ROUNDS_PER_EPOCH_FLOOR`
#: (no floor: "floor 0" below), which the script keeps so that its runs reproduce.
pfair.settings.ROUNDS_PER_EPOCH_FLOOR = 1


def resolved(p: dict, floor: int, lam: float) -> dict:
    """The batch, epochs and decay of the default non-private run on ``p``'s silos under ``floor``
    (0: none): the settings ``batch_size="auto"`` resolves to, then epochs and decay period times
    ``k = ⌈floor / (epochs · R)⌉`` where that is above 1."""
    sizes = np.bincount(p["silos"], minlength=N_SILOS)
    # The run of 20 epochs these floors were measured on: resolved at λ ≤ λ_c, so that "auto" does
    # not also stretch it by λ (SteFFLeSettings.lambda_stretch, which came after; the batch and the
    # written-out run do not depend on λ otherwise).
    st = SteFFLeSettings(epsilon=None, lam=min(lam, THETA_STEP_LAMBDA))
    st = st.for_sizes(training_sizes(sizes, st.validation_share))
    out = st.written_out()
    k = max(1, math.ceil(floor / (st.epochs * rounds_per_epoch(st.sampling, training_sizes(sizes, st.validation_share),
                                                                int(st.batch_size)))))
    out["epochs"], out["decay_every"] = out["epochs"] * k, out["decay_every"] * k
    return {key: out[key] for key in ("batch_size", "lr_theta", "epochs", "decay_every", "lr_decay")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tables", nargs="+", default=TABLES)
    ap.add_argument("--floors", nargs="+", type=int, default=list(FLOORS))
    ap.add_argument("--out", default=str(HERE / "rounds_floor.csv"))
    ap.add_argument("--table-only", action="store_true", help="read --out and print the table")
    args = ap.parse_args()
    if not args.table_only:
        scan(args.tables, part, "floor", args.floors, LAMS, resolved, None, {}, args.out)
    df = pd.read_csv(args.out)
    df["score"] = df["val_error"] / df["trivial"] + df["val_dp"]
    table(df)


def table(df: pd.DataFrame) -> None:
    """:func:`run_length.score_tables` per floor against none (floor 0), then the λ = 0 validation
    error per table and the epochs each floor resolves to."""
    score_tables(df, "floor", 0, "non-private; score = validation error / constant's + validation DP (lower is "
                 "better); mean over seeds and λ ∈ {" + ", ".join(f"{v:g}" for v in sorted(df["lam"].unique()))
                 + "}; floor 0: none", base_name="none")
    zero = df[df["lam"] == 0].groupby(["floor", "data"])["val_error"].mean().unstack("data")
    print("\nλ = 0: validation error (mean over seeds)\n")
    print("| floor | " + " | ".join(zero.columns) + " |")
    print("|---|" + "---|" * len(zero.columns))
    for floor, r in zero.iterrows():
        print(f"| {floor} | " + " | ".join(f"{v:.4f}" for v in r) + " |")
    epochs = df.drop_duplicates(["data", "floor"]).pivot(index="floor", columns="data", values="epochs")
    print("\nepochs each floor resolves to (batch: " + ", ".join(
        f"{d} {int(b)}" for d, b in df.drop_duplicates("data")[["data", "batch_size"]].itertuples(index=False)) + ")\n")
    print("| floor | " + " | ".join(epochs.columns) + " |")
    print("|---|" + "---|" * len(epochs.columns))
    for floor, r in epochs.iterrows():
        print(f"| {floor} | " + " | ".join(str(int(v)) for v in r) + " |")


if __name__ == "__main__":
    main()
