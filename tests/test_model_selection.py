"""Private model selection (pfair.model_selection) and the accounting of a search (pfair.privacy.tuning)."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

import pfair
from pfair.exceptions import ConvergenceWarning
from pfair.model_selection import PrivateSearch, choose_candidate
from pfair.privacy import tuning
from pfair.privacy.accountant import default_orders, gaussian_mu, rdp_curve
from pfair.privacy.calibration import composed_epsilon
from pfair.validation import CheckpointFigures

from support import toy_federation


# ------------------------------------------------------------------ the split of the budget
@pytest.mark.parametrize("k,spent", [(1, 0.0), (3, 0.0), (5, 0.4)])
def test_search_targets_end_at_the_budget_with_equal_shares_of_mu_squared(k, spent):
    delta = 1e-6
    t = tuning.search_targets(2.0, delta, k, spent=spent)
    assert len(t) == k and t[-1] == 2.0 and all(a < b for a, b in zip(t, t[1:]))
    assert t[0] > spent
    mu2 = [gaussian_mu(epsilon=spent, delta=delta) ** 2 if spent else 0.0] + \
          [gaussian_mu(epsilon=e, delta=delta) ** 2 for e in t]
    steps = np.diff(mu2)
    np.testing.assert_allclose(steps, steps.mean(), rtol=1e-6)


def test_search_targets_refuse_a_spent_budget():
    with pytest.raises(ValueError, match="spent"):
        tuning.search_targets(1.0, 1e-6, 2, spent=1.0)
    with pytest.raises(ValueError, match="k"):
        tuning.search_targets(1.0, 1e-6, 0)


# ------------------------------------------------------------------ Papernot and Steinke
def _geometric_reference(orders, rdp, mean):
    """Theorem 2 of Papernot and Steinke (2022) for the geometric law (eta = 1, gamma = 1/mean),
    written out directly: eps'(l) = eps(l) + 2 min_h[(1 - 1/h) eps(h) + log(mean)/h] + log(mean)/(l - 1)."""
    o, r = np.asarray(orders), np.asarray(rdp)
    c = 2 * min((1 - 1 / h) * e + math.log(mean) / h for h, e in zip(o, r) if h >= 1)
    out = np.where(o > 1, r + c + math.log(mean) / np.maximum(o - 1, 1e-300), np.inf)
    return np.minimum.accumulate(out[::-1])[::-1]


@pytest.mark.parametrize("sigma,steps,mean", [(1.0, 1, 3.0), (4.0, 40, 10.0), (20.0, 100, 2.0)])
def test_repeat_and_select_geometric_equals_the_theorem_written_out(sigma, steps, mean):
    o, r = rdp_curve(noise_multiplier=sigma, sample_rate=1.0, steps=steps, sampling="full_batch")
    got = np.asarray(tuning.repeat_and_select_rdp(o, r, mean=mean, shape=1.0))
    np.testing.assert_allclose(got, _geometric_reference(o, r, mean), rtol=1e-12)
    assert np.all(got[np.asarray(o) > 1] > np.asarray(r)[np.asarray(o) > 1])  # never cheaper than one run


def test_repeat_and_select_of_a_pure_dp_run_is_about_three_epsilon():
    """The geometric case's 3 eps0 (Liu and Talwar 2019; Papernot and Steinke 2022): a pure eps0-DP run
    is (l, eps0)-RDP at every order; at large orders the bound tends to 3 eps0."""
    o = [1.5, 2, 4, 8, 16, 64, 256, 1e4, 1e6]
    eps0 = 0.5
    got = tuning.repeat_and_select_rdp(o, [eps0] * len(o), mean=5.0, shape=1.0)
    assert got[-1] == pytest.approx(3 * eps0, rel=1e-3)
    assert got[-1] > 3 * eps0


@pytest.mark.parametrize("shape", [0.0, 0.5, 1.0, 2.0, math.inf])
@pytest.mark.parametrize("sigma,steps,mean", [(1.0, 1, 3.0), (5.0, 40, 10.0)])
def test_repeat_and_select_matches_dp_accounting(shape, sigma, steps, mean):
    """dp-accounting's RepeatAndSelectDpEvent as an oracle (its own implementation of the same theorems)."""
    from dp_accounting import dp_event
    from dp_accounting.rdp import rdp_privacy_accountant as rdp

    o = default_orders()
    _, r = rdp_curve(noise_multiplier=sigma, sample_rate=1.0, steps=steps, sampling="full_batch", orders=o)
    ours = np.asarray(tuning.repeat_and_select_rdp(o, r, mean=mean, shape=shape))
    acc = rdp.RdpAccountant(orders=o)
    acc.compose(dp_event.RepeatAndSelectDpEvent(dp_event.SelfComposedDpEvent(dp_event.GaussianDpEvent(sigma), steps),
                                                mean, shape))
    theirs = np.asarray(acc._rdp)
    np.testing.assert_allclose(ours, theirs, rtol=1e-7)
    eps = tuning.epsilon_from_rdp(orders=o, rdp=ours.tolist(), delta=1e-5)[0]
    assert eps == pytest.approx(acc.get_epsilon(1e-5), rel=1e-7)


def test_truncated_negative_binomial_mean_and_gamma_invert():
    for shape in (0.0, 0.5, 1.0, 3.0):
        g = tuning.truncated_negative_binomial_gamma(shape, 7.0)
        assert tuning.truncated_negative_binomial_mean(g, shape) == pytest.approx(7.0, rel=1e-9)
        # the mean by summing the law itself: P[K=k] ∝ (1-g)^k Γ(k+η)/(Γ(η) k!)  (η=0: (1-g)^k / k)
        ks = np.arange(1, 4000)
        logw = ks * math.log1p(-g) + (np.array([math.lgamma(k + shape) - math.lgamma(shape) - math.lgamma(k + 1)
                                                for k in ks]) if shape > 0 else -np.log(ks))
        w = np.exp(logw - logw.max())
        assert (ks * w).sum() / w.sum() == pytest.approx(7.0, rel=1e-6)


def test_events_rdp_is_the_ledgers_own_rdp_account():
    fed = toy_federation()
    m = pfair.SteFFLe(epsilon=1.0, epochs=3, batch_size=150, p_s="dp", seed=1).fit(fed, ledgers="new")
    ledger = m.ledgers_[0]
    o, r = tuning.events_rdp(ledger.events)
    eps = tuning.epsilon_from_rdp(orders=o, rdp=r, delta=ledger.delta)[0]
    assert eps == pytest.approx(ledger.epsilons()["rdp"], rel=1e-9)


# ------------------------------------------------------------------ the choice
def _fig(error, constant=0.3, n=1000, violation=None, violation_sd=0.0, epoch=0):
    return CheckpointFigures(epoch=epoch, error=error, constant_error=constant, n=n, violation=violation,
                             violation_sd=violation_sd)


def test_choice_without_a_target_is_the_lowest_error_clearly_better_than_constant():
    figs = [_fig(0.2), _fig(0.18), _fig(0.29), None]
    assert choose_candidate(figs, None) == (1, None)
    i, why = choose_candidate([_fig(0.31), _fig(0.295)], None)
    assert i == 1 and "clearly better" in why


def test_choice_with_a_target_is_the_most_accurate_that_meets_it_with_its_noise():
    figs = [_fig(0.15, violation=0.10), _fig(0.18, violation=0.03, violation_sd=0.005),
            _fig(0.17, violation=0.038, violation_sd=0.005), _fig(0.32, violation=0.0)]
    # 0.038 + 0.005 > 0.04: candidate 2 does not meet t = 0.04 with its noise; 3 is no better than constant
    assert choose_candidate(figs, 0.04) == (1, None)
    i, why = choose_candidate(figs[:1] + figs[3:], 0.04)
    assert i == 0 and "fairest" in why


# ------------------------------------------------------------------ searches on federations
def _search(**kw):
    base = dict(epsilon=1.0, epochs=3, batch_size=150, p_s=[0.5, 0.5], seed=1)
    return PrivateSearch(pfair.SteFFLe(**{**base, **kw}), {"lam": [0.5, 2.0], "lr_theta": [0.25, 1.0]})


def test_a_private_search_composes_on_the_silos_ledgers_to_its_epsilon():
    fed = toy_federation()
    s = _search().fit(fed)
    ledgers = [silo.ledger for silo in fed.silos]
    assert s.ledgers_ == ledgers  # the Federation's persistent ledgers
    for ledger in ledgers:
        spent = ledger.epsilon_spent()
        assert 0.985 <= spent <= 1.0
        assert composed_epsilon(ledger.events, ledger.delta) == pytest.approx(spent, rel=1e-12)
        runs = [e for e in ledger.events if e.name == "steffle_rounds"]
        # four candidates of one shape: the same noise for each (equal shares of mu^2), within calibration's 0.5%
        zs = sorted({e.noise_multiplier for e in runs})
        assert len(ledger.runs) == 4 and zs[-1] / zs[0] < 1.02
    rep = s.privacy_report_
    assert list(rep["accounting"]) == ["composition"] * 3 and (rep["candidates"] == 4).all()
    np.testing.assert_allclose(rep["epsilon_spent"], [ledger.epsilon_spent() for ledger in ledgers])
    # what a random number of runs (geometric, mean 4) would cost the released best alone: the most
    # expensive candidate's events repeated and selected; reported, never charged
    ledger = ledgers[0]
    per = [c[0] for c in s.candidate_events_]
    assert [e for ev in per for e in ev] == ledger.events  # every charge belongs to one candidate
    worst = max(tuning.repeat_and_select_epsilon(ev, mean=4, shape=1.0, delta=ledger.delta) for ev in per)
    assert rep["epsilon_random_stopping"].iloc[0] == pytest.approx(worst, rel=1e-9)
    assert 0.5 < worst < 2.0
    assert list(rep["cheaper_account"]) == ["composition" if a <= b else "random_stopping" for a, b in
                                            zip(rep["epsilon_spent"], rep["epsilon_random_stopping"])]
    # a later fit on the same silos would get only the sliver the search left (noise far too large
    # for a model better than the constant predictor): the silos refuse it before spending anything
    before = [ledger.epsilon_spent() for ledger in ledgers]
    with warnings.catch_warnings(), pytest.raises(pfair.exceptions.BudgetTooSmall, match="ledgers='new'"):
        warnings.simplefilter("ignore")
        pfair.SteFFLe(epsilon=1.0, epochs=3, batch_size=150, p_s=[0.5, 0.5]).fit(fed)
    assert [ledger.epsilon_spent() for ledger in ledgers] == before


def test_the_search_chooses_from_the_released_figures_of_each_returned_model():
    fed = toy_federation()
    s = _search().fit(fed, ledgers="new")
    r = s.results_
    assert len(r) == 4 and r["chosen"].sum() == 1 and r["chosen"].iloc[s.best_index_]
    ok = r[r["clearly_better"]]
    assert s.best_index_ == ok["validation_error"].idxmin()
    best = s.best_estimator_
    row = best.checkpoints_.loc[best.selected_epoch_]
    assert r.loc[s.best_index_, "validation_error"] == row["validation_error"]
    assert s.best_params_ == {k[len("param_"):]: r.loc[s.best_index_, k] for k in r if k.startswith("param_")}
    X, y, sf, _ = __import__("support").toy_data(seed=5)
    np.testing.assert_array_equal(s.predict(X), best.predict(X))
    # the cumulative targets: nondecreasing, the last the search's epsilon
    assert list(r["epsilon_target"]) == sorted(r["epsilon_target"]) and r["epsilon_target"].iloc[-1] == 1.0


def test_free_candidates_take_no_share_of_the_budget():
    """lambda = 0 in attribute mode sends nothing that depends on s: its candidates cost nothing, so
    the two paying candidates split the whole budget between them."""
    fed = toy_federation()
    s = PrivateSearch(pfair.SteFFLe(epsilon=1.0, epochs=2, batch_size=150, p_s=[0.5, 0.5], seed=1),
                      {"lam": [0.0, 1.0], "lr_theta": [0.25, 1.0]}).fit(fed, ledgers="new")
    r = s.results_
    assert (r.loc[r["param_lam"] == 0.0, "epsilon_spent"] == 0.0).all()
    zs = {e.noise_multiplier for e in s.ledgers_[0].events if e.name == "steffle_rounds"}
    assert len(s.ledgers_[0].runs) == 2 and max(zs) / min(zs) < 1.02
    two = tuning.search_targets(1.0, min(ledger.delta for ledger in s.ledgers_), 2)
    assert r["epsilon_target"].iloc[2] == pytest.approx(two[0])


def test_a_search_with_a_fairness_target_picks_the_most_accurate_candidate_that_meets_it():
    """Non-private (exact violations, no noise): the choice is the most accurate candidate whose
    returned model meets t and is clearly better than the constant predictor. The label reads an
    s-free feature too (weights on X0, X0 shifted by s, and X1), so a fair linear model exists: with
    the label on X0 alone, fairness in the soft predictions F only shrinks θ and leaves the argmax
    as unfair (docs/optimisation.md, "Two time scales")."""
    fed = toy_federation(n=1500, weights=(1.0, 1.0))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        s = PrivateSearch(pfair.SteFFLe(epsilon=None, epochs=10, batch_size=250, p_s=[0.5, 0.5], seed=1),
                          {"lr_theta": [0.1, 1.0], "lam_lr": [5.0, 50.0]}, max_violation=0.1).fit(fed)
    assert s.target_ == 0.1 and s.selection_warning_ is None and s.best_estimator_.max_violation == 0.1
    r = s.results_
    meets = r[(r["violation_released"] <= 0.1) & r["clearly_better"]]
    assert 1 <= len(meets) < len(r) and s.best_index_ == meets["validation_error"].idxmin()
    # the target mattered: the most accurate candidate overall does not meet it
    assert r["validation_error"].idxmin() not in meets.index


def test_a_private_search_with_a_target_charges_every_candidates_violation_releases():
    fed = toy_federation(n=1500)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        s = PrivateSearch(pfair.SteFFLe(epsilon=2.0, epochs=4, batch_size=250, p_s=[0.5, 0.5], seed=1,
                                        max_violation=0.2, lam_lr=20.0),
                          {"lr_theta": [0.25, 1.0]}).fit(fed, ledgers="new")
    assert s.target_ == 0.2 and s.results_["violation_released"].notna().all()
    for c in s.candidate_events_:
        assert "violation_histogram" in [e.name for e in c[0]]
    # every candidate's violation releases get the same noise: their shares are priced on epsilon_1 alone
    zv = [{e.noise_multiplier for e in c[0] if e.name == "violation_histogram"} for c in s.candidate_events_]
    assert len(zv[0]) == 1 and zv[0] == zv[1]
    assert 0.985 * 2.0 <= s.ledgers_[0].epsilon_spent() <= 2.0


def test_a_non_private_search_runs_without_ledgers():
    fed = toy_federation()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        s = PrivateSearch(pfair.SteFFLe(epsilon=None, epochs=2, batch_size=150, seed=1),
                          {"lam": [0.0, 1.0]}).fit(fed)
    assert s.ledgers_ == [] and (s.results_["accounting"] == "none (non-private)").all()
    assert s.results_["validation_error"].notna().all()


def test_a_search_refuses_what_it_cannot_account_for():
    fed = toy_federation()
    with pytest.raises(ValueError, match="server"):
        _search().set_params(accounting="random_stopping").fit(fed, ledgers="new")
    with pytest.raises(ValueError, match="may not vary 'epsilon'"):
        PrivateSearch(pfair.SteFFLe(), {"epsilon": [0.5, 1.0]}).fit(fed, ledgers="new")
    with pytest.raises(ValueError, match="no parameter 'nope'"):
        PrivateSearch(pfair.SteFFLe(), {"nope": [1]}).fit(fed, ledgers="new")
    with pytest.raises(ValueError, match="set PrivateSearch\\(max_violation=t\\)"):
        PrivateSearch(pfair.SteFFLe(), {"max_violation": [0.05, 0.1]}).fit(fed, ledgers="new")


def test_a_search_on_spent_ledgers_gets_what_is_left_and_no_more():
    fed = toy_federation()
    first = pfair.SteFFLe(epsilon=0.5, epochs=2, batch_size=150, p_s=[0.5, 0.5], seed=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # a ledger made with budget 1 on which a first fit spent 0.5
        from pfair.privacy.ledger import PrivacyLedger

        book = [PrivacyLedger(epsilon=1.0, delta=pfair.SteFFLe().settings().delta_for(n), silo=j)
                for j, n in enumerate(fed.sizes)]
        first.fit(fed, ledgers=book)
    before = [ledger.epsilon_spent() for ledger in book]
    s = _search().fit(fed, ledgers=book)
    np.testing.assert_allclose(s.privacy_report_["epsilon_before"], before)
    assert all(0.985 <= ledger.epsilon_spent() <= 1.0 for ledger in book)
    assert s.results_["epsilon_target"].iloc[0] > max(before)


def test_pfair_exports_model_selection():
    assert pfair.model_selection.PrivateSearch is PrivateSearch


# ------------------------------------------------------------------ pfair train --tune
def test_pfair_train_tune_prints_the_choice_and_the_searchs_epsilon(capsys):
    import json

    from pfair.cli import main

    assert main(["train", "--dataset", "compas", "--epsilon", "1", "--epochs", "3", "--tune", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    tune = result["tune"]
    # COMPAS's smallest training share m is above 1,024 records and below 4,096: batch 1,024 at the
    # estimator's 3 epochs, and the stretched run of "auto" (batch m, epochs and steps times m / 1024)
    results = tune["results"]
    assert tune["candidates"] == 4 == len(results) and tune["accounting"] == "composition"
    m = results[-1]["param_batch_size"]
    assert 1024 < m < 4096 and [r["param_batch_size"] for r in results] == [1024, 1024, m, m]
    k = m / 1024
    assert [r["param_lr_theta"] for r in results] == pytest.approx([0.25, 1.0, 0.25 * k, 1.0 * k])
    assert [r["param_epochs"] for r in results[2:]] == [math.ceil(3 * k)] * 2
    chosen = [r for r in results if r["chosen"]]
    assert len(chosen) == 1 and {k: v for k, v in chosen[0].items() if k.startswith("param_") and v is not None} == {
        "param_" + k: v for k, v in tune["best_params"].items()}
    # the whole search within the budget, and the figure printed is the silos' ledgers after it
    assert 0.985 <= tune["epsilon_search"] <= 1.0 and result["epsilon_spent"] == tune["epsilon_search"]
    assert result["validation_error"] == chosen[0]["validation_error"]
    assert main(["train", "--dataset", "german", "--epsilon", "1", "--epochs", "2", "--tune"]) == 0
    out = capsys.readouterr().out  # German's silos hold fewer than 1,024 records: one batch, two candidates
    assert "the best of 2 candidates" in out and "search        epsilon 0.9" in out and "composition" in out
    assert main(["train", "--dataset", "german", "--epsilon", "1", "--epochs", "2", "--tune", "--tune-grid",
                 '{"lr_theta": [0.5, 1.0, 2.0]}']) == 0
    assert "the best of 3 candidates" in capsys.readouterr().out


def test_the_default_grid_fits_the_silos():
    from pfair.model_selection import default_grid

    est = pfair.SteFFLe()  # private, λ = 1: "auto" stretches the run to its batch (training shares 10,175)
    assert default_grid(est, [11306] * 3) == [
        {"lr_theta": [0.25, 1.0], "batch_size": [1024]},
        {"lr_theta": [2.0, 8.0], "batch_size": [8192], "epochs": [160], "decay_every": [40], "lr_decay": [0.4],
         "clip": ["adaptive"]}]
    assert default_grid(est, [2000, 5000])[1] == {"lr_theta": [0.25 * 1800 / 1024, 1800 / 1024], "batch_size": [1800],
                                                  "epochs": [36], "decay_every": [9], "lr_decay": [0.4],
                                                  "clip": ["adaptive"]}
    # A clip the user sets is theirs: the grid does not write one.
    assert "clip" not in default_grid(pfair.SteFFLe(clip=0.5), [11306] * 3)[1]
    assert default_grid(est, [300, 400]) == {"lr_theta": [0.25, 1.0], "batch_size": [270]}
    assert default_grid(pfair.SteFFLe(protect="record"), [11306] * 3)["batch_size"] == [256, 4096]
    # A fairness target runs the stretched private run too (docs/optimisation.md, "A fairness target's run").
    assert default_grid(pfair.SteFFLe(max_violation=0.05), [11306] * 3) == default_grid(est, [11306] * 3)
    assert default_grid(pfair.SteFFLe(lam=0), [11306] * 3)["batch_size"] == [256, 4096]
    # A noise-free run stretched by λ keeps its stretched epochs and decay at both batches (written
    # out, a batch would otherwise run the 20 epochs of λ ≤ 1).
    noise_free = pfair.SteFFLe(epsilon=None, lam=8.0)
    assert default_grid(noise_free, [11306] * 3) == {"lr_theta": [0.25, 1.0], "batch_size": [256, 4096],
                                                      "epochs": [160], "decay_every": [80]}
    assert "epochs" not in default_grid(pfair.SteFFLe(epsilon=None, lam=1.0), [11306] * 3)


def test_the_accounts_table_of_the_docs_is_the_scripts_output():
    """docs/model_selection.md, "Composition or random stopping": the table is what its script prints."""
    from support import ROOT, script_output

    table = script_output("docs/model_selection_accounts.py").strip()
    assert table in (ROOT / "docs" / "model_selection.md").read_text()
    # composition wins at two candidates, random stopping (for the returned model alone) from four
    rows = [line.strip("|").split("|") for line in table.splitlines()[2:]]
    for eps0, k, comp, rs in ((r[0], int(r[1]), float(r[2]), float(r[3])) for r in rows):
        assert (comp < rs) if k == 2 else (rs < comp), (eps0, k)


def test_a_record_protection_search_charges_its_validation_tables_within_the_budget():
    """protect="record": the validation tables are DP releases, charged; each candidate's priced alone
    at the same share of epsilon_1 (the same noise), and the ledgers end within the budget. The rounds
    are priced by RDP of hidden batches, which the GDP split does not equalise exactly (measured here:
    the second candidate's noise multiplier about 1.2 times the first's)."""
    fed = toy_federation(n=3000)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        s = PrivateSearch(pfair.SteFFLe(epsilon=2.0, epochs=3, protect="record", p_s=[0.5, 0.5], seed=1),
                          {"lr_theta": [0.25, 1.0]}).fit(fed, ledgers="new")
    zval = [{e.noise_multiplier for e in c[0] if e.name == "validation_table"} for c in s.candidate_events_]
    assert len(zval[0]) == 1 and zval[0] == zval[1]
    z = s.results_["noise_multiplier"]
    assert 0.67 < z.iloc[1] / z.iloc[0] < 1.5  # within 50 % either way (the split equalises GDP, not PLD)
    assert all(0.985 * 2.0 <= ledger.epsilon_spent() <= 2.0 for ledger in s.ledgers_)


@pytest.mark.slow
def test_a_search_over_a_deep_model_composes_like_the_linear_one():
    torch = pytest.importorskip("torch", reason="the torch extra is not installed")
    from pfair.torch import DeepSteFFLe

    fed = toy_federation()
    module = torch.nn.Sequential(torch.nn.Linear(3, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    est = DeepSteFFLe(module, epsilon=1.0, epochs=2, batch_size=150, p_s=[0.5, 0.5], seed=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        s = PrivateSearch(est, {"lr_theta": [0.1, 0.5]}).fit(fed, ledgers="new")
    assert isinstance(s.best_estimator_, DeepSteFFLe) and s.best_estimator_ is not est
    assert s.results_["validation_error"].notna().all()
    z = s.results_["noise_multiplier"]
    assert z.iloc[1] / z.iloc[0] < 1.02
    assert all(0.985 <= ledger.epsilon_spent() <= 1.0 for ledger in s.ledgers_)


# ---------------------------------------------------------------------- the privacy warning of a grid search


def test_a_private_fit_in_a_grid_search_warns_once_not_once_per_fold():
    """GridSearchCV over 2 candidates x 5 folds fits 11 times; the privacy warning about the cost of
    refitting is shown once (it was shown 11 times, 480 characters each); a filter asking for
    every occurrence still gets every one."""
    import warnings

    import numpy as np
    import sklearn
    from sklearn.model_selection import GridSearchCV

    from pfair import SteFFLe
    from pfair.exceptions import PrivacyWarning

    rng = np.random.default_rng(0)
    n = 300
    X = rng.normal(size=(n, 3))
    s = rng.integers(0, 2, n)
    y = (X[:, 0] + 0.5 * s + rng.normal(0, 0.5, n) > 0).astype(int)
    ids = rng.integers(0, 3, n)

    def search(action):
        with sklearn.config_context(enable_metadata_routing=True), warnings.catch_warnings(record=True) as caught:
            warnings.resetwarnings()
            warnings.simplefilter(action)
            est = SteFFLe(epochs=2, epsilon=4.0).set_fit_request(sensitive_features=True, silos=True)
            GridSearchCV(est, {"lam": [0.5, 1.0]}, cv=5).fit(X, y, sensitive_features=s, silos=ids)
        return [w for w in caught if issubclass(w.category, PrivacyWarning) and "cross-validation" in str(w.message)]

    shown = search("default")
    assert len(shown) == 1 and "shown once per process" in str(shown[0].message)
    assert search("default") == []  # the same process: not again
    assert len(search("always")) == 11
