"""A loopback Flower round, end to end, as figures and ratios measured in one run.

Three silos of 300 records as separate SuperNodes on 127.0.0.1, one SuperLink, the ServerApp:
the seconds of each training round (push θ and W, every silo's ClientApp answers, the server's
step) as the ServerApp measures them, the seconds until every silo joined (the SuperNodes'
start and the hello round) reported beside them, and the CPU seconds a round costs the
deployment's long-lived processes (SuperLink, SuperNodes, their SuperExecs, warm processes and
silo hosts, the ServerApp; not the ClientApp forks, about 0.03-0.05 s each, which exit before
they can be read). Four configurations alternate, each run twice:

* ``tuned`` — what ``pfair deploy local`` runs: the SuperLink holds a pull that finds nothing
  until something is stored (:func:`pfair.flower.patches.hold_pulls`), skips the middleware that
  would hand a request on untouched (:func:`pfair.flower.patches.skip_idle_middleware`), the
  silo host keeps the silo's data between messages, and the Fleet and Runtime API calls pass
  Flower's acting ``BaseHTTPMiddleware`` layers without a task group each
  (:func:`pfair.flower.patches.direct_middleware`);
* ``indirect`` — ``tuned`` with Flower's ``BaseHTTPMiddleware`` layers as they are;
* ``polled`` — ``indirect`` without the hold and with every middleware: SuperNodes poll every
  0.05 s within 5 s of their last message (0.2 s otherwise), the server every 0.02 s (the
  tuning before the hold);
* ``before`` — polled at the pace before that (nodes and server every 0.2 s), no silo host.

Every configuration sends θ, W and a reply's parts as bytes of one config entry
(:mod:`pfair.flower.codec`; 3 Flower objects a message) and forks its ClientApps from a warm
process whose heap is frozen for the collector. The load average before and after is
printed: the machine is shared, and a round is mostly waiting for a core. Run with
``pytest benches/python/test_flower_round_bench.py -s``; ``docs/dev/performance-notebook.md``
records the figures.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("flwr", reason="the flower extra is not installed (pip install 'pfair[flower]')")

import pfair  # noqa: E402
from pfair.flower.deploy import descendants, run_deployment, write_federation  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))
from flower_support import data, settings  # noqa: E402

INDIRECT = {"PFAIR_DIRECT_MIDDLEWARE": "0"}
POLLED = {**INDIRECT, "PFAIR_LINK_HOLD": "0", "PFAIR_SKIP_MIDDLEWARE": "0"}
CONFIGS = {
    "tuned": {},
    "indirect": INDIRECT,
    "polled": POLLED,
    "before": {**POLLED, "PFAIR_SUPERNODE_BUSY_POLL": "0.2", "PFAIR_SERVER_POLL": "0.2", "PFAIR_SILO_HOST": "0"},
}
ROUNDS = 18
FIRST, LAST = 3, ROUNDS - 1  # CPU read after these rounds (the first rounds start processes)


def _cpu_seconds() -> dict[int, float]:
    """User + system CPU seconds of every live descendant of this process."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for pid in descendants([os.getpid()]):
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[pid] = (int(fields[11]) + int(fields[12])) / tick
    return out


def _deploy(env: dict) -> dict:
    X, y, s, silos = data()
    fed = pfair.Federation.from_arrays(X, y, sensitive_features=s, silos=silos)
    reads: dict[str, tuple[int, dict[int, float]]] = {}

    def on_round(progress: dict) -> None:  # read about twice a second while the run lasts
        key = "first" if FIRST <= progress["round"] < LAST else "last" if progress["round"] >= LAST else None
        if key and key not in reads:
            reads[key] = (progress["round"], _cpu_seconds())

    with tempfile.TemporaryDirectory() as d:
        cfgs = write_federation(fed, Path(d) / "data", fmt="parquet")
        for c in cfgs:
            c.update({"epsilon": 2.0, "noise-seed": 4})
        st = settings(epochs=3, batch_size=50, p_s=[0.5, 0.5])  # 6 rounds an epoch: 18 rounds
        res = run_deployment(st, cfgs, n_groups=2, n_classes=2, workdir=Path(d) / "flwr", round_timeout=60,
                             timeout=600, evaluate=False, env=env, on_round=on_round)
    assert res["status"] == "completed" and len(res["timing"]["round_s"]) == ROUNDS
    (r0, a), (r1, b) = reads["first"], reads["last"]
    res["cpu_per_round"] = sum(cpu - a.get(pid, 0.0) for pid, cpu in b.items()) / (r1 - r0)
    return res


def test_a_loopback_round_tuned_against_indirect_polled_and_before():
    load0, t0 = os.getloadavg(), time.monotonic()
    runs = {k: [] for k in CONFIGS}
    for _ in range(2):
        for name, env in CONFIGS.items():
            runs[name].append(_deploy(env))
    load1 = os.getloadavg()
    print(f"\nloopback Flower round, 3 silos of 300 records, {ROUNDS} rounds a run, 2 runs each (load average "
          f"{load0[0]:.2f} before, {load1[0]:.2f} after, {time.monotonic() - t0:.0f} s)")
    med, cpu = {}, {}
    for name, results in runs.items():
        rounds = np.concatenate([r["timing"]["round_s"] for r in results])
        joined = [r["timing"]["silos_joined_s"] for r in results]
        med[name] = float(np.median(rounds))
        cpu[name] = float(np.mean([r["cpu_per_round"] for r in results]))
        print(f"  {name:<6} round median {med[name]:.3f} s  p10 {np.percentile(rounds, 10):.3f} s  p90 "
              f"{np.percentile(rounds, 90):.3f} s  min {rounds.min():.3f} s  CPU {cpu[name]:.2f} s a round   "
              f"silos joined after {', '.join(f'{j:.1f}' for j in joined)} s")
    print(f"  median tuned/before {med['tuned'] / med['before']:.2f}  tuned/polled {med['tuned'] / med['polled']:.2f}"
          f"  tuned/indirect {med['tuned'] / med['indirect']:.2f}   CPU tuned/before {cpu['tuned'] / cpu['before']:.2f}"
          f"  tuned/polled {cpu['tuned'] / cpu['polled']:.2f}  tuned/indirect {cpu['tuned'] / cpu['indirect']:.2f}")
    # CPU a round is what a round is made of on a shared machine, and it moves less with the load
    # than wall time: the hold and the skipped middleware cut the long-lived processes' share
    # (0.66 measured with the machine's load average at 18-22).
    assert cpu["tuned"] / cpu["polled"] < 0.8, cpu
