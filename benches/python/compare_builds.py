"""Two builds of the extension side by side: the Adult epoch and a 10⁷-row epoch, run in turn.

Each build is a wheel installed into its own directory (``pip install --no-deps --target DIR
WHEEL``); every run is a new process with that directory first on ``PYTHONPATH``, and A and B
alternate (A B A B ...) so that the ratio of each pair is taken on the same stretch of a shared
machine. Prints each pair's figures and the median ratio A/B.

    python benches/python/compare_builds.py /tmp/pf-abi3 /tmp/pf-cp311 [--pairs 5] [--rows 1e7]

Used for issue 39: the abi3 wheel (A) against the version-specific build (B), docs/performance.md.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def run(target: str, argv: list[str]) -> str:
    env = {**os.environ, "PYTHONPATH": target}
    out = subprocess.run([sys.executable, *argv], env=env, capture_output=True, text=True, check=True)
    return out.stdout


def adult(target: str, epochs: int) -> tuple[float, float]:
    text = run(target, [str(HERE / "adult_epoch.py"), "--runs", "1", "--epochs", str(epochs)])
    mn, med = re.search(r"min ([\d.]+) ms\s+median ([\d.]+) ms", text).groups()
    return float(mn), float(med)


def rows(target: str, n: str) -> tuple[float, float]:
    text = run(target, [str(HERE / "scale.py"), "--one", n, "100", "1000", "256", "float32", "--layout", "ranges",
                        "--reps", "3"])
    r = json.loads(text.strip().splitlines()[-1])
    return r["epoch_min_s"] * 1e3, r["epoch_median_s"] * 1e3


def which(target: str) -> str:
    return run(target, ["-c", "import pfair._core as c; print(c.__file__.rsplit('/', 1)[-1])"]).strip()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--adult-epochs", type=int, default=300)
    ap.add_argument("--rows", default="1e7")
    ap.add_argument("--rows-pairs", type=int, default=3)
    args = ap.parse_args()
    print(f"A: {args.a} ({which(args.a)})\nB: {args.b} ({which(args.b)})", flush=True)
    for name, fn, arg, pairs in [("Adult epoch", adult, args.adult_epochs, args.pairs),
                                 (f"{args.rows} x 100 float32 epoch, batch 256, 1000 silos", rows, args.rows,
                                  args.rows_pairs)]:
        ratios_min, ratios_med = [], []
        for i in range(pairs):
            a, b = fn(args.a, arg), fn(args.b, arg)
            ratios_min.append(a[0] / b[0])
            ratios_med.append(a[1] / b[1])
            print(f"{name} pair {i + 1}: A min {a[0]:.3f} median {a[1]:.3f} ms | B min {b[0]:.3f} median {b[1]:.3f} ms"
                  f" | A/B min {ratios_min[-1]:.3f} median {ratios_med[-1]:.3f}", flush=True)
        print(f"{name}: A/B over {pairs} pairs, median of the pairs' ratios: min {statistics.median(ratios_min):.3f}, "
              f"median {statistics.median(ratios_med):.3f} (range of the medians' ratios "
              f"{min(ratios_med):.3f}-{max(ratios_med):.3f})", flush=True)


if __name__ == "__main__":
    main()
