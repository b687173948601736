"""The Adult epoch against the sparse pass it must make: ratios in one run (issue 40, item 4).

An epoch of SteFFLe's linear model reads every training record once: its logit ``x·θ`` and its
contribution ``xᵀr`` to a gradient. The floor taken here is exactly that work done by SciPy on
one thread, over the same training rows (the three silos' rows after the validation split, as
one CSR matrix): ``z = X @ θ`` then ``g = Xᵀ @ r`` with ``r = z`` (the value of r does not change
the cost). Against it, in the same run and alternated with it:

* the whole epoch in process at the estimators' validation defaults (``validation_share=0.1``,
  a checkpoint after every epoch), timed epoch by epoch through ``on_epoch``;
* its rounds in Rust alone (``SiloSet.run_rounds``, timed around ``RustBatched.rounds``);
* the Python part: the epoch minus its rounds (the ledger charge, the collapse check, the
  checkpoint with its Rust counts, the bookkeeping), from the same epochs.

Batch 256 (45 rounds, the issue's setting) and ``batch_size="auto"`` (the estimators' default: a
private fit at λ > 0 takes a batch of 8,192, 2 rounds an Adult epoch, and stretches its run to
eight times ``--epochs`` epochs, each of them timed). Prints min and median (µs) and the ratios of
the minima and of the medians to the sparse pass, with the load average before and after.

    python benches/python/floor_ratio.py [--epochs 200] [--runs 3] [--out docs/dev/performance-notebook.md --section floor]
"""

from __future__ import annotations

import argparse
import os
import time
import warnings

import sys

import numpy as np
import scipy.sparse as sp

import pfair
from pfair.protocol import transports
from pfair.protocol.simulation import Simulation

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _markdown import write_between_markers  # noqa: E402


def epochs_of(fed: pfair.Federation, epochs: int, batch: int | str) -> tuple[np.ndarray, np.ndarray, Simulation]:
    """Per-epoch wall times and per-epoch times of the rounds in Rust (µs), the first epoch left out."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        st = pfair.SteFFLe(epsilon=1.0, lam=1.0, batch_size=batch, epochs=epochs).settings()
        sim = Simulation(st, fed, ledgers="new")
    stamps: list[float] = []
    rounds: list[float] = []
    orig = transports.RustBatched.rounds

    def timed(self, *a, **k):
        t = time.perf_counter()
        try:
            return orig(self, *a, **k)
        finally:
            rounds.append(time.perf_counter() - t)

    transports.RustBatched.rounds = timed
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            stamps.append(time.perf_counter())
            sim.run(on_epoch=lambda *a: stamps.append(time.perf_counter()))
    finally:
        transports.RustBatched.rounds = orig
    return np.diff(stamps)[1:] * 1e6, np.asarray(rounds[1:]) * 1e6, sim


def sparse_pass(X: sp.csr_matrix, reps: int) -> np.ndarray:
    """µs of ``z = X @ θ; g = Xᵀ @ z`` on one thread, ``reps`` times."""
    theta = np.linspace(-0.5, 0.5, X.shape[1])
    XT = X.T  # a CSC view: Xᵀ @ r reads the CSR arrays once
    out = np.empty(reps)
    for i in range(reps):
        t = time.perf_counter()
        z = X @ theta
        g = XT @ z
        out[i] = time.perf_counter() - t
    assert np.isfinite(g).all()
    return out * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--epochs", type=int, default=200)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--out", default=None, help="write the table into this Markdown file (between its markers)")
    ap.add_argument("--section", default="floor", help="name of the marked block of --out to replace")
    args = ap.parse_args()
    data = pfair.datasets.load_adult()
    fed = pfair.Federation.partition(data, 3, heterogeneity=0.0, by="age", seed=0)
    _, _, sim = epochs_of(fed, 5, 256)  # warm-up, and the training rows of the split
    X = sp.csr_matrix(np.vstack([np.asarray(s.X, dtype=np.float64) for s in sim.fed.silos]))
    sparse_pass(X, 50)
    load_before = os.getloadavg()
    res: dict[str, list] = {"csr": [], **{f"{k}{b}": [] for b in (256, "auto") for k in ("epoch", "rust", "py")}}
    for _ in range(args.runs):
        for batch in (256, "auto"):
            res["csr"].append(sparse_pass(X, args.epochs))
            ep, ru, _ = epochs_of(fed, args.epochs, batch)
            res[f"epoch{batch}"].append(ep)
            res[f"rust{batch}"].append(ru)
            res[f"py{batch}"].append(ep - ru)
    load_after = os.getloadavg()
    csr = np.concatenate(res["csr"])
    lines = [f"Adult's training rows: {X.shape[0]} × {X.shape[1]}, {X.nnz} non-zeros (CSR); {args.epochs} epochs a run, "
             f"{args.runs} runs, alternated with the pass; load average (1, 5, 15 min) {load_before[0]:.2f} "
             f"{load_before[1]:.2f} {load_before[2]:.2f} before, {load_after[0]:.2f} {load_after[1]:.2f} "
             f"{load_after[2]:.2f} after, on {os.cpu_count()} cores.", ""]
    c_min, c_med = float(np.min(csr)), float(np.median(csr))
    lines.append("| what | min µs | median µs | min / pass min | median / pass median |")
    lines.append("|---|---|---|---|---|")
    lines.append(f"| SciPy CSR pass, one thread (`X @ θ`, `Xᵀ @ r`) | {c_min:.0f} | {c_med:.0f} | 1 | 1 |")
    names = {"epoch": "whole epoch at the validation defaults", "rust": "its rounds in Rust (`run_rounds`)",
             "py": "its Python part (epoch − rounds)"}
    for batch in (256, "auto"):
        for k in ("epoch", "rust", "py"):
            v = np.concatenate(res[f"{k}{batch}"])
            mn, md = float(np.min(v)), float(np.median(v))
            lines.append(f"| batch {batch}: {names[k]} | {mn:.0f} | {md:.0f} | {mn / c_min:.2f} | {md / c_med:.2f} |")
    table = "\n".join(lines) + "\n"
    print(table)
    if args.out:
        write_between_markers(args.out, table, "floor_ratio.py", args.section)


if __name__ == "__main__":
    main()
