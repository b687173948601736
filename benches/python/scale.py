"""Scaling of a private SteFFLe fit with the number of records: build, set-up, epoch, peak RSS.

Each configuration runs in its own subprocess (so its peak RSS is its own):

    python benches/python/scale.py                       # the table of docs/dev/performance-notebook.md
    python benches/python/scale.py --one 2000000 100 1000 64 float64
    python benches/python/scale.py --memory 1e7 100 1000 256 float32 --layout ranges --out docs/performance.md

Data: x ~ N(0, I_d), s ~ Bernoulli(0.4), y from a logistic model of x and s, silo of record i
is i mod N (so silos are not consecutive rows: the general case, rows of one matrix), or with
``--layout ranges`` silo j holds the j-th block of consecutive records (data that arrive silo by
silo; pfair then holds each silo as an index range of the matrix). Times are
wall clock, min over ``--reps`` epochs after the first. Peak RSS is the process's ``VmHWM``, reset
after the data are made (``/proc/self/clear_refs``), so it is the caller's arrays plus the peak of
pfair's own work (build, set-up, epochs); the generation's own peak is reported apart. It is shown
against the feature matrix and against the caller's X, y and s together.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

import numpy as np


def make_data(n: int, d: int, dtype: str, seed: int = 0, codes: str = "int64"):
    """Features, labels and groups, made block by block (no temporary of length n). ``codes``:
    the labels' and groups' type, ``"int64"`` (NumPy's default) or ``"int8"`` (what a caller
    short of memory passes)."""
    rng = np.random.default_rng(seed)
    X = np.empty((n, d), dtype=dtype)
    y = np.empty(n, dtype=codes)
    s = np.empty(n, dtype=codes)
    w = rng.normal(size=d) / np.sqrt(d)
    chunk = 1 << 16
    for a in range(0, n, chunk):
        m = min(chunk, n - a)
        X[a : a + m] = rng.standard_normal((m, d))
        s[a : a + m] = rng.random(m) < 0.4
        y[a : a + m] = X[a : a + m] @ w + 0.5 * s[a : a + m] + rng.logistic(size=m) > 0
    return X, y, s


def _peak_rss() -> int:
    """Peak resident bytes of this process since the last :func:`_reset_peak` (VmHWM)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _reset_peak() -> None:
    """Make the peak resident size start again from the current one (Linux: ``clear_refs`` 5)."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def one(n: int, d: int, n_silos: int, batch: int, dtype: str, reps: int, codes: str = "int64",
        layout: str = "interleaved", validation_share: float = 0.1) -> dict:
    import pfair
    from pfair.protocol.simulation import Simulation

    t = time.perf_counter()
    X, y, s = make_data(n, d, dtype, codes=codes)
    ids = np.arange(n) % n_silos if layout == "interleaved" else np.arange(n) * n_silos // n
    ids = ids.astype(np.int64 if codes == "int64" else np.uint16)
    gen = time.perf_counter() - t
    gen_peak = _peak_rss()
    _reset_peak()  # from here on: the peak of pfair's work alone, on top of the caller's arrays
    t = time.perf_counter()
    fed = pfair.Federation.from_arrays(X, y, sensitive_features=s, silos=ids)
    del ids
    build = time.perf_counter() - t
    peaks = {"build": _peak_rss()}
    _reset_peak()
    est = pfair.SteFFLe(lam=1.0, epsilon=1.0, epochs=reps + 1, batch_size=batch, track_history=False, noise_seed=None,
                        validation_share=validation_share)
    settings = est.settings()
    t = time.perf_counter()
    sim = Simulation(settings, fed, ledgers="new")
    setup = time.perf_counter() - t
    peaks["setup"] = _peak_rss()
    _reset_peak()
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
    peaks["epochs"] = _peak_rss()
    rss = max(peaks.values())
    data = X.nbytes + y.nbytes + s.nbytes
    return {"n": n, "d": d, "silos": n_silos, "batch": batch, "dtype": dtype, "codes": codes, "layout": layout,
            "validation_share": validation_share, "load_average": list(__import__("os").getloadavg()),
            "generate_s": gen,
            "build_s": build, "setup_s": setup, "first_epoch_s": first, "epoch_min_s": min(rest),
            "epoch_median_s": float(np.median(rest)), "rounds_per_epoch": sim.rounds_per_epoch,
            "generation_peak_gb": gen_peak / 1e9, **{f"{k}_peak_gb": v / 1e9 for k, v in peaks.items()},
            "peak_rss_gb": rss / 1e9, "data_gb": X.nbytes / 1e9,
            "rss_over_data": rss / X.nbytes, "rss_over_xys": rss / data}


def memory_table(a: argparse.Namespace) -> None:
    """Peak resident memory against the feature matrix, at the validation defaults and with
    ``validation_share=0`` (every epoch a checkpoint in both), as a Markdown table."""
    import os

    n, d, silos, batch, dtype = a.memory
    rows = []
    for share in (0.1, 0.0):
        out = subprocess.run([sys.executable, __file__, "--one", n, d, silos, batch, dtype, "--reps", str(a.reps),
                              "--layout", a.layout, "--codes", a.codes, "--validation-share", str(share)],
                             capture_output=True, text=True)
        if out.returncode != 0:
            raise SystemExit(out.stderr[-2000:])
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
    r0 = rows[0]
    lines = [f"{int(float(n)):.0e} × {d} {dtype} rows on {silos} silos (`--layout {a.layout}`), batch {batch}, "
             f"ε = 1, λ = 1, {a.reps + 1} epochs, each a checkpoint; load average (1 min) "
             + ", ".join(f"{r['load_average'][0]:.1f}" for r in rows) + f" on {os.cpu_count()} cores.", "",
             "| validation_share | feature matrix | peak RSS | peak / matrix | build / set-up / epochs peak (GB) | "
             "epoch min / median |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['validation_share']:g} | {r['data_gb']:.2f} GB | {r['peak_rss_gb']:.2f} GB | "
                     f"**{r['rss_over_data']:.2f}×** | {r['build_peak_gb']:.2f} / {r['setup_peak_gb']:.2f} / "
                     f"{r['epochs_peak_gb']:.2f} | {r['epoch_min_s']:.2f} / {r['epoch_median_s']:.2f} s |")
    table = "\n".join(lines) + "\n"
    print(table)
    if a.out:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from _markdown import write_between_markers

        write_between_markers(a.out, table, "scale.py", a.section)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--one", nargs=5, metavar=("N", "D", "SILOS", "BATCH", "DTYPE"))
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--codes", choices=("int64", "int8"), default="int64",
                   help="type of the caller's labels and groups (int8: a caller short of memory; silo ids uint16)")
    p.add_argument("--layout", choices=("interleaved", "ranges"), default="interleaved",
                   help="silo of record i: i mod SILOS (interleaved) or blocks of consecutive records (ranges)")
    p.add_argument("--validation-share", type=float, default=0.1,
                   help="each silo's held-out share (the estimators' default 0.1; 0: the checkpoint tables count "
                        "the training records)")
    p.add_argument("--sizes", default="1e5,1e6,2e6,1e7")
    p.add_argument("--memory", nargs=5, metavar=("N", "D", "SILOS", "BATCH", "DTYPE"),
                   help="the peak-memory table: one fit at the validation defaults and one with validation_share=0, "
                        "each in its own process")
    p.add_argument("--out", default=None, help="with --memory: write the table into this Markdown page")
    p.add_argument("--section", default="memory", help="name of the marked block of --out")
    a = p.parse_args()
    if a.memory:
        memory_table(a)
        return
    if a.one:
        n, d, silos, batch, dtype = a.one
        print(json.dumps(one(int(float(n)), int(d), int(silos), int(batch), dtype, a.reps, a.codes, a.layout,
                            a.validation_share)))
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
