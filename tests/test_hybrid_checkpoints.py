"""Checkpoints of the hybrid topologies: who releases what, what it costs, and what the run does with it.

A non-sensitive silo releases the exact validation table of its held-out records (x and y only); a
sensitive silo, under a fairness target, the violation histogram of all its records, charged first
and noised with its own key at sensitivity √2 (docs/privacy.md, "Checkpoints of the hybrid
topologies"). The server pools them, takes the dual step on λ, and the one Driver chooses the model."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

import pfair
from pfair import SteFFLe, _core, metrics
from pfair.exceptions import BudgetTooSmall, NotBetterThanConstantWarning, PrivacyWarning
from pfair.fairness_target import VIOLATION_EVENT, violation_noise_multiplier
from pfair.protocol.keys import HYBRID_GROUP_COUNTS, group_counts_release, violation_release
from pfair.protocol.messages import CheckpointRelease
from pfair.protocol.simulation import Simulation
from pfair.protocol.topologies import HybridParties
from pfair.validation import validation_table

from support import fit_interrupted, toy_data

TARGET = 0.12


def data(n=900, seed=0):
    return toy_data(n, seed, minority=0.35, weights=(1.0, 0.5), noise=0.3)


def settings(**kw):
    base = dict(mode="hybrid", epsilon=2.0, max_violation=TARGET, epochs=4, batch_size=50, p_s=[0.65, 0.35], seed=1,
                noise_seed=4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyWarning)
        return SteFFLe(**{**base, **kw}).settings()


def federation(n=900, s=None):
    X, y, s0, silos = data(n)
    return pfair.Federation.from_arrays(X, y, sensitive_features=s0 if s is None else s, silos=silos)


SENS = np.arange(900) % 3


def started(st, fed=None, sens=SENS):
    sim = Simulation(st, federation() if fed is None else fed, sensitive_silos=sens, ledgers="new", fast=False)
    return sim, sim.start()


def exact_of(setup: HybridParties, theta):
    """The exact tables and histograms, recomputed here from the pooled records and predictions."""
    X, y, s = setup.fed.pooled()
    pred = np.argmax(_core.predict_proba(np.ascontiguousarray(X), theta, 2), axis=1)
    tables = [validation_table(y[r], pred[r], 2) for r in setup.held_rows]
    hists = [setup.settings.notion.violation_counts(y[r], pred[r], s[r], n_groups=2, n_classes=2)
             for r in (np.flatnonzero(setup.whole_owner == c) for c in range(setup.layout.n_sensitive))]
    return tables, hists


# ------------------------------------------------------------------------------------ the releases
def test_each_sensitive_silo_releases_its_histogram_plus_its_own_noise_charged_first():
    st = settings()
    assert st.checkpoint_epochs() == (0, 1, 2, 3)
    sim, run = started(st)
    setup, loop = sim.silos, run.transport
    K = len(st.checkpoint_epochs())
    theta = np.array([1.0, 0.2, 0.0, -0.5])
    before = [len(ledger.events) for ledger in setup.ledgers]
    releases = dict(loop.checkpoint(theta, 2, [], set()))
    tables, hists = exact_of(setup, theta)
    for c, ledger in enumerate(setup.ledgers):
        z = violation_noise_multiplier(epsilon=2.0, share=st.max_violation_epsilon_share, delta=ledger.delta,
                                       releases=K)
        assert setup.violation_z[c] == z
        # One full-batch Gaussian event, charged to this silo's ledger only.
        assert [(e.name, e.sampling, e.sample_rate, e.noise_multiplier, e.steps)
                for e in ledger.events[before[c]:]] == [(VIOLATION_EVENT, "full_batch", 1.0, z, 1)]
        rel = releases[("sensitive", c)]
        assert isinstance(rel, CheckpointRelease) and rel.silo == c and rel.epoch == 2 and rel.validation is None
        # Every record of the silo, training and held out, plus z·√2·N(0, I) of its own release stream.
        assert hists[c].sum() == np.sum(setup.whole_owner == c)
        noise = _core.gaussian_release(_core.NoiseKey.seeded(4), violation_release(c, "ledger:0", 2).encode(),
                                       hists[c].size)
        np.testing.assert_allclose(rel.counts, hists[c] + z * math.sqrt(2) * noise.reshape(hists[c].shape),
                                   rtol=0, atol=1e-9)
    for j, table in enumerate(tables):  # exact, of the held-out records, no histogram (no s)
        rel = releases[("non-sensitive", j)]
        assert rel.counts is None and rel.silo == j
        np.testing.assert_array_equal(rel.validation, table)
        assert rel.validation.sum() == setup.held_rows[j].size == sim.held_out[j] > 0
    # Asked again for the same epoch: the same releases, nothing charged.
    again = dict(loop.checkpoint(theta, 2, [], set()))
    for c, ledger in enumerate(setup.ledgers):
        np.testing.assert_array_equal(again[("sensitive", c)].counts, releases[("sensitive", c)].counts)
        assert len(ledger.events) == before[c] + 1
    # An epoch the run did not plan a release for is refused before anything is charged.
    for epoch in (-1, 4, 2**40):
        with pytest.raises(ValueError, match=r"checkpoint epochs \[0, 1, 2, 3\] only"):
            loop.checkpoint(theta, epoch, [], set())
    assert [len(ledger.events) for ledger in setup.ledgers] == [b + 1 for b in before]


@pytest.mark.parametrize("record", [0, 1, 7, 450, 899])
def test_changing_one_records_s_moves_only_its_sensitive_silos_histogram_by_at_most_sqrt2(record):
    """The neighbours the hybrid guarantee is about: one record's s changed. No non-sensitive
    silo's table moves (it is exact because it does not read s), no other sensitive silo's
    histogram moves, and its own moves by √2 in L2 (one count from one group's cell to another's):
    the sensitivity its noise is scaled to."""
    X, y, s, silos = data()
    s2 = s.copy()
    s2[record] = 1 - s2[record]
    st = settings(epsilon=None, max_violation=TARGET)
    a, b = (HybridParties(st, federation(s=v), SENS) for v in (s, s2))
    rng = np.random.default_rng(record)
    for theta in (rng.normal(size=4), np.zeros(4), np.array([0.0, 0.0, 5.0, 0.0])):
        ta, ha = a.checkpoint_counts(theta, tables=range(3), histograms=range(3))
        tb, hb = b.checkpoint_counts(theta, tables=range(3), histograms=range(3))
        for j in range(3):
            np.testing.assert_array_equal(ta[j], tb[j])
        owner = SENS[record]
        for c in range(3):
            diff = np.linalg.norm(ha[c] - hb[c])
            if c == owner:
                assert diff == pytest.approx(math.sqrt(2))
            else:
                assert diff == 0.0
    # The recomputation from the records agrees with the Rust pass.
    tables, hists = exact_of(a, theta)
    for j in range(3):
        np.testing.assert_array_equal(ta[j], tables[j])
    for c in range(3):
        np.testing.assert_array_equal(ha[c], hists[c])


def test_a_server_that_knows_one_silos_exact_counts_learns_nothing_of_anothers_noise():
    """With a known noise_seed every sensitive silo's key is the same seed's: their releases must
    still draw distinct streams, or a server that learned one silo's exact counts (a θ whose
    predictions it can count, a colluding silo) would subtract that noise from another silo's
    release, or from the same silo's p_s histogram, and read exact counts."""
    st = settings(p_s="dp", fairness="demographic_parity")
    sim, run = started(st)
    setup = sim.silos
    theta = np.array([0.3, -1.0, 0.4, 0.0])
    releases = dict(run.transport.checkpoint(theta, 1, [], set()))
    _, hists = exact_of(setup, theta)
    noise = [releases[("sensitive", c)].counts - hists[c] for c in range(3)]
    for c in range(3):
        for d in range(c + 1, 3):
            assert np.all(np.abs(noise[c] - noise[d]) > 1e-6)
    # The p_s histogram of silo 0 (its own stream), against its violation histogram's noise.
    z_h = setup.plan.budget.histogram_noise_multiplier(setup.ledgers[0].delta)
    unit = _core.gaussian_release(_core.NoiseKey.seeded(4), group_counts_release(0, HYBRID_GROUP_COUNTS).encode(), 2)
    unit_v = noise[0].ravel()[:2] / (setup.violation_z[0] * math.sqrt(2))
    assert z_h > 0 and np.all(np.abs(unit - unit_v) > 1e-6)


def test_the_hybrid_server_rejects_implausible_releases_and_keeps_lambda():
    st = settings()
    sim, run = started(st)
    server, lim = run.server, run.server.checkpoint_limits
    assert lim["tables"] == dict(enumerate(sim.held_out))
    assert {c: n for c, (n, _) in lim["histograms"].items()} == {0: 300, 1: 300, 2: 300}
    assert all(std == pytest.approx(z * math.sqrt(2)) for (_, std), z in zip(lim["histograms"].values(),
                                                                               sim.silos.violation_z))
    lam, n0 = server.lam, sim.held_out[0]
    table = np.array([[n0 - 3.0, 1.0], [1.0, 1.0]])
    bad = [(("non-sensitive", 0), CheckpointRelease(0, 1, table + 1.0, None)),  # must add up to n_0 exactly
           (("non-sensitive", 1), CheckpointRelease(0, 1, table, None)),  # claims another silo
           (("sensitive", 0), CheckpointRelease(0, 1, None, np.full((1, 2, 2), 1e6))),  # no 300 records give this
           (("sensitive", 1), CheckpointRelease(1, 1, None, np.zeros((1, 3, 2)))),
           (("sensitive", 7), CheckpointRelease(7, 1, None, np.zeros((1, 2, 2)))),
           (("non-sensitive", 2), None)]
    assert server.read_checkpoint(bad, 1, n_classes=2) is None and server.lam == lam
    reasons = [r for _, _, r in server.rejected[-6:]]
    assert ("add up" in reasons[0] and "claims silo" in reasons[1] and "outside" in reasons[2]
            and "shape" in reasons[3] and "unknown silo" in reasons[4] and "no reply" in reasons[5])
    # A valid table with no valid histogram: figures, but λ stays.
    fig = server.read_checkpoint([(("non-sensitive", 0), CheckpointRelease(0, 1, table, None))], 1, n_classes=2)
    assert fig is not None and fig.violation is None and server.lam == lam


# ------------------------------------------------------------------------------------ the run
def test_a_hybrid_target_moves_lambda_and_returns_the_most_accurate_checkpoint_meeting_it():
    X, y, s, silos = data(1800)
    sens = np.arange(len(y)) % 3
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = SteFFLe(mode="hybrid", epsilon=None, max_violation=0.15, epochs=12, batch_size=64, seed=3,
                    p_s=[0.65, 0.35]).fit(X, y, sensitive_features=s, silos=silos, sensitive_silos=sens)
    h, ck = m.history_, m.checkpoints_
    # Non-private: a free checkpoint after every epoch, whose histograms count every record exactly.
    assert len(ck) == 12
    np.testing.assert_allclose(h["violation_released"], h["train_demographic_parity_difference"], atol=1e-12)
    lam, released = h["lam"].to_numpy(), h["violation_released"].to_numpy()
    assert lam[0] == 0.0 and lam.max() > 1.0
    aim = 0.85 * 0.15
    for e in range(len(lam) - 1):  # λ rises while the released violation is above the aim, falls below it
        assert np.sign(lam[e + 1] - lam[e]) == np.sign(released[e] - aim) or lam[e + 1] == lam[e] == 0.0
    meets = ck[ck["violation_released"] <= 0.15]
    assert len(meets) and m.selected_epoch_ == meets["validation_error"].idxmin() < 12  # not the last model
    assert m.lam_ == h["lam"].loc[m.selected_epoch_]
    # The returned model is that checkpoint's: its violation on every record is the released one.
    got = metrics.demographic_parity_difference(y, m.predict(X), sensitive_features=s)
    assert got == pytest.approx(ck.loc[m.selected_epoch_, "violation_released"], abs=1e-12)


def test_a_hybrid_fit_no_better_than_the_constant_predictor_warns():
    X, y, s, silos = data()
    with pytest.warns(NotBetterThanConstantWarning, match="no better than the constant predictor"), \
            warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyWarning)
        # lr_theta = 0: θ stays 0, every record gets one class; the held-out tables show it.
        m = SteFFLe(mode="central_sensitive", epsilon=1.0, lr_theta=0.0, epochs=3, batch_size=50,
                    p_s=[0.65, 0.35], noise_seed=2).fit(X, y, sensitive_features=s, silos=silos)
    assert len(m.checkpoints_) == 3 and not m.checkpoints_["clearly_better"].any()
    # θ = 0 predicts the majority class: the constant predictor's error on the held-out records.
    np.testing.assert_allclose(m.checkpoints_["validation_error"], m.checkpoints_["constant_error"], atol=1e-12)


def test_a_private_hybrid_target_prices_its_histograms_before_its_rounds():
    """The claimed ε includes the violation histograms: each sensitive silo's rounds are calibrated
    on its ledger with the K releases charged in advance, so the plan's ε is what the ledger holds
    after the run, within ε; the rounds get more noise than without a target."""
    X, y, s, silos = data()
    kw = dict(mode="hybrid", epsilon=2.0, epochs=4, batch_size=50, p_s=[0.65, 0.35], noise_seed=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = SteFFLe(max_violation=TARGET, **kw).fit(X, y, sensitive_features=s, silos=silos, sensitive_silos=SENS)
        free = SteFFLe(**kw).fit(X, y, sensitive_features=s, silos=silos, sensitive_silos=SENS)
    K = 4
    for c, ledger in enumerate(m.ledgers_):
        names = [e.name for e in ledger.events]
        assert names.count(VIOLATION_EVENT) == K
        row = m.privacy_report_.loc[c]
        assert ledger.epsilon_spent() == pytest.approx(row["epsilon"], rel=1e-9) and ledger.epsilon_spent() <= 2.0
        assert row["noise_multiplier"] > free.privacy_report_.loc[c, "noise_multiplier"]
    assert all(VIOLATION_EVENT not in [e.name for e in ledger.events] for ledger in free.ledgers_)


def test_a_sensitive_silo_with_too_little_left_refuses_before_anything_is_released():
    X, y, s, silos = data()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyWarning)
        st = SteFFLe(mode="hybrid", epsilon=1e-4, epochs=4, batch_size=50, p_s="dp", fairness="demographic_parity",
                     noise_seed=1).settings()
    sim = Simulation(st, federation(), sensitive_silos=SENS, ledgers="new")
    with pytest.raises(BudgetTooSmall, match="noise-to-signal ratio"):
        sim.run()
    assert all(not ledger.events and not ledger.runs for ledger in sim.ledgers)  # not even the p_s histogram


def test_an_interrupted_hybrid_target_resumes_to_the_same_model_charging_each_release_once():
    fed = federation()
    kw = dict(mode="hybrid", epsilon=2.0, max_violation=TARGET, epochs=5, batch_size=50, p_s=[0.65, 0.35],
              noise_seed=6, seed=2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        whole = SteFFLe(**kw).fit(fed, sensitive_silos=SENS, ledgers="new")
        m = SteFFLe(**kw)
        fit_interrupted(m, fed, sensitive_silos=SENS, ledgers="new", at_epoch=3)
        m.fit(fed, sensitive_silos=SENS, resume=True)
    np.testing.assert_array_equal(m.theta_, whole.theta_)
    assert m.selected_epoch_ == whole.selected_epoch_ and m.lam_ == whole.lam_
    np.testing.assert_array_equal(m.checkpoints_["violation_released"], whole.checkpoints_["violation_released"])
    for a, b in zip(m.ledgers_, whole.ledgers_):
        assert [e.name for e in a.events].count(VIOLATION_EVENT) == 5
        assert a.epsilon_spent() == pytest.approx(b.epsilon_spent(), rel=1e-12)
