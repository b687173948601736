"""Release streams cannot collide (issue 36, S1).

A silo's releases outside its rounds (the p_s histogram, checkpoint tables and histograms, a deployed
silo's evaluations, score histograms) once drew the stream ``base + epoch`` of one purpose, with bases
2⁴⁰ apart and ``epochs`` unbounded: a server that planned a run of 3·2⁴⁰ + 1 epochs got the last
checkpoint's violation histogram and the first score histogram on one stream, and cancelled the noise
of a node with its own noise-seed. Streams are now derived from each release's identifier
(:class:`pfair.protocol.keys.ReleaseId`), and a run's length is bounded by what its settings imply.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings as hsettings, strategies as hst

import pfair
from pfair import _core
from pfair.exceptions import SettingsMismatch
from pfair.flower.node import SiloNode, check_total_rounds, settings_from_run_config
from pfair.privacy.mechanisms import release_histogram
from pfair.privacy.score_histogram import score_bins, score_counts
from pfair.protocol.keys import (
    RELEASE_KINDS,
    ReleaseId,
    evaluation_release,
    group_counts_release,
    noise_key,
    score_release,
    validation_release,
    violation_release,
)
from pfair.settings import MAX_EPOCHS
from pfair.validation import holdout, validation_table

from support import toy_data

#: The stream bases of the earlier derivation (purpose "histogram", round base + epoch or index).
OLD_VIOLATION, OLD_EVALUATION, OLD_SCORE = 1 << 40, 1 << 41, 1 << 42


def decode(raw: bytes) -> ReleaseId:
    """Reads an identifier back from :meth:`ReleaseId.encode` (that this exists is the injectivity)."""
    fields, pos = [], 0
    while pos < len(raw):
        n = int.from_bytes(raw[pos:pos + 8], "little")
        fields.append(raw[pos + 8:pos + 8 + n])
        pos += 8 + n
    assert pos == len(raw) and len(fields) == 6 and fields[0] == ReleaseId.DOMAIN
    kind, silo, run, subject, index = (f.decode() for f in fields[1:])
    return ReleaseId(kind, int(silo), run=run, subject=subject, index=int(index))


@hsettings(max_examples=300, deadline=None)
@given(kind=hst.sampled_from(RELEASE_KINDS), silo=hst.integers(0, 2**64), run=hst.text(max_size=12),
       subject=hst.text(max_size=12), index=hst.integers(0, 2**70))
def test_the_encoding_of_a_release_id_reads_back(kind, silo, run, subject, index):
    rid = ReleaseId(kind, silo, run=run, subject=subject, index=index)
    assert decode(rid.encode()) == rid


def test_every_release_of_a_long_run_has_its_own_stream():
    """Every release identifier of the longest run a silo plans (every epoch of MAX_EPOCHS a
    checkpoint, both kinds), of two runs, three silos, a hundred evaluations and score histograms
    and the p_s histograms of every statistic: distinct encodings, and distinct noise for a
    sample of them (every identifier the old bases made meet included), none a round's noise."""
    silos, runs = range(3), ("run-a", "run-b")
    ids = []
    for silo in silos:
        for run in runs:
            for epoch in range(MAX_EPOCHS):
                ids += [validation_release(silo, run, epoch), violation_release(silo, run, epoch)]
            ids += [evaluation_release(silo, run, i) for i in range(100)]
        ids += [score_release(silo, i) for i in range(100)]
        ids += [group_counts_release(silo, f"p_s:{f}:{c}") for f in ("demographic_parity", "equalized_odds",
                                                                     "equal_opportunity") for c in (0, 1)]
    encoded = [r.encode() for r in ids]
    assert len(set(encoded)) == len(encoded) == 3 * (2 * (2 * MAX_EPOCHS + 100) + 100 + 6)
    # What the old bases lined up: checkpoint 3·2⁴⁰ with score histogram 0, checkpoint 2⁴⁰ with
    # evaluation 0, and the p_s histogram with a checkpoint at epoch -2⁴⁰ (refused anyway).
    sample = ids[::997] + [violation_release(0, "run-a", 3 * 2**40), score_release(0, 0),
                           violation_release(0, "run-a", 2**40), evaluation_release(0, "run-a", 0),
                           group_counts_release(0, "p_s:demographic_parity:1")]
    key = noise_key(7)
    draws = {tuple(_core.gaussian_release(key, r.encode(), 2)) for r in sample}
    assert len(draws) == len(set(sample))
    rounds = {tuple(_core.gaussian_stream(key, silo, t, 2, purpose=p)) for silo in silos
              for t in (0, 1, 2**40, 3 * 2**40, 2**41, 2**42) for p in ("noise", "histogram")}
    assert not draws & rounds


def test_release_ids_are_checked():
    with pytest.raises(ValueError, match="release kind 'rounds' is unknown"):
        ReleaseId("rounds", 0)
    with pytest.raises(ValueError, match="index must be an integer >= 0"):
        violation_release(0, "run", -1)
    with pytest.raises(TypeError, match="release must be a pfair.protocol.keys.ReleaseId"):
        release_histogram(np.zeros(2), ledger=None, event=None, key=noise_key(1), release=5, noise_multiplier=1.0,
                          sensitivity=1.0)


# ------------------------------------------------------------------------------------ S1's attack
def _cancel(first: np.ndarray, first_known: np.ndarray, sigma_first: float, second: np.ndarray,
            sigma_second: float) -> np.ndarray:
    """The server's estimate of the second release's exact counts, if both carry the same unit
    normals: second − σ₂ · (first − first's known counts) / σ₁."""
    return second - sigma_second * (first - first_known) / sigma_first


@pytest.mark.parametrize("epoch, other", [(3 * 2**40, "score"), (2**40, "evaluation")])
def test_s1_cancelling_a_checkpoint_against_another_release_recovers_nothing(epoch, other):
    """S1 at the level of the streams, with the node's own seeded key (unknown to the server) and
    a checkpoint epoch the run bound no longer allows: the checkpoint's violation histogram of
    counts the server knows (a θ predicting one class: the other class's cells are 0) and the other
    release of unknown counts. Under the old bases the two noises were one stream, and the server
    read the exact counts; with identifier-derived streams the estimate is off by noise of std
    σ₂·√2 in every cell."""
    rng = np.random.default_rng(0)
    known = np.zeros(64)
    secret = rng.integers(0, 50, size=64).astype(float)
    z_v, z_o, delta = 3.0, 5.0, math.sqrt(2)
    key = noise_key(987654321)
    old = {"score": OLD_SCORE, "evaluation": OLD_EVALUATION}[other]
    # The old derivation: the two streams are one, and the attack is exact.
    v_old = known + z_v * delta * _core.gaussian_stream(key, 0, OLD_VIOLATION + epoch, 64, purpose="histogram")
    o_old = secret + z_o * delta * _core.gaussian_stream(key, 0, old, 64, purpose="histogram")
    np.testing.assert_allclose(_cancel(v_old, known, z_v * delta, o_old, z_o * delta), secret, atol=1e-9)
    # Now: the releases as the silo makes them.
    v = release_histogram(known, ledger=None, event=None, key=key, release=violation_release(0, "run-a", epoch),
                          noise_multiplier=z_v, sensitivity=delta)
    rid = score_release(0, 0) if other == "score" else evaluation_release(0, "run-a", 0)
    o = release_histogram(secret, ledger=None, event=None, key=key, release=rid, noise_multiplier=z_o,
                          sensitivity=delta)
    error = _cancel(v, known, z_v * delta, o, z_o * delta) - secret
    assert np.all(np.abs(error) > 1e-6)
    # The error is σ₂(ξ₂ − ξ₁), ξ independent: std σ₂·√2 ≈ 10 (64 cells: within ±30%).
    assert 0.7 * z_o * delta * math.sqrt(2) < error.std() < 1.3 * z_o * delta * math.sqrt(2)


def _node(tmp_path, seed: int | None = 12345):
    X, y, s, _ = toy_data(n=400)
    shard = pfair.datasets.write_shard(tmp_path / "silo0.csv", X, y, s)
    cfg = {"data-path": str(shard), "state-dir": str(tmp_path / "state"), "silo-id": 0, "epsilon": 2.0,
           "n-groups": 2, "n-classes": 2}
    if seed is not None:
        cfg["noise-seed"] = seed
    return lambda: SiloNode(cfg, n_groups=2, n_classes=2)


@pytest.mark.parametrize("epochs", [3 * 2**40 + 1, 2**40 + 1, MAX_EPOCHS + 1])
def test_s1_a_node_refuses_to_plan_a_run_longer_than_max_epochs(tmp_path, epochs):
    """The attack's first step: the run config asks for more epochs than any run has. Refused
    when the node reads the settings, before the ledger is touched."""
    node = _node(tmp_path)
    base = dict(epsilon=1.0, lam=1.0, epochs=epochs, batch_size=50, p_s=[0.5, 0.5], seed=1, max_violation=0.05)
    with pytest.raises(ValueError, match=f"epochs must be at most {MAX_EPOCHS:,}"):
        settings_from_run_config({"settings": json.dumps(base)})
    assert node().ledger().epsilon_spent() == 0.0 and not node().ledger().runs


@pytest.mark.parametrize("total_rounds", [1, 7, 3 * 2**40 + 1, 41])
def test_a_node_plans_only_the_rounds_its_settings_imply(tmp_path, total_rounds):
    node = _node(tmp_path)
    base = dict(epsilon=1.0, lam=1.0, epochs=4, batch_size=50, p_s=[0.5, 0.5], seed=1)
    st = settings_from_run_config({"settings": json.dumps(base)})
    with pytest.raises(SettingsMismatch, match=rf"total-rounds = {total_rounds}, which these settings do not imply"):
        node().plan(st, np.array([[0.5, 0.5]]), total_rounds, "run-a")
    assert not node().ledger().runs and node().ledger().epsilon_spent() == 0.0
    node().plan(st, np.array([[0.5, 0.5]]), 4 * 8, "run-a")  # 8 rounds an epoch: planned
    assert "run-a" in node().ledger().runs


def test_full_batch_runs_have_one_round_an_epoch():
    st = settings_from_run_config({"settings": json.dumps(dict(epsilon=1.0, epochs=3, sampling="full_batch",
                                                               p_s=[0.5, 0.5]))})
    check_total_rounds(st, 3, silo=0)
    with pytest.raises(SettingsMismatch, match="exactly epochs = 3"):
        check_total_rounds(st, 6, silo=0)


def test_a_run_is_named_by_its_place_in_the_silo_s_ledger():
    """Seeded fits release the same noise again from a fresh ledger (an in-process run id is a
    fresh uuid), and two runs of one ledger never share a release stream."""
    from pfair.privacy.ledger import PrivacyLedger
    from pfair.protocol.keys import release_run

    ledger = PrivacyLedger(epsilon=1.0, delta=1e-6)
    for rid in ("4f1c", "ledger:0"):
        ledger.begin_run(rid, sampling="full_batch", sample_rate=1.0, noise_multiplier=2.0, planned_steps=3)
    assert [release_run(ledger, r) for r in ("4f1c", "ledger:0", "other")] == ["ledger:0", "ledger:1", "id:other"]
    assert release_run(None, "ledger:0") == "id:ledger:0"  # a server's name cannot pose as a position


# ---------------------------------------------------------------------- a deployed silo: validation tables and score histograms


N_NODE = 400


def test_validation_and_score_streams_are_distinct():
    assert validation_release(0, "run-a", 0).encode() != score_release(0, 0).encode()


def test_server_cancels_the_noise_of_a_validation_table_with_a_score_histogram(tmp_path):
    X, y, s, _ = toy_data(n=N_NODE)
    shard = pfair.datasets.write_shard(tmp_path / "silo0.csv", X, y, s)
    cfg = {"data-path": str(shard), "state-dir": str(tmp_path / "state"), "silo-id": 0, "epsilon": 2.0,
           "n-groups": 2, "n-classes": 2, "noise-seed": 12345,  # the node's own seed, unknown to the server
           "allow-score-histogram": True}
    node = lambda: SiloNode(cfg, n_groups=2, n_classes=2)  # noqa: E731
    base = dict(epsilon=1.0, lam=1.0, epochs=2, batch_size=50, p_s=[0.5, 0.5], seed=1, protect="record")
    st = settings_from_run_config({"settings": json.dumps(base)})
    assert 0 in st.checkpoint_epochs()
    train, held = holdout(N_NODE, st.validation_share, seed=st.seed, silo=0)
    rounds = 2 * -(-len(train) // 50)
    node().plan(st, np.array([[0.5, 0.5]]), rounds, "run-a")
    node().train(st, "run-a", 0, np.zeros(4), np.zeros(4))  # a run's checkpoints follow its rounds
    # Validation at epoch 0 under a constant predictor (every held-out record predicted class 0):
    # cells V[0, 1] and V[1, 1] are exactly 0, so their released values are pure noise.
    theta_v = np.array([0.0, 0.0, 0.0, -50.0])
    n0 = node()
    assert np.all(n0._predict(X[held], theta_v) == 0)
    rel = n0.checkpoint(st, "run-a", 0, theta_v)
    z_val = n0._planned_party(st, "run-a").validation_z
    # The server's only other query: one score histogram (the node allows one with its noise-seed).
    theta_s, edges = np.array([1.0, 0.0, 0.0, 0.0]), np.array([0.5])
    out = node().score_histogram(theta_s, edges, epsilon=1.5)  # above what its round and table spent
    H, z_h = out["histogram"], out["noise_multiplier"]
    # Server side, from public values and the two releases only: flat cell 1 of H is
    # (bin 0, group 0, y = 1); flat cell 1 of V is V[0, 1] = 0 + z_val·√2·N_1.
    noise_1 = rel.validation.ravel()[1] / (z_val * math.sqrt(2))
    recovered = H.ravel()[1] - z_h * math.sqrt(2) * noise_1
    exact = score_counts(score_bins(n0._predict_proba(X, theta_s)[:, 1], edges), s, y, n_bins=2,
                         n_groups=2).ravel()[1]
    # On main the server recovers the exact count (to rounding): the release is not private.
    assert abs(recovered - exact) > 1e-6, (recovered, exact)


def test_a_checkpoint_with_a_theta_the_model_cannot_take_is_refused_before_the_charge(tmp_path):
    """Score histograms compute what reads x alone before the charge (commit 2a340f7); a checkpoint
    charges first, so a malformed θ burns a validation release each time (nothing is stored under the
    release's name, so the next request charges again)."""
    X, y, s, _ = toy_data(n=N_NODE)
    shard = pfair.datasets.write_shard(tmp_path / "silo0.csv", X, y, s)
    cfg = {"data-path": str(shard), "state-dir": str(tmp_path / "state"), "silo-id": 0, "epsilon": 2.0,
           "n-groups": 2, "n-classes": 2}
    node = lambda: SiloNode(cfg, n_groups=2, n_classes=2)  # noqa: E731
    base = dict(epsilon=1.0, lam=1.0, epochs=2, batch_size=50, p_s=[0.5, 0.5], seed=1, protect="record")
    st = settings_from_run_config({"settings": json.dumps(base)})
    train, _ = holdout(N_NODE, st.validation_share, seed=st.seed, silo=0)
    node().plan(st, np.array([[0.5, 0.5]]), 2 * -(-len(train) // 50), "run-a")
    before = node().ledger().epsilon_spent()
    for _ in range(3):
        with pytest.raises(Exception):
            node().checkpoint(st, "run-a", 0, np.zeros(7))  # not a θ of this model
    names = [e.name for e in node().ledger().events]
    assert names.count("validation_table") == 0, names  # fails on main: 3 charges, nothing released
    assert node().ledger().epsilon_spent() == before
