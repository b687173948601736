"""Epoch benchmarks as ratios measured in one run (min and median of many repetitions).

The machine is shared (2 cores, other processes), so absolute times drift from run to run; each
test times the variants it compares interleaved, and prints min and median of each and their
ratios. Run with ``pytest benches/python/test_epoch_bench.py -s`` (no pytest-benchmark needed);
``docs/dev/performance-notebook.md`` records the figures.
"""

from __future__ import annotations

import math
import time

import numpy as np
import pytest

import pfair
from pfair import _core

REPS = 60


def interleaved(fns: dict, reps: int = REPS) -> dict:
    """Times each callable ``reps`` times, interleaved; ``{name: (min, median)}`` in seconds."""
    times = {k: [] for k in fns}
    for _ in range(reps):
        for k, f in fns.items():
            t = time.perf_counter()
            f()
            times[k].append(time.perf_counter() - t)
    return {k: (min(v), float(np.median(v))) for k, v in times.items()}


def report(title: str, stats: dict, base: str) -> None:
    print(f"\n{title}")
    for k, (mn, med) in stats.items():
        print(f"  {k:<28} min {mn * 1e3:9.3f} ms  median {med * 1e3:9.3f} ms  "
              f"min/{base} {mn / stats[base][0]:6.2f}  median/{base} {med / stats[base][1]:6.2f}")


@pytest.fixture(scope="module")
def adult():
    data = pfair.datasets.load_adult()
    fed = pfair.Federation.partition(data, 3, heterogeneity=0.0, by="age", seed=0)
    props = fed.group_proportions("demographic_parity")
    return fed, np.ascontiguousarray(props.ravel() ** -0.5)


def test_adult_epoch_fast_path_against_the_party_loop(adult):
    # One private epoch (N = 3, batch 256, λ = 1): all rounds in one Rust call, against the same
    # rounds silo by silo and round by round through the bindings (what a deployment does).
    fed, inv = adult
    silo_set = fed.silo_set()
    cfg = _core.SiloConfig(batch_size=256, clip_theta=1.0, sigma_theta=0.02, sigma_w=0.05)
    rounds = math.ceil(np.mean(fed.sizes) / 256)
    keys = [_core.NoiseKey.secret() for _ in range(3)]
    theta0, w0 = np.zeros(fed.n_features + 1), np.zeros(4)
    server = dict(lam=1.0, lr_theta=0.25, lr_w=0.5, w_radius=2.0)

    def fast():
        return silo_set.run_rounds(theta0, w0, inv, [cfg] * 3, [1 / 3] * 3, batch_keys=keys, noise_keys=keys,
                                   start=0, n_rounds=rounds, **server)

    def loop():
        theta, w = theta0, w0
        for r in range(rounds):
            msgs = []
            for j in range(3):
                m = silo_set.step(j, theta, w, inv, cfg, batch_key=keys[j], noise_key=keys[j], round=r)
                msgs.append((m["loss_grad"], m["psi_theta_sfree"], m["psi_theta"], m["psi_w_sfree"], m["psi_w"]))
            theta, w = _core.server_update(theta, w, 4, msgs, [1 / 3] * 3, **server)
        return theta, w

    np.testing.assert_array_equal(fast()["theta"], loop()[0])
    stats = interleaved({"run_rounds (one call)": fast, "party loop (per silo)": loop})
    report(f"Adult epoch, 3 silos, batch 256, {rounds} rounds", stats, "run_rounds (one call)")


@pytest.mark.parametrize("sampling", ["without_replacement", "poisson", "shuffle"])
def test_sampling_cost_does_not_grow_with_the_silo(sampling):
    # A batch of 64 from 10^4 and from 10^7 records: O(batch) sampling costs the same.
    cfg = {n: _core.SiloConfig(sampling=sampling, batch_size=64, sample_rate=64 / n) for n in (10_000, 10_000_000)}
    key = _core.NoiseKey.secret()
    rounds = iter(range(10**9))
    fns = {f"n = {n:.0e}": (lambda n=n: _core.draw_batch(cfg[n], n, key=key, silo=0, round=next(rounds)))
           for n in cfg}
    stats = interleaved(fns, reps=300)
    report(f"{sampling}: one batch of 64", stats, "n = 1e+04")
    assert abs(len(fns["n = 1e+07"]()) - 64) < 64


def test_shared_matrix_against_copied_silos():
    # 2·10^5 × 100 on 100 silos (rows i mod 100): building the Rust silos in place vs from copies,
    # and an epoch of batch 64 on each.
    rng = np.random.default_rng(0)
    n, d, N = 200_000, 100, 100
    X = rng.standard_normal((n, d))
    y, s = rng.integers(0, 2, n), rng.integers(0, 2, n)
    fed = pfair.Federation.from_arrays(X, y, sensitive_features=s, silos=np.arange(n) % N)
    build = interleaved({"from_matrix (in place)": fed.silo_set,
                         "copies per silo": lambda: _core.SiloSet([(q.X, q.y, q.s) for q in fed.silos], n_groups=2,
                                                                  n_classes=2)}, reps=5)
    report("building the Rust silos, 2e5 x 100, 100 silos", build, "from_matrix (in place)")
    shared = fed.silo_set()
    copied = _core.SiloSet([(q.X, q.y, q.s) for q in fed.silos], n_groups=2, n_classes=2)
    cfg = _core.SiloConfig(batch_size=64, clip_theta=1.0, sigma_theta=0.1, sigma_w=0.1)
    keys = [_core.NoiseKey.secret() for _ in range(N)]
    rounds = math.ceil(n / N / 64)

    def epoch(ss):
        return lambda: ss.run_rounds(np.zeros(d + 1), np.zeros(4), np.ones(2), [cfg] * N, [1 / N] * N,
                                     batch_keys=keys, noise_keys=keys, lam=1.0, lr_theta=0.2, lr_w=0.2,
                                     w_radius=2.0, start=0, n_rounds=rounds)

    stats = interleaved({"shared matrix": epoch(shared), "copied silos": epoch(copied)}, reps=10)
    report(f"epoch, 2e5 x 100, 100 silos, batch 64, {rounds} rounds", stats, "shared matrix")
