"""pytest-benchmark: one silo step of SteFFLe with the torch backend, batch 256, on the CPU.

A silo step is what :meth:`pfair.protocol.SiloParty.step` does after charging its ledger: draw
the batch, compute the five exact parts with :class:`pfair.providers.torch.TorchProvider`, and add
the noise from the silo's key (``_core.noise_message``, CPU, float64). Models: an MLP on Adult
(99 → 64 → 2, tanh) and the small GroupNorm CNN on the 8×8 digits (``SmallCNN(width=8)``), both
private (λ = 1, C_θ = 1, σ's as a fit at ε ≈ 1 would use), attribute and record mode.

Run with ``make bench`` (or ``pytest benches/python/test_torch_bench.py --benchmark-enable``).
The measured figures are in docs/deep.md. Threads: ``PFAIR_BENCH_THREADS`` (default 1: on a shared
2-core machine a second intra-op thread mostly waits for the other processes).
"""

from __future__ import annotations

import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import pfair  # noqa: E402
from pfair import _core  # noqa: E402
from pfair.providers.torch import TorchProvider  # noqa: E402
from pfair.torch import load_digits_fair, reset_parameters  # noqa: E402
from pfair.torch.models import SmallCNN, mlp  # noqa: E402

BATCH = 256
torch.set_num_threads(int(os.environ.get("PFAIR_BENCH_THREADS", "1")))


def _step_inputs(module, X, y, s, k, l, protect, input_shape=None):  # noqa: E741
    reset_parameters(module, 0)
    clips = dict(clip_loss=1.0, clip_theta=1.0, clip_w=2.0)
    provider = TorchProvider(module, X, y, s, n_groups=k, n_classes=l, denominator=float(BATCH), protect=protect,
                             input_shape=input_shape, device="cpu", **clips)
    cfg = _core.SiloConfig(batch_size=BATCH, sample_rate=BATCH / len(y), protect=protect, sigma_loss=0.03,
                           sigma_theta=0.03, sigma_w=0.05, **clips)
    rng = np.random.default_rng(0)
    theta = provider.theta()
    w = rng.normal(size=k * l) * 0.3  # a W that is not zero, so every b_i is computed
    inv = np.full(k, k**0.5)
    return provider, cfg, theta, w, inv


def _silo_step(provider, cfg, theta, w, inv, key, counter):
    r = next(counter)
    batch = _core.draw_batch(cfg, provider.n_records, key=key, silo=0, round=r)
    parts = provider.parts(theta, w, inv, batch)
    return _core.noise_message(parts.loss_grad, parts.psi_theta_sfree, parts.psi_theta, parts.psi_w_sfree,
                               parts.psi_w, cfg, key=key, silo=0, round=r)


def _counter():
    i = 0
    while True:
        yield i
        i += 1


@pytest.fixture(scope="module")
def adult():
    data = pfair.datasets.load_adult()
    return data.X_train[:12000], data.y_train[:12000], data.s_train[:12000], data.n_features


@pytest.fixture(scope="module")
def digits():
    data = load_digits_fair()
    return data.X_train, data.y_train, data.s_train


@pytest.mark.parametrize("protect", ["attribute", "record"])
def test_mlp_silo_step_batch_256(benchmark, adult, protect):
    X, y, s, d = adult
    provider, cfg, theta, w, inv = _step_inputs(mlp(d, 2, (64,)), X, y, s, 2, 2, protect)
    key, counter = _core.NoiseKey.seeded(0), _counter()
    out = benchmark(_silo_step, provider, cfg, theta, w, inv, key, counter)
    assert out[0].shape == (provider.n_params,)


@pytest.mark.parametrize("protect", ["attribute", "record"])
def test_cnn_silo_step_batch_256(benchmark, digits, protect):
    X, y, s = digits
    provider, cfg, theta, w, inv = _step_inputs(SmallCNN(1, 10, width=8), X, y, s, 3, 10, protect,
                                                input_shape=(1, 8, 8))
    key, counter = _core.NoiseKey.seeded(0), _counter()
    out = benchmark(_silo_step, provider, cfg, theta, w, inv, key, counter)
    assert out[2].shape == (provider.n_params,)
