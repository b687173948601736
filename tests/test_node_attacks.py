"""A hostile server against one deployed silo (:class:`pfair.flower.node.SiloNode`), attacks that
need more than one run or more than the training messages: adaptive run lengths, evaluation as a
query oracle, a ledger rolled back, and a server choosing the silo's budget shares."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy.optimize import brentq
from scipy.stats import binom, norm

import pfair
from pfair.flower.node import SiloNode, settings_from_run_config
from pfair.privacy.calibration import noise_multiplier_after
from pfair.privacy.ledger import MechanismEvent, PrivacyLedger

N = 400


def shard(path, n=N, seed=0):
    rng = np.random.default_rng(seed)
    s = rng.integers(0, 2, size=n)
    X = rng.normal(size=(n, 3))
    X[:, 0] += s
    y = (X[:, 0] + 0.5 * rng.normal(size=n) > 0.5).astype(int)
    return pfair.datasets.write_shard(path, X, y, s)


def config(tmp_path, **kw):
    return {"data-path": str(shard(tmp_path / "silo0.csv")), "state-dir": str(tmp_path / "state"), "silo-id": 0,
            "n-groups": 2, "n-classes": 2, "epsilon": 1.0} | kw


def settings(**kw):
    base = dict(epsilon=1.0, lam=1.0, epochs=1, p_s=[0.5, 0.5], seed=1)
    return settings_from_run_config({"settings": json.dumps(base | kw)})


def node(cfg):
    return SiloNode(cfg, n_groups=2, n_classes=2)


PROPS = np.array([[0.5, 0.5]])
THETA, W = np.full(4, 0.1), np.full(4, 0.2)


def gaussian_delta(eps: float, mu: np.ndarray) -> np.ndarray:
    """δ(ε) of a Gaussian mechanism with μ = sensitivity / σ (Balle and Wang 2018); 0 at μ = 0."""
    mu = np.asarray(mu, dtype=np.float64)
    out = np.zeros_like(mu)
    m = mu > 0
    out[m] = norm.cdf(-eps / mu[m] + mu[m] / 2) - math.exp(eps) * norm.cdf(-eps / mu[m] - mu[m] / 2)
    return out


# ---------------------------------------------------------------------------------------- N2
def _stop_at_second_draw(cfg, st1, T1, K=2):
    """Answer run 1 until the record whose K-th draw comes first was drawn K times (an oracle reads
    the silo's batch key; a server reads it off the exact s-free gradient); returns (t1, target)."""
    party = node(cfg)._planned_party(st1, "run-1")
    batches = [set(party.draw_batch(r).tolist()) for r in range(T1)]
    counts, first_k = np.zeros(N, dtype=int), {}
    for r, b in enumerate(batches):
        for i in b:
            counts[i] += 1
            if counts[i] == K and i not in first_k:
                first_k[i] = r
    target = min(first_k, key=first_k.get)
    return first_k[target] + 1, target


def test_a_server_cannot_stop_random_batch_runs_once_a_record_was_drawn_often(tmp_path):
    """Random batches (here fixed-size, without replacement) are accounted by how often a record
    is drawn, averaged over the draws. The server stops run 1 once the target record was drawn
    K = 2 times, then asks for a run the silo
    calibrates to what is left: one full-batch round. Before, the ledger priced run 1 by the rounds
    answered as if the record had been drawn at random in them, while it was drawn twice for sure,
    and the second run spent a budget that was not there: true δ 1.36 times the target. Charging
    such a run in full when planned is not enough either: split into one-round runs it is charged
    round by round again. A deployed silo therefore refuses random batches (before anything is
    charged); if it ever answers them, the exact oracle below must hold.

    The true δ is computed exactly over every stopping path of the attacker's rule (a record is in
    each batch independently with probability q): run 1 stops at round t with probability
    C(t−1, K−1) q^K (1−q)^(t−K), having drawn the record K times, or runs all T₁ rounds with the
    record drawn j < K times (Bin(j; T₁, q)); run 2's noise z₂ is what the silo's ledger gives
    after that path; the privacy loss is then Gaussian with μ² = K₁/z₁² + K₂/z₂²."""
    cfg = config(tmp_path)
    m, K = 40, 2
    T1, q = N // m, m / N
    st1 = settings(sampling="without_replacement", batch_size=m)
    try:
        plan1 = node(cfg).plan(st1, PROPS, T1, "run-1")
    except pfair.exceptions.SettingsMismatch as exc:
        assert "sampling='shuffle'" in str(exc) and node(cfg).ledger().epsilon_spent() == 0.0
        # The same rounds asked as runs of one round each (each charged in full when planned
        # would still be charged round by round) are refused as well.
        with pytest.raises(pfair.exceptions.SettingsMismatch, match="sampling='shuffle'"):
            node(cfg).plan(settings(sampling="without_replacement", batch_size=m, epsilon=0.1), PROPS, 1, "r0")
        with pytest.raises(pfair.exceptions.SettingsMismatch, match="sampling='shuffle'"):
            node(cfg).plan(settings(sampling="poisson", batch_size=m, protect="record"), PROPS, T1, "r1")
        return
    z1, delta = plan1["noise_multiplier"], plan1["delta"]
    t1, _ = _stop_at_second_draw(cfg, st1, T1, K)
    assert t1 < T1
    for r in range(t1):
        node(cfg).train(st1, "run-1", r, THETA, W)
    z2_node = node(cfg).plan(settings(sampling="full_batch"), PROPS, 1, "run-2")["noise_multiplier"]
    held = sum(count for (sampling, _, z, count) in node(cfg).ledger().mechanisms() if sampling == "public_batch")

    def z2_after(t: int) -> float:  # the silo's own calibration after run 1 stopped at round t
        ledger = PrivacyLedger(epsilon=1.0, delta=delta)
        steps = T1 if held == T1 else t
        ledger.charge(MechanismEvent(name="run-1", sampling="public_batch", sample_rate=q, noise_multiplier=z1,
                                     steps=steps))
        return noise_multiplier_after(ledger, epsilon=1.0, sample_rate=1.0, steps=1, sampling="full_batch")

    assert z2_after(t1) == pytest.approx(z2_node, rel=1e-9)  # the model is the silo's own calibration
    paths = [(math.comb(t - 1, K - 1) * q**K * (1 - q) ** (t - K), t, K) for t in range(K, T1 + 1)]
    paths += [(binom.pmf(j, T1, q), T1, j) for j in range(K)]
    assert sum(p for p, _, _ in paths) == pytest.approx(1.0)
    true_delta = sum(p * float(gaussian_delta(1.0, np.sqrt([k1 / z1**2 + 1 / z2_after(t) ** 2]))[0])
                     for p, t, k1 in paths)
    assert true_delta <= delta * (1 + 1e-9), f"true delta {true_delta:.3g} over the target {delta:.3g}"


def test_shuffled_epochs_stopped_at_will_cost_no_more_than_the_budget(tmp_path):
    """Shuffled epochs: every record is in one batch an epoch and the ledger charges each epoch a
    run touched, so wherever the server stops run 1, a record took part in at most as many
    Gaussian releases as were charged. Worst case over every stopping round t and every record
    (drawn in each epoch touched): μ² = ⌈t/b⌉/z₁² + 1/z₂(t)², which must meet the target."""
    cfg = config(tmp_path)
    m = 40
    b = N // m
    T1 = 3 * b
    st1 = settings(sampling="shuffle", batch_size=m, epochs=3)
    plan1 = node(cfg).plan(st1, PROPS, T1, "run-1")
    z1, delta = plan1["noise_multiplier"], plan1["delta"]
    t1 = b + 1  # stopped one round into the second epoch
    for r in range(t1):
        node(cfg).train(st1, "run-1", r, THETA, W)
    z2_node = node(cfg).plan(settings(sampling="full_batch"), PROPS, 1, "run-2")["noise_multiplier"]

    def z2_after(t: int) -> float:
        ledger = PrivacyLedger(epsilon=1.0, delta=delta)
        ledger.charge(MechanismEvent(name="run-1", sampling="shuffle", sample_rate=m / N, noise_multiplier=z1,
                                     steps=t))
        return noise_multiplier_after(ledger, epsilon=1.0, sample_rate=1.0, steps=1, sampling="full_batch")

    assert z2_after(t1) == pytest.approx(z2_node, rel=1e-9)
    for t in range(1, T1 + 1):
        mu = math.sqrt(math.ceil(t / b) / z1**2 + 1 / z2_after(t) ** 2)
        assert float(gaussian_delta(1.0, np.array([mu]))[0]) <= delta * (1 + 1e-9)


# ---------------------------------------------------------------------------------------- N4
@pytest.mark.parametrize("asked, cap", [
    ({"max_violation": 0.05, "max_violation_epsilon_share": 0.7, "epochs": 3}, {}),
    ({"epsilon": 1.0}, {"max-run-epsilon": 0.5}),
])
def test_the_silo_owns_its_budget_shares(tmp_path, asked, cap):
    """The server's run config cannot choose how much of the silo's budget a run or its
    histogram or violation releases take: past the node's caps it is refused before any charge."""
    cfg = config(tmp_path, epsilon=2.0, **cap)
    st = settings(**{"epsilon": 2.0, **asked})
    if "epsilon" not in asked:  # the run's ε is decided at the plan round, its histogram's share at the hello
        with pytest.raises(pfair.exceptions.SettingsMismatch, match="caps what one run may spend"):
            node(cfg).hello(st)
    with pytest.raises(pfair.exceptions.SettingsMismatch, match="caps"):
        node(cfg).plan(st, PROPS, 10, "run-x")
    assert node(cfg).ledger().epsilon_spent() == 0.0
    assert node(cfg).ledger().releases == {}


NOTIONS = [("demographic_parity", 1), ("equalized_odds", 1), ("equal_opportunity", 0), ("equal_opportunity", 1),
           ("false_positive_rate_parity", 0), ("false_positive_rate_parity", 1)]


def _hostile_hellos(cfg):
    """The hostile server before any training: hellos of every fairness notion (and positive class),
    each asking for almost all, large, default and small shares of runs of huge, equal and small ε.
    Returns the refusals' messages."""
    refused = []
    for fairness, positive in NOTIONS:
        for share in (0.99, 0.25, 0.1, 0.05):  # the largest first: a histogram is released once per notion
            for eps in (7.9, 2.0, 0.5):
                try:
                    node(cfg).hello(settings(epsilon=eps, p_s="dp", p_s_epsilon_share=share, fairness=fairness,
                                             positive_class=positive))
                except pfair.exceptions.SettingsMismatch as exc:
                    refused.append(str(exc))
    return refused


def _gaussian_epsilon(mu: float, delta: float) -> float:
    """ε of a Gaussian mechanism of μ at δ: the root of δ(ε) = δ (Balle and Wang 2018)."""
    return brentq(lambda e: float(gaussian_delta(e, np.array([mu]))[0]) - delta, 1e-9, 200.0, xtol=1e-13)


def test_a_hostile_server_spends_only_the_silos_own_histogram_before_training(tmp_path):
    """N4: the server used to choose the histogram's share (up to a cap of 0.25) and its notion. On
    eafc1b0 these hellos spent 0.25 · 2.0 = 0.5 with the first notion and 1.06 (53% of the budget)
    with the four, before any round. Now the silo's node config alone prices it (histogram-share
    0.1 of min(epsilon, max-run-epsilon), for demographic parity only): 0.2, whatever the server
    asks; and no checkpoint, evaluation or score histogram is answered before the run trained."""
    from pfair.privacy.proportions import histogram_noise_multiplier

    cfg = config(tmp_path, epsilon=2.0, **{"test-path": str(shard(tmp_path / "test.csv", n=60, seed=5))})
    refused = _hostile_hellos(cfg)
    spent = node(cfg).ledger().epsilon_spent()
    assert spent <= 0.1 * 2.0 * (1 + 1e-9), spent
    # Every notion but demographic parity is refused, at every share and ε, for that reason only.
    assert len(refused) == (len(NOTIONS) - 1) * 4 * 3 and all("histogram-fairness" in r for r in refused)
    # Attained: one histogram, the Gaussian of z_h priced at 0.2 alone.
    delta = node(cfg).ledger().delta
    z_h = histogram_noise_multiplier(epsilon=2.0, share=0.1, delta=delta)
    assert spent == pytest.approx(_gaussian_epsilon(math.sqrt(2.0) / (z_h * math.sqrt(2.0)), delta), rel=1e-6)
    assert node(cfg).hello_bound() == pytest.approx(spent, rel=1e-9)
    # The other releases a server might ask before training: refused, uncharged.
    st = settings(epsilon=2.0, p_s="dp", max_violation=0.05, epochs=2)
    node(cfg).plan(st, PROPS, 20, "run-h")
    for ask, what in ((lambda: node(cfg).checkpoint(st, "run-h", 0, THETA), "answered no round"),
                      (lambda: node(cfg).evaluate(st, "run-h", THETA), "answered no round"),
                      (lambda: node(cfg).score_histogram(THETA, np.array([0.5]), 2.0), "allow-score-histogram")):
        with pytest.raises(pfair.exceptions.SettingsMismatch, match=what):
            ask()
    assert node(cfg).ledger().epsilon_spent() == spent


def test_the_hello_bound_of_a_silo_that_releases_for_every_notion(tmp_path):
    """A silo whose operator lists every release pays at most one histogram of its own share per
    entry, composed (μ = √entries/z_h): attained by the hostile server, and below what the server bought on
    eafc1b0 with its own share of 0.25 (53% of the budget)."""
    from pfair.privacy.proportions import histogram_noise_multiplier

    every = ",".join(f"{f}:{p}" if f in ("equal_opportunity", "false_positive_rate_parity") else f for f, p in NOTIONS)
    cfg = config(tmp_path, epsilon=2.0, **{"histogram-fairness": every})
    assert _hostile_hellos(cfg) == []
    spent = node(cfg).ledger().epsilon_spent()
    delta = node(cfg).ledger().delta
    z_h = histogram_noise_multiplier(epsilon=2.0, share=0.1, delta=delta)
    bound = _gaussian_epsilon(math.sqrt(len(NOTIONS)) / z_h, delta)  # Gaussians of μ = 1/z_h: μ² adds
    assert spent == pytest.approx(bound, rel=1e-6) and node(cfg).hello_bound() == pytest.approx(bound, rel=1e-9)
    assert 0.2 < spent < 0.35 * 2.0
    # The old price of the same attack (share 0.25 of 2.0, four notions), for the record.
    z_old = histogram_noise_multiplier(epsilon=2.0, share=0.25, delta=delta)
    assert _gaussian_epsilon(2.0 / z_old, delta) == pytest.approx(0.53 * 2.0, abs=0.01)


def test_the_histogram_policy_is_read_from_the_node_config(tmp_path):
    with pytest.raises(ValueError, match="max-histogram-share is gone.*histogram-share"):
        node(config(tmp_path, **{"max-histogram-share": 0.2}))
    with pytest.raises(ValueError, match="histogram-share=1.5 must be in"):
        node(config(tmp_path, **{"histogram-share": 1.5}))
    with pytest.raises(ValueError, match="histogram-fairness has 'equal_opportunity'.*positive class"):
        node(config(tmp_path, **{"histogram-fairness": "equal_opportunity"}))
    cfg = config(tmp_path, epsilon=2.0, **{"histogram-share": 0.05, "max-run-epsilon": 1.0})
    node(cfg).hello(settings(epsilon=2.0, p_s="dp", p_s_epsilon_share=0.25))
    assert node(cfg).ledger().epsilon_spent() == pytest.approx(0.05 * 1.0, rel=1e-6)


# ---------------------------------------------------------------------------------------- N3
def _answered_one_round(cfg):
    st = settings(sampling="shuffle", batch_size=40)
    node(cfg).plan(st, PROPS, 10, "run-r")
    node(cfg).train(st, "run-r", 0, THETA, W)
    return st


@pytest.mark.parametrize("how", ["restore", "delete", "truncate", "replace"])
def test_a_ledger_rolled_back_deleted_or_truncated_is_refused(tmp_path, how):
    """A backup restored over the ledger (or the ledger deleted) used to reset the silo's replay
    protection and its budget: an answered round was answered again with fresh noise (checked on
    main 058ec9c, whose node this test cannot import: after restoring an older copy, round 0 was
    answered a second time; after deleting the file the node started afresh, spent 1.70 -> 0.93)."""
    from pfair.exceptions import LedgerConflict, LedgerRollback

    cfg = config(tmp_path)
    ledger_file = tmp_path / "state" / "ledger.json"
    st = settings(sampling="shuffle", batch_size=40)
    node(cfg).plan(st, PROPS, 10, "run-r")
    backup = ledger_file.read_bytes()  # planned, nothing answered
    node(cfg).train(st, "run-r", 0, THETA, W)
    spent = node(cfg).ledger().epsilon_spent()
    assert spent > 0
    if how == "restore":
        ledger_file.write_bytes(backup)
    elif how == "delete":
        ledger_file.unlink()
    elif how == "truncate":
        ledger_file.write_bytes(ledger_file.read_bytes()[:100])
    else:  # another ledger file of the same revision
        data = json.loads(ledger_file.read_text())
        data["runs"]["run-r"]["next_round"] = 0
        ledger_file.write_text(json.dumps(data, indent=1))
    with pytest.raises(LedgerConflict, match="restore the latest|Restore the latest") as err:
        node(cfg).train(st, "run-r", 0, THETA, W)
    if how != "truncate":
        assert isinstance(err.value, LedgerRollback) and "pfair node reset" in str(err.value)


def test_an_anchor_outside_the_state_dir_catches_a_restored_state_dir(tmp_path):
    """Restoring the whole state directory (journal included) is caught by the anchor journal."""
    import shutil

    from pfair.exceptions import LedgerRollback

    cfg = config(tmp_path, **{"ledger-anchor": str(tmp_path / "elsewhere" / "silo0.anchor")})
    st = settings(sampling="shuffle", batch_size=40)
    node(cfg).plan(st, PROPS, 10, "run-r")
    shutil.copytree(tmp_path / "state", tmp_path / "backup")
    node(cfg).train(st, "run-r", 0, THETA, W)
    shutil.rmtree(tmp_path / "state")
    shutil.copytree(tmp_path / "backup", tmp_path / "state")
    with pytest.raises(LedgerRollback, match="anchor"):
        node(cfg).train(st, "run-r", 0, THETA, W)


def test_a_restored_state_dir_does_not_answer_a_round_twice_by_default(tmp_path):
    """N3: restoring a backup of the whole state directory (ledger, journal and plan) under the
    default node config. On eafc1b0, which anchored nothing unless the node config set
    ledger-anchor, round 0 was answered a second time, with fresh noise and no charge."""
    import shutil

    from pfair.exceptions import LedgerRollback

    cfg = config(tmp_path)  # no ledger-anchor: the default one
    assert "ledger-anchor" not in cfg
    st = settings(sampling="shuffle", batch_size=40)
    node(cfg).plan(st, PROPS, 10, "run-r")
    shutil.copytree(tmp_path / "state", tmp_path / "backup")
    first = node(cfg).train(st, "run-r", 0, THETA, W)
    spent = node(cfg).ledger().epsilon_spent()
    assert first.round == 0 and spent > 0
    shutil.rmtree(tmp_path / "state")
    shutil.copytree(tmp_path / "backup", tmp_path / "state")
    with pytest.raises(LedgerRollback, match="anchor"):
        node(cfg).train(st, "run-r", 0, THETA, W)
    with pytest.raises(LedgerRollback, match="anchor"):
        node(cfg).hello(st)


def test_an_emptied_state_dir_does_not_start_the_budget_over_by_default(tmp_path):
    """N3: emptying the state directory. On eafc1b0 the node made a new ledger: spent 0 again, and
    the budget answered anew."""
    import shutil

    from pfair.exceptions import LedgerRollback

    cfg = config(tmp_path)
    st = settings(sampling="shuffle", batch_size=40)
    node(cfg).plan(st, PROPS, 10, "run-r")
    node(cfg).train(st, "run-r", 0, THETA, W)
    assert node(cfg).ledger().epsilon_spent() > 0
    shutil.rmtree(tmp_path / "state")
    (tmp_path / "state").mkdir()
    for ask in (lambda: node(cfg).hello(st), lambda: node(cfg).plan(st, PROPS, 10, "run-s"), lambda: node(cfg).report()):
        with pytest.raises(LedgerRollback, match="gone"):
            ask()
    assert not (tmp_path / "state" / "ledger.json").exists()  # no new ledger was made


def test_a_state_dir_copied_where_its_anchor_never_saw_it_is_refused(tmp_path):
    """A ledger written under an anchor says so; an anchor with no record of it (lost, or the state
    directory restored at another path) is refused rather than taken for a new one."""
    import shutil

    from pfair.exceptions import LedgerRollback

    cfg = config(tmp_path)
    st = settings(sampling="shuffle", batch_size=40)
    node(cfg).plan(st, PROPS, 10, "run-r")
    shutil.copytree(tmp_path / "state", tmp_path / "backup")
    node(cfg).train(st, "run-r", 0, THETA, W)
    moved = cfg | {"state-dir": str(tmp_path / "backup")}
    with pytest.raises(LedgerRollback, match="has no record of it"):
        node(moved).train(st, "run-r", 0, THETA, W)


def test_the_anchor_must_live_outside_the_state_dir_and_none_is_warned(tmp_path):
    from pfair.exceptions import PrivacyWarning
    from pfair.flower.node import default_anchor

    inside = config(tmp_path, **{"ledger-anchor": str(tmp_path / "state" / "sub" / "anchor")})
    with pytest.raises(ValueError, match="ledger-anchor=.*inside its state-dir"):
        node(inside)
    anchor = default_anchor(tmp_path / "state")
    assert (tmp_path / "state") not in anchor.parents
    with pytest.warns(PrivacyWarning, match="ledger-anchor=none"):
        bare = node(config(tmp_path, **{"ledger-anchor": "none"}))
    assert bare.anchor is None and "ledger-anchor = none" in bare.report()["not_covered"][0]


def test_pfair_node_reset_starts_over_only_when_asked(tmp_path, capsys):
    from pfair.cli import main

    cfg = config(tmp_path)
    _answered_one_round(cfg)
    (tmp_path / "state" / "ledger.json").unlink()
    assert main(["node", "reset", "--state-dir", str(tmp_path / "state")]) == 2
    assert "--i-understand" in capsys.readouterr().err
    assert main(["node", "reset", "--state-dir", str(tmp_path / "state"), "--i-understand"]) == 0
    assert "ledger.json.journal" in capsys.readouterr().out
    assert node(cfg).ledger().epsilon_spent() == 0.0  # a new ledger, on purpose


# ---------------------------------------------------------------------------------------- N1
def _threshold_sweep(evaluate, X_test, n):
    """The query oracle: θ predicts 1 iff x₀ is above a threshold; lowering it past one test record
    at a time flips that record's prediction, and the demographic-parity gap moves by 1/n₀ or
    1/n₁ depending on its group. Returns the guessed group of each record (None: no answer)."""
    order = np.argsort(-X_test[:, 0])
    xs = X_test[order, 0]
    answers = []
    for i in range(n + 1):
        t = xs[i - 1] - 1e-9 if i > 0 else xs[0] + 1.0
        theta = np.array([1e3, 0.0, 0.0, -1e3 * t])  # logit of class 1 = 1000 (x₀ − t)
        try:
            answers.append(evaluate(theta).get("demographic_parity_difference"))
        except Exception:
            answers.append(None)
    steps = [abs(b) - abs(a) if a is not None and b is not None else None for a, b in zip(answers, answers[1:])]
    sizes = sorted({round(abs(d), 9) for d in steps if d is not None and d != 0})
    guess = np.full(n, -1)
    if len(sizes) >= 2:
        small, large = sizes[0], sizes[-1]  # 1/n_big, 1/n_small
        for j, d in enumerate(steps):
            if d is not None:
                guess[order[j]] = int(abs(abs(d) - small) > abs(abs(d) - large))
    return guess, answers


def _evaluating_node(tmp_path, **cfg_kw):
    rng = np.random.default_rng(3)
    n = 120
    s = (rng.random(n) < 0.35).astype(int)
    X = rng.normal(size=(n, 3))
    y = (X[:, 1] > 0).astype(int)
    test = pfair.datasets.write_shard(tmp_path / "test.csv", X, y, s)
    cfg = config(tmp_path, **{"test-path": str(test), "epsilon": 2.0, **cfg_kw})
    st = settings(epsilon=2.0, sampling="shuffle", batch_size=40)
    node(cfg).plan(st, PROPS, 10, "run-e")
    node(cfg).train(st, "run-e", 0, THETA, W)  # a run is evaluated after it trained
    return cfg, st, X, s


def test_exact_evaluation_is_a_query_oracle_and_only_an_opt_in(tmp_path, caplog):
    """What the silo's operator opts into with allow-exact-evaluate: n + 1 queries give s. This is
    what every silo answered on main 058ec9c, where evaluation was exact by default (checked there:
    121 answers, 97.5% of s recovered against 68.3% by chance, nothing charged). The opt-in is
    logged as not covered at each answer and reported."""
    cfg, st, X, s = _evaluating_node(tmp_path, **{"allow-exact-evaluate": "true"})
    with caplog.at_level("WARNING", logger="pfair.node"):
        guess, _ = _threshold_sweep(lambda th: node(cfg).evaluate(st, "run-e", th), X, len(s))
    flipped = max(np.mean(guess == s), np.mean(guess == 1 - s))  # the attacker knows the sizes
    assert flipped > 0.9
    warned = [r for r in caplog.records if "not covered by the guarantee" in r.getMessage()]
    assert len(warned) == len(s) + 1  # one per exact answer
    assert node(cfg).report()["not_covered"] == ["exact evaluation of the test shard (allow-exact-evaluate)"]


def test_the_evaluation_table_moves_by_at_most_root_2_between_neighbours_and_costs_its_epsilon():
    """The sensitivity of the evaluation release, attacked like the rounds': on random shards and a
    fixed θ, replacing one record (x, y and s, or only s) changes the table c[r, y, ŷ] by an L2 norm
    of at most √2, reached; and z_e prices one release (σ = z_e·√2) at evaluate-epsilon: the
    Gaussian mechanism's exact δ(ε) (Balle and Wang 2018) at ε = evaluate-epsilon is at most δ."""
    from pfair.flower.node import confusion_by_group, evaluation_noise_multiplier

    rng = np.random.default_rng(11)
    worst = 0.0
    for _ in range(300):
        n, k, l = int(rng.integers(2, 30)), int(rng.integers(2, 4)), int(rng.integers(2, 4))
        X, w = rng.normal(size=(n, 3)), rng.normal(size=(3, l))
        y, s = rng.integers(0, l, n), rng.integers(0, k, n)

        def table(X, y, s):
            return confusion_by_group(y, np.argmax(X @ w, axis=1), s, n_groups=k, n_classes=l)

        i = int(rng.integers(n))
        X2, y2, s2 = X.copy(), y.copy(), s.copy()
        if rng.random() < 0.5:
            s2[i] = rng.integers(0, k)  # only the sensitive attribute
        else:
            X2[i], y2[i], s2[i] = rng.normal(size=3), rng.integers(0, l), rng.integers(0, k)
        change = float(np.linalg.norm(table(X, y, s) - table(X2, y2, s2)))
        assert change <= math.sqrt(2) + 1e-12
        worst = max(worst, change)
    assert worst == pytest.approx(math.sqrt(2))
    for eps, delta in ((0.05, 1e-5), (0.2, 1e-6), (1.0, 1e-5)):
        mu = 1.0 / evaluation_noise_multiplier(eps, delta)  # sensitivity / σ
        exact = norm.cdf(mu / 2 - eps / mu) - math.exp(eps) * norm.cdf(-mu / 2 - eps / mu)
        assert exact <= delta * (1 + 1e-6)  # delivered
        # and not priced far above it: the exact smallest multiplier is within 15% (the accountant's
        # RDP conversion: 1.09-1.13 at these settings)
        z_min = brentq(lambda z: norm.cdf(0.5 / z - eps * z) - math.exp(eps) * norm.cdf(-0.5 / z - eps * z) - delta,
                       1e-2, 1e4)
        assert evaluation_noise_multiplier(eps, delta) <= 1.15 * z_min


def test_evaluation_is_a_charged_dp_release_and_the_sweep_recovers_no_more_than_chance(tmp_path):
    cfg, st, X, s = _evaluating_node(tmp_path)
    before = node(cfg).ledger().epsilon_spent()
    guess, answers = _threshold_sweep(lambda th: node(cfg).evaluate(st, "run-e", th), X, len(s))
    assert sum(a is not None for a in answers) <= 1  # one evaluation per run
    assert node(cfg).ledger().epsilon_spent() > before  # and it was charged
    chance = max(np.mean(s), 1 - np.mean(s))
    recovered = max(np.mean(guess == s), np.mean(guess == 1 - s), chance)
    assert recovered <= chance + 1e-12
    # A run the silo did not plan gets no evaluation at all.
    with pytest.raises(pfair.exceptions.SettingsMismatch, match="not the run this silo planned"):
        node(cfg).evaluate(st, "someone-elses-run", THETA)
    assert node(cfg).report()["not_covered"] == []


def test_an_evaluation_is_answered_under_the_runs_planned_protection_only(tmp_path):
    """A record-protected run evaluated under settings that say protect='attribute' would return the
    exact error and loss of the test shard (x and y are protected there): refused, uncharged."""
    cfg, _, X, s = _evaluating_node(tmp_path)
    st_record = settings(epsilon=2.0, protect="record", sampling="shuffle", batch_size=40)
    node(cfg).plan(st_record, PROPS, 10, "run-r")
    node(cfg).train(st_record, "run-r", 0, THETA, W)
    spent = node(cfg).ledger().epsilon_spent()
    with pytest.raises(pfair.exceptions.SettingsMismatch, match="planned under other settings"):
        node(cfg).evaluate(settings(epsilon=2.0, protect="attribute", sampling="shuffle"), "run-r", THETA)
    assert node(cfg).ledger().epsilon_spent() == spent
    out = node(cfg).evaluate(st_record, "run-r", THETA)
    assert "test_loss" not in out  # record mode: nothing exact; the error comes from the noisy table


def test_metrics_from_a_noisy_table_leave_out_the_gaps_it_leaves_undefined():
    """After the noise a small shard's table can hold one class only in one group, or one group only:
    the gaps that need more are left out instead of failing the evaluation (seen in CI)."""
    from pfair.flower.node import metrics_from_table

    table = np.zeros((2, 2, 2))
    table[0, 1, 1], table[1, 0, 0], table[0, 0, 1] = 30.0, 10.0, -3.0  # class 1 in group 0 only, 0 in 1
    out = metrics_from_table(table)
    assert out["test_error"] == 0.0
    assert out["demographic_parity_difference"] == pytest.approx(1.0)
    assert "equalized_odds_difference" not in out
    table[1, 1, 0] = 5.0  # class 1 now in both groups, predicted 1 in group 0 and 0 in group 1
    out = metrics_from_table(table)
    assert out["test_error"] == pytest.approx(5 / 45)
    assert out["equalized_odds_difference"] == pytest.approx(1.0)
    one_group = np.zeros((2, 2, 2))
    one_group[1] = [[4.0, 1.0], [2.0, 6.0]]
    assert set(metrics_from_table(one_group)) == {"test_error"}
    assert metrics_from_table(np.full((2, 2, 2), -1.0)) == {}


def test_a_hello_asking_for_a_huge_run_does_not_buy_a_larger_histogram(tmp_path):
    """The histogram's ε is the silo's share of at most what it lets one run spend, whatever ε and
    share the run config names (a hello with epsilon=7.9 and share 0.25 once spent 1.975 of 2.0)."""
    cfg = config(tmp_path, epsilon=2.0)
    node(cfg).hello(settings(epsilon=7.9, p_s="dp", p_s_epsilon_share=0.25))
    assert node(cfg).ledger().epsilon_spent() <= 0.1 * 2.0 * (1 + 1e-6)


def test_a_journal_line_cut_by_a_crash_does_not_swallow_the_next_entry(tmp_path):
    from pfair.exceptions import LedgerRollback

    path = tmp_path / "ledger.json"
    ledger = PrivacyLedger(epsilon=1.0, delta=1e-5, path=path)
    ledger.save(path)
    backup = path.read_bytes()  # revision 1
    ledger.charge(MechanismEvent.gaussian_histogram(noise_multiplier=20.0))  # revision 2
    journal = tmp_path / "ledger.json.journal"
    with open(journal, "ab") as f:
        f.write(b'{"revision": 3, "sha2')  # a crash in the middle of an append
    ledger.charge(MechanismEvent.gaussian_histogram(noise_multiplier=20.0))  # revision 3, journalled
    path.write_bytes(backup)
    with pytest.raises(LedgerRollback, match="older copy"):
        PrivacyLedger.load(path)


def test_a_plan_without_its_ledger_is_refused(tmp_path):
    from pfair.exceptions import LedgerRollback

    cfg = config(tmp_path)
    st = settings(sampling="shuffle", batch_size=40)
    node(cfg).plan(st, PROPS, 10, "run-r")
    node(cfg).train(st, "run-r", 0, THETA, W)
    for f in (tmp_path / "state").glob("ledger.json*"):
        f.unlink()  # ledger and journal gone, the plan left
    with pytest.raises(LedgerRollback, match="plan but no ledger"):
        node(cfg).train(st, "run-r", 0, THETA, W)
