"""Persistent ledgers: a silo's budget outlives a fit, a process and an interruption."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest

from pfair import Federation, SteFFLe
from pfair.exceptions import LedgerConflict, LedgerMismatch, PrivacyBudgetExceeded, PrivacyWarning, ReplayRefused
from pfair.privacy import MechanismEvent, PrivacyLedger
from pfair.privacy.ledger import data_fingerprint

from support import fit_interrupted, toy_data as data, toy_federation as fed


FAST = dict(lam=1.0, epochs=4, batch_size=50, p_s=[0.5, 0.5], seed=0, track_history=False)


def test_refitting_the_same_silos_spends_only_what_is_left_and_then_refuses():
    f = fed()
    first = SteFFLe(epsilon=1.0, **FAST).fit(f)
    spent = first.privacy_report_["epsilon_spent"]
    assert (spent > 0.95).all() and (spent <= 1.0).all()
    # The budget lives in the silos' ledgers: a second fit gets the sliver that is left (warned),
    # so its noise is far larger, and the silos' total stays within the budget.
    with pytest.warns(PrivacyWarning, match="spent"):
        second = SteFFLe(epsilon=1.0, **FAST).fit(f)
    assert (second.privacy_report_["noise_multiplier"] > 3 * first.privacy_report_["noise_multiplier"]).all()
    assert all(0.99 < ledger.epsilon_spent() <= 1.0 for ledger in second.ledgers_)
    assert second.ledgers_ == first.ledgers_ and all(len(ledger.runs) == 2 for ledger in second.ledgers_)
    # A ledger with nothing left refuses before any round.
    exhausted = []
    for ledger in first.ledgers_:
        d = ledger.to_dict()
        d["epsilon_budget"] = d["epsilon_spent"]
        exhausted.append(PrivacyLedger.from_dict(d))
    eps = min(ledger.epsilon for ledger in exhausted)
    with pytest.raises(PrivacyBudgetExceeded, match="nothing is left"):
        SteFFLe(epsilon=eps, **FAST).fit(f, ledgers=exhausted)
    # Simulations may ask for fresh ledgers explicitly.
    again = SteFFLe(epsilon=1.0, **FAST).fit(f, ledgers="new")
    assert (again.privacy_report_["epsilon_spent"] <= 1.0).all()


def test_a_second_fit_gets_only_the_remaining_budget():
    f = fed()
    budget = [PrivacyLedger(epsilon=2.0, delta=1e-5, silo=j) for j in range(3)]
    SteFFLe(epsilon=1.0, delta=1e-5, **FAST).fit(f, ledgers=budget)
    with pytest.warns(PrivacyWarning, match="what is left"):
        b = SteFFLe(epsilon=2.0, delta=1e-5, **FAST).fit(f, ledgers=budget)
    for ledger in budget:
        assert 1.9 < ledger.epsilon_spent() <= 2.0
        assert len(ledger.runs) == 2
    # The second fit had only what the first left, so it noised more than a fresh ε = 2 fit.
    fresh = SteFFLe(epsilon=2.0, delta=1e-5, **FAST).fit(f, ledgers="new")
    assert (b.privacy_report_["noise_multiplier"] > 1.05 * fresh.privacy_report_["noise_multiplier"]).all()
    with pytest.raises(LedgerMismatch, match="budget"):
        SteFFLe(epsilon=3.0, delta=1e-5, **FAST).fit(f, ledgers=budget)


def test_ledger_round_trips_through_dict_and_file(tmp_path):
    ledger = PrivacyLedger(epsilon=1.0, delta=1e-5, silo="a", fingerprint="f" * 64)
    ledger.charge(MechanismEvent.gaussian_histogram(noise_multiplier=20.0))
    ledger.begin_run("r1", sampling="public_batch", sample_rate=0.1, noise_multiplier=30.0, planned_steps=50)
    ledger.charge_rounds("r1", 0, 10)
    ledger.release("p_s_histogram:demographic_parity", np.array([[3.5, 7.25]]))
    back = PrivacyLedger.from_dict(json.loads(json.dumps(ledger.to_dict())))
    assert back.epsilon_spent() == ledger.epsilon_spent()
    assert back.next_round("r1") == 10 and back.fingerprint == "f" * 64
    np.testing.assert_array_equal(back.release("p_s_histogram:demographic_parity"), [[3.5, 7.25]])
    path = tmp_path / "silo_a.json"
    ledger.save(path)
    loaded = PrivacyLedger.load(path)
    loaded.charge_rounds("r1", 10, 5)  # written through to the file
    assert PrivacyLedger.load(path).next_round("r1") == 15
    # A tampered file whose events exceed the budget is refused.
    d = json.loads(path.read_text())
    d["epsilon_budget"] = 1e-3
    with pytest.raises(PrivacyBudgetExceeded):
        PrivacyLedger.from_dict(d)


def test_rounds_are_charged_once_and_in_order():
    ledger = PrivacyLedger(epsilon=1.0, delta=1e-5)
    ledger.begin_run("r", sampling="public_batch", sample_rate=0.1, noise_multiplier=30.0, planned_steps=20)
    ledger.charge_rounds("r", 0, 5)
    spent = ledger.epsilon_spent()
    with pytest.raises(ReplayRefused, match="already answered"):
        ledger.charge_rounds("r", 3, 1)
    with pytest.raises(PrivacyBudgetExceeded, match="planned 20"):
        ledger.charge_rounds("r", 5, 16)
    assert ledger.epsilon_spent() == spent and ledger.next_round("r") == 5
    # A silo that was down skips the rounds it missed, and can never answer them later.
    ledger.charge_rounds("r", 8, 2)
    assert ledger.next_round("r") == 10
    with pytest.raises(ReplayRefused, match="already answered"):
        ledger.charge_rounds("r", 6, 1)
    assert ledger.epsilon_spent() > spent
    with pytest.raises(LedgerMismatch, match="noise plan"):
        ledger.begin_run("r", sampling="public_batch", sample_rate=0.1, noise_multiplier=10.0, planned_steps=20)


def test_a_ledger_is_bound_to_its_data():
    f = fed()
    X2, y2, s2, silos2 = data(seed=1)
    other = Federation.from_arrays(X2, y2, sensitive_features=s2, silos=silos2)
    m = SteFFLe(epsilon=1.0, **FAST).fit(f, ledgers="new")
    assert m.ledgers_[0].fingerprint == data_fingerprint(f.silos[0].X, f.silos[0].y, f.silos[0].s)
    with pytest.raises(LedgerMismatch, match="other data"):
        SteFFLe(epsilon=1.0, **FAST).fit(other, ledgers=m.ledgers_)


def test_paper_calibration_keeps_the_budget_and_stops_when_refused():
    X, y, s, silos = data(n=3000)
    kw = dict(FAST, epochs=30, batch_size=100, p_s=[0.5, 0.5])
    with pytest.warns(PrivacyWarning, match="refuse"):
        m = SteFFLe(epsilon=1.0, calibration="paper", **kw).fit(X, y, sensitive_features=s, silos=silos)
    assert (m.privacy_report_["epsilon_spent"] <= 1.0).all()
    assert all(ledger.epsilon == 1.0 for ledger in m.ledgers_)
    assert m.epochs_done_ < 30


@pytest.mark.slow
def test_budget_survives_a_process(tmp_path):
    """A fit in another process charges ledgers on disk; this process sees the spend and refuses."""
    X, y, s, silos = data()
    np.savez(tmp_path / "d.npz", X=X, y=y, s=s, silos=silos)
    paths = [str(tmp_path / f"silo{j}.json") for j in range(3)]
    script = textwrap.dedent(f"""
        import numpy as np, pfair
        d = np.load({str(tmp_path / 'd.npz')!r})
        m = pfair.SteFFLe(epsilon=1.0, delta=1e-5, **{FAST!r}).fit(
            d['X'], d['y'], sensitive_features=d['s'], silos=d['silos'], ledgers={paths!r})
        print(m.epsilon_spent_, m.privacy_report_["noise_multiplier"].min())
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    spent, z_first = map(float, out.stdout.strip().splitlines()[-1].split())
    assert 0.95 < spent <= 1.0
    assert all(os.path.exists(p) for p in paths)
    with pytest.warns(PrivacyWarning, match="spent"):
        m = SteFFLe(epsilon=1.0, delta=1e-5, **FAST).fit(X, y, sensitive_features=s, silos=silos, ledgers=paths)
    for p in paths:
        ledger = PrivacyLedger.load(p)
        assert len(ledger.runs) == 2 and 0.99 < ledger.epsilon_spent() <= 1.0
    assert (m.privacy_report_["noise_multiplier"] > 3 * z_first).all()


@pytest.mark.parametrize("protect", ["attribute", "record"])
def test_resume_charges_no_round_twice_and_equals_an_uninterrupted_run(protect):
    """Interrupt a fit in its third epoch, resume it: the ledgers hold exactly the planned rounds,
    and with reproducible noise the result equals the uninterrupted fit bit for bit. Record mode's
    PLD-priced run was paid in full when planned; its resume pays nothing again."""
    kw = dict(FAST, epochs=5, noise_seed=11, protect=protect)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyWarning)
        whole = SteFFLe(epsilon=1.0, **kw).fit(fed(), ledgers="new")
        f = fed()
        m = SteFFLe(epsilon=1.0, **kw)
        fit_interrupted(m, f, at_epoch=3)
        assert m._run_state.epochs_done == 3
        m.fit(f, resume=True)
    rounds = whole.n_rounds_
    for ledger in m.ledgers_:
        (run,) = ledger.runs.values()
        assert run["next_round"] == rounds == run["planned_steps"]
        assert bool(run.get("prepaid")) == (protect == "record")
    np.testing.assert_array_equal(m.theta_, whole.theta_)
    assert list(m.privacy_report_["epsilon_spent"]) == list(whole.privacy_report_["epsilon_spent"])
    with pytest.warns(PrivacyWarning, match="spent"):
        if protect == "record":  # what is left cannot pay for the validation tables: refused, nothing released
            with pytest.raises(PrivacyBudgetExceeded, match="cannot pay for this run.s 2 checkpoint releases"):
                m.fit(f)
        else:
            m.fit(f)  # a new run (not a resume) gets only what is left


def test_a_warm_start_is_a_new_run_on_the_same_ledgers():
    f = fed()
    m = SteFFLe(epsilon=2.0, warm_start=True, **FAST).fit(f)
    first_theta = m.theta_.copy()
    spent = [ledger.epsilon_spent() for ledger in m.ledgers_]
    with pytest.warns(PrivacyWarning, match="what is left"):
        m.fit(f)
    assert all(len(ledger.runs) == 2 for ledger in m.ledgers_)
    assert all(b > a and b <= 2.0 for a, b in zip(spent, (ledger.epsilon_spent() for ledger in m.ledgers_)))
    # It started from the previous model: with λ = 0 and no noise, one more epoch from θ₁ is not
    # the same as one epoch from zero.
    X, y, s, silos = data()
    kw = dict(lam=0.0, epochs=1, batch_size=50, seed=0, track_history=False)
    cold = SteFFLe(**kw).fit(X, y, sensitive_features=s, silos=silos)
    warm = SteFFLe(warm_start=True, **kw).fit(X, y, sensitive_features=s, silos=silos)
    twice = warm.fit(X, y, sensitive_features=s, silos=silos)
    assert not np.array_equal(twice.theta_, cold.theta_)
    assert np.linalg.norm(twice.theta_) > np.linalg.norm(cold.theta_)
    assert not np.array_equal(first_theta, m.theta_)


# --------------------------------------------------------------------------------------------
# Set-up and per-epoch charging at scale: the same answers as one ledger at a time.


def _filter_epsilon(ledger, events):
    """The ledger's ε by its filters (RDP and the exact account): the currency of rounds charged as
    they are answered. The PLD currency prices only runs paid in full when planned."""
    e = ledger.epsilons(events)
    return min(e["rdp"], e["exact"])


def _reference_z_after(ledger, *, epsilon, sample_rate, steps, sampling):
    """The calibration after a ledger as it was written in Python: geometric bisection on z of
    the ledger's ε (by its filters) with one more event, to a ratio of 1.005 (the upper end)."""
    def eps(z):
        return _filter_epsilon(ledger, [MechanismEvent(name="r", sampling=sampling, sample_rate=sample_rate,
                                                       noise_multiplier=z, steps=steps)])

    lo, hi = 1e-3, 1.0
    while eps(hi) > epsilon:
        lo, hi = hi, hi * 4
    while hi / lo > 1.005:
        mid = (lo * hi) ** 0.5
        lo, hi = (lo, mid) if eps(mid) <= epsilon else (mid, hi)
    return hi


@pytest.mark.parametrize("sampling", ["public_batch", "shuffle", "without_replacement"])
def test_calibration_after_a_ledger_equals_the_python_bisection(sampling):
    from pfair.privacy.calibration import noise_multiplier_after

    ledger = PrivacyLedger(epsilon=1.0, delta=1e-6, silo=0)
    ledger.charge(MechanismEvent.gaussian_histogram(noise_multiplier=12.0))
    q, steps = 64 / 3000, 900
    z = noise_multiplier_after(ledger, epsilon=1.0, sample_rate=q, steps=steps, sampling=sampling)
    assert z == pytest.approx(_reference_z_after(ledger, epsilon=1.0, sample_rate=q, steps=steps, sampling=sampling),
                              rel=1e-12)
    event = MechanismEvent(name="r", sampling=sampling, sample_rate=q, noise_multiplier=z, steps=steps)
    assert ledger.epsilon_with([event]) <= 1.0
    assert _filter_epsilon(ledger, [MechanismEvent(name="r", sampling=sampling, sample_rate=q,
                                                   noise_multiplier=z / 1.006, steps=steps)]) > 1.0
    # accountant="rdp" prices the same by RDP alone: never less noise than the ledger's currency.
    z_rdp = noise_multiplier_after(ledger, epsilon=1.0, sample_rate=q, steps=steps, sampling=sampling,
                                   accountant="rdp")
    assert z_rdp >= z * (1 - 0.006)
    assert ledger.epsilons([MechanismEvent(name="r", sampling=sampling, sample_rate=q, noise_multiplier=z_rdp,
                                           steps=steps)])["rdp"] <= 1.0


def test_calibration_after_a_spent_ledger_refuses_instead_of_pure_noise():
    from pfair.privacy.calibration import noise_multiplier_after

    ledger = PrivacyLedger(epsilon=1.0, delta=1e-6, silo=0)
    ledger.charge(MechanismEvent.gaussian_histogram(noise_multiplier=5.0))
    with pytest.raises(PrivacyBudgetExceeded, match="cannot be met"):
        noise_multiplier_after(ledger, epsilon=ledger.epsilon_spent() * (1 - 1e-9), sample_rate=0.1, steps=100,
                               sampling="public_batch")


def test_charging_many_ledgers_together_equals_charging_each_alone():
    from pfair.privacy.ledger import charge_rounds_together

    def make(budget, z, n_before):
        ledger = PrivacyLedger(epsilon=budget, delta=1e-6, silo=budget)
        ledger.begin_run("run", sampling="public_batch", sample_rate=0.05, noise_multiplier=z, planned_steps=400)
        if n_before:
            ledger.charge_rounds("run", 0, n_before)
        return ledger

    # Equal ledgers (deduplicated in Rust), a nearly spent one, one whose plan ends, and a replay.
    specs = [(1.0, 8.0, 0)] * 5 + [(0.3, 3.0, 0), (1.0, 8.0, 20), (2.0, 4.0, 0), (1.0, 8.0, 0)]
    together, alone = [make(*sp) for sp in specs], [make(*sp) for sp in specs]
    for start in (0, 20, 40, 390):
        count = 10 if start < 390 else 20  # the last charge goes past the 400 planned rounds
        got = charge_rounds_together([(lg, "run") for lg in together], start, count)
        for lg, exc in zip(alone, got):
            try:
                lg.charge_rounds("run", start, count)
                want = None
            except (PrivacyBudgetExceeded, ReplayRefused) as e:
                want = e
            assert type(exc) is type(want) and str(exc) == str(want)
    assert [lg.to_dict() for lg in together] == [lg.to_dict() for lg in alone]
    outcomes = {type(e).__name__ for e in got}
    assert {"PrivacyBudgetExceeded"} <= outcomes
    assert sum(lg.next_round("run") > 40 for lg in together) >= 1  # some ledgers went on charging
    # A refused charge records nothing; the one ledger twice in a list is charged in order.
    lg = make(1.0, 8.0, 0)
    lg.begin_run("other", sampling="public_batch", sample_rate=0.05, noise_multiplier=8.0, planned_steps=400)
    twice = charge_rounds_together([(lg, "run"), (lg, "other")], 0, 10)
    assert twice == [None, None] and lg.next_round("run") == lg.next_round("other") == 10
    assert lg.epsilon_spent() == pytest.approx(PrivacyLedger(epsilon=1.0, delta=1e-6).epsilon_with(
        [MechanismEvent(name="r", sampling="public_batch", sample_rate=0.05, noise_multiplier=8.0, steps=20)]))


def test_a_ledger_records_the_events_of_its_round_charges_as_charged():
    """A ledger reuses one frozen event per distinct round charge (epoch after epoch the same);
    what it records is the events of the charges, in order: a shuffled epoch charged in two parts
    (its second part touching no new epoch), whole epochs, a resumed run's shorter charge."""
    from pfair.privacy.ledger import charge_rounds_together

    q, z = 0.1, 4.0  # 10 rounds an epoch
    lg = PrivacyLedger(epsilon=10.0, delta=1e-6)
    lg.begin_run("run", sampling="shuffle", sample_rate=q, noise_multiplier=z, planned_steps=100,
                 rounds_per_epoch=10)
    lg.charge_rounds("run", 0, 6)
    lg.charge_rounds("run", 6, 4)
    for start in (10, 20, 30):
        assert charge_rounds_together([(lg, "run")], start, 10) == [None]
    lg.charge_rounds("run", 45, 10)  # rounds 45..54: epochs 4 and 5
    want = [(6, 1), (4, 0), (10, 1), (10, 1), (10, 1), (10, 2)]
    assert [(e.steps, e.epochs) for e in lg.events] == want
    assert all(e == MechanismEvent(name="steffle_rounds", sampling="shuffle", sample_rate=q, noise_multiplier=z,
                                   steps=t, epochs=k) for e, (t, k) in zip(lg.events, want))
    again = PrivacyLedger.from_dict(lg.to_dict())
    assert again.to_dict()["events"] == lg.to_dict()["events"] and again.epsilon_spent() == lg.epsilon_spent()
    assert lg.epsilon_spent() == PrivacyLedger(epsilon=10.0, delta=1e-6).epsilon_with(list(lg.events))


def test_a_silo_of_rows_is_fingerprinted_from_its_sampled_rows_with_the_same_digest():
    from pfair import federation
    from pfair.privacy.ledger import fingerprint_step, legacy_fingerprint

    rng = np.random.default_rng(3)
    n = 3 * federation._HASH_ROWS + 17  # several legacy blocks and a short last one
    X = rng.normal(size=(n, 4))
    y, s = rng.integers(0, 2, n), rng.integers(0, 3, n)
    silos = np.arange(n) % 3  # row lists: neither silo is a view
    f = Federation.from_arrays(X, y, sensitive_features=s, silos=silos)
    prints = federation.silo_fingerprints(f.silos)
    for silo, fp in zip(f.silos, prints):
        assert silo._X is None  # hashed from the sampled rows, not a gathered copy
        assert fp.startswith("v2:") and fp == data_fingerprint(silo.X, silo.y, silo.s)
        assert silo.legacy_fingerprint() == legacy_fingerprint(silo.X, silo.y, silo.s)
    assert len(set(prints)) == 3
    step = fingerprint_step(len(f.silos[2]))
    assert step == 33  # 8,197 records: 249 rows are read

    def changed(edit):
        X2, y2, s2 = X.copy(), y.copy(), s.copy()
        edit(X2, y2, s2)
        f2 = Federation.from_arrays(X2, y2, sensitive_features=s2, silos=silos)
        new, old = f2.silos[2], f.silos[2]
        return new.fingerprint() != prints[2], new.legacy_fingerprint() != old.legacy_fingerprint()

    # Record k of silo 2 is row 3k + 2 of X. A sampled row, any label or group: a new fingerprint.
    assert changed(lambda X2, y2, s2: X2.__setitem__((3 * step + 2, 1), X2[3 * step + 2, 1] + 1e-12)) == (True, True)
    assert changed(lambda X2, y2, s2: y2.__setitem__(3 * 5 + 2, 1 - y2[3 * 5 + 2])) == (True, True)
    assert changed(lambda X2, y2, s2: s2.__setitem__(3 * 5 + 2, (s2[3 * 5 + 2] + 1) % 3)) == (True, True)
    # A feature of a row the sample skips: the same fingerprint (the ledger carries on, charging
    # more, never less); the legacy digest, which read every row, saw it.
    assert changed(lambda X2, y2, s2: X2.__setitem__((3 * 1 + 2, 1), X2[3 * 1 + 2, 1] + 1.0)) == (False, True)


def test_a_ledger_bound_by_an_older_pfair_is_recognised_and_rebound():
    from pfair.exceptions import LedgerMismatch
    from pfair.privacy.ledger import legacy_fingerprint

    rng = np.random.default_rng(4)
    X, y, s = rng.normal(size=(300, 3)), rng.integers(0, 2, 300), rng.integers(0, 2, 300)
    old = legacy_fingerprint(X, y, s)
    assert len(old) == 64 and not old.startswith("v2:")
    calls = []

    def legacy():
        calls.append(1)
        return legacy_fingerprint(X, y, s)

    ledger = PrivacyLedger(epsilon=1.0, delta=1e-5, silo="a", fingerprint=old)
    ledger.bind(data_fingerprint(X, y, s), legacy=legacy)
    assert ledger.fingerprint == data_fingerprint(X, y, s) and calls == [1]
    ledger.bind(data_fingerprint(X, y, s), legacy=legacy)  # current form: no legacy hashing
    assert calls == [1]
    other = PrivacyLedger(epsilon=1.0, delta=1e-5, silo="b", fingerprint=legacy_fingerprint(X + 1.0, y, s))
    with pytest.raises(LedgerMismatch, match="other data"):
        other.bind(data_fingerprint(X, y, s), legacy=legacy)
    with pytest.raises(LedgerMismatch, match="other data"):  # without the legacy check: refused
        PrivacyLedger(epsilon=1.0, delta=1e-5, fingerprint=old).bind(data_fingerprint(X, y, s))
    # A resumed run's stored fingerprints may be of either form.
    silo = Federation.from_arrays(X, y, sensitive_features=s, silos=np.zeros(300, dtype=int)).silos[0]
    assert silo.holds_data_of(silo.fingerprint()) and silo.holds_data_of(old)
    assert not silo.holds_data_of(legacy_fingerprint(X + 1.0, y, s))
    assert not silo.holds_data_of(data_fingerprint(X, 1 - y, s))
    # Through a fit: the silos' ledgers written by an older pfair are accepted and re-bound.
    f = Federation.from_arrays(X, y, sensitive_features=s, silos=np.arange(300) % 2)
    ledgers = [PrivacyLedger(epsilon=2.0, delta=1e-5, silo=j, fingerprint=silo.legacy_fingerprint())
               for j, silo in enumerate(f.silos)]
    SteFFLe(lam=1.0, epsilon=1.0, delta=1e-5, epochs=1, batch_size=32, p_s=[0.5, 0.5]).fit(f, ledgers=ledgers)
    assert [lg.fingerprint for lg in ledgers] == [silo.fingerprint() for silo in f.silos]
    assert all(lg.epsilon_spent() > 0 for lg in ledgers)


def test_a_resumed_record_protection_run_goes_on_with_its_epochs_permutations():
    """Record mode, shuffled epochs, secret keys, silos of 100 and 60 records with batches of 20:
    the federation's epoch is 4 rounds, silo 0's is 5. Interrupted after one epoch, silo 0 is in
    the middle of its first epoch; the resumed run must draw the rest of it from the same
    permutation (each record once an epoch, as the ledger charges), not from a fresh key."""
    import copy

    from pfair.protocol.simulation import Simulation

    rng = np.random.default_rng(5)
    n = 160
    X, s = rng.normal(size=(n, 3)), rng.integers(0, 2, n)
    y = (X[:, 0] + rng.normal(size=n) > 0).astype(int)
    silos = np.r_[np.zeros(100, int), np.ones(60, int)]
    f = Federation.from_arrays(X, y, sensitive_features=s, silos=silos)
    st = SteFFLe(epsilon=2.0, lam=1.0, epochs=3, batch_size=20, protect="record", sampling="shuffle",
                 p_s=[0.5, 0.5], track_history=False, validation_share=0.0).settings()

    def stop(epoch, theta, w, info):
        raise KeyboardInterrupt

    first = Simulation(st, f, ledgers="new")
    assert first.rounds_per_epoch == 4 and first.parties[0].keys.batch.is_secret
    with pytest.raises(KeyboardInterrupt):
        first.run(on_epoch=stop)
    state = first.state
    assert state.epochs_done == 1
    ledgers = first.ledgers
    lost = copy.deepcopy(state)  # secret keys never leave their process: a copy has none
    assert lost.batch_keys is None
    with pytest.raises(ValueError, match="secret batch keys are gone"):
        Simulation(st, f, ledgers=ledgers).run(resume=lost)
    second = Simulation(st, f, ledgers=ledgers)
    second.run(resume=state)
    epoch0 = [first.parties[0].draw_batch(r) for r in range(4)] + [second.parties[0].draw_batch(4)]
    assert sorted(np.concatenate(epoch0).tolist()) == list(range(100))
    assert [ledger.runs[state.run_ids[j]]["next_round"] for j, ledger in enumerate(ledgers)] == [12, 12]


def test_two_ledger_objects_of_one_file_cannot_both_charge(tmp_path):
    # Two fits (or processes) that load one ledger file before either writes: the second charge
    # would erase the first. It is refused, and nothing is written.
    path = tmp_path / "silo0.json"
    PrivacyLedger(epsilon=1.0, delta=1e-5, silo=0, path=path).save(path)
    a, b = PrivacyLedger.load(path), PrivacyLedger.load(path)
    event = MechanismEvent(name="release", sampling="full_batch", sample_rate=1.0, noise_multiplier=20.0, steps=1)
    a.charge(event)
    with pytest.raises(LedgerConflict, match="another process charged this silo"):
        b.charge(event)
    assert len(PrivacyLedger.load(path).events) == 1
    a.charge(event)  # the object that wrote last goes on
    fresh = PrivacyLedger.load(path)
    assert len(fresh.events) == 2 and fresh.revision == 3
    # A new ledger object at a path another one has written to first is refused too.
    with pytest.raises(LedgerConflict):
        PrivacyLedger(epsilon=1.0, delta=1e-5, silo=0, path=path).charge(event)
    assert len(PrivacyLedger.load(path).events) == 2


def test_a_ledger_file_is_replaced_only_by_an_object_that_read_its_latest_revision(tmp_path, monkeypatch):
    event = MechanismEvent(name="release", sampling="full_batch", sample_rate=1.0, noise_multiplier=20.0, steps=1)
    path = tmp_path / "silo0.json"
    # The documented workflow: a fit's in-memory ledger saved to a file, and saved again later.
    mine = PrivacyLedger(epsilon=1.0, delta=1e-5, silo=0)
    mine.save(path)
    mine.charge(event)
    mine.save(path)
    # Another process charges the file; the old in-memory object must not erase that.
    other = PrivacyLedger.load(path)
    other.charge(event)
    other.charge(event)
    with pytest.raises(LedgerConflict, match="changed since this ledger read it"):
        mine.save(path)
    assert len(PrivacyLedger.load(path).events) == 3
    # A ledger that never read the file does not replace it either; a new file is fine.
    with pytest.raises(LedgerConflict, match="never read"):
        PrivacyLedger(epsilon=1.0, delta=1e-5, silo=0).save(path)
    (tmp_path / "notes.txt").write_text("not a ledger")
    with pytest.raises(LedgerConflict, match="never read"):
        PrivacyLedger(epsilon=1.0, delta=1e-5, silo=0).save(tmp_path / "notes.txt")
    PrivacyLedger.from_dict(PrivacyLedger.load(path).to_dict(), path=tmp_path / "copy.json").charge(event)
    assert len(PrivacyLedger.load(tmp_path / "copy.json").events) == 4
    # Names of one file are one ledger, whatever the working directory.
    link = tmp_path / "link.json"
    link.symlink_to(path)
    via_link, via_file = PrivacyLedger.load(link), PrivacyLedger.load(path)
    via_link.charge(event)
    with pytest.raises(LedgerConflict):
        via_file.charge(event)
    assert link.is_symlink() and len(PrivacyLedger.load(path).events) == 4
    monkeypatch.chdir(tmp_path)
    relative = PrivacyLedger.load("silo0.json")
    monkeypatch.chdir(tmp_path.parent)
    relative.charge(event)
    assert len(PrivacyLedger.load(path).events) == 5
    # A hard link would be split by the atomic replace: refused.
    os.link(path, tmp_path / "hard.json")
    with pytest.raises(LedgerConflict, match="hard links"):
        PrivacyLedger.load(path).charge(event)


def test_an_anchor_shared_by_busy_ledgers_still_refuses_an_emptied_one(tmp_path, monkeypatch):
    """An anchor may hold several ledgers' entries: when the others wrote more than the tail a
    journal is read from since this ledger's last entry, its record must still be found, so that a
    ledger file deleted (a state directory emptied) is refused rather than started over at 0."""
    from pfair.exceptions import LedgerRollback
    from pfair.privacy import ledger_file as ledger_module
    from pfair.privacy.ledger import MechanismEvent, PrivacyLedger

    monkeypatch.setattr(ledger_module, "JOURNAL_TAIL", 2048)  # 64 KiB in use; a small tail, the same logic
    JOURNAL_TAIL = ledger_module.JOURNAL_TAIL

    anchor = tmp_path / "anchors" / "shared.journal"
    a_path, b_path = tmp_path / "a" / "ledger.json", tmp_path / "b" / "ledger.json"
    a = PrivacyLedger(epsilon=1.0, delta=1e-6, path=a_path, anchor=anchor)
    a.save(a_path)
    a.charge(MechanismEvent.gaussian_histogram(noise_multiplier=5.0))
    b = PrivacyLedger(epsilon=100.0, delta=1e-6, path=b_path, anchor=anchor)
    b.save(b_path)
    while anchor.stat().st_size < 2 * JOURNAL_TAIL:
        b.charge(MechanismEvent.gaussian_histogram(noise_multiplier=1000.0))
    for f in a_path.parent.iterdir():  # the operator empties silo a's state directory
        f.unlink()
    with pytest.raises(LedgerRollback, match="is gone"):
        PrivacyLedger(epsilon=1.0, delta=1e-6, path=a_path, anchor=anchor).save(a_path)


# ---------------------------------------------------------------------- a resumed fit selects what the uninterrupted fit selects


@pytest.mark.parametrize("noise_seed", [2, 5])
def test_a_resumed_fit_selects_the_checkpoint_the_uninterrupted_fit_selects(noise_seed):
    kw = dict(FAST, epochs=5, noise_seed=noise_seed, protect="record")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        whole = SteFFLe(epsilon=1.0, **kw).fit(fed(), ledgers="new")
        f = fed()
        m = SteFFLe(epsilon=1.0, **kw)
        fit_interrupted(m, f, at_epoch=3)
        m.fit(f, resume=True)
    assert m.selected_epoch_ == whole.selected_epoch_
    np.testing.assert_array_equal(m.theta_, whole.theta_)


def test_a_fit_on_arrays_resumes_on_the_ledgers_that_charged_it():
    """fit(X, y, ..., resume=True) builds a new Federation, which brought fresh ledgers: the
    resumed run was charged for its own rounds only and reported less than it spent. It now goes on
    on the interrupted fit's ledgers (the same ε as the uninterrupted fit), and ledgers that hold
    no record of the interrupted run are refused."""
    X, y, s, silos = data(600, 0)
    kw = dict(FAST, epochs=5, noise_seed=4, epsilon=1.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyWarning)
        whole = SteFFLe(**kw).fit(X, y, sensitive_features=s, silos=silos)
        m = SteFFLe(**kw)
        fit_interrupted(m, X, y, sensitive_features=s, silos=silos, at_epoch=3)
        with pytest.raises(ValueError, match="holds no record of the interrupted run"):
            m.fit(X, y, sensitive_features=s, silos=silos, resume=True, ledgers="new")
        m.fit(X, y, sensitive_features=s, silos=silos, resume=True)
    np.testing.assert_array_equal(m.theta_, whole.theta_)
    assert list(m.privacy_report_["epsilon_spent"]) == list(whole.privacy_report_["epsilon_spent"])


def test_a_resume_refuses_a_copy_of_a_ledger_older_than_the_run(tmp_path):
    """A copy of the ledger files taken at epoch 2 still records the run, but the run went on to
    epoch 4 before its second interruption: resumed on the copy, it would go on from epoch 4 and
    the rounds of epochs 2-3 would be released but missing from the ledgers that report ε (0.797
    against 0.9975 spent, found in review). The state keeps what each ledger had charged at its
    last epoch, and a ledger behind it is refused; the files as they are now resume."""
    import shutil

    X, y, s, silos = data(600, 0)
    paths = [str(tmp_path / f"l{j}.json") for j in range(len(set(silos)))]
    kw = dict(FAST, epochs=6, noise_seed=3, epsilon=1.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyWarning)
        whole = SteFFLe(**kw).fit(X, y, sensitive_features=s, silos=silos, ledgers="new")
        m = SteFFLe(**kw)
        fit_interrupted(m, X, y, sensitive_features=s, silos=silos, ledgers=paths, at_epoch=2)
        copies = [p + ".copy" for p in paths]
        for p, c in zip(paths, copies):
            shutil.copy(p, c)
        fit_interrupted(m, X, y, sensitive_features=s, silos=silos, resume=True, at_epoch=2)
        assert m._run_state.epochs_done == 4
        with pytest.raises(ValueError, match="older than the interrupted run"):
            m.fit(X, y, sensitive_features=s, silos=silos, resume=True, ledgers=copies)
        m.fit(X, y, sensitive_features=s, silos=silos, resume=True, ledgers=paths)
    assert list(m.privacy_report_["epsilon_spent"]) == list(whole.privacy_report_["epsilon_spent"])
