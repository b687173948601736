"""One private SteFFLe epoch on real UCI Adult, in process, Python work included.

The issue's measurement: N = 3 silos, batch 256, ε = 1, λ = 1, a ``Simulation`` of many epochs
timed epoch by epoch through ``on_epoch`` (so each epoch's ledger charge, ``run_rounds`` call,
collapse check and bookkeeping are in it). Prints min and median per run.

    python benches/python/adult_epoch.py [--epochs 200] [--runs 3]

Compare builds by alternating runs of this script with each extension installed; absolute times
drift between runs on a shared VM (``docs/performance.md``).
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np

import pfair
from pfair.exceptions import PrivacyWarning
from pfair.protocol.simulation import Simulation


def one_run(fed: pfair.Federation, epochs: int) -> tuple[float, float]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyWarning)
        st = pfair.SteFFLe(epsilon=1.0, lam=1.0, batch_size=256, epochs=epochs).settings()
        sim = Simulation(st, fed, ledgers="new")
    stamps: list[float] = []

    def on_epoch(epoch: int, theta: np.ndarray, w: np.ndarray, info: dict) -> None:
        stamps.append(time.perf_counter())

    stamps.append(time.perf_counter())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sim.run(on_epoch=on_epoch)
    # The first epoch pays one-off costs (the collapse check reads its whole sample once).
    times = np.diff(stamps)[1:] * 1e3
    return float(times.min()), float(np.median(times))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--epochs", type=int, default=200)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    data = pfair.datasets.load_adult()
    fed = pfair.Federation.partition(data, 3, heterogeneity=0.0, by="age", seed=0)
    one_run(fed, 5)  # warm-up: imports, first calls
    for r in range(args.runs):
        mn, med = one_run(fed, args.epochs)
        print(f"run {r + 1}: one Adult epoch in process  min {mn:.3f} ms  median {med:.3f} ms", flush=True)


if __name__ == "__main__":
    main()
