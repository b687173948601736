"""Features far from standardised: a fit standardises them where the guarantee allows (and folds
the model back to the original units, also after an interruption), and refuses them with the fix
where it does not (record protection, a Federation)."""

from __future__ import annotations

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
