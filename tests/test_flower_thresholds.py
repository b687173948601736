"""Private post-processing on deployed silos: ``query.score_histogram`` answered by the real ClientApp
(:data:`pfair.flower.client_app.app`, dispatching to :meth:`SiloNode.score_histogram`), charged to
the silo's ledger and refused past its budget and caps, and the server side that pools the replies
and chooses the thresholds (:mod:`pfair.flower.thresholds`). The last test runs it over a loopback
Flower deployment (127.0.0.1 only, bounded in time)."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

pytest.importorskip("flwr", reason="the flower extra is not installed (pip install 'pfair[flower]')")
from flwr.app import Context, RecordDict  # noqa: E402
from flwr.supercore.task_identity import TaskIdentity

import pfair
from pfair.exceptions import PrivacyWarning
from pfair.flower import client_app, codec
from pfair.flower.node import SiloNode
from pfair.flower.thresholds import read_score_histogram, score_histogram_message, thresholds_from_histograms
from pfair.postprocessing import PrivateThresholdOptimizer, rate_resolution
from pfair.privacy.score_histogram import SCORE_HISTOGRAM_SENSITIVITY, score_bins, score_counts

from support import toy_data

EDGES = np.linspace(0, 1, 9)[1:-1]


@pytest.fixture
def identity(monkeypatch):
    """The task identity Flower sets in a ServerApp process, so that messages can be made here."""
    for name, value in (("_run_id", 1), ("_node_id", 0), ("_task_id", 1)):
        monkeypatch.setattr(TaskIdentity, name, value)


def _silos(tmp_path, n=900, n_silos=3, **cfg):
    X, y, s, silos = toy_data(n=n, seed=0, round_robin=True, n_silos=n_silos)
    fed = pfair.Federation.from_arrays(X, y, sensitive_features=s, silos=silos)
    from pfair.flower.deploy import write_federation

    configs = write_federation(fed, tmp_path / "data")
    for c in configs:
        c.update({"epsilon": 2.0, "delta": 1e-5, "allow-score-histogram": True, **cfg})
    return fed, configs


def _ask(config, theta, *, epsilon=1.0, edges=EDGES, node_id=7):
    msg = score_histogram_message(node_id, theta=theta, edges=edges, epsilon=epsilon, n_groups=2, n_classes=2)
    ctx = Context(run_id=1, node_id=node_id, node_config=config, state=RecordDict(), run_config={})
    return client_app.app(msg, ctx)


def _theta(fed):
    from sklearn.linear_model import LogisticRegression

    X, y, _ = fed.pooled()
    lr = LogisticRegression().fit(X, y)
    return np.concatenate([lr.coef_[0], lr.intercept_])  # θ = (w, b), pfair's linear layout


def _spent(config):
    return SiloNode(config, n_groups=2, n_classes=2).ledger().epsilon_spent()


def test_a_deployed_silo_answers_a_charged_score_histogram(tmp_path, identity):
    fed, configs = _silos(tmp_path, **{"noise-seed": 11})
    theta = _theta(fed)
    reply = _ask(configs[0], theta)
    assert not reply.has_error()
    hist, meta = read_score_histogram(reply.content, n_bins=EDGES.size + 1, n_groups=2)
    silo = fed.silos[0]
    scores = pfair._core.predict_proba(silo.X, theta, 2)[:, 1]
    exact = score_counts(score_bins(scores, EDGES), silo.s, silo.y, n_bins=EDGES.size + 1, n_groups=2)
    z = meta["noise_multiplier"]
    assert meta["n_records"] == len(silo) and 3.0 < z < 6.0
    assert 0 < np.std(hist - exact) < 3 * z * np.sqrt(2)
    assert 0.99 <= _spent(configs[0]) <= 1.0
    # The in-process release of the same silo with the same key is the same bits.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyWarning)
        from pfair.privacy.ledger import PrivacyLedger
        from pfair.privacy.score_histogram import release_score_histogram
        from pfair.protocol.keys import noise_key

        same, z2 = release_score_histogram(exact, ledger=PrivacyLedger(epsilon=2.0, delta=1e-5, silo=0), epsilon=1.0,
                                           key=noise_key(11), silo=0)
    np.testing.assert_array_equal(same, hist)
    assert z2 == z


def test_a_silo_refuses_what_its_budget_and_caps_do_not_allow(tmp_path, identity):
    """A refusal raises in the ClientApp (Flower sends it to the server as an error reply) before
    anything is read or charged."""
    from pfair.exceptions import PrivacyBudgetExceeded, SettingsMismatch

    fed, configs = _silos(tmp_path, **{"max-run-epsilon": 1.5})
    theta, cfg = _theta(fed), configs[0]
    for asked in (1.6, 2.5, 0.0):  # over max-run-epsilon, over the budget, not a budget
        with pytest.raises(SettingsMismatch, match="Nothing was read or charged"):
            _ask(cfg, theta, epsilon=asked)
    with pytest.raises(ValueError, match="not finite"):
        _ask(cfg, np.full(4, np.nan))
    with pytest.raises(ValueError, match="strictly increasing"):
        _ask(cfg, theta, edges=np.array([0.5, 0.2]))
    with pytest.raises(ValueError, match="theta has length 7"):  # refused before the charge, not after
        _ask(cfg, np.zeros(7))
    assert _spent(cfg) == 0.0
    first = _ask(cfg, theta, epsilon=1.5)
    spent = _spent(cfg)
    assert 1.49 <= spent <= 1.5
    # A refusal for want of budget is a typed reply (its kind and reason), not an error text.
    refusal = _ask(cfg, theta, epsilon=1.0)
    assert not refusal.has_error() and "arrays" not in refusal.content
    assert refusal.content["meta"][codec.REFUSAL_KIND] == PrivacyBudgetExceeded.__name__
    assert "nothing is left" in codec.read_refusal(refusal.content)
    assert _spent(cfg) == spent
    # What the calibration left below 1.5 buys one more release, under noise to match.
    sliver = _ask(cfg, theta, epsilon=1.5)
    assert sliver.content["meta"]["noise_multiplier"] > 5 * first.content["meta"]["noise_multiplier"]
    assert spent < _spent(cfg) <= 1.5


def test_a_noise_seed_serves_one_score_histogram(tmp_path, identity):
    from pfair.exceptions import SettingsMismatch

    fed, configs = _silos(tmp_path, **{"noise-seed": 3})
    theta = _theta(fed)
    assert not _ask(configs[0], theta, epsilon=1.0).has_error()
    with pytest.raises(SettingsMismatch, match="noise-seed"):
        _ask(configs[0], theta, epsilon=2.0)


def test_the_server_pools_the_replies_into_the_in_process_rule(tmp_path, identity):
    """The deployed silos' releases, pooled by the server, give the rule PrivateThresholdOptimizer
    chooses in process from the same silos, base model, edges and noise keys."""
    fed, configs = _silos(tmp_path, **{"noise-seed": 5})
    theta = _theta(fed)
    tables, sigmas = [], []
    for j, cfg in enumerate(configs):
        hist, meta = read_score_histogram(_ask(cfg, theta, node_id=10 + j).content, n_bins=EDGES.size + 1, n_groups=2)
        tables.append(hist)
        sigmas.append(meta["noise_multiplier"] * SCORE_HISTOGRAM_SENSITIVITY)
    # The margin "auto" holds the rule to: the pooled table's resolution, from the public noise stds.
    pooled = np.maximum(np.sum(tables, axis=0), 0.0)
    margin, _ = rate_resolution(pooled, "equalized_odds", float(np.sqrt(np.sum(np.square(sigmas)))))
    rule, pooled = thresholds_from_histograms(tables, constraints="equalized_odds", max_violation=0.02, margin=margin)

    class Linear:  # the deployed model as a scikit-learn base
        classes_ = np.array([0, 1])

        def predict_proba(self, X):
            return pfair._core.predict_proba(np.asarray(X, dtype=np.float64), theta, 2)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyWarning)
        m = PrivateThresholdOptimizer(estimator=Linear(), prefit=True, constraints="equalized_odds",
                                      max_violation=0.02, bins=EDGES, delta=1e-5, noise_seed=5).fit(fed)
    np.testing.assert_allclose(m.released_counts_, pooled, rtol=0, atol=1e-9)
    assert m.resolution_ == pytest.approx(margin, rel=1e-12) and m.rule_.margin == pytest.approx(margin, rel=1e-12)
    np.testing.assert_allclose(m.rule_.q, rule.q, atol=1e-9)
    assert rule.violation <= max(0.0, 0.02 - margin) + 1e-9


def test_the_strategy_takes_the_margin_as_the_estimator_does():
    """The ServerApp's run config carries margin as the template's string ("auto") or a number, or a
    string of one (a --run-config override); anything else is refused naming margin."""
    from pfair.flower.thresholds import ThresholdStrategy

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyWarning)
        st = pfair.SteFFLe(lam=0.0, epsilon=2.0, p_s=[0.5, 0.5]).settings()
    kw = dict(theta=np.zeros(4), edges=EDGES, epsilon=1.0, n_silos=3, n_groups=2, n_classes=2)
    for given, want in (("auto", "auto"), ("0", 0.0), (0.02, 0.02), ("0.05", 0.05)):
        assert ThresholdStrategy(st, margin=given, **kw).margin == want
    for bad in ("resolution", "-1", True, float("nan")):
        with pytest.raises(ValueError, match="margin \\(the run config's margin\\) must be 'auto'"):
            ThresholdStrategy(st, margin=bad, **kw)


def test_the_server_refuses_a_malformed_or_implausible_table():
    from flwr.app import ConfigRecord

    from pfair.flower import codec

    def content(hist, n=100, z=4.0):
        return RecordDict({"meta": ConfigRecord({"silo": 0, "n_records": n, "noise_multiplier": z}),
                           "arrays": codec.arrays(histogram=hist)})

    good = np.zeros((8, 2, 2))
    good[3, 0, 1] = 100.0
    read_score_histogram(content(good), n_bins=8, n_groups=2)
    with pytest.raises(ValueError, match="shape"):
        read_score_histogram(content(good[:4]), n_bins=8, n_groups=2)
    with pytest.raises(ValueError, match="implausible"):
        read_score_histogram(content(good * 50), n_bins=8, n_groups=2)  # 5000 records' worth from 100


@pytest.mark.slow
def test_private_post_processing_over_a_loopback_deployment(tmp_path):
    from pfair.flower.deploy import LoopbackDeployment, run_config_for, write_app
    from pfair.flower.thresholds import ThresholdStrategy  # noqa: F401  (the ServerApp's module imports)

    fed, configs = _silos(tmp_path)
    theta = _theta(fed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyWarning)
        st = pfair.SteFFLe(lam=0.0, epsilon=2.0, p_s=[0.5, 0.5]).settings()
    with LoopbackDeployment(tmp_path / "flwr") as dep:
        dep.start_superlink()
        for j, cfg in enumerate(configs):
            dep.start_supernode(f"supernode{j}", cfg)
        app = write_app(dep.workdir / "app", serverapp="pfair.flower.thresholds:app")
        out = dep.workdir / "result.json"
        rc = run_config_for(st, n_silos=3, n_groups=2, n_classes=2, out=out, round_timeout=60, wait_timeout=60,
                            evaluate=False)
        rc.update({"theta": json.dumps(theta.tolist()), "edges": json.dumps(EDGES.tolist()),
                   "histogram-epsilon": 1.0, "constraints": "demographic_parity", "max-violation": 0.03})
        done = dep.run_app(app, rc, timeout=240)
        assert out.exists(), f"exit {done.returncode}: " + dep.log("flwr-run")[-4000:]
    res = json.loads(out.read_text())
    # The only event: these small silos' table resolves their groups' rates more coarsely than 0.03 (said). Its
    # resolution is 0.061 ± 0.004 over the secret noise (300 draws in process: 0.052 at least), seven sd above 0.03
    # (at a target of 0.05 about one run in a hundred fell below it and was not warned, rightly).
    assert res["status"] == "completed" and [e["event"] for e in res["events"]] == ["target_beyond_resolution"]
    assert res["events"][0]["resolution"] == res["resolution_released"] > 0.03
    assert all(row["answered"] for row in res["silos"])
    assert all(0.99 <= row["ledger"]["epsilon_spent"] <= 1.0 for row in res["silos"])
    # The rule is held the table's resolution below the target ("auto"): past it, to equal rates on the noisy table.
    assert res["margin"] == res["resolution_released"]
    assert res["violation_released"] <= max(0.0, 0.03 - res["margin"]) + 1e-9
    assert res["error_released"] < res["constant_error_released"]
    assert np.asarray(res["q"]).shape == (2, EDGES.size + 1)
    # The pooled table's resolution, as PrivateThresholdOptimizer.resolution_ reads it from the same counts and noise
    sigma = np.sqrt(sum((row["noise_multiplier"] * SCORE_HISTOGRAM_SENSITIVITY) ** 2 for row in res["silos"]))
    assert res["resolution_released"] == pytest.approx(rate_resolution(np.asarray(res["pooled"]), "demographic_parity",
                                                                       sigma)[0], rel=1e-12)
    assert res["events"][0]["max_violation"] == 0.03
