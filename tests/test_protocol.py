"""The round as a protocol: silo parties, the server party, and the simulation built from them."""

from __future__ import annotations

import dataclasses
import warnings

import numpy as np
import pytest

from pfair import SteFFLe, _core
from pfair.exceptions import PrivacyWarning, ReplayRefused
from pfair.protocol.messages import PARTS, SiloMessage
from pfair.protocol.simulation import Simulation

from support import toy_data as data, toy_federation as fed


def settings(**kw):
    base = dict(epsilon=2.0, lam=1.0, epochs=3, batch_size=50, p_s=[0.5, 0.5], seed=1, noise_seed=4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyWarning)
        return SteFFLe(**{**base, **kw}).settings()


@pytest.mark.parametrize("kw", [
    {}, {"fairness": "equalized_odds", "p_s": [[0.5, 0.5], [0.4, 0.6]]}, {"protect": "record"},
    {"sampling": "poisson"}, {"silo_weights": "size"}, {"epsilon": None, "p_s": "pooled"}, {"lam": 0.0},
])
def test_party_by_party_loop_equals_the_fast_path(kw):
    st = settings(**kw)
    f = fed()
    fast = Simulation(st, f, ledgers="new", fast=True)
    slow = Simulation(st, f, ledgers="new", fast=False)
    a, b = fast.run(), slow.run()
    np.testing.assert_array_equal(a.theta, b.theta)
    np.testing.assert_array_equal(a.w, b.w)
    for la, lb in zip(fast.ledgers, slow.ledgers):
        if la is not None:
            assert la.epsilon_spent() == lb.epsilon_spent()


def test_a_message_holds_exactly_the_covered_parts_and_diagnostics_stay_local():
    st = settings()
    sim = Simulation(st, fed(), ledgers="new", fast=False)
    party = sim.parties[1]
    party.plan_rounds(sim.group_proportions(), sim.total_rounds)
    msg = party.step(np.zeros(4), np.full(4, 0.1), 0)
    assert isinstance(msg, SiloMessage)
    assert [f.name for f in dataclasses.fields(msg)] == ["silo", "round", *PARTS]
    assert msg.silo == 1 and msg.round == 0
    assert len(party.diagnostics) == 1 and party.diagnostics[0].batch_size == 50
    # Asked again for the same round: the same message, nothing charged.
    spent = party.ledger.epsilon_spent()
    assert party.step(np.zeros(4), np.full(4, 0.1), 0) is msg
    assert party.ledger.epsilon_spent() == spent
    party.step(np.zeros(4), np.full(4, 0.1), 1)
    with pytest.raises(ReplayRefused):
        party.step(np.zeros(4), np.full(4, 0.1), 0)
    party.step(np.zeros(4), np.full(4, 0.1), 5)  # rounds 2..4 missed: skipped for good
    with pytest.raises(ReplayRefused):
        party.step(np.zeros(4), np.full(4, 0.1), 3)


def _round0(sim):
    for p in sim.parties:
        p.plan_rounds(sim.group_proportions(), sim.total_rounds)
    from pfair.protocol.server import ServerParty, reply_limits

    inv = sim.parties[0].inv_sqrt_ps
    limits = [reply_limits(theta_len=4, w_len=4, settings=sim.settings, plan=p.plan, inv_sqrt_ps=inv)
              for p in sim.parties]
    server = ServerParty(settings=sim.settings, weights=[1 / 3] * 3, limits=limits, block_len=4,
                         rounds_per_epoch=sim.rounds_per_epoch)
    theta, w = np.zeros(4), np.full(4, 0.1)
    return server, theta, w, [(j, p.step(theta, w, 0)) for j, p in enumerate(sim.parties)]


@pytest.mark.parametrize("break_it,reason", [
    (lambda m: dataclasses.replace(m, psi_w=m.psi_w[:2]), "length"),
    (lambda m: dataclasses.replace(m, loss_grad=np.where(np.arange(4) == 1, np.nan, m.loss_grad)), "NaN"),
    (lambda m: dataclasses.replace(m, psi_theta=m.psi_theta * 1e6), "norm"),
    (lambda m: dataclasses.replace(m, round=7), "round"),
    (lambda m: dataclasses.replace(m, silo=0), "silo"),
    (lambda m: dataclasses.replace(m, psi_w=m.psi_w.astype(np.int64)), "dtype"),
    (lambda m: None, "no reply"),
])
def test_server_rejects_malformed_replies_and_reweights_the_rest(break_it, reason):
    # A fixed clip: the server bounds ‖h_θ‖ by it (an adaptive clip's h_θ is not bounded:
    # test_adaptive_clip.py).
    sim = Simulation(settings(clip=0.25), fed(), ledgers="new", fast=False)
    server, theta, w, replies = _round0(sim)
    bad = [(j, break_it(m) if j == 2 else m) for j, m in replies]
    th_bad, w_bad, used = server.update(theta, w, bad, 0)
    assert used == [0, 1]
    assert reason in server.rejected[-1][2]
    # Equal to a server that only ever heard silos 0 and 1, with weights 1/2 each.
    th_ok, w_ok, _ = server.update(theta, w, replies[:2], 0)
    np.testing.assert_array_equal(th_bad, th_ok)
    np.testing.assert_array_equal(w_bad, w_ok)


def test_estimator_only_configures_and_every_fit_starts_fresh():
    X, y, s, silos = data()
    m = SteFFLe(epsilon=2.0, lam=1.0, epochs=2, batch_size=50, p_s="dp", track_history=False)
    m.fit(X, y, sensitive_features=s, silos=silos)
    assert [e.name for e in m.ledgers_[0].events][0] == "p_s_histogram"
    m.set_params(p_s=[0.5, 0.5]).fit(X, y, sensitive_features=s, silos=silos)
    assert all(e.name != "p_s_histogram" for led in m.ledgers_ for e in led.events)
    assert (m.privacy_report_["p_s"] == "given").all()
    # The value's old name still compares equal, with a warning (it now means only "known to all").
    with pytest.warns(DeprecationWarning, match="'public' is now called 'given'"):
        assert (m.privacy_report_["p_s"] == "public").all()
    assert m.settings().p_s_source != "dp" and str(m.settings().p_s_source) == "given"


def test_private_history_holds_released_values_only():
    X, y, s, silos = data()
    kw = dict(epsilon=2.0, lam=1.0, epochs=2, batch_size=50, p_s=[0.5, 0.5])
    m = SteFFLe(**kw).fit(X, y, sensitive_features=s, silos=silos, eval_set=(X[:100], y[:100], s[:100]))
    cols = set(m.history_.columns)
    assert {"theta_norm", "w_norm", "update_norm", "silos_answering", "test_error"} <= cols
    assert not any(c.startswith(("train_", "batch_")) or c == "clipped" for c in cols)
    with pytest.warns(PrivacyWarning, match="exact_diagnostics"):
        m = SteFFLe(exact_diagnostics=True, **kw).fit(X, y, sensitive_features=s, silos=silos)
    assert {"train_demographic_parity_difference", "batch_loss", "clipped"} <= set(m.history_.columns)


def test_bindings_take_their_keywords_as_python_would():
    """The per-round bindings (SiloSet.run_rounds and .step, noise_message, server_update; the
    HybridSet's share the same reader) read their keyword arguments into parameter structs (rust/src/python/kwargs.rs);
    a misspelt or missing keyword is still refused by name."""
    silo_set = fed().silo_set()
    cfg = _core.SiloConfig(sampling="without_replacement", batch_size=32)
    key = _core.NoiseKey.seeded(1)
    kw = dict(batch_keys=[key] * 3, noise_keys=[key] * 3, lam=1.0, lr_theta=0.5, lr_w=0.5, w_radius=2.0, start=0,
              n_rounds=2)
    args = (np.zeros(4), np.zeros(4), np.ones(2), [cfg] * 3, [1 / 3] * 3)
    out = silo_set.run_rounds(*args, **kw)
    assert out["snapshot"] is None and np.all(np.isfinite(out["theta"])) and np.any(out["theta"] != 0)
    snap = silo_set.run_rounds(*args, **kw, snapshot_round=0)["snapshot"]
    np.testing.assert_array_equal(snap[0], silo_set.run_rounds(*args, **{**kw, "n_rounds": 1})["theta"])
    with pytest.raises(TypeError, match="unexpected keyword argument 'lr_thetta'"):
        silo_set.run_rounds(*args, **kw, lr_thetta=1.0)
    with pytest.raises(TypeError, match="missing required keyword argument 'lam'"):
        silo_set.run_rounds(*args, **{k: v for k, v in kw.items() if k != "lam"})
    with pytest.raises(ValueError, match="lam must be finite and >= 0"):
        silo_set.run_rounds(*args, **{**kw, "lam": -1.0})
    # The per-round bindings read theirs the same way.
    state = (np.zeros(4), np.zeros(4), np.ones(2))
    one = silo_set.step(0, *state, cfg, batch_key=key, noise_key=key, round=3)
    again = silo_set.step(0, *state, cfg, noise_key=key, round=3, batch_key=key)  # any keyword order
    np.testing.assert_array_equal(one["loss_grad"], again["loss_grad"])
    assert np.any(one["loss_grad"] != 0)
    with pytest.raises(TypeError, match="SiloSet.step\\(\\) missing required keyword argument 'round'"):
        silo_set.step(0, *state, cfg, batch_key=key, noise_key=key)
    with pytest.raises(TypeError, match="SiloSet.step\\(\\) missing required keyword argument 'batch_key'"):
        silo_set.step(0, *state, cfg)  # no keyword at all: the first required one is named
    parts = [np.zeros(4)] * 3 + [np.zeros(4)] * 2
    with pytest.raises(TypeError, match="noise_message\\(\\) got an unexpected keyword argument 'seed'"):
        _core.noise_message(*parts, cfg, key=key, silo=0, round=0, seed=1)
    with pytest.raises(TypeError, match="server_update\\(\\) missing required keyword argument 'w_radius'"):
        _core.server_update(np.zeros(4), np.zeros(4), 4, [tuple(parts)], [1.0], lam=1.0, lr_theta=0.5, lr_w=0.5)
