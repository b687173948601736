"""pytest-benchmark: one SteFFLe epoch on Adult (N = 3 silos, batch 256), private, λ = 1.

Run with ``make bench`` (or ``pytest benches/python --benchmark-enable``). The measured figure is
recorded in docs/results.md; the target is well under 10 ms per epoch on 2 cores.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import pfair
from pfair import _core


@pytest.fixture(scope="module")
def adult_round_inputs():
    data = pfair.datasets.load_adult()
    ids = pfair.partition.heterogeneous(data.attrs_train["age"].to_numpy(float), 3, heterogeneity=0.0, seed=0)
    fed = pfair.Federation.from_dataset(data, ids)
    props = fed.group_proportions("demographic_parity")
    silo_set = _core.SiloSet([(s.X, s.y, s.s) for s in fed.silos], n_groups=2, n_classes=2)
    cfg = _core.SiloConfig(batch_size=256, clip_theta=1.0, sigma_theta=0.02, sigma_w=0.05)
    rounds = math.ceil(np.mean(fed.sizes) / 256)
    theta = np.zeros(fed.n_features + 1)
    return silo_set, cfg, props, theta, rounds


def test_one_steffle_epoch_on_adult(benchmark, adult_round_inputs):
    silo_set, cfg, props, theta, rounds = adult_round_inputs
    inv = np.ascontiguousarray(props.ravel() ** -0.5)

    def epoch():
        return silo_set.run_rounds(
            theta, np.zeros(4), inv, [cfg] * 3, [1 / 3] * 3, lam=1.0, lr_theta=0.25, lr_w=0.5,
            w_radius=2.0, seed=0, start=0, n_rounds=rounds,
        )

    out = benchmark(epoch)
    assert len(out["loss"]) == rounds


@pytest.fixture(scope="module")
def adult_federation():
    data = pfair.datasets.load_adult()
    return pfair.Federation.partition(data, 3, heterogeneity=0.0, by="age", seed=0)


@pytest.mark.parametrize("epochs", [1, 10])
def test_steffle_fit_on_adult(benchmark, adult_federation, epochs):
    # The estimator end to end: calibration, ledgers, handing the silos to Rust, then the epochs.
    # The difference between the two sizes is the cost of 9 epochs; the rest is set-up.
    def fit():
        return pfair.SteFFLe(lam=1.0, epsilon=1.0, epochs=epochs, track_history=False).fit(adult_federation)

    model = benchmark(fit)
    assert model.privacy_report_["epsilon_spent"].max() <= 1.0
