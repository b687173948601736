"""Features far from standardised: a fit standardises them where the guarantee allows (and folds
the model back to the original units, also after an interruption), and refuses them with the fix
where it does not (record protection, a Federation)."""

from __future__ import annotations

import re
import warnings

import numpy as np
import pytest
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from pfair import Federation, SteFFLe
from pfair.exceptions import NonPrivateFitWarning, PrivacyWarning

from support import toy_data


QUICK = dict(epochs=8, sampling="full_batch", progress=False)


def data(n: int = 300, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """s shifts every feature; y depends on the first two."""
    return toy_data(n, seed, shift=(0.5, 0.5, 0.5), weights=(1.0, -1.0), noise=0.3, cuts=(0.0,))


@pytest.mark.parametrize("kw", [dict(epsilon=None), dict(epsilon=1.0, noise_seed=0)], ids=["non-private", "attribute"])
def test_a_column_times_1000_is_standardised_and_the_model_equals_the_pipelines(kw):
    """Before: the column ×1000 made training diverge, and the warning blamed lr_theta and lam."""
    X, y, s, ids = data()
    X[:, 1] *= 1000
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NonPrivateFitWarning)
        warnings.simplefilter("ignore", PrivacyWarning)
        with pytest.warns(UserWarning, match=r"standardised the features .*column 1 \(mean .*std .*original units"):
            m = SteFFLe(**QUICK, **kw).fit(X, y, sensitive_features=s, silos=ids, eval_set=(X, y, s))
        pipe = make_pipeline(StandardScaler(), SteFFLe(**QUICK, **kw)).fit(X, y, steffle__sensitive_features=s,
                                                                          steffle__silos=ids)
    assert m.score(X, y) > 0.8
    np.testing.assert_allclose(m.predict_proba(X), pipe.predict_proba(X), atol=1e-6)
    np.testing.assert_allclose(m.coef_, pipe[-1].coef_ / pipe[0].scale_, rtol=1e-6)
    assert m.history_["test_error"].iloc[-1] == pytest.approx(1 - m.score(X, y))
    np.testing.assert_allclose(m.feature_scaling_[0], X.mean(0))


def test_a_fit_interrupted_on_unscaled_features_keeps_coef_in_the_original_units():
    """Before: an epoch's θ (of the standardised features) became theta_ as it was, so a fit
    interrupted mid-way predicted raw X with standardised coefficients (accuracy 0.50 on toy
    data; 0.86 for the same epochs uninterrupted)."""
    from support import fit_interrupted

    X, y, s, ids = data()
    X[:, 1] *= 1000
    kw = dict(QUICK, epsilon=None, epochs=4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NonPrivateFitWarning)
        warnings.simplefilter("ignore", UserWarning)
        two = SteFFLe(**{**kw, "epochs": 2}).fit(X, y, sensitive_features=s, silos=ids)
        m = SteFFLe(**kw)
        fit_interrupted(m, X, y, sensitive_features=s, silos=ids, at_epoch=3)  # after 2 epochs
    np.testing.assert_allclose(m.coef_, two.coef_, rtol=1e-12)
    np.testing.assert_allclose(m.predict_proba(X), two.predict_proba(X), rtol=1e-12)
    assert m.score(X, y) > 0.8


def test_record_protection_and_a_federation_refuse_unscaled_features_with_the_fix():
    X, y, s, ids = data()
    X[:, 0] += 500.0
    with pytest.raises(ValueError, match=r"column 0 \(mean .*make_pipeline\(StandardScaler\(\), SteFFLe.*"
                                         r"protect='record' does not cover"):
        SteFFLe(**QUICK, epsilon=1.0, protect="record").fit(X, y, sensitive_features=s, silos=ids)
    import pandas as pd

    fed = Federation.from_arrays(pd.DataFrame(X, columns=["age", "income", "hours"]), y, sensitive_features=s,
                                 silos=ids)
    with pytest.raises(ValueError, match="'age'.*standardise before building it"):
        SteFFLe(**QUICK).fit(fed)


def rates_data(n: int = 1500, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Three columns of rates in [0, 1] (Beta(2, 8): mean 0.2, std about 0.12), y from the first two."""
    rng = np.random.default_rng(seed)
    X = rng.beta(2, 8, size=(n, 3))
    logit = 8 * (X[:, 0] - 0.2) + 6 * (X[:, 1] - 0.2) - 0.3
    y = (rng.random(n) < 1 / (1 + np.exp(-logit))).astype(int)
    return X, y, rng.integers(0, 3, n), rng.integers(0, 3, n)


def test_columns_off_scale_are_standardised_and_train_as_logistic_regression():
    """Before: rates of std 0.12 (nothing that diverges) ended every default fit at the constant
    predictor (accuracy 0.571; scikit-learn's logistic regression 0.717), with a warning that blamed
    lam and the steps."""
    from sklearn.linear_model import LogisticRegression

    X, y, s, ids = rates_data()
    reference = LogisticRegression().fit(X, y).score(X, y)
    constant = max(np.mean(y), 1 - np.mean(y))
    assert reference > constant + 0.1
    for kw in (dict(epsilon=None), dict(epsilon=1.0, noise_seed=0)):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", NonPrivateFitWarning)
            with pytest.warns(UserWarning, match=r"standardised the features .*column 0 \(mean 0\.\d+, std 0\.1\d+\).*off the "
                                                 r"scale.*std outside \[0.5, 5\]"):
                m = SteFFLe(lam=0.0, **kw).fit(X, y, sensitive_features=s, silos=ids)
        assert m.score(X, y) > reference - 0.01, kw
        np.testing.assert_allclose(m.feature_scaling_[0], X.mean(0))
        np.testing.assert_allclose(m.feature_scaling_[1], X.std(0))


def test_indicator_columns_stay_as_they_are_and_scaled_features_are_left_alone():
    X, y, s, ids = data()
    onehot = (np.random.default_rng(1).random((len(y), 2)) < [0.05, 0.5]).astype(float)  # std 0.22 and 0.5
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # neither column makes fit standardise anything
        warnings.simplefilter("ignore", NonPrivateFitWarning)
        m = SteFFLe(**QUICK, epsilon=None).fit(np.hstack([X, onehot]), y, sensitive_features=s, silos=ids)
    assert not hasattr(m, "feature_scaling_")
    # With an off-scale column beside them, the indicators keep mean 0 and std 1 in the scaling.
    Z = np.hstack([X, onehot, 0.05 * X[:, :1]])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NonPrivateFitWarning)
        with pytest.warns(UserWarning, match=r"column 5 \(mean .*std 0.0"):
            m = SteFFLe(**QUICK, epsilon=None).fit(Z, y, sensitive_features=s, silos=ids)
    mean, std = m.feature_scaling_
    np.testing.assert_array_equal(mean[3:5], [0.0, 0.0])
    np.testing.assert_array_equal(std[3:5], [1.0, 1.0])
    np.testing.assert_allclose(std[[0, 1, 2, 5]], Z[:, [0, 1, 2, 5]].std(0))


def test_a_federation_and_record_protection_warn_about_off_scale_columns():
    import pandas as pd

    X, y, s, ids = rates_data(600)
    fed = Federation.from_arrays(pd.DataFrame(X, columns=["a", "b", "c"]), y, sensitive_features=s, silos=ids)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NonPrivateFitWarning)
        with pytest.warns(UserWarning, match=r"'a' \(mean 0\.\d+, std 0\.1\d+\).*off the scale.*a Federation holds the silos' data as "
                                             r"given"):
            SteFFLe(**QUICK, epsilon=None).fit(fed)
    with pytest.warns(UserWarning, match=r"column 0 \(std outside \[0.5, 5\] or \|mean\| above 2\).*protect='record' "
                                         r"does not use the records' statistics") as caught:
        m = SteFFLe(**QUICK, epsilon=1.0, protect="record").fit(X, y, sensitive_features=s, silos=ids)
    assert not hasattr(m, "feature_scaling_")
    assert not any(re.search(r"\(mean 0\.\d", str(w.message)) for w in caught)  # a record-mode fit shows no statistics


def test_a_lambda_zero_fit_worse_than_the_constant_at_every_checkpoint_returns_the_constant():
    """Rates centred at 3 with std 0.1 in a Federation (warned, not rescaled): the default λ = 0 run
    predicts the smaller class for everyone at every checkpoint. Before, the fit returned that model
    (accuracy 0.429 against the constant predictor's 0.571); now it returns the constant predictor."""
    X, y, s, ids = rates_data()
    X = (X - X.mean(0)) / X.std(0) * 0.1 + 3.0
    fed = Federation.from_arrays(X, y, sensitive_features=s, silos=ids)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        m = SteFFLe(lam=0.0, epsilon=1.0, noise_seed=0).fit(fed)
    said = [str(w.message) for w in caught]
    assert any("off the scale" in msg for msg in said)
    assert m.selected_epoch_ == 0
    assert any("even the most accurate checkpoint" in msg and "returned the constant predictor" in msg for msg in said)
    assert np.all(m.predict(X) == np.bincount(y).argmax())
    assert m.score(X, y) == pytest.approx(max(np.mean(y), 1 - np.mean(y)))


def test_a_constant_column_is_never_off_scale_and_the_statistics_are_exact_in_chunks(monkeypatch):
    """Before the review: a column of 0.7 everywhere has a two-pass std of about 1e-15, not 0; it
    counted as off scale and was divided by that std (coef_ of -2e13; any record with 0.7 + 1e-6
    there was predicted one class)."""
    import pfair._fit as fit_module

    X, y, s, ids = data()
    Z = np.hstack([X, np.full((len(y), 1), 0.7)])
    mean, std = fit_module._column_stats([Z])
    assert 0 < std[3] < 1e-12  # rounding error, not 0
    assert 3 not in fit_module.off_scale_columns(mean, std)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        warnings.simplefilter("ignore", NonPrivateFitWarning)
        m = SteFFLe(**QUICK, epsilon=None).fit(Z, y, sensitive_features=s, silos=ids)
    shifted = Z.copy()
    shifted[:, 3] += 1e-6
    np.testing.assert_array_equal(m.predict(shifted), m.predict(Z))
    assert np.all(np.abs(m.coef_) < 100)
    # Beside an off-scale column, a constant one is only centred (std 1), never divided by ~0.
    W = np.hstack([Z, 0.05 * X[:, :1]])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = SteFFLe(**QUICK, epsilon=None).fit(W, y, sensitive_features=s, silos=ids)
    assert m.feature_scaling_[1][3] == 1.0
    np.testing.assert_array_equal(m.predict(W + np.r_[0, 0, 0, 1e-6, 0]), m.predict(W))
    # The exact statistics, summed in chunks of rows, are NumPy's.
    monkeypatch.setattr(fit_module, "STATS_CHUNK_BYTES", 7 * 8 * 4)  # 7 rows of 4 columns a chunk
    R = np.random.default_rng(0).normal(3, 0.2, size=(50, 4)).astype(np.float32)
    mean, std = fit_module._column_stats([R[:20], R[20:]])
    np.testing.assert_allclose(mean, R.astype(np.float64).mean(0), rtol=1e-12)
    np.testing.assert_allclose(std, R.astype(np.float64).std(0), rtol=1e-10)
