"""Review reproduction: a deployed silo's record-mode validation table of checkpoint epoch e and its
(e+1)-th score histogram were once noised from the same stream (both bases 1 << 42, purpose
"histogram", the node's one key). With a node noise-seed (which the server does not know), the
server cancelled the noise: an exact count of the silo's records. Release streams are now derived
from each release's identifier (pfair.protocol.keys.ReleaseId)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

import pfair
from pfair.flower.node import SiloNode, settings_from_run_config
from pfair.privacy.score_histogram import score_bins, score_counts
from pfair.protocol.keys import score_release, validation_release
from pfair.validation import holdout, validation_table

from support import toy_data

N = 400


def test_validation_and_score_streams_are_distinct():
    assert validation_release(0, "run-a", 0).encode() != score_release(0, 0).encode()


def test_server_cancels_the_noise_of_a_validation_table_with_a_score_histogram(tmp_path):
    X, y, s, _ = toy_data(n=N)
    shard = pfair.datasets.write_shard(tmp_path / "silo0.csv", X, y, s)
    cfg = {"data-path": str(shard), "state-dir": str(tmp_path / "state"), "silo-id": 0, "epsilon": 2.0,
           "n-groups": 2, "n-classes": 2, "noise-seed": 12345,  # the node's own seed, unknown to the server
           "allow-score-histogram": True}
    node = lambda: SiloNode(cfg, n_groups=2, n_classes=2)  # noqa: E731
    base = dict(epsilon=1.0, lam=1.0, epochs=2, batch_size=50, p_s=[0.5, 0.5], seed=1, protect="record")
    st = settings_from_run_config({"settings": json.dumps(base)})
    assert 0 in st.checkpoint_epochs()
    train, held = holdout(N, st.validation_share, seed=st.seed, silo=0)
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
    X, y, s, _ = toy_data(n=N)
    shard = pfair.datasets.write_shard(tmp_path / "silo0.csv", X, y, s)
    cfg = {"data-path": str(shard), "state-dir": str(tmp_path / "state"), "silo-id": 0, "epsilon": 2.0,
           "n-groups": 2, "n-classes": 2}
    node = lambda: SiloNode(cfg, n_groups=2, n_classes=2)  # noqa: E731
    base = dict(epsilon=1.0, lam=1.0, epochs=2, batch_size=50, p_s=[0.5, 0.5], seed=1, protect="record")
    st = settings_from_run_config({"settings": json.dumps(base)})
    train, _ = holdout(N, st.validation_share, seed=st.seed, silo=0)
    node().plan(st, np.array([[0.5, 0.5]]), 2 * -(-len(train) // 50), "run-a")
    before = node().ledger().epsilon_spent()
    for _ in range(3):
        with pytest.raises(Exception):
            node().checkpoint(st, "run-a", 0, np.zeros(7))  # not a θ of this model
    names = [e.name for e in node().ledger().events]
    assert names.count("validation_table") == 0, names  # fails on main: 3 charges, nothing released
    assert node().ledger().epsilon_spent() == before
