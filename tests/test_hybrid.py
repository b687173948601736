"""Hybrid centralization: modes (a)–(c) train, noise only where s lives, account exactly."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import pfair
from pfair.federation import Federation  # noqa: F401
from pfair import SteFFLe, _core, metrics

from pfair.protocol.topologies import HybridParties, layout_for, sensitive_sample_rates
from pfair.protocol.simulation import Simulation
from pfair.privacy import epsilon_for

from support import toy_data


def data(n=2400, seed=0):
    """A minority group (s = 1 for 35% of the records) that shifts the first feature."""
    return toy_data(n, seed, minority=0.35, weights=(1.0, 0.5), noise=0.3)


FAST = dict(epochs=6, batch_size=64, lr_theta=0.5, seed=3, p_s=[0.65, 0.35])


@pytest.mark.parametrize("share", [0.0, 0.1])
def test_divisions_mode_equals_standard_without_noise(share):
    X, y, s, silos = data()
    # Both hold out the same records (the one holdout rule) and read the same checkpoint figures.
    std = SteFFLe(lam=1.0, epsilon=None, sampling="without_replacement", validation_share=share, **FAST).fit(
        X, y, sensitive_features=s, silos=silos)
    div = SteFFLe(lam=1.0, epsilon=None, mode="divisions", validation_share=share, **FAST).fit(
        X, y, sensitive_features=s, silos=silos)
    np.testing.assert_allclose(div.theta_, std.theta_, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(div.W_, std.W_, rtol=1e-9, atol=1e-12)
    if share > 0:  # the held-out share's figures at every checkpoint, and the same model chosen
        assert len(div.checkpoints_) == FAST["epochs"]
        np.testing.assert_allclose(div.checkpoints_["validation_error"], std.checkpoints_["validation_error"])
        assert div.selected_epoch_ == std.selected_epoch_
        assert list(div.privacy_report_["n_held_out"]) == list(std.privacy_report_["n_held_out"])
    else:  # no held-out share, no target: no checkpoints (as before the hybrid topologies had them)
        assert div.checkpoints_ is None or len(div.checkpoints_) == 0


def test_central_and_hybrid_modes_equal_standard_without_noise():
    X, y, s, silos = data()
    std = SteFFLe(lam=1.0, epsilon=None, sampling="without_replacement", **FAST).fit(
        X, y, sensitive_features=s, silos=silos)
    central = SteFFLe(lam=1.0, epsilon=None, mode="central_sensitive", **FAST).fit(X, y, sensitive_features=s, silos=silos)
    hybrid = SteFFLe(lam=1.0, epsilon=None, mode="hybrid", **FAST).fit(
        X, y, sensitive_features=s, silos=silos, sensitive_silos=np.arange(len(y)) % 4
    )
    # Equal batch sizes: the union mean equals the mean of the silos' means; the same records held out.
    for m in (central, hybrid):
        np.testing.assert_allclose(m.theta_, std.theta_, rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(m.checkpoints_["validation_error"], std.checkpoints_["validation_error"])


def test_only_sensitive_silos_noise_and_a_change_of_s_moves_only_its_owner():
    X, y, s, silos = data(600)
    n = len(y)
    members = [np.flatnonzero(silos == j) for j in range(3)]
    owner = np.arange(n) % 2
    theta = np.array([0.8, 0.1, 0.0, -0.2])
    w = np.array([0.3, -0.2, 0.5, 0.1])
    inv = np.array([0.65, 0.35]) ** -0.5
    hs = _core.HybridSet(X, y, s, members, owner, n_sensitive=2, n_groups=2, n_classes=2)
    kw = dict(batch_size=50, clip_theta=1.0, batch_key=_core.NoiseKey.seeded(9), round=4,
              noise_keys=[_core.NoiseKey.seeded(9)] * 2)
    quiet = hs.messages(theta, w, inv, sigma_theta=[0.0, 0.0], sigma_w=[0.0, 0.0], **kw)
    noisy = hs.messages(theta, w, inv, sigma_theta=[0.5, 0.5], sigma_w=[0.5, 0.5], **kw)
    for a, b in zip(quiet["non_sensitive"], noisy["non_sensitive"]):  # non-sensitive silos: exact, no noise
        for key in ("loss_grad", "psi_theta_sfree", "psi_w_sfree"):
            np.testing.assert_array_equal(a[key], b[key])
    for (u0, v0), (u1, v1) in zip(quiet["sensitive"], noisy["sensitive"]):
        assert not np.allclose(u0, u1) and not np.allclose(v0, v1)
    assert quiet["union_size"] == 150 and sum(quiet["intersection"]) == 150

    # Flip the s of one sampled record: only its owner's sums move, within the sum sensitivities.
    sampled = [i for i in range(n) if owner[i] == 1]
    for i in sampled[:40]:
        s2 = s.copy()
        s2[i] = 1 - s2[i]
        hs2 = _core.HybridSet(X, y, s2, members, owner, n_sensitive=2, n_groups=2, n_classes=2)
        flip = hs2.messages(theta, w, inv, sigma_theta=[0.0, 0.0], sigma_w=[0.0, 0.0], **kw)
        for a, b in zip(quiet["non_sensitive"], flip["non_sensitive"]):
            np.testing.assert_array_equal(a["loss_grad"], b["loss_grad"])
        np.testing.assert_array_equal(quiet["sensitive"][0][0], flip["sensitive"][0][0])
        _, d_theta, d_w = _core.sensitivities(inv, n_groups=2, denom=1.0, clip_theta=1.0)
        assert np.linalg.norm(quiet["sensitive"][1][0] - flip["sensitive"][1][0]) <= d_theta * (1 + 1e-12)
        assert np.linalg.norm(quiet["sensitive"][1][1] - flip["sensitive"][1][1]) <= d_w * (1 + 1e-12)


def test_dummy_noise_from_silos_without_records_in_the_batch():
    X, y, s, silos = data(300)
    members = [np.flatnonzero(silos == j) for j in range(3)]
    owner = np.zeros(len(y), dtype=int)
    owner[:5] = 1  # sensitive silo 1 holds 5 records: often absent from the batch
    hs = _core.HybridSet(X, y, s, members, owner, n_sensitive=2, n_groups=2, n_classes=2)
    args = (np.zeros(4), np.zeros(4), np.array([1.4, 1.6]))
    kw = dict(batch_size=4, clip_theta=1.0, sigma_theta=[1.0, 1.0], sigma_w=[1.0, 1.0],
              batch_key=_core.NoiseKey.seeded(0), noise_keys=[_core.NoiseKey.secret(), _core.NoiseKey.secret()])
    silent = [r for r in range(30) if hs.messages(*args, round=r, **kw)["intersection"][1] == 0]
    assert silent
    assert hs.messages(*args, round=silent[0], **kw)["sensitive"][1] is None
    dummy = hs.messages(*args, round=silent[0], dummy_noise=True, **kw)["sensitive"][1]
    assert dummy is not None and np.abs(dummy[0]).sum() > 0


def test_ledgers_belong_to_sensitive_silos_with_the_right_rates():
    X, y, s, _ = data(3000)
    silos = np.repeat([0, 1, 2], [1500, 1000, 500])
    sens = np.where(silos == 2, 1, 0)  # sensitive silo 1 holds exactly the records of silo 2
    m = SteFFLe(epsilon=1.0, mode="hybrid", **FAST).fit(X, y, sensitive_features=s, silos=silos, sensitive_silos=sens)
    rep = m.privacy_report_
    # The rounds sample each non-sensitive silo's training records (10 % held out: 1350, 900, 450);
    # the ledgers' δ belong to all of a sensitive silo's records.
    assert len(m.ledgers_) == 2 and list(rep["n_records"]) == [2250, 450]
    assert list(rep["n_held_out"]) == [250, 50]
    assert [ledger.delta for ledger in m.ledgers_] == [m.settings().delta_for(n) for n in (2500, 500)]
    # q_c = the largest inclusion probability m/n_j among the silos holding c's records.
    np.testing.assert_allclose(rep["sample_rate"], [64 / 900, 64 / 450])
    for c, row in rep.iterrows():
        assert row["epsilon_spent"] <= 1.0
        assert row["accounting"] == "public_batch"  # the non-sensitive silos' sums reveal the batch
        again = epsilon_for(noise_multiplier=row["noise_multiplier"], sample_rate=row["sample_rate"],
                            steps=int(row["steps"]), delta=row["delta"], sampling="public_batch",
                            accountant="best")
        assert m.ledgers_[c].epsilon_spent() == pytest.approx(again, rel=1e-9)
    # Noise is calibrated to the sums' sensitivities (denominator 1).
    assert rep["denominator"].eq(1.0).all()
    np.testing.assert_allclose(rep["sigma_theta"], rep["noise_multiplier"] * np.sqrt(2) * 2 * m.settings().clip)


def test_sample_rates_without_amplification_are_one():
    lay = layout_for("central_sensitive", [100, 50], None)
    np.testing.assert_allclose(sensitive_sample_rates(lay, 10, True), [0.2])
    np.testing.assert_allclose(sensitive_sample_rates(lay, 10, False), [1.0])
    X, y, s, silos = data()
    m = SteFFLe(epsilon=3.0, mode="central_sensitive", amplification=False, **FAST)
    m.fit(X, y, sensitive_features=s, silos=silos)
    assert (m.privacy_report_["accounting"] == "full_batch").all()
    assert (m.privacy_report_["epsilon_spent"] <= 3.0).all()


def test_hybrid_mode_errors():
    X, y, s, silos = data(600)
    with pytest.raises(ValueError, match="mode='hybrid' needs sensitive_silos"):
        SteFFLe(mode="hybrid", **FAST).fit(X, y, sensitive_features=s, silos=silos)
    with pytest.raises(ValueError, match="protect='attribute'"):
        SteFFLe(mode="divisions", protect="record", epsilon=1.0, **FAST).fit(X, y, sensitive_features=s, silos=silos)
    with pytest.raises(ValueError, match="mode='nope' is not supported"):
        SteFFLe(mode="nope", **FAST).fit(X, y, sensitive_features=s, silos=silos)
    with pytest.raises(ValueError, match="sensitive_silos has 5 entries"):
        SteFFLe(mode="hybrid", **FAST).fit(X, y, sensitive_features=s, silos=silos, sensitive_silos=[0, 1, 0, 1, 0])


@pytest.mark.parametrize("mode", ["divisions", "central_sensitive", "hybrid"])
def test_modes_train_on_adult_as_well_as_the_standard_mode(adult, adult_federation, mode):
    data_, fed = adult, adult_federation
    # Reproducible noise (a simulation): the comparison is not at the mercy of one noise draw.
    kw = dict(lam=1.0, epsilon=1.0, epochs=10, seed=0, noise_seed=0, track_history=False)
    std = SteFFLe(**kw).fit(fed, ledgers="new")
    sens = np.arange(fed.n_records) % 5 if mode == "hybrid" else None
    m = SteFFLe(mode=mode, **kw).fit(fed, sensitive_silos=sens, ledgers="new")
    err_std = 1 - std.score(data_.X_test, data_.y_test)
    err = 1 - m.score(data_.X_test, data_.y_test)
    trivial = metrics.trivial_error(data_.y_test)
    assert err < trivial - 0.05
    assert abs(err - err_std) < 0.015, (mode, err, err_std)
    assert (m.privacy_report_["epsilon_spent"] <= 1.0).all()
    assert (m.privacy_report_["p_s"] == "dp").all()  # each sensitive silo released a DP histogram


def test_hybrid_modes_refuse_options_they_cannot_honour():
    X, y, s, silos = data()
    with pytest.raises(ValueError, match="silo_weights does not apply"):
        SteFFLe(epsilon=1.0, mode="central_sensitive", silo_weights="size", **FAST).fit(
            X, y, sensitive_features=s, silos=silos)
    with pytest.raises(ValueError, match="numeric accountant only"):
        SteFFLe(epsilon=1.0, mode="divisions", calibration="paper", **FAST).fit(X, y, sensitive_features=s, silos=silos)


def test_ledger_rates_of_the_divisions_and_central_modes():
    X, y, s, _ = data(3000)
    silos = np.repeat([0, 1, 2], [1500, 1000, 500])
    # (a) each silo's sensitive division accounts its own silo's rate m / n_j.
    div = SteFFLe(epsilon=1.0, mode="divisions", **FAST).fit(X, y, sensitive_features=s, silos=silos)
    # (n_j: its training records, 10 % of each silo held out)
    np.testing.assert_allclose(div.privacy_report_["sample_rate"], [64 / 1350, 64 / 900, 64 / 450])
    # (b) the central sensitive silo holds every record: the worst rate, max_j m / n_j.
    cen = SteFFLe(epsilon=1.0, mode="central_sensitive", **FAST).fit(X, y, sensitive_features=s, silos=silos)
    np.testing.assert_allclose(cen.privacy_report_["sample_rate"], [64 / 450])
    for m in (div, cen):
        rep = m.privacy_report_
        assert (rep["accounting"] == "public_batch").all() and len(m.ledgers_) == len(rep)
        for c, row in rep.iterrows():
            again = epsilon_for(noise_multiplier=row["noise_multiplier"], sample_rate=row["sample_rate"],
                                steps=int(row["steps"]), delta=row["delta"], sampling="public_batch",
                                accountant="best")
            assert m.ledgers_[c].epsilon_spent() == pytest.approx(again, rel=1e-9) and again <= 1.0


@pytest.mark.parametrize("mode,dummy", [("divisions", False), ("central_sensitive", False), ("hybrid", True),
                                        ("hybrid", False)])
def test_hybrid_parties_equal_the_fast_rounds(mode, dummy):
    """Each hybrid topology run party by party (non-sensitive silos, sensitive silos with their own
    keys and ledgers, the server) gives the fast in-process rounds' model bit for bit."""
    import warnings

    from pfair.exceptions import PrivacyWarning
    from pfair.federation import Federation

    X, y, s, silos = data(900)
    fed = Federation.from_arrays(X, y, sensitive_features=s, silos=silos)
    sens = np.arange(len(y)) % 3 if mode == "hybrid" else None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyWarning)
        st = SteFFLe(epsilon=2.0, mode=mode, dummy_noise=dummy, noise_seed=7, output="random", **{**FAST, "epochs": 3}
                     ).settings()
    fast = Simulation(st, fed, sensitive_silos=sens, ledgers="new")
    slow = Simulation(st, fed, sensitive_silos=sens, ledgers="new", fast=False)
    a, b = fast.run(), slow.run()
    np.testing.assert_array_equal(a.theta, b.theta)
    np.testing.assert_array_equal(a.w, b.w)
    np.testing.assert_array_equal(a.snapshot[0], b.snapshot[0])
    assert [x.epsilon_spent() for x in fast.ledgers] == [x.epsilon_spent() for x in slow.ledgers]


def test_a_sensitive_silo_only_sums_its_own_records():
    X, y, s, silos = data(300)
    members = [np.flatnonzero(silos == j) for j in range(3)]
    owner = np.arange(len(y)) % 2
    hs = _core.HybridSet(X, y, s, members, owner, n_sensitive=2, n_groups=2, n_classes=2)
    args = (np.zeros(4), np.zeros(4), np.array([1.4, 1.6]))
    with pytest.raises(ValueError, match="record 1 is not held by sensitive silo 0"):
        hs.sensitive_step(0, *args, [np.array([0, 1])], clip_theta=1.0)


def test_the_non_sensitive_batches_come_from_a_secret_key():
    """The sensitive silos' rounds are accounted as random batches (a record drawn with
    probability q, averaged over the draws); batches that follow from the public seed would be
    known in advance, with some record in more of them than the average."""
    X, y, s, silos = data(600)
    sens = (np.arange(len(y)) % 2).astype(int)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        st = SteFFLe(epsilon=1.0, mode="hybrid", **FAST).settings()
        fed = pfair.Federation.from_arrays(X, y, sensitive_features=s, silos=silos)
        sims = [Simulation(st, fed, sensitive_silos=sens, ledgers="new") for _ in range(2)]
        for sim in sims:
            sim.start()
    runners = [sim.silos for sim in sims]
    assert all(isinstance(r, HybridParties) and r.batch_key.is_secret for r in runners)
    batches = [r.parties()[0][0].step(np.zeros(4), np.zeros(4), r.inv, 0)[1] for r in runners]
    assert not all(np.array_equal(a, b) for a, b in zip(*batches))  # the same seed, other batches


@pytest.mark.parametrize("bad", ["nan", "huge", "round", "silo", "length", "type"])
def test_the_hybrid_server_refuses_a_malformed_reply(bad):
    """A hostile or broken party's reply is dropped and logged, never averaged in: the step equals
    the one without it (the hybrid server once averaged whatever it was sent)."""
    import dataclasses

    from pfair.protocol.topologies import SensitiveMessage

    X, y, s, silos = data(600)
    sens = (np.arange(len(y)) % 2).astype(int)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        st = SteFFLe(epsilon=1.0, mode="hybrid", noise_seed=3, dummy_noise=True, **FAST).settings()
        fed = pfair.Federation.from_arrays(X, y, sensitive_features=s, silos=silos)
        sim = Simulation(st, fed, sensitive_silos=sens, ledgers="new")
        server = sim.start().server
    setup = sim.silos
    ns, sp = setup.parties()
    theta, w = np.zeros(4), np.zeros(4)
    replies = [party.step(theta, w, setup.inv, 0) for party in ns]
    msgs = [p.step(theta, w, setup.inv, 0, [h[p.c] for _, h in replies]) for p in sp]
    ns_msgs = [m for m, _ in replies]
    m0 = msgs[0]
    forged = {
        "nan": dataclasses.replace(m0, psi_theta=np.full_like(m0.psi_theta, np.nan)),
        "huge": dataclasses.replace(m0, psi_w=m0.psi_w + 1e6),
        "round": dataclasses.replace(m0, round=5),
        "silo": dataclasses.replace(m0, silo=1),
        "length": dataclasses.replace(m0, psi_theta=np.zeros(7)),
        "type": SensitiveMessage(0, 0, m0.psi_theta.astype(np.int64), m0.psi_w),
    }[bad]
    want = server.update(theta, w, ns_msgs, [None, msgs[1]], lr_theta=0.1, round=0)
    got = server.update(theta, w, ns_msgs, [forged, msgs[1]], lr_theta=0.1, round=0)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])
    assert [r[1] for r in server.rejected] == [("sensitive", 0)]
    # A non-sensitive silo's reply of the wrong shape is dropped too.
    broken = dataclasses.replace(ns_msgs[0], loss_grad=np.zeros(3))
    server.update(theta, w, [broken, *ns_msgs[1:]], msgs, lr_theta=0.1, round=0)
    assert server.rejected[-1][1] == ("non-sensitive", 0) and "length" in server.rejected[-1][2]


def test_sensitive_silos_ledgers_from_paths_persist_and_are_checked(tmp_path):
    """The sensitive silos' ledgers come from the shared set-up (pfair.protocol.setup.ledgers_for):
    a path that does not exist yet is created, and holds the run's spending for the next fit; a
    list of the wrong length or a ledger with less budget than asked is refused before any round."""
    from pfair.exceptions import LedgerMismatch
    from pfair.privacy import PrivacyLedger

    X, y, s, silos = data(600)
    kw = dict(lam=1.0, epsilon=1.0, mode="central_sensitive", noise_seed=0, **FAST)
    path = tmp_path / "sensitive0.json"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = SteFFLe(**kw).fit(X, y, sensitive_features=s, silos=silos, ledgers=[str(path)])
    spent = m.ledgers_[0].epsilon_spent()
    assert 0.5 < spent <= 1.0 and path.exists()
    assert PrivacyLedger.load(str(path)).epsilon_spent() == pytest.approx(spent, rel=1e-12)
    with pytest.raises(ValueError, match="one per sensitive silo"):
        SteFFLe(**kw).fit(X, y, sensitive_features=s, silos=silos, ledgers=["a.json", "b.json"])
    small = PrivacyLedger(epsilon=0.5, delta=m.ledgers_[0].delta, silo="sensitive 0")
    with pytest.raises(LedgerMismatch, match="more than its ledger's budget"):
        SteFFLe(**kw).fit(X, y, sensitive_features=s, silos=silos, ledgers=[small])


def test_the_old_module_name_still_imports_with_a_warning():
    """pfair.protocol.hybrid is now pfair.protocol.topologies ("hybrid" names the topologies only)."""
    with pytest.warns(DeprecationWarning, match="pfair.protocol.topologies"):
        from pfair.protocol.hybrid import HybridParties as old
    assert old is HybridParties


def test_a_sensitive_silos_histogram_of_s_is_kept_once_on_its_ledger():
    """Two private fits of a hybrid topology on the same ledgers, with one noise seed and different
    ε: the second gets the first's release again at no cost. A second draw of the same stream at
    another σ would let anyone who sees both cancel the noise ((σ_b m_a − σ_a m_b)/(σ_b − σ_a) is
    the exact counts), without knowing the seed."""
    X, y, s, silos = toy_data(900, 0, minority=0.35, weights=(1.0, 0.5), noise=0.3)
    fed = pfair.Federation.from_arrays(X, y, sensitive_features=s, silos=silos)
    released, ledgers = [], None
    for eps in (3.0, 2.0):
        st = SteFFLe(epsilon=eps, mode="central_sensitive", noise_seed=7, p_s="dp", epochs=1, batch_size=64,
                     seed=3).settings()
        sim = Simulation(st, fed, ledgers="new" if ledgers is None else ledgers)
        ledgers = sim.ledgers if ledgers is None else ledgers
        sim.silos.ledgers = ledgers
        released.append(sim.silos.release_group_counts(0))
    np.testing.assert_array_equal(released[0], released[1])
    assert [e.name for e in ledgers[0].events] == ["p_s_histogram"]


@pytest.mark.parametrize("mode", ["hybrid", "divisions"])
def test_a_resumed_hybrid_fit_charges_no_round_twice_and_equals_the_uninterrupted_one(mode):
    """The hybrid topologies are put together by the one assembler, so an interrupted fit resumes:
    on arrays its sensitive silos' ledgers are the interrupted fit's (kept by the estimator), each
    holds exactly the planned rounds once, and with reproducible noise the model is the
    uninterrupted fit's, bit for bit."""
    from support import fit_interrupted

    X, y, s, silos = data(900)
    extra = {"sensitive_silos": np.arange(len(y)) % 3} if mode == "hybrid" else {}
    kw = dict(FAST, epochs=5, epsilon=1.0, mode=mode, noise_seed=11)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        whole = SteFFLe(**kw).fit(X, y, sensitive_features=s, silos=silos, ledgers="new", **extra)
        m = SteFFLe(**kw)
        fit_interrupted(m, X, y, sensitive_features=s, silos=silos, ledgers="new", at_epoch=3, **extra)
        assert m._run_state.epochs_done == 3
        m.fit(X, y, sensitive_features=s, silos=silos, resume=True, **extra)
    np.testing.assert_array_equal(m.theta_, whole.theta_)
    np.testing.assert_array_equal(m.W_, whole.W_)
    assert m.n_rounds_ == whole.n_rounds_
    for ledger in m.ledgers_:
        (run,) = ledger.runs.values()
        assert run["next_round"] == whole.n_rounds_ == run["planned_steps"]
    assert list(m.privacy_report_["epsilon_spent"]) == list(whole.privacy_report_["epsilon_spent"])


def test_a_hybrid_run_does_not_resume_on_ledgers_that_did_not_charge_it():
    """Resuming on fresh ledgers would forget the rounds the interrupted run was charged for."""
    from support import fit_interrupted

    X, y, s, silos = data(600)
    kw = dict(FAST, epochs=4, epsilon=1.0, mode="central_sensitive", noise_seed=2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = SteFFLe(**kw)
        fit_interrupted(m, X, y, sensitive_features=s, silos=silos, ledgers="new", at_epoch=2)
        with pytest.raises(ValueError, match="holds no record of the interrupted run"):
            m.fit(X, y, sensitive_features=s, silos=silos, resume=True, ledgers="new")


def test_a_hybrid_fit_warm_starts_from_its_previous_model():
    """warm_start=True starts a hybrid topology's new run from the fitted θ and W (a new run,
    charged on top of what the ledgers hold), as the standard topology does: its first epoch's
    update is a step from the previous model, not from zero."""
    X, y, s, silos = data(600)
    sens = np.arange(len(y)) % 2
    kw = dict(FAST, epochs=2, epsilon=None, mode="hybrid")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cold = SteFFLe(**kw).fit(X, y, sensitive_features=s, silos=silos, sensitive_silos=sens)
        warm = SteFFLe(**kw, warm_start=True).fit(X, y, sensitive_features=s, silos=silos, sensitive_silos=sens)
        first = warm.theta_.copy()
        warm.fit(X, y, sensitive_features=s, silos=silos, sensitive_silos=sens)
        again = SteFFLe(**{**kw, "epochs": 4}).fit(X, y, sensitive_features=s, silos=silos, sensitive_silos=sens)
    np.testing.assert_array_equal(first, cold.theta_)
    # Two more epochs from the two-epoch model (a new run: its rounds start again at 0): not the
    # cold model, and nearer a 4-epoch fit than the cold model is.
    assert not np.array_equal(warm.theta_, cold.theta_)
    assert np.linalg.norm(warm.theta_ - again.theta_) < np.linalg.norm(cold.theta_ - again.theta_)
