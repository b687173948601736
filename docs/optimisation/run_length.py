"""A private fit's run length as the default: ``batch_size="auto"`` that stretches the run, on validation splits.

``SteFFLeSettings.for_sizes`` resolves ``batch_size="auto"`` of a private attribute-mode fit that
sends ψ to ``m = min(cap, smallest silo)`` and multiplies ``lr_theta``, ``epochs`` and
``decay_every`` by ``k = max(1, m / 1024)`` (docs/optimisation.md, "A private fit's run length").
This script scores that rule the way the protocol scores a default (validation error over the
constant predictor's plus the validation demographic-parity violation, mean over seeds 0–2 and
λ ∈ {1, 2, 8, 40}, then over data sets; ε = 1) for the cap at 1024 (the rule before: k = 1, the
former default), 4096 and 8192, on the protocol's splits of the bundled tables and on the three
synthetic tables of ``private_defaults.py`` (``make_synthetic(60000, 40, silos=3, dependence=D,
seed=1)``). Each configuration is the settings ``for_sizes`` resolves for the silos' training
shares, written out (``SteFFLeSettings.written_out``: with the default private run's adaptive clip
and decay), so the script checks the code's rule, not a copy of it. Printout:
``docs/optimisation/run_length_log.txt``; runs: ``run_length.csv``.

    python docs/optimisation/run_length.py            # ~25 min on 2 cores
    python docs/optimisation/run_length.py --caps 16384 --out run_length_16384.csv   # one more cap, ~3 min
    python docs/optimisation/run_length.py --table-only --extra docs/optimisation/run_length_16384.csv
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterable

import numpy as np
import pandas as pd

import pfair.settings as settings_module
from pfair.experiments.defaults import BASE1, N_SILOS, SEEDS, evaluate
from pfair.settings import SteFFLeSettings
from pfair.validation import training_sizes

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from private_defaults import DATASETS, LAMS, part  # noqa: E402

CAPS = (1024, 4096, 8192)


def resolved(p: dict, cap: int, lam: float) -> dict:
    """The batch, step, epochs, decay and clip ``batch_size="auto"`` resolves to under ``cap``."""
    sizes = np.bincount(p["silos"], minlength=N_SILOS)
    before = settings_module.AUTO_BATCH_PRIVATE
    settings_module.AUTO_BATCH_PRIVATE = cap
    try:
        st = SteFFLeSettings(epsilon=1.0, lam=lam, **{**BASE1, "clip": "auto"})
        st = st.for_sizes(training_sizes(sizes, st.validation_share))
    finally:
        settings_module.AUTO_BATCH_PRIVATE = before
    # Written out as the default private run resolves them (the adaptive clip and the decay "auto"
    # chose with them), which a batch stated to evaluate() would otherwise turn into a user's run.
    return st.written_out()


def scan(names: list[str], part_of: Callable[[str], dict], column: str, values: list, lams: Iterable[float],
         resolve: Callable[[dict, Any, float], dict], epsilon: float | None, base: dict, out: str) -> None:
    """Every table of ``names`` (split by ``part_of``) under each of ``values`` of a rule's constant
    (``column`` in the runs), λ of ``lams`` and the protocol's seeds: the settings ``resolve(part,
    value, λ)`` gives, on top of ``base``, scored by the protocol's ``evaluate`` at ``epsilon``. A
    configuration two values resolve alike is fitted once. Writes the runs to ``out`` table by table."""
    t0 = time.time()
    rows = []
    for name in names:
        p = part_of(name)
        done: dict = {}
        for value in values:
            for lam in lams:
                cfg = resolve(p, value, lam)
                for seed in SEEDS:
                    key = (*cfg.values(), lam, seed)  # e.g. a cap above the silos resolves like a smaller one
                    if key not in done:
                        t = time.time()
                        done[key] = dict(evaluate(p, lam, seed, epsilon, **{**base, **cfg}), seconds=time.time() - t)
                    rows.append(dict(data=name, **{column: value}, lam=lam, seed=seed, **cfg, **done[key]))
        print(f"  {name}: {len(done)} fits ({time.time() - t0:.0f} s)", flush=True)
        pd.DataFrame(rows).to_csv(out, index=False)
    print(f"{len(rows)} rows, {time.time() - t0:.0f} s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--datasets", nargs="+", default=DATASETS)
    ap.add_argument("--caps", nargs="+", type=int, default=list(CAPS))
    ap.add_argument("--out", default=str(HERE / "run_length.csv"))
    ap.add_argument("--table-only", action="store_true", help="read --out and print the table")
    ap.add_argument("--extra", nargs="+", default=[], help="runs of more caps (CSVs of --out) printed with --out's")
    args = ap.parse_args()
    if not args.table_only:
        scan(args.datasets, part, "cap", args.caps, LAMS, resolved, 1.0, BASE1, args.out)
    df = pd.concat([pd.read_csv(path) for path in [args.out, *args.extra]], ignore_index=True)
    df["score"] = df["val_error"] / df["trivial"] + df["val_dp"]
    table(df)


def score_tables(df: pd.DataFrame, column: str, base: Any, header: str, base_name: str | None = None) -> None:
    """Per value of a rule's constant (``column``): its score on each data set (mean over λ and
    seeds), the mean over data sets, its difference from ``base``'s with the standard error of that
    mean difference over the data sets (paired), how many data sets it improves and worsens, and the
    mean seconds a fit; then the score per λ. ``header`` opens the printout; ``base_name`` names
    ``base`` in the difference's column (default: its value)."""
    per = df.groupby([column, "data"])["score"].mean().unstack("data")
    diff = per.sub(per.loc[base], axis=1)
    out = per.copy()
    out["mean"] = per.mean(axis=1)
    vs = f"vs {base if base_name is None else base_name}"
    out[vs] = diff.mean(axis=1)
    out["s.e."] = diff.std(axis=1, ddof=1) / np.sqrt(diff.shape[1])
    out["better"] = (diff < -1e-12).sum(axis=1)
    out["worse"] = (diff > 1e-12).sum(axis=1)
    out["seconds"] = df.groupby(column)["seconds"].mean()
    print(header + "\n")
    print(f"| {column} | " + " | ".join(out.columns) + " |")
    print("|---|" + "---|" * len(out.columns))
    for value, r in out.iterrows():
        cells = [f"{v:+.3f}" if c == vs else f"{int(v)}" if c in ("better", "worse") else
                 f"{v:.2f}" if c == "seconds" else f"{v:.3f}" for c, v in r.items()]
        print(f"| {value} | " + " | ".join(cells) + " |")
    lam = df.groupby([column, "lam"])["score"].mean().unstack("lam")
    print("\nmean over data sets and seeds, per λ\n")
    print(f"| {column} | " + " | ".join(f"λ = {v:g}" for v in lam.columns) + " |")
    print("|---|" + "---|" * len(lam.columns))
    for value, r in lam.iterrows():
        print(f"| {value} | " + " | ".join(f"{v:.3f}" for v in r) + " |")


def table(df: pd.DataFrame) -> None:
    """:func:`score_tables` per cap against the cap of 1024 (the former default), then what the
    rule resolves to."""
    score_tables(df, "cap", 1024, "ε = 1; score = validation error / constant's + validation DP (lower is better); "
                 "mean over seeds and λ")
    cfg = df.drop_duplicates(["data", "cap"])[["data", "cap", "batch_size", "lr_theta", "epochs", "decay_every",
                                               "lr_decay", "clip"]]
    print("\nwhat the rule resolves to (λ > 0)\n")
    print(cfg.to_string(index=False))

if __name__ == "__main__":
    main()
