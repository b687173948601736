"""The rough edges a new user hits first: features far from standardised, the non-private notice,
sample weights, one small silo shrinking every silo's batch, and refits on a spent federation."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from pfair import Federation, SteFFLe
from pfair.exceptions import NonPrivateFitWarning, PrivacyWarning
from pfair.settings import AUTO_BATCH_NONPRIVATE

from support import toy_data

QUICK = dict(epochs=8, sampling="full_batch", progress=False)


def data(n: int = 300, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """s shifts every feature; y depends on the first two."""
    return toy_data(n, seed, shift=(0.5, 0.5, 0.5), weights=(1.0, -1.0), noise=0.3, cuts=(0.0,))


# ------------------------------------------------------------------ features far from standardised


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


# ------------------------------------------------------------------ private by default


def test_steffle_is_private_by_default_like_the_cli_and_warns_when_not():
    from pfair.cli import build_parser

    assert SteFFLe().epsilon == 1.0 == build_parser().parse_args(["train"]).epsilon
    X, y, s, ids = data()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        m = SteFFLe(**QUICK).fit(X, y, sensitive_features=s, silos=ids)
    assert m.epsilon_spent_ <= 1.0 and m.privacy_report_["guarantee"].eq("covered").all()
    assert not any(issubclass(w.category, NonPrivateFitWarning) for w in caught)
    with pytest.warns(NonPrivateFitWarning, match=r"epsilon=None: not private"):
        SteFFLe(epsilon=None, **QUICK).fit(X, y, sensitive_features=s, silos=ids)


# ------------------------------------------------------------------ sample weights


def test_sample_weight_is_refused_with_the_reason_and_what_to_do():
    """Before: a bare TypeError (unexpected keyword argument 'sample_weight')."""
    X, y, s, ids = data()
    with pytest.raises(TypeError, match=r"does not take sample_weight: .*clipped.*sensitivity.*resample"):
        SteFFLe(**QUICK).fit(X, y, sensitive_features=s, silos=ids, sample_weight=np.ones(len(y)))
    with pytest.raises(TypeError, match=r"does not take sample_weight"):  # through a Pipeline, too
        make_pipeline(StandardScaler(), SteFFLe(**QUICK)).fit(X, y, steffle__sensitive_features=s,
                                                              steffle__sample_weight=np.ones(len(y)))
    with pytest.raises(TypeError, match=r"unexpected keyword argument\(s\) weights"):
        SteFFLe(**QUICK).fit(X, y, sensitive_features=s, weights=1)
    # scikit-learn sees no sample_weight parameter (its checks do not pass weights).
    from sklearn.utils.validation import has_fit_parameter

    assert not has_fit_parameter(SteFFLe(), "sample_weight")


# ------------------------------------------------------------------ one small silo, spent ledgers


def test_one_small_silo_that_shrinks_every_silos_auto_batch_is_named_in_a_warning():
    """Before: silent; a 1-record silo made every silo draw batches of 1."""
    rng = np.random.default_rng(1)
    n = 3001
    X, y, s, _ = data(n)
    ids = np.where(np.arange(n) == 5, "tiny", np.where(np.arange(n) % 2 == 0, "a", "b"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NonPrivateFitWarning)
        with pytest.warns(UserWarning, match=rf"batch_size='auto' is min\({AUTO_BATCH_NONPRIVATE}, smallest silo\) = 1 "
                                             r"because silo 'tiny' has only 1 record.*\d+ rounds per epoch instead of "
                                             r"\d+ .*Merge silo 'tiny'"):
            SteFFLe(epsilon=None, epochs=1, lam=0.0).fit(X, y, sensitive_features=s, silos=ids)
        # Silos of similar sizes, a fixed batch, or the full batch: nothing to say.
        with warnings.catch_warnings():
            warnings.simplefilter("error", UserWarning)
            warnings.simplefilter("ignore", NonPrivateFitWarning)
            SteFFLe(epsilon=None, epochs=1, lam=0.0).fit(X, y, sensitive_features=s, silos=rng.integers(0, 3, n))
            SteFFLe(epsilon=None, epochs=1, lam=0.0, batch_size=1).fit(X, y, sensitive_features=s, silos=ids)


def test_a_refit_on_a_spent_federation_says_how_much_is_left_and_how_to_start_over():
    """Before: "this fit gets only what is left", with no amount and no way out named."""
    X, y, s, ids = data()
    fed = Federation.from_arrays(X, y, sensitive_features=s, silos=ids)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        SteFFLe(epochs=3).fit(fed)
    with pytest.warns(PrivacyWarning, match=r"silo 0: .*already spent epsilon=0\.99\d* of its budget 1 .*gets "
                                            r"only what is left: the epsilon=\S+ left \(\d+\.\d% of the budget\)\. Its noise is larger.*"
                                            r"ledgers='new'"):
        SteFFLe(epochs=3).fit(fed)
    # The explicit choice: new ledgers, a full budget (and no warning about spent ones).
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        m = SteFFLe(epochs=3).fit(fed, ledgers="new")
    assert not any("already spent" in str(w.message) for w in caught)
    assert m.epsilon_spent_ > 0.99


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


def test_fairness_report_of_a_tiny_test_split_leaves_equal_opportunity_undefined():
    """A 20-row table leaves 5 test records; when one group has no positive record the bundle's
    equal_opportunity_difference is NaN (nobody asked for it) instead of failing the whole report;
    the metric alone still says why, and a pos_label not among the labels still fails."""
    import math

    import numpy as np

    from pfair import metrics

    y, s, p = np.array([0, 0, 1, 1, 0]), np.array([0, 0, 1, 1, 1]), np.array([0, 1, 1, 0, 0])
    report = metrics.fairness_report(y, p, sensitive_features=s)
    assert math.isnan(report["equal_opportunity_difference"]) and report["test_error"] == 0.4
    assert report["demographic_parity_difference"] == pytest.approx(0.5 - 1 / 3)
    with pytest.raises(ValueError, match="groups without such records: \\[0\\]"):
        metrics.equal_opportunity_difference(y, p, sensitive_features=s)
    with pytest.raises(ValueError, match="pos_label=2 is not among"):
        metrics.fairness_report(y, p, sensitive_features=s, pos_label=2)


def test_csv_messages_name_the_file_and_the_columns(tmp_path, capsys):
    import numpy as np
    import pandas as pd

    from pfair.cli import main

    (tmp_path / "header.csv").write_text("a,b,sex,y\n")
    assert main(["train", "--csv", str(tmp_path / "header.csv"), "--label", "y", "--sensitive", "sex"]) == 2
    assert "header: the table has its header but no rows (columns ['y', 'sex', 'a', 'b'])" in capsys.readouterr().err
    rng = np.random.default_rng(0)
    t = pd.DataFrame({"a": rng.normal(size=50), "b": rng.normal(size=50), "sex": rng.choice(["m", "f"], 50)})
    t["y"] = (t.a > 0).astype(int)
    t.loc[3, "b"] = np.inf
    t.to_csv(tmp_path / "inf.csv", index=False)
    assert main(["train", "--csv", str(tmp_path / "inf.csv"), "--label", "y", "--sensitive", "sex"]) == 2
    assert "column(s) 'b' (1 row(s), the first on line 5 of the file) hold +inf or -inf" in capsys.readouterr().err
    (tmp_path / "run.json").write_text("silo,epsilon\n0,1\n")
    assert main(["privacy-report", str(tmp_path / "run.json")]) == 2
    assert "is not JSON" in capsys.readouterr().err


def test_summary_notes_small_groups_held_out_share_and_uneven_noise():
    import numpy as np
    import pandas as pd

    from pfair.cli import privacy_notes, small_group_notes

    y = np.array([0] * 40 + [1] * 40 + [0] * 10 + [1] * 5)
    s = np.array([0] * 80 + [1] * 15)
    (note,) = small_group_notes(y, s, ["a", "b"], ["no", "yes"])
    assert note.startswith("1 of 2 sensitive groups") and "'b' 15 (10 with label no, 5 with label yes)" in note
    assert small_group_notes(y[:80], s[:80]) == []
    report = pd.DataFrame({"n_records": [6, 9, 9], "noise_multiplier": [10.04, 8.287, 8.287],
                           "sample_rate": [1.0, 0.6667, 0.6667]}, index=pd.Index([0, 1, 2], name="silo"))
    held, noise = privacy_notes(report, [7, 10, 10])
    assert "holds out [1, 1, 1]" in held
    assert noise.startswith("silo 0 has 21% more noise than the others (noise_multiplier 10.04 against 8.287)")
    assert "batch is 100% of its training records (6)" in noise
    assert privacy_notes(report.assign(noise_multiplier=8.0), [6, 9, 9]) == []


def test_a_csv_plot_title_names_the_file_and_columns():
    from pfair.experiments.plots import dataset_title

    spec = "csv:/a/very/long/path/to/the/data/loans.csv?label=default&sensitive=sex&positive_label=yes"
    assert dataset_title(spec) == "loans.csv (label default, sensitive sex)"
    assert dataset_title("adult") == "adult" and len(dataset_title("x" * 100)) == 60


def test_ctrl_c_in_train_is_one_line(capsys, monkeypatch):
    import pfair.cli as cli

    def interrupted(args):
        raise KeyboardInterrupt

    parser = cli.build_parser()
    monkeypatch.setattr(cli, "build_parser", lambda: parser)
    parser._subparsers._group_actions[0].choices["train"].set_defaults(func=interrupted)
    assert cli.main(["train"]) == 130
    err = capsys.readouterr().err.strip()
    assert err == ("pfair train: interrupted; nothing was written (--out and --save-model are written at the end) and "
                   "nothing was spent outside this process (a fit's ledgers live in it)")
