"""The adaptive clip's cost: whole default private fits on Adult, ``clip="auto"`` (the adaptive clip of
the default private run) against ``clip=0.25``, alternated in one process so that each pair's ratio is
taken on the same stretch of a shared machine. Prints each pair's time per epoch, the median ratio
adaptive / fixed, the load average before and after, and the CPU.

    python benches/python/adaptive_clip.py [--pairs 5]

Used for docs/dev/performance-notebook.md, "The adaptive clip".
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
import warnings

import pfair


def cpu() -> str:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def per_epoch(fed, clip) -> float:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = pfair.SteFFLe(lam=1.0, epsilon=1.0, noise_seed=0, clip=clip)
        t = time.perf_counter()
        model.fit(fed, ledgers="new")
    return (time.perf_counter() - t) / len(model.history_)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", type=int, default=5)
    args = ap.parse_args()
    data = pfair.datasets.load("adult")
    fed = pfair.Federation.for_dataset(data, 3, heterogeneity=0.0, seed=0)
    before = os.getloadavg()
    ratios = []
    for i in range(args.pairs):
        fixed, adaptive = per_epoch(fed, 0.25), per_epoch(fed, "auto")
        ratios.append(adaptive / fixed)
        print(f"pair {i}: fixed {fixed * 1e3:.3f} ms, adaptive {adaptive * 1e3:.3f} ms an epoch, ratio {ratios[-1]:.3f}")
    after = os.getloadavg()
    print(f"median ratio adaptive / fixed {statistics.median(ratios):.2f} (pairs {min(ratios):.2f}-{max(ratios):.2f}); "
          f"load {before[0]:.2f} before, {after[0]:.2f} after; {os.cpu_count()} cores, {cpu()}")


if __name__ == "__main__":
    main()
