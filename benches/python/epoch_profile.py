"""Where an in-process Adult epoch spends its time, Python part included: the table of
``docs/dev/epoch_profile.md``.

A private SteFFLe fit on the bundled UCI Adult data (3 silos, batch 256, ε = 1, λ = 1) at the
estimators' defaults for validation (``validation_share=0.1``, a checkpoint after every epoch),
run for many epochs with timers around the pieces of an epoch (``time.perf_counter`` wrappers on
the methods named below, inclusive times; the wrappers cost about 1 µs per call and are included).
``validation_share=0`` (the checkpoint figures from the training records) is timed the same way.
Prints a Markdown table (µs per epoch, min over runs of the per-run mean) and, with ``--out``,
writes it with the load average of the run.

    python benches/python/epoch_profile.py [--epochs 300] [--runs 3] [--out docs/dev/epoch_profile.md --section now]
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import time
import warnings
from collections import defaultdict

import numpy as np

import pfair
from pfair.protocol import driver, server, silo, transports
from pfair.protocol import convergence
from pfair.protocol.simulation import Simulation
from pfair.providers.linear import CheckpointCounter

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _markdown import write_between_markers  # noqa: E402

#: (label, owner, attribute): the pieces timed, inclusive (nested pieces are also in their parent).
PIECES = [
    ("ledger charge of the epoch (`RustBatched.answering`)", transports.RustBatched, "answering"),
    ("rounds in Rust (`SiloSet.run_rounds`, in `RustBatched.rounds`)", transports.RustBatched, "rounds"),
    ("collapse and divergence check (`ConvergenceMonitor.after_epoch`)", convergence.ConvergenceMonitor, "after_epoch"),
    ("· its counts in Rust (`SiloSet.predict_counts`, in `ConvergenceMonitor._counts`)", convergence.ConvergenceMonitor,
     "_counts"),
    ("checkpoint, all of it (`Driver.checkpoint_step`)", driver.Driver, "checkpoint_step"),
    ("· the silos' releases (`transport.checkpoint`)", transports.RustBatched, "checkpoint"),
    ("·· one silo's release (`SiloParty.release_checkpoint`, all silos)", silo.SiloParty, "release_checkpoint"),
    ("·· the exact counts in Rust (`SiloSet.checkpoint_counts`, in `CheckpointCounter.counts`)", CheckpointCounter,
     "counts"),
    ("· the server's reading (`ServerParty.read_checkpoint`)", server.ServerParty, "read_checkpoint"),
    ("· selection bookkeeping (`Selector.offer`)", driver.Selector, "offer"),
]


class Timers:
    """Inclusive wall time and CPU time of the calling thread (``time.thread_time``) of each piece."""

    def __init__(self) -> None:
        self.total: dict[str, float] = defaultdict(float)
        self.cpu: dict[str, float] = defaultdict(float)
        self._orig: list = []

    def install(self) -> None:
        for label, owner, name in PIECES:
            if not hasattr(owner, name):
                continue
            orig = getattr(owner, name)
            self._orig.append((owner, name, orig))

            def wrap(orig=orig, label=label):
                @functools.wraps(orig)
                def timed(*a, **k):
                    t, c = time.perf_counter(), time.thread_time()
                    try:
                        return orig(*a, **k)
                    finally:
                        self.total[label] += time.perf_counter() - t
                        self.cpu[label] += time.thread_time() - c
                return timed

            setattr(owner, name, wrap())

    def remove(self) -> None:
        for owner, name, orig in self._orig:
            setattr(owner, name, orig)
        self._orig = []


def one_run(fed: pfair.Federation, epochs: int, share: float, timers: Timers | None) -> tuple[float, dict, float, dict]:
    """Mean epoch wall time (µs, the first epoch left out) and the pieces' µs per epoch; then the
    same in CPU time of the calling thread."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        st = pfair.SteFFLe(epsilon=1.0, lam=1.0, batch_size=256, epochs=epochs, validation_share=share).settings()
        sim = Simulation(st, fed, ledgers="new")
    stamps: list[float] = []
    cpu: list[float] = []
    if timers is not None:
        timers.total.clear()
        timers.cpu.clear()

    def on_epoch(*a) -> None:
        stamps.append(time.perf_counter())
        cpu.append(time.thread_time())

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        on_epoch()
        sim.run(on_epoch=on_epoch)
    t = np.diff(stamps)[1:] * 1e6
    c = np.diff(cpu)[1:] * 1e6
    pieces = {k: v * 1e6 / epochs for k, v in timers.total.items()} if timers is not None else {}
    pieces_cpu = {k: v * 1e6 / epochs for k, v in timers.cpu.items()} if timers is not None else {}
    return float(np.mean(t)), pieces, float(np.mean(c)), pieces_cpu


ROUNDS = "rounds in Rust (`SiloSet.run_rounds`, in `RustBatched.rounds`)"


def profile(epochs: int, runs: int) -> str:
    data = pfair.datasets.load_adult()
    fed = pfair.Federation.partition(data, 3, heterogeneity=0.0, by="age", seed=0)
    one_run(fed, 5, 0.1, None)  # warm-up
    load_before = os.getloadavg()
    timers = Timers()
    shares = (0.1, 0.0)
    results: dict[float, list] = {sh: [] for sh in shares}
    plain: dict[float, list] = {sh: [] for sh in shares}
    for _ in range(runs):
        for share in shares:
            plain[share].append(one_run(fed, epochs, share, None))
            timers.install()
            try:
                results[share].append(one_run(fed, epochs, share, timers))
            finally:
                timers.remove()
    load_after = os.getloadavg()
    lines = [f"Adult, 3 silos, batch 256, ε = 1, λ = 1, {epochs} epochs a run, {runs} runs; load average "
             f"(1, 5, 15 min) {load_before[0]:.2f} {load_before[1]:.2f} {load_before[2]:.2f} before, "
             f"{load_after[0]:.2f} {load_after[1]:.2f} {load_after[2]:.2f} after, on {os.cpu_count()} cores. "
             "µs per epoch, the smallest over the runs of a run's mean: wall time, and CPU time of the "
             "calling thread (`time.thread_time`; the Python part runs there, so its CPU time moves less "
             "with the load than its wall time).", ""]
    lines.append("| piece | share 0.1 (default), wall | share 0.1, CPU | validation_share=0, wall | share 0, CPU |")
    lines.append("|---|---|---|---|---|")
    lines.append(f"| **epoch, untimed run** | **{min(r[0] for r in plain[0.1]):.0f}** | "
                 f"**{min(r[2] for r in plain[0.1]):.0f}** | **{min(r[0] for r in plain[0.0]):.0f}** | "
                 f"**{min(r[2] for r in plain[0.0]):.0f}** |")
    lines.append(f"| epoch, timed run | {min(r[0] for r in results[0.1]):.0f} | {min(r[2] for r in results[0.1]):.0f} | "
                 f"{min(r[0] for r in results[0.0]):.0f} | {min(r[2] for r in results[0.0]):.0f} |")
    for label, _, _ in PIECES:
        vals = []
        for share in shares:
            vals += [min(r[1].get(label, 0.0) for r in results[share]), min(r[3].get(label, 0.0) for r in results[share])]
        lines.append(f"| {label} | " + " | ".join(f"{v:.0f}" for v in vals) + " |")
    rest, py = [], []
    for share in shares:
        for at in (0, 2):
            best = min(results[share], key=lambda r: r[at])
            top = sum(best[at + 1].get(label, 0.0) for label, _, _ in PIECES if not label.startswith("·"))
            rest.append(best[at] - top)
            py.append(min(r[at] - r[at + 1].get(ROUNDS, 0.0) for r in results[share]))
    lines.append("| the rest (history row, norms, λ and step bookkeeping, `on_epoch`) | "
                 + " | ".join(f"{v:.0f}" for v in rest) + " |")
    lines.append("| **the Python part (timed epoch − rounds; the checkpoint's and the collapse check's Rust counts "
                 "included)** | " + " | ".join(f"**{v:.0f}**" for v in py) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--epochs", type=int, default=300)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--out", default=None, help="write the table into this Markdown file (between its markers)")
    ap.add_argument("--section", default="now", help="name of the marked block of --out to replace")
    args = ap.parse_args()
    table = profile(args.epochs, args.runs)
    print(table)
    if args.out:
        write_between_markers(args.out, table, "epoch_profile.py", args.section)


if __name__ == "__main__":
    main()
