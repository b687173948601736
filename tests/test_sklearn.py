"""scikit-learn compatibility: check_estimator on SteFFLe and the baselines, Pipeline,
cross_val_score and GridSearchCV with metadata routing of sensitive_features and silos."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest
import sklearn
from sklearn.base import clone, is_classifier
from sklearn.model_selection import GridSearchCV, KFold, cross_val_score
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.utils.estimator_checks import check_estimator

from pfair import SteFFLe
from pfair.baselines import DPFERMI, FERMI, PFLD, CentralERM, FedAvg, NonPrivateSteFFLe, SingleShotSyntheticFL
from pfair.estimators import NEEDS_SENSITIVE_FEATURES, UNSCALED_FEATURES, expected_failed_checks
from pfair.exceptions import NotFittedError, PrivacyWarning
from pfair.settings import PRIVATE_CLIPS, SteFFLeSettings

from support import toy_data

QUICK = dict(sampling="full_batch", epochs=20)

# Estimators that can fit without sensitive_features (lam = 0 / lam_max = 0 / never use s): the
# whole check suite must pass.
NO_S = [
    SteFFLe(lam=0.0, lr_theta=1.0, epsilon=None, **QUICK),
    SteFFLe(lam=0.0, lr_theta=1.0, **QUICK),  # the default: private, epsilon = 1
    SteFFLe(lam=0.0, lr_theta=1.0, epsilon=4.0, protect="record", noise_seed=0, **QUICK),
    CentralERM(lr=1.0, **QUICK),
    FedAvg(lr=1.0, **QUICK),
    PFLD(lam_max=0.0, epsilon=None, lr=1.0, **QUICK),
    FERMI(lam=0.0, lr_theta=1.0, **QUICK),
    DPFERMI(lam=0.0, lr_theta=1.0, noise_seed=0, **QUICK),
    NonPrivateSteFFLe(lam=0.0, lr_theta=1.0, **QUICK),
]
# Estimators that need sensitive_features: the documented subset.
NEED_S = [SteFFLe(**QUICK), PFLD(epsilon=None, **QUICK), SingleShotSyntheticFL(outer_steps=2)]


def run_checks(est):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return check_estimator(est, on_fail=None)


@pytest.mark.parametrize("est", NO_S, ids=lambda e: repr(e)[:60])
def test_check_estimator_passes_without_sensitive_features(est):
    expected = expected_failed_checks(est)
    # A private protect="record" SteFFLe refuses the checks' unstandardised features (mean ~100).
    record = getattr(est, "protect", None) == "record" and est.epsilon is not None
    assert set(expected) == (set(UNSCALED_FEATURES) if record else set())
    results = run_checks(est)
    failed = {r["check_name"]: str(r["exception"]) for r in results if r["status"] == "failed"}
    assert set(failed) == set(expected)
    assert all("StandardScaler" in message for message in failed.values())
    assert sum(r["status"] == "passed" for r in results) >= 50


@pytest.mark.parametrize("est", NEED_S, ids=lambda e: type(e).__name__)
def test_check_estimator_documented_subset_with_required_sensitive_features(est):
    expected = expected_failed_checks(est)
    assert set(expected) == set(NEEDS_SENSITIVE_FEATURES) and all("sensitive_features" in r for r in expected.values())
    results = run_checks(est)
    failed = {r["check_name"]: str(r["exception"]) for r in results if r["status"] == "failed"}
    # Every failure is an expected one, and each failed because sensitive_features is missing.
    assert set(failed) <= set(expected), set(failed) - set(expected)
    assert len(failed) >= 25
    for name, message in failed.items():
        if name not in ("check_classifiers_one_label", "check_fit2d_1sample", "check_fit2d_1feature",
                        "check_positive_only_tag_during_fit"):  # these re-word the error
            assert "sensitive_features" in message, (name, message)
    # ... and the checks that do not fit pass.
    passed = {r["check_name"] for r in results if r["status"] == "passed"}
    assert {"check_no_attributes_set_in_init", "check_parameters_default_constructible", "check_estimators_unfitted",
            "check_get_params_invariance", "check_set_params", "check_estimator_cloneable",
            "check_mixin_order", "check_requires_y_none", "check_estimators_empty_data_messages"} <= passed
    # The official API accepts the exclusions (raises if any unexpected check fails).
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check_estimator(est, expected_failed_checks=expected)


def test_fit_without_sensitive_features_names_the_argument_and_the_routing_fix():
    X, y, s, ids = data()
    with pytest.raises(ValueError, match=r"needs sensitive_features=.*set_fit_request\(sensitive_features=True\)"):
        SteFFLe(**QUICK).fit(X, y)
    with pytest.raises(ValueError, match="needs sensitive_features"):
        PFLD(epsilon=None, **QUICK).fit(X, y)
    m = SteFFLe(lam=0.0, **QUICK).fit(X, y)  # the documented fallback: no fairness penalty, no s read
    assert not hasattr(m, "groups_") and not any("violation" in c for c in m.history_.columns)
    with_s = SteFFLe(lam=0.0, **QUICK).fit(X, y, sensitive_features=s)
    np.testing.assert_array_equal(m.theta_, with_s.theta_)  # s is not read when lam = 0


# --------------------------------------------------------------------------------------------
# Attributes the scikit-learn way
# --------------------------------------------------------------------------------------------


def data(n=240, seed=0):
    rng = np.random.default_rng(seed)
    s = rng.integers(0, 2, n)
    X = rng.normal(size=(n, 4)) + 0.8 * s[:, None] * np.array([1.0, 0.0, -0.5, 0.0])
    y = (X[:, 0] + 0.5 * X[:, 1] + 0.3 * rng.normal(size=n) > 0.4).astype(int)
    ids = rng.integers(0, 3, n)
    return X, y, s, ids


def test_is_classifier_feature_names_and_classes():
    X, y, s, ids = data()
    assert is_classifier(SteFFLe()) and is_classifier(CentralERM()) and is_classifier(FERMI())
    df = pd.DataFrame(X, columns=["age", "income", "hours", "score"])
    m = SteFFLe(**QUICK).fit(df, np.array(["no", "yes"])[y], sensitive_features=s, silos=ids)
    assert list(m.feature_names_in_) == ["age", "income", "hours", "score"] and m.n_features_in_ == 4
    assert list(m.classes_) == ["no", "yes"] and set(m.predict(df)) <= {"no", "yes"}
    with pytest.warns(UserWarning, match="X does not have valid feature names"):
        m.predict(X)
    with pytest.raises(ValueError, match="feature names"):
        m.predict(df[["income", "age", "hours", "score"]])
    # decision_function is the log-odds of classes_[1].
    p = m.predict_proba(df)[:, 1]
    np.testing.assert_allclose(m.decision_function(df), np.log(p / (1 - p)), rtol=1e-9)
    # Refit on arrays forgets the names.
    m.fit(X, y, sensitive_features=s)
    assert not hasattr(m, "feature_names_in_")
    with pytest.raises(NotFittedError):
        SteFFLe().predict(X)
    with pytest.raises(RuntimeError, match="not fitted"):  # still a RuntimeError, as before
        CentralERM().predict(X)


def test_named_configurations_set_only_their_parameters():
    assert "epsilon" not in FERMI().get_params() and FERMI().epsilon is None and "epsilon" not in vars(FERMI())
    assert clone(FERMI(lam=0.3)).get_params()["lam"] == 0.3
    assert FERMI(lam=0.3).settings().epsilon is None and DPFERMI().settings().epsilon == 1.0


def test_settings_are_get_params_validated_once():
    # An estimator's settings are its get_params(), completed by what a named configuration fixes.
    est = SteFFLe(lam=0.3, epsilon=2.0, batch_size=128)
    assert est.settings() == SteFFLeSettings.from_estimator_params(est.get_params())
    fermi = FERMI(lam=0.3)
    assert fermi.settings() == SteFFLeSettings.from_estimator_params(
        {**fermi.get_params(), "epsilon": None, "mode": "standard", "p_s": "pooled"})
    # "auto" resolves with epsilon: the private clip norms (the adaptive clip for the default private
    # run, a fixed one for a batch the user sets), no clipping otherwise.
    assert est.settings().clip == PRIVATE_CLIPS["clip"] and SteFFLe(epsilon=None).settings().clip is None
    assert SteFFLe(epsilon=2.0).settings().clip == "adaptive"


# --------------------------------------------------------------------------------------------
# Pipeline, cross_val_score and GridSearchCV with metadata routing
# --------------------------------------------------------------------------------------------


def manual_cv_scores(make, X, y, s, ids, cv):
    scores = []
    for train, test in cv.split(X):
        scaler = StandardScaler().fit(X[train])
        est = make().fit(scaler.transform(X[train]), y[train], sensitive_features=s[train], silos=ids[train])
        scores.append(est.score(scaler.transform(X[test]), y[test]))
    return np.array(scores)


@pytest.mark.parametrize("private", [False, True])
def test_pipeline_and_cross_val_score_route_sensitive_features_and_silos(private):
    X, y, s, ids = data()
    kw = dict(epsilon=8.0, noise_seed=3) if private else dict(epsilon=None)

    def make():
        return SteFFLe(lam=2.0, **QUICK, **kw)

    cv = KFold(3, shuffle=True, random_state=0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", PrivacyWarning)  # noise_seed: reproducible noise, warned
        with sklearn.config_context(enable_metadata_routing=True):
            pipe = make_pipeline(StandardScaler(), make().set_fit_request(sensitive_features=True, silos=True))
            scores = cross_val_score(pipe, X, y, cv=cv, params={"sensitive_features": s, "silos": ids})
            # A private fit inside cross-validation is told that the folds' epsilons add up.
            cost = [w for w in caught if "inside scikit-learn cross-validation" in str(w.message)]
            assert len(cost) == (3 if private else 0)
            # Without routing the error names the routing fix.
            with pytest.raises(ValueError, match="sensitive_features"):
                cross_val_score(make_pipeline(StandardScaler(), make()), X, y, cv=cv,
                                params={"sensitive_features": s}, error_score="raise")
        caught.clear()
        expected = manual_cv_scores(make, X, y, s, ids, cv)
        assert not any("cross-validation" in str(w.message) for w in caught)  # fits by hand: not detected
    np.testing.assert_array_equal(scores, expected)  # each fold got its own rows of s and silos
    assert scores.mean() > 0.75


def test_grid_search_routes_sensitive_features_and_refits():
    X, y, s, ids = data()
    with sklearn.config_context(enable_metadata_routing=True):
        est = SteFFLe(epsilon=None, **QUICK).set_fit_request(sensitive_features=True, silos=True)
        grid = GridSearchCV(make_pipeline(StandardScaler(), est), {"steffle__lam": [0.0, 4.0]}, cv=3)
        grid.fit(X, y, sensitive_features=s, silos=ids)
    assert set(grid.cv_results_["param_steffle__lam"]) == {0.0, 4.0}
    best = grid.best_estimator_[-1]
    assert best.lam == grid.best_params_["steffle__lam"] and best.n_features_in_ == 4
    # The refit used all the rows, split into the 3 silos.
    assert best.privacy_report_.shape[0] == 3
    # The fairness penalty acted in the grid: lam = 4 predicts with a smaller DP gap than lam = 0.
    from pfair.metrics import demographic_parity_difference

    fitted = {lam: make_pipeline(StandardScaler(), SteFFLe(lam=lam, epsilon=None, **QUICK)).fit(
        X, y, steffle__sensitive_features=s, steffle__silos=ids) for lam in (0.0, 4.0)}
    gaps = {lam: demographic_parity_difference(y, p.predict(X), sensitive_features=s) for lam, p in fitted.items()}
    assert gaps[4.0] < gaps[0.0]


def fairest_within_accuracy(cv_results, tolerance=0.05):
    """A refit rule: of the candidates whose mean accuracy is within ``tolerance`` of the best, the
    one with the smallest mean demographic-parity gap (the ``dp`` scorer reports it negated)."""
    accuracy, gap = cv_results["mean_test_accuracy"], -cv_results["mean_test_dp"]
    near = np.flatnonzero(accuracy >= accuracy.max() - tolerance)
    return int(near[np.argmin(gap[near])])


def test_grid_search_scores_accuracy_and_a_routed_fairness_gap_and_refits_by_a_rule():
    """docs/sklearn.md's fairness-aware search: multi-metric scoring with pfair's DP gap as a
    scorer that asks for sensitive_features, a callable refit; the gap of each fold is computed with
    that fold's s, and the rule, not accuracy, picks the candidate."""
    from sklearn.metrics import make_scorer
    from sklearn.model_selection import StratifiedKFold

    import pfair.metrics

    X, y, s, ids = data()
    # λ = 4 is fairer than λ = 1 and within the rule's accuracy tolerance; λ = 8, trained eight times
    # the epochs (the noise-free stretch), is 0.08 less accurate, outside it.
    lams = [0.0, 1.0, 4.0]
    with sklearn.config_context(enable_metadata_routing=True):
        dp = make_scorer(pfair.metrics.demographic_parity_difference, greater_is_better=False)
        scoring = {"accuracy": "accuracy", "dp": dp.set_score_request(sensitive_features=True)}
        est = SteFFLe(epsilon=None, **QUICK).set_fit_request(sensitive_features=True, silos=True)
        grid = GridSearchCV(make_pipeline(StandardScaler(), est), {"steffle__lam": lams}, cv=3, scoring=scoring,
                            refit=fairest_within_accuracy, error_score="raise")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the non-private notice
            grid.fit(X, y, sensitive_features=s, silos=ids)
    res = grid.cv_results_
    folds = [res[f"split{k}_test_dp"] for k in range(3)]
    assert (res["mean_test_dp"] <= 0).all() and all((f <= 0).all() for f in folds)
    assert grid.best_index_ == fairest_within_accuracy(res)
    assert grid.best_index_ != int(np.argmax(res["mean_test_accuracy"]))  # the gap rule decided, not accuracy
    assert grid.best_params_ == {"steffle__lam": lams[grid.best_index_]} == {"steffle__lam": grid.best_estimator_[-1].lam}
    # The scorer got each fold's own s: the chosen candidate's first fold, refitted by hand.
    train, test = next(StratifiedKFold(3).split(X, y))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        by_hand = make_pipeline(StandardScaler(), SteFFLe(lam=lams[grid.best_index_], epsilon=None, **QUICK)).fit(
            X[train], y[train], steffle__sensitive_features=s[train], steffle__silos=ids[train])
    gap = pfair.metrics.demographic_parity_difference(y[test], by_hand.predict(X[test]), sensitive_features=s[test])
    assert folds[0][grid.best_index_] == pytest.approx(-gap, abs=1e-12)


# ---------------------------------------------------------------------- sample weights


QUICK_FULL_BATCH = dict(epochs=8, sampling="full_batch", progress=False)


def shifted_data(n: int = 300, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """s shifts every feature; y depends on the first two."""
    return toy_data(n, seed, shift=(0.5, 0.5, 0.5), weights=(1.0, -1.0), noise=0.3, cuts=(0.0,))


def test_sample_weight_is_refused_with_the_reason_and_what_to_do():
    """Before: a bare TypeError (unexpected keyword argument 'sample_weight')."""
    X, y, s, ids = shifted_data()
    with pytest.raises(TypeError, match=r"does not take sample_weight: .*clipped.*sensitivity.*resample"):
        SteFFLe(**QUICK_FULL_BATCH).fit(X, y, sensitive_features=s, silos=ids, sample_weight=np.ones(len(y)))
    with pytest.raises(TypeError, match=r"does not take sample_weight"):  # through a Pipeline, too
        make_pipeline(StandardScaler(), SteFFLe(**QUICK_FULL_BATCH)).fit(X, y, steffle__sensitive_features=s,
                                                              steffle__sample_weight=np.ones(len(y)))
    with pytest.raises(TypeError, match=r"unexpected keyword argument\(s\) weights"):
        SteFFLe(**QUICK_FULL_BATCH).fit(X, y, sensitive_features=s, weights=1)
    # scikit-learn sees no sample_weight parameter (its checks do not pass weights).
    from sklearn.utils.validation import has_fit_parameter

    assert not has_fit_parameter(SteFFLe(), "sample_weight")
