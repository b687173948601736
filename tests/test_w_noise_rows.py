"""h_W's noise row by row (``pfair.settings.W_NOISE_ROWS``; docs/privacy.md, "Noise on h_W row by row").

Row (b, r) of h_W is ``2 p(r|b)^{-1/2}`` times the unscaled per-group sum of the F_i; with the switch
on, it takes noise of std ``σ_W p(r|b)^{-1/2}`` and σ_W is calibrated to the Δ_W of the unscaled
sums (``2√2/m`` per unit of p^{-1/2}). The audit (``tests/test_audit.py``) attacks the round and the
sensitivity tests (``tests/test_sensitivity.py``) try to break the bound; here the plumbing: where
the switch applies, that a fit's plan, its silos' configs and the server's limits follow it, and
that a round refuses a config built for other proportions.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

import pfair
import pfair.settings
from pfair import _core
from pfair.privacy.calibration import NoiseRequest, plan_silo_noise
from pfair.protocol.server import reply_limits
from pfair.settings import SteFFLeSettings

from support import toy_data

PROPS = np.array([[0.15, 0.85]])


@pytest.fixture
def rows(monkeypatch):
    monkeypatch.setattr(pfair.settings, "W_NOISE_ROWS", True)


def _fit(**kw):
    X, y, s, silos = toy_data(n=1500, minority=0.15, seed=3)
    params = dict(epsilon=2.0, lam=2.0, epochs=2, batch_size=64, noise_seed=0, seed=0, p_s=list(PROPS[0]))
    params.update(kw)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return pfair.SteFFLe(**params).fit(X, y, sensitive_features=s, silos=silos, ledgers="new")


def test_the_switch_applies_to_private_attribute_fits_of_the_standard_topology_only(rows):
    assert SteFFLeSettings(epsilon=1.0).w_noise_rows
    assert not SteFFLeSettings(epsilon=1.0, protect="record").w_noise_rows
    assert not SteFFLeSettings(epsilon=1.0, calibration="paper").w_noise_rows
    assert not SteFFLeSettings(epsilon=1.0, mode="hybrid").w_noise_rows
    assert not SteFFLeSettings(epsilon=1.0, mode="central_sensitive").w_noise_rows


def test_the_default_is_one_std_on_every_row():
    assert pfair.settings.W_NOISE_ROWS is False
    assert not SteFFLeSettings(epsilon=1.0).w_noise_rows
    assert not _fit().privacy_report_["w_rows"].any()


def test_a_fit_with_rows_spends_what_the_isotropic_fit_spends_and_sends_other_noise(rows, monkeypatch):
    with_rows = _fit()
    monkeypatch.setattr(pfair.settings, "W_NOISE_ROWS", False)
    flat = _fit()
    r, f = with_rows.privacy_report_, flat.privacy_report_
    assert r["w_rows"].all() and not f["w_rows"].any()
    # The same noise multiplier and ε (one Gaussian mechanism per round, the same z).
    np.testing.assert_allclose(r["noise_multiplier"], f["noise_multiplier"], rtol=1e-12)
    np.testing.assert_allclose(r["epsilon"], f["epsilon"], rtol=1e-12)
    np.testing.assert_allclose(r["sigma_theta"], f["sigma_theta"], rtol=1e-12)
    # Δ_W per unit of p^{-1/2} is 2√2/m; the isotropic one (2/m)(1/ρ₁ + 1/ρ₂)^{1/2}.
    np.testing.assert_allclose(r["sensitivity_w"], 2 * math.sqrt(2) / r["denominator"], rtol=1e-12)
    np.testing.assert_allclose(f["sensitivity_w"], 2 / f["denominator"] * math.sqrt(np.sum(1 / PROPS)), rtol=1e-12)
    # Each row's std against the isotropic one: the common group's row less, the rare one's more.
    per_row = r["sigma_w"].to_numpy()[:, None] * PROPS[0] ** -0.5
    assert np.all(per_row[:, 1] < f["sigma_w"].to_numpy()) and np.all(f["sigma_w"].to_numpy() < per_row[:, 0])
    # The models differ (other noise), the fits complete (every reply within the server's limits).
    assert not np.allclose(with_rows.theta_, flat.theta_)


def test_a_round_refuses_a_config_built_for_other_proportions():
    X, y, s, _ = toy_data(n=40, seed=0)
    silo_set = _core.SiloSet([(X, y, s)], n_groups=2, n_classes=2)
    inv = PROPS.ravel() ** -0.5
    theta, W = np.zeros(4), np.zeros(4)
    key = _core.NoiseKey.seeded(0)
    good = _core.SiloConfig(batch_size=8, sample_rate=0.2, clip_theta=1.0, sigma_w=0.1, w_row_scale=inv)
    silo_set.step(0, theta, W, inv, good, batch_key=key, noise_key=key, round=0)
    other = _core.SiloConfig(batch_size=8, sample_rate=0.2, clip_theta=1.0, sigma_w=0.1, w_row_scale=inv[::-1].copy())
    with pytest.raises(ValueError, match="w_row_scale must be the round's inv_sqrt_ps"):
        silo_set.step(0, theta, W, inv, other, batch_key=key, noise_key=key, round=0)
    three = _core.SiloConfig(batch_size=8, sample_rate=0.2, clip_theta=1.0, sigma_w=0.1, w_row_scale=np.ones(3))
    with pytest.raises(ValueError, match="w_row_scale has 3 values, but W has 2 rows"):
        silo_set.step(0, theta, W, inv, three, batch_key=key, noise_key=key, round=0)
    with pytest.raises(ValueError, match="w_row_scale has 3 rows, which does not divide the W parts' length 4"):
        _core.noise_message(np.zeros(4), np.zeros(4), np.zeros(4), np.zeros(4), np.zeros(4), three, key=key, silo=0,
                            round=0)
    with pytest.raises(ValueError, match="only for attribute mode"):
        _core.SiloConfig(protect="record", clip_loss=1.0, clip_theta=1.0, clip_w=1.0, w_row_scale=inv)
    with pytest.raises(ValueError, match="finite values > 0"):
        _core.SiloConfig(w_row_scale=np.array([1.0, 0.0]))


def test_the_papers_closed_form_refuses_rows():
    st = SteFFLeSettings(epsilon=1.0, calibration="paper", batch_size=64)
    request = NoiseRequest.of_settings(st, silo=0, n_records=1000, steps=10, delta=1e-6, w_rows=True)
    with pytest.raises(ValueError, match="calibration='paper' prices the isotropic release"):
        plan_silo_noise(request, PROPS)


def test_the_servers_norm_limit_covers_the_rows_noise(rows):
    st = SteFFLeSettings(epsilon=1.0, lam=1.0, batch_size=64, clip=0.25)
    request = NoiseRequest.of_settings(st, silo=0, n_records=1000, steps=50, delta=1e-6)
    plan = plan_silo_noise(request, PROPS)
    inv = PROPS.ravel() ** -0.5
    assert plan.w_rows
    limits = reply_limits(theta_len=4, w_len=4, settings=st, plan=plan, inv_sqrt_ps=inv)
    w_bound = 2.0 * inv.max() * plan.n_records / plan.denominator
    stds = plan.sigma_w * np.repeat(inv, 2)
    assert limits.max_norms["psi_w"] == pytest.approx(w_bound + math.sqrt(np.sum(stds ** 2)) + stds.max() * 8.0)
    # Far above any draw of the noise (one in 10¹⁴), and equal to σ(√D + 8) when every row's std is σ.
    draws = np.random.default_rng(0).normal(size=(20000, 4)) * stds
    assert np.linalg.norm(draws, axis=1).max() < limits.max_norms["psi_w"] - w_bound
    flat = plan_silo_noise(request, np.array([[0.5, 0.5]]))
    even = reply_limits(theta_len=4, w_len=4, settings=st, plan=flat, inv_sqrt_ps=np.array([2 ** 0.5] * 2))
    sigma = flat.sigma_w * 2 ** 0.5
    assert even.max_norms["psi_w"] == pytest.approx(2 * 2 ** 0.5 * flat.n_records / flat.denominator
                                                    + sigma * (2.0 + 8.0))


def test_a_plan_with_rows_holds_for_other_proportions_and_the_config_follows_them(rows):
    """With rows, Δ_W per unit of p^{-1/2} does not depend on the proportions, so a plan stays valid
    under other released proportions (the isotropic plan does not: tests/test_flower_node.py), and
    the silo's config scales its rows by the proportions it adopts the plan under."""
    from pfair.privacy.ledger import PrivacyLedger
    from pfair.protocol.silo import SiloParty, silo_config
    from pfair.providers.linear import LinearProvider

    X, y, s, _ = toy_data(n=300, seed=2)
    st = pfair.SteFFLe(epsilon=2.0, lam=1.0, epochs=2, batch_size=50, p_s=[0.5, 0.5], clip=0.25).settings()

    def party():
        silo_set = _core.SiloSet([(X, y, s)], n_groups=2, n_classes=2)
        provider = LinearProvider(silo_set, 0, silo_config(st, 300, None))
        return SiloParty(silo_id=0, y=y, s=s, settings=st, provider=provider,
                         ledger=PrivacyLedger(epsilon=2.0, delta=st.delta_for(300), silo=0), n_groups=2, n_classes=2)

    planned = party()
    plan = planned.plan_rounds(np.array([[0.5, 0.5]]), 12)
    assert plan.w_rows
    np.testing.assert_allclose(planned.config.w_row_scale, [2 ** 0.5] * 2, rtol=1e-15)
    other = party()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        other.adopt(plan, PROPS)
    np.testing.assert_allclose(other.config.w_row_scale, PROPS.ravel() ** -0.5, rtol=1e-15)
    other.step(np.zeros(4), np.zeros(4), 0)  # a round under the adopted proportions is answered
    # Parts computed for other proportions than the noise's rows (the party's path through
    # noise_message, which cannot see them) are refused before anything is sent.
    other.inv_sqrt_ps = np.array([2 ** 0.5] * 2)
    with pytest.raises(RuntimeError, match="scales h_W's rows for other proportions"):
        other.step(np.zeros(4), np.zeros(4), 1)


def test_a_deep_fit_takes_the_rows_too(rows):
    torch = pytest.importorskip("torch")  # noqa: F841  (pfair[torch]; CI installs it)
    from pfair.torch import DeepSteFFLe
    from pfair.torch.models import mlp

    X, y, s, silos = toy_data(n=600, minority=0.15, seed=4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = DeepSteFFLe(mlp(3, 2, (4,)), lam=1.0, epsilon=2.0, epochs=1, batch_size=64, init_seed=0, device="cpu",
                            p_s=list(PROPS[0])).fit(X, y, sensitive_features=s, silos=silos, ledgers="new")
    report = model.privacy_report_
    assert report["w_rows"].all()
    np.testing.assert_allclose(report["sensitivity_w"], 2 * math.sqrt(2) / report["denominator"], rtol=1e-12)
