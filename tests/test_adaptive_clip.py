"""``clip="adaptive"``: a round's clip norm is a quantile of its batch's s-free scales S_i, the mean
of ‖b_i‖ over the groups under the released proportions.

What is checked here (the Rust tests check the scale itself, that the clip is the same on
neighbours and that an adaptive round is the fixed round at its clip; ``test_audit.py`` attacks one
round): the settings accept it where it applies and refuse it, naming the fix, where it does not;
the noise plan prices it per unit of clip norm with the same z as a fixed clip; the in-process
epoch (Rust) and the party loop (round by round, as a deployed silo answers) give the same model bit
for bit; the bindings that take a batch's parts and its noise apart refuse it; the server leaves
h_θ's norm unchecked (it does not see C_t); and on a table whose features carry s strongly it
reaches a fairness the former fixed clip of 0.25 does not at ε = 1.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import pfair
from pfair import _core
from pfair.protocol.simulation import Simulation
from pfair.settings import ADAPTIVE_CLIP_QUANTILE, PRIVATE_CLIPS, SteFFLeSettings


def _data(n: int = 1200, seed: int = 0):
    rng = np.random.default_rng(seed)
    s = rng.integers(0, 2, n)
    X = rng.normal(size=(n, 4)) + 1.5 * s[:, None] * np.array([1.0, 0.5, 0.0, -0.5])
    y = (X[:, 0] + 0.5 * X[:, 2] + rng.normal(scale=0.5, size=n) > 0.8).astype(np.int64)
    return X, y, s, np.arange(n) % 3


def _fed():
    X, y, s, silos = _data()
    return pfair.Federation.from_arrays(X, y, sensitive_features=s, silos=silos)


BASE = dict(lam=4.0, epochs=3, batch_size=64, seed=1, noise_seed=2, epsilon=1.0, clip="adaptive")


def test_the_settings_take_adaptive_where_it_applies_and_name_the_fix_elsewhere():
    # "auto" is the adaptive clip for the default private run (attribute mode, the standard mode, the
    # auto batch, a fixed λ or a fairness target), the fixed 0.25 elsewhere, no clipping without privacy.
    assert SteFFLeSettings.from_estimator_params(dict(epsilon=1.0)).clip == "adaptive"
    assert SteFFLeSettings.from_estimator_params(dict(epsilon=1.0, max_violation=0.05)).clip == "adaptive"
    for other in (dict(protect="record"), dict(mode="hybrid"), dict(calibration="paper", p_s="pooled"),
                  dict(batch_size=256), dict(max_violation=0.05, batch_size=256), dict(sampling="full_batch")):
        assert SteFFLeSettings.from_estimator_params(dict(epsilon=1.0, **other)).clip == PRIVATE_CLIPS["clip"], other
    assert SteFFLeSettings.from_estimator_params(dict(epsilon=None)).clip is None
    st = SteFFLeSettings.from_estimator_params(dict(epsilon=1.0, clip="adaptive"))
    assert st.adaptive_clip and st.clip_quantile == ADAPTIVE_CLIP_QUANTILE
    # The noise plan is per unit of clip norm; the refusal rule prices the fixed default.
    assert st.clips()["clip_theta"] == 1.0 and st.reference_clip == PRIVATE_CLIPS["clip"]
    fixed = SteFFLeSettings.from_estimator_params(dict(epsilon=1.0, clip=0.3))
    assert not fixed.adaptive_clip and fixed.clip_quantile is None and fixed.reference_clip == 0.3
    with pytest.raises(ValueError, match="clip='adaptive' needs protect='attribute'"):
        SteFFLeSettings.from_estimator_params(dict(epsilon=1.0, clip="adaptive", protect="record"))
    with pytest.raises(ValueError, match="mode='standard' only"):
        SteFFLeSettings.from_estimator_params(dict(epsilon=1.0, clip="adaptive", mode="hybrid"))
    with pytest.raises(ValueError, match="calibration='paper' takes one fixed clip norm"):
        SteFFLeSettings.from_estimator_params(dict(epsilon=1.0, clip="adaptive", calibration="paper", p_s="pooled"))
    with pytest.raises(ValueError, match="'adaptive'"):
        SteFFLeSettings.from_estimator_params(dict(epsilon=1.0, clip="quantile"))
    with pytest.raises(ValueError, match="clip_w must be a positive number"):
        SteFFLeSettings.from_estimator_params(dict(epsilon=1.0, protect="record", clip_w="adaptive"))


def test_the_noise_plan_is_the_unit_clips_with_the_same_z():
    fed = _fed()
    reports = {}
    for clip in ("adaptive", 1.0, 0.25):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            m = pfair.SteFFLe(**{**BASE, "clip": clip}).fit(fed, ledgers="new")
        reports[clip] = m.privacy_report_
    a, unit, default = reports["adaptive"], reports[1.0], reports[0.25]
    cols = ["noise_multiplier", "sigma_theta", "sigma_w", "sensitivity_theta", "sensitivity_w", "epsilon"]
    # Per unit of clip norm: exactly the plan of a fixed clip of 1, and the z of any fixed clip.
    np.testing.assert_array_equal(a[cols].to_numpy(float), unit[cols].to_numpy(float))
    np.testing.assert_array_equal(a["noise_multiplier"].to_numpy(float), default["noise_multiplier"].to_numpy(float))
    np.testing.assert_allclose(a["sigma_theta"].to_numpy(float), 4 * default["sigma_theta"].to_numpy(float), rtol=1e-12)


def test_the_party_loop_and_the_rust_epoch_give_the_same_model():
    st = pfair.SteFFLe(**BASE).settings()
    fast = Simulation(st, _fed(), ledgers="new").run()
    slow = Simulation(st, _fed(), ledgers="new", fast=False).run()
    np.testing.assert_array_equal(slow.theta, fast.theta)
    np.testing.assert_array_equal(slow.w, fast.w)
    # And it is not the fixed clip's model.
    fixed = Simulation(pfair.SteFFLe(**{**BASE, "clip": 0.25}).settings(), _fed(), ledgers="new").run()
    assert not np.array_equal(fixed.theta, fast.theta)


def test_a_round_reports_its_clip_and_the_two_step_bindings_refuse_it():
    X, y, s, _ = _data(200)
    silo_set = _core.SiloSet([(X, y, s)], n_groups=2, n_classes=2)
    theta, w, inv = np.array([0.3, -0.2, 0.1, 0.0, 0.05]), np.array([0.4, -0.3, -0.2, 0.5]), np.array([1.4, 1.4])
    cfg = _core.SiloConfig(batch_size=32, sample_rate=32 / 200, clip_theta=1.0, sigma_theta=0.5, sigma_w=0.5,
                           clip_quantile=0.5)
    assert cfg.clip_quantile == 0.5
    key = _core.NoiseKey.seeded(9)
    msg = silo_set.step(0, theta, w, inv, cfg, batch_key=key, noise_key=key, round=4)
    batch = _core.draw_batch(cfg, 200, key=key, silo=0, round=4)
    again = silo_set.noised_parts(0, theta, w, inv, batch, cfg, key=key, round=4)
    for name in ("loss_grad", "psi_theta_sfree", "psi_theta", "psi_w_sfree", "psi_w", "clip_theta"):
        np.testing.assert_array_equal(again[name], msg[name])
    assert 0 < msg["clip_theta"] < np.inf and msg["clip_theta"] != 1.0
    with pytest.raises(ValueError, match="takes a fixed clip norm.*SiloSet.step"):
        silo_set.parts(0, theta, w, inv, batch, cfg)
    with pytest.raises(ValueError, match="takes a fixed clip norm"):
        _core.noise_message(msg["loss_grad"], msg["psi_theta_sfree"], msg["psi_theta"], msg["psi_w_sfree"],
                            msg["psi_w"], cfg, key=key, silo=0, round=4)
    for q in (0.0, 1.5):
        with pytest.raises(ValueError, match=r"clip_quantile must be in \(0, 1\]"):
            _core.SiloConfig(clip_quantile=q)
    with pytest.raises(ValueError, match="only for attribute mode"):
        _core.SiloConfig(protect="record", clip_loss=1.0, clip_theta=1.0, clip_w=1.0, clip_quantile=0.5)


def test_the_server_does_not_check_the_norm_it_cannot_bound():
    from pfair.protocol.server import reply_limits

    fed = _fed()
    sim = Simulation(pfair.SteFFLe(**BASE).settings(), fed, ledgers="new", fast=False)
    sim.run()
    party = sim.parties[0]
    limits = reply_limits(theta_len=5, w_len=4, settings=party.settings, plan=party.plan,
                          inv_sqrt_ps=party.inv_sqrt_ps)
    assert limits.max_norms["psi_theta"] == np.inf and np.isfinite(limits.max_norms["psi_w"])
    fixed = Simulation(pfair.SteFFLe(**{**BASE, "clip": 0.25}).settings(), fed, ledgers="new", fast=False)
    fixed.run()
    p = fixed.parties[0]
    assert np.isfinite(reply_limits(theta_len=5, w_len=4, settings=p.settings, plan=p.plan,
                                    inv_sqrt_ps=p.inv_sqrt_ps).max_norms["psi_theta"])


def test_on_features_that_carry_s_it_reaches_a_fairness_a_fixed_clip_does_not():
    """``make_synthetic(dependence=2)``: the b_i are about ten times the former default clip of 0.25,
    so at ε = 1 that clip leaves equalized odds near the λ = 0 model's; the adaptive clip (today's
    default) follows the b_i and the fairness term takes hold (docs/optimisation.md, "An adaptive
    clip norm")."""
    data = pfair.datasets.make_synthetic(60000, 40, silos=3, dependence=2.0, seed=0)
    fed = pfair.Federation.from_dataset(data, data.attrs_train["silo"].to_numpy())
    out = {}
    for clip in (0.25, "auto"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            m = pfair.SteFFLe(fairness="equalized_odds", lam=8.0, epsilon=1.0, noise_seed=0, clip=clip).fit(fed, ledgers="new")
        pred = m.predict(data.X_test)
        out[clip] = (float(np.mean(pred != data.y_test)),
                     pfair.metrics.equalized_odds_difference(data.y_test, pred, sensitive_features=data.s_test))
    # Equalized odds 0.58 (the λ = 0 model's) with the fixed clip, 0.36 with the adaptive one, at
    # about the same error (0.10 and 0.09).
    assert out["auto"][1] < out[0.25][1] - 0.15 and out["auto"][0] < out[0.25][0] + 0.02, out


def test_a_deep_model_refuses_it_and_names_its_own_default():
    from pfair.settings import DEEP_PRIVATE_CLIP, resolve_deep_defaults

    with pytest.raises(ValueError, match=f"clip='adaptive' is for the linear model.*clip={DEEP_PRIVATE_CLIP:g}"):
        resolve_deep_defaults(dict(epsilon=1.0, clip="adaptive"))
