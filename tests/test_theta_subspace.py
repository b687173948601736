"""``theta_subspace``: a silo projects its noised θ-part on the top principal directions of its own
x̃ (post-processing in attribute mode). The empirical audit of a projected round is in
``test_audit.py``; here: the basis reads x only, the message is the plain message projected and
nothing else moves, the accounting is unchanged, and the settings refuse what it cannot do."""

from __future__ import annotations

import numpy as np
import pytest

from pfair import SteFFLe, _core
from pfair.privacy.subspace import principal_basis
from pfair.settings import SteFFLeSettings
from support import toy_data

INV = np.array([0.5, 0.5]) ** -0.5
FAST = dict(epochs=2, batch_size=64, validation_share=0.0)


def _problem(seed: int = 0, n: int = 200, d: int = 6):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    X[:, 1] += 2.0 * (rng.random(n) < 0.5)  # a direction of large variance
    y = (X[:, 0] + 0.5 * rng.normal(size=n) > 0).astype(np.int64)
    s = (rng.random(n) < 0.4).astype(np.int64)
    return X, y, s


@pytest.mark.parametrize("sparse", [False, True])
def test_the_basis_reads_x_only(sparse):
    """The Gram matrix, and so the basis, is bit for bit the same on two silos that differ in any
    record's s (the neighbours of attribute mode), for dense and sparse rows alike."""
    X, y, s = _problem()
    if sparse:
        X = np.where(np.abs(X) > 1.0, X, 0.0)
    s2 = s.copy()
    s2[:7] = 1 - s2[:7]
    grams = [_core.SiloSet([(X, y, g)], n_groups=2, n_classes=2).gram(0) for g in (s, s2)]
    np.testing.assert_array_equal(grams[0], grams[1])
    Xt = np.column_stack([X, np.ones(len(X))])
    np.testing.assert_allclose(grams[0], Xt.T @ Xt, rtol=1e-12, atol=1e-9)
    U = principal_basis(grams[0], 3)
    assert U.shape == (X.shape[1] + 1, 3)
    np.testing.assert_allclose(U.T @ U, np.eye(3), atol=1e-12)
    # The top eigenvectors: U captures more of Σ x̃ x̃ᵀ than any other 3 coordinates.
    captured = np.trace(U.T @ grams[0] @ U)
    assert captured >= np.sort(np.diag(grams[0]))[-3:].sum() - 1e-9
    assert principal_basis(grams[0], X.shape[1] + 1) is None  # the whole space: nothing to project


def test_the_message_is_the_plain_message_projected_and_nothing_else_moves():
    X, y, s = _problem(1)
    silo_set = _core.SiloSet([(X, y, s)], n_groups=2, n_classes=2)
    U = principal_basis(silo_set.gram(0), 2)
    theta, w = np.array([0.3, -0.2, 0.1, 0.0, 0.2, -0.1, 0.05]), np.array([0.4, -0.2, 0.1, 0.3])
    kw = dict(sampling="without_replacement", batch_size=32, sample_rate=32 / len(y), clip_theta=0.5,
              sigma_theta=0.3, sigma_w=0.2)
    plain, projected = _core.SiloConfig(**kw), _core.SiloConfig(**kw, subspace=U)
    np.testing.assert_array_equal(projected.subspace, U)
    assert plain.subspace is None
    keys = dict(batch_key=_core.NoiseKey.seeded(3), noise_key=_core.NoiseKey.seeded(4), round=5)
    a = silo_set.step(0, theta, w, INV, plain, **keys)
    b = silo_set.step(0, theta, w, INV, projected, **keys)
    np.testing.assert_allclose(b["psi_theta"], U @ (U.T @ a["psi_theta"]), rtol=1e-12, atol=1e-15)
    assert np.linalg.norm(b["psi_theta"]) < np.linalg.norm(a["psi_theta"])
    for part in ("loss_grad", "psi_theta_sfree", "psi_w_sfree", "psi_w"):
        np.testing.assert_array_equal(a[part], b[part])
    # The same through the noise primitive the silo party calls.
    parts = silo_set.parts(0, theta, w, INV, np.arange(32), plain)
    noised = [_core.noise_message(parts["loss_grad"], parts["psi_theta_sfree"], parts["psi_theta"],
                                  parts["psi_w_sfree"], parts["psi_w"], cfg, key=_core.NoiseKey.seeded(9), silo=0,
                                  round=1) for cfg in (plain, projected)]
    np.testing.assert_allclose(noised[1][2], U @ (U.T @ noised[0][2]), rtol=1e-12, atol=1e-15)


def test_a_change_of_s_moves_the_projected_release_by_at_most_the_sensitivity():
    """The s-neighbours' projected releases (no noise) differ by at most Δ_θ = 2 C_θ / m, for
    random problems, bases and records (the projection is a contraction: ‖P v‖ ≤ ‖v‖)."""
    rng = np.random.default_rng(5)
    for trial in range(40):
        X, y, s = _problem(trial, n=60, d=4)
        clip, m = float(rng.uniform(0.1, 2.0)), 16
        s2 = s.copy()
        i = int(rng.integers(0, 60))
        s2[i] = 1 - s2[i]
        U = np.linalg.qr(rng.normal(size=(5, int(rng.integers(1, 5)))))[0]
        cfg = _core.SiloConfig(batch_size=m, sample_rate=m / 60, clip_theta=clip, subspace=U)
        theta, w = rng.normal(size=5), rng.normal(size=4)
        keys = dict(batch_key=_core.NoiseKey.seeded(trial), noise_key=_core.NoiseKey.seeded(0), round=0)
        a, b = (_core.SiloSet([(X, y, g)], n_groups=2, n_classes=2).step(0, theta, w, INV, cfg, **keys) for g in (s, s2))
        _, d_theta, _ = _core.sensitivities(INV, n_groups=2, denom=float(m), clip_theta=clip)
        assert np.linalg.norm(a["psi_theta"] - b["psi_theta"]) <= d_theta * (1 + 1e-9)
        np.testing.assert_array_equal(a["psi_theta_sfree"], b["psi_theta_sfree"])


def test_a_fit_with_a_subspace_spends_what_the_plain_fit_spends():
    X, y, s, silos = toy_data(n=1500, seed=2, shift=(1.0, 1.0, 0.0))
    kw = dict(lam=4.0, epsilon=2.0, noise_seed=1, **FAST)
    plain = SteFFLe(**kw).fit(X, y, sensitive_features=s, silos=silos)
    proj = SteFFLe(theta_subspace=2, **kw).fit(X, y, sensitive_features=s, silos=silos)
    cols = ["epsilon_spent", "noise_multiplier", "sigma_theta", "sigma_w", "sensitivity_theta", "sensitivity_w", "steps"]
    assert plain.privacy_report_[cols].equals(proj.privacy_report_[cols])
    assert not np.array_equal(plain.coef_, proj.coef_)
    # A subspace of every dimension (d + 1 = 4) is no projection: the same bits as the plain fit.
    whole = SteFFLe(theta_subspace=4, **kw).fit(X, y, sensitive_features=s, silos=silos)
    np.testing.assert_array_equal(whole.coef_, plain.coef_)


@pytest.mark.parametrize("params,match", [
    (dict(theta_subspace=4), "a fit without epsilon has none"),
    (dict(theta_subspace=4, epsilon=1.0, protect="record"), "needs protect='attribute'"),
    (dict(theta_subspace=4, epsilon=1.0, mode="hybrid"), "mode='standard' only"),
    (dict(theta_subspace=0, epsilon=1.0), "theta_subspace must be >= 1"),
])
def test_the_settings_refuse_what_a_subspace_cannot_do(params, match):
    with pytest.raises(ValueError, match=match):
        SteFFLeSettings.from_estimator_params(params)


def test_a_bad_basis_is_refused_with_the_argument_named():
    with pytest.raises(ValueError, match="theta_subspace: the basis columns must be orthonormal"):
        _core.SiloConfig(subspace=np.ones((3, 1)))
    with pytest.raises(ValueError, match="theta_subspace: only in attribute mode"):
        _core.SiloConfig(protect="record", clip_loss=1.0, clip_theta=1.0, clip_w=1.0, subspace=np.eye(3)[:, :1])
    X, y, s = _problem(d=4)
    silo_set = _core.SiloSet([(X, y, s)], n_groups=2, n_classes=2)
    cfg = _core.SiloConfig(batch_size=8, sample_rate=8 / len(y), subspace=np.eye(3)[:, :2])
    with pytest.raises(ValueError, match="does not divide the θ parts' length 5"):
        _core.noise_message(*(np.zeros(5),) * 3, np.zeros(4), np.zeros(4), cfg, key=_core.NoiseKey.seeded(0), silo=0,
                            round=0)
    with pytest.raises(ValueError, match="theta_subspace has a basis of 3 rows, but theta has d \\+ 1 = 5"):
        silo_set.step(0, np.zeros(5), np.zeros(4), INV, cfg, batch_key=_core.NoiseKey.seeded(0),
                      noise_key=_core.NoiseKey.seeded(0), round=0)


def test_a_deep_model_refuses_a_subspace_before_anything_is_released():
    torch = pytest.importorskip("torch")
    from pfair.torch import DeepSteFFLe

    X, y, s, silos = toy_data(n=300, seed=1)
    model = DeepSteFFLe(torch.nn.Linear(3, 2), epsilon=1.0, theta_subspace=2)
    with pytest.raises(ValueError, match="a network's parameters have no such rows"):
        model.fit(X, y, sensitive_features=s, silos=silos)
