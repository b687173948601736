"""Scaling of a private SteFFLe fit with the number of records: build, set-up, epoch, peak RSS.

Each configuration runs in its own subprocess (so its peak RSS is its own):

    python benches/python/scale.py                       # the table of docs/performance.md
    python benches/python/scale.py --one 2000000 100 1000 64 float64

Data: x ~ N(0, I_d), s ~ Bernoulli(0.4), y from a logistic model of x and s, silo of record i
is i mod N (so silos are not consecutive rows: the general case, rows of one matrix). Times are
wall clock, min over ``--reps`` epochs after the first; peak RSS is ``ru_maxrss`` of the process,
shown against the size of the feature matrix.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

import numpy as np


def make_data(n: int, d: int, dtype: str, seed: int = 0):
    rng = np.random.default_rng(seed)
    X = np.empty((n, d), dtype=np.float64)
    chunk = 1 << 16
    for a in range(0, n, chunk):
        X[a : a + chunk] = rng.standard_normal((min(chunk, n - a), d))
    s = (rng.random(n) < 0.4).astype(np.int64)
    w = rng.normal(size=d) / np.sqrt(d)
    z = np.zeros(n)
    for a in range(0, n, chunk):
        z[a : a + chunk] = X[a : a + chunk] @ w
    y = (z + 0.5 * s + rng.logistic(size=n) > 0).astype(np.int64)
    return X, y, s


def one(n: int, d: int, n_silos: int, batch: int, dtype: str, reps: int) -> dict:
    import pfair
    from pfair.protocol.simulation import Simulation
    from pfair.settings import SteFFLeSettings

    t = time.perf_counter()
    X, y, s = make_data(n, d, dtype)
    gen = time.perf_counter() - t
    t = time.perf_counter()
    fed = pfair.Federation.from_arrays(X, y, sensitive_features=s, silos=np.arange(n) % n_silos)
    build = time.perf_counter() - t
    est = pfair.SteFFLe(lam=1.0, epsilon=1.0, epochs=reps + 1, batch_size=batch, track_history=False, noise_seed=None)
    settings = est.settings()
    t = time.perf_counter()
    sim = Simulation(settings, fed, ledgers="new")
    setup = time.perf_counter() - t
    epoch_times = []
    last = [time.perf_counter()]

    def on_epoch(epoch, theta, w, info):
        now = time.perf_counter()
        epoch_times.append(now - last[0])
        last[0] = now
        return None

    t = time.perf_counter()
    last[0] = t
    sim.run(on_epoch=on_epoch)
    first = epoch_times[0]
    rest = epoch_times[1:] or epoch_times
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {"n": n, "d": d, "silos": n_silos, "batch": batch, "dtype": dtype, "generate_s": gen, "build_s": build,
            "setup_s": setup, "first_epoch_s": first, "epoch_min_s": min(rest), "epoch_median_s": float(np.median(rest)),
            "rounds_per_epoch": sim.rounds_per_epoch, "peak_rss_gb": rss / 1e9, "data_gb": X.nbytes / 1e9,
            "rss_over_data": rss / X.nbytes}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--one", nargs=5, metavar=("N", "D", "SILOS", "BATCH", "DTYPE"))
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--sizes", default="1e5,1e6,2e6,1e7")
    a = p.parse_args()
    if a.one:
        n, d, silos, batch, dtype = a.one
        print(json.dumps(one(int(float(n)), int(d), int(silos), int(batch), dtype, a.reps)))
        return
    rows = []
    for n in [int(float(v)) for v in a.sizes.split(",")]:
        for silos, batch in [(1000, 64), (1000, 256)] if n >= 1_000_000 else [(3, 256), (1000, 64)]:
            out = subprocess.run([sys.executable, __file__, "--one", str(n), "100", str(silos), str(batch), "float64",
                                  "--reps", str(a.reps)], capture_output=True, text=True)
            if out.returncode != 0:
                print(out.stderr[-2000:], file=sys.stderr)
                continue
            rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
            r = rows[-1]
            print(f"| {r['n']:.0e} × {r['d']} | {r['silos']} | {r['batch']} | {r['build_s']:.2f} | {r['setup_s']:.2f} | "
                  f"{r['epoch_min_s']:.3f} / {r['epoch_median_s']:.3f} | {r['peak_rss_gb']:.2f} | {r['rss_over_data']:.2f} |",
                  flush=True)


if __name__ == "__main__":
    main()
