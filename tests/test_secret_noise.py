"""Secret noise: noise keys come from the OS, so knowing the seed does not reveal the noise.

The attacks below are the ones a hostile server or silo can run when it knows every public
setting (including the ``seed`` a user typed) and every record but one record's s.
"""

from __future__ import annotations

import pickle
import warnings
from functools import partial

import numpy as np
import pytest

from pfair import Federation, SteFFLe, _core
from pfair.exceptions import PrivacyWarning

from support import toy_data

# 600 records in 2 silos.
data = partial(toy_data, n=600, n_silos=2)

# clip=0.25: a fixed clip, so that a silo's exact parts can be read off its provider (SiloSet.parts
# takes no adaptive clip); the noise streams attacked here are the same under either clip.
SETTINGS = dict(epsilon=2.0, lam=1.0, epochs=2, batch_size=50, p_s=[0.5, 0.5], seed=0, track_history=False,
                clip=0.25)


def fit(s, **kw):
    X, y, _, silos = data()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyWarning)
        return SteFFLe(**{**SETTINGS, **kw}).fit(X, y, sensitive_features=s, silos=silos)


def test_default_fits_with_the_same_seed_differ():
    _, _, s, _ = data()
    a, b = fit(s), fit(s)
    assert not np.array_equal(a.theta_, b.theta_)
    assert (a.privacy_report_["noise"] == "secret").all()
    assert (a.privacy_report_["guarantee"] == "covered").all()


def test_seed_replay_attack_fails_with_secret_noise_and_succeeds_with_noise_seed():
    """The attacker refits with each candidate value of record 0's s and compares with the
    published θ. With a known noise seed, exactly the true candidate reproduces θ bit for bit;
    with secret noise neither does."""
    _, _, s, _ = data()
    truth = s.copy()
    candidates = []
    for v in (0, 1):
        c = s.copy()
        c[0] = v
        candidates.append(c)

    published = fit(truth)
    assert not any(np.array_equal(published.theta_, fit(c).theta_) for c in candidates)

    with pytest.warns(PrivacyWarning, match="noise_seed"):
        SteFFLe(**{**SETTINGS, "noise_seed": 5}).settings()
    published = fit(truth, noise_seed=5)
    matches = [np.array_equal(published.theta_, fit(c, noise_seed=5).theta_) for c in candidates]
    assert matches == [c[0] == truth[0] for c in candidates]
    assert published.privacy_report_["guarantee"].str.startswith("not covered").all()


def first_message(fed, eps, noise_seed):
    """Silo 0's reply to round 0 (θ = 0, W ≠ 0) in a fit at ``eps``, and its exact parts."""
    from pfair.protocol.simulation import Simulation

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyWarning)
        st = SteFFLe(**{**SETTINGS, "epsilon": eps, "noise_seed": noise_seed}).settings()
    sim = Simulation(st, fed, ledgers="new", fast=False)
    party = sim.parties[0]
    party.plan_rounds(sim.group_proportions(), sim.total_rounds)
    theta, w = np.zeros(4), np.array([0.3, -0.2, -0.1, 0.4])
    msg = party.step(theta, w, 0)
    exact = party.provider.parts(theta, w, party.inv_sqrt_ps, party.draw_batch(0))
    return msg, exact, party.plan


@pytest.mark.parametrize("noise_seed,cancels", [(3, True), (None, False)])
def test_two_epsilons_cancel_the_noise_only_when_the_noise_seed_is_known(noise_seed, cancels):
    """Two fits with one noise seed and different ε send exact + σ_a ξ and exact + σ_b ξ with the
    same unit normals ξ: (σ_b m_a − σ_a m_b)/(σ_b − σ_a) is the exact s-dependent part. With
    secret noise the same algebra returns noise."""
    X, y, s, silos = data()
    fed = Federation.from_arrays(X, y, sensitive_features=s, silos=silos)
    (ma, exact, pa), (mb, _, pb) = first_message(fed, 1.0, noise_seed), first_message(fed, 4.0, noise_seed)
    assert pa.sigma_w > 2 * pb.sigma_w > 0
    recovered = (pb.sigma_w * ma.psi_w - pa.sigma_w * mb.psi_w) / (pb.sigma_w - pa.sigma_w)
    error = np.max(np.abs(recovered - exact.psi_w))
    assert bool(error < 1e-9) == cancels
    if not cancels:
        # The recovered part is off by noise of scale ~σ_b: below 0.001·σ_b in all four entries
        # happens with probability about 3e-14 (below 0.1·σ_b, the bound before: about 3e-6).
        assert error > 1e-3 * pb.sigma_w


def test_noise_keys_cannot_be_pickled_or_printed():
    key = _core.NoiseKey.secret()
    assert key.is_secret and "secret" in repr(key).lower()
    assert not any(ch.isdigit() for ch in repr(key))
    with pytest.raises(TypeError, match="secret"):
        pickle.dumps(key)
    assert not _core.NoiseKey.seeded(3).is_secret


def test_record_protection_batches_are_secret_too():
    """In record mode the batch is part of the privacy argument (amplification by subsampling):
    it must not follow from the seed."""
    from pfair.protocol.silo import SiloKeys

    st = SteFFLe(epsilon=1.0, protect="record").settings()
    keys = SiloKeys.for_silo(st)
    assert keys.batch.is_secret and keys.noise.is_secret
    st = SteFFLe(epsilon=1.0).settings()
    keys = SiloKeys.for_silo(st)
    assert not keys.batch.is_secret and keys.noise.is_secret


@pytest.mark.parametrize("sampling, public", [("shuffle", True), ("full_batch", True),
                                              ("without_replacement", False), ("poisson", False)])
def test_attribute_protection_batches_follow_the_seed_only_where_every_record_counts_the_same(sampling, public):
    """Batches drawn without replacement or by Poisson sampling are accounted as random draws
    (each record in a round with probability q, averaged over the draws). From a seed known in
    advance they are fixed, and some record is in many more than the average: with n = 400,
    m = 50 and 40 epochs the worst record of seed 0 is in well over the mean of 40 rounds. So
    those batches come from the secret key; shuffled epochs and the full batch keep the seed
    (every record in one batch an epoch, or in all of them, whatever the seed)."""
    from pfair.protocol.silo import SiloKeys

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyWarning)
        st = SteFFLe(epsilon=1.0, sampling=sampling, batch_size=50, epochs=40).settings()
    keys = SiloKeys.for_silo(st)
    assert keys.batch.is_secret is not public
    if sampling == "without_replacement":
        cfg = _core.SiloConfig(sampling=sampling, batch_size=50)
        counts = np.zeros(400, dtype=int)
        for r in range(40 * 8):
            counts[_core.draw_batch(cfg, 400, key=_core.NoiseKey.seeded(0), silo=0, round=r)] += 1
        assert counts.mean() == 40 and counts.max() >= 52  # what a public seed would fix in advance
        a = _core.draw_batch(cfg, 400, key=SiloKeys.for_silo(st).batch, silo=0, round=0)
        b = _core.draw_batch(cfg, 400, key=SiloKeys.for_silo(st).batch, silo=0, round=0)
        assert not np.array_equal(a, b)  # the same settings, the same seed: other batches


def test_private_pfld_draws_its_batches_from_its_noise_key(monkeypatch):
    from pfair.baselines import PFLD

    seen = []
    real = _core.draw_batch

    def spy(cfg, n, *, key, silo, round):
        seen.append(key.is_secret)
        return real(cfg, n, key=key, silo=silo, round=round)

    monkeypatch.setattr(_core, "draw_batch", spy)
    X, y, s, _ = data()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        PFLD(epsilon=2.0, epochs=1, batch_size=100).fit(X, y, sensitive_features=s)
    assert seen and all(seen)
    seen.clear()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        PFLD(epsilon=None, epochs=1, batch_size=100).fit(X, y, sensitive_features=s)
    assert seen and not any(seen)  # non-private: the public seed's batches
