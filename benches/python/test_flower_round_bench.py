"""A loopback Flower round, end to end, as figures and a ratio measured in one run.

Three silos of 300 records as separate SuperNodes on 127.0.0.1, one SuperLink, the ServerApp:
the seconds of each training round (push θ and W, every silo's ClientApp answers, the server's
step) as the ServerApp measures them, and the seconds until every silo joined (the SuperNodes'
start and the hello round) reported beside them. Three configurations alternate, each run twice:

* ``tuned`` — what ``pfair deploy local`` runs: SuperNodes that poll the SuperLink every 0.05 s
  within 5 s of their last message (0.2 s otherwise), a server that polls every 0.02 s, reply
  objects pulled after 0.02 s;
* ``no host`` — the same without the silo host (each ClientApp reads its shard and builds its
  Rust data set, :mod:`pfair.flower.silo_host`);
* ``before`` — the same processes at the pace before (nodes 0.2 s, server 0.2 s, no silo host).

The load average before and after is printed: the machine is shared, and a round is mostly
waiting and process work. Run with ``pytest benches/python/test_flower_round_bench.py -s``;
``docs/dev/performance-notebook.md`` records the figures.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("flwr", reason="the flower extra is not installed (pip install 'pfair[flower]')")

import pfair  # noqa: E402
from pfair.flower.deploy import run_deployment, write_federation  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))
from flower_support import data, settings  # noqa: E402

CONFIGS = {
    "tuned": {},
    "no host": {"PFAIR_SILO_HOST": "0"},
    "before": {"PFAIR_SUPERNODE_BUSY_POLL": "0.2", "PFAIR_SERVER_POLL": "0.2", "PFAIR_SILO_HOST": "0"},
}


def _deploy(env: dict) -> dict:
    X, y, s, silos = data()
    fed = pfair.Federation.from_arrays(X, y, sensitive_features=s, silos=silos)
    with tempfile.TemporaryDirectory() as d:
        cfgs = write_federation(fed, Path(d) / "data", fmt="parquet")
        for c in cfgs:
            c.update({"epsilon": 2.0, "noise-seed": 4})
        st = settings(epochs=3, batch_size=50, p_s=[0.5, 0.5])  # 6 rounds an epoch: 18 rounds
        res = run_deployment(st, cfgs, n_groups=2, n_classes=2, workdir=Path(d) / "flwr", round_timeout=60,
                             timeout=600, evaluate=False, env=env)
    assert res["status"] == "completed" and len(res["timing"]["round_s"]) == 18
    return res


def test_a_loopback_round_tuned_against_before():
    load0 = os.getloadavg()
    runs = {k: [] for k in CONFIGS}
    for _ in range(2):
        for name, env in CONFIGS.items():
            runs[name].append(_deploy(env))
    load1 = os.getloadavg()
    print(f"\nloopback Flower round, 3 silos of 300 records, 18 rounds a run, 2 runs each (load average "
          f"{load0[0]:.2f} before, {load1[0]:.2f} after)")
    med = {}
    for name, results in runs.items():
        rounds = np.concatenate([r["timing"]["round_s"] for r in results])
        joined = [r["timing"]["silos_joined_s"] for r in results]
        med[name] = float(np.median(rounds))
        print(f"  {name:<7} round median {med[name]:.3f} s  p10 {np.percentile(rounds, 10):.3f} s  p90 "
              f"{np.percentile(rounds, 90):.3f} s  min {rounds.min():.3f} s   silos joined after "
              f"{', '.join(f'{j:.1f}' for j in joined)} s")
    print(f"  median tuned/before {med['tuned'] / med['before']:.2f}  tuned/no host {med['tuned'] / med['no host']:.2f}")
