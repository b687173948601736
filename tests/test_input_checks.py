"""What a fit refuses or warns about in its inputs (a float or many-valued sensitive attribute, a
continuous label, a huge λ, a one-record silo, silo index arrays, a private fit without s): each a
clear error or warning naming the argument and the fix."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from pfair import Federation, SteFFLe
from pfair.baselines import PFLD, CentralERM
from pfair.exceptions import NonPrivateFitWarning, PrivacyWarning

from support import toy_data


QUICK = dict(sampling="full_batch", epochs=5)


def data(n=200, seed=0):
    """s shifts every feature."""
    return toy_data(n, seed, shift=(0.5, 0.5, 0.5), noise=0.3, cuts=(0.3,))


def test_silos_of_a_few_records_with_default_delta_are_refused_naming_the_delta():
    """Before: silos of 2 to 9 records trained at the default delta = 1/n² (0.11 for 3 records),
    with a PrivacyWarning only."""
    X, y, s, _ = data()
    ids = np.where(np.arange(len(y)) < 8, "small", "big")
    with pytest.raises(ValueError, match=r"silo 'small' has 8 records.*which is 0.0156 for it: a guarantee that "
                                         r"allows publishing one of its records outright.*delta="):
        SteFFLe(epsilon=1.0, **QUICK).fit(X, y, sensitive_features=s, silos=ids)
    ids = np.where(np.arange(len(y)) < 10, "small", "big")  # 10 records: delta 0.01, allowed
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        SteFFLe(epsilon=1.0, **QUICK).fit(X, y, sensitive_features=s, silos=ids)


def test_a_validation_share_that_holds_out_nothing_checks_the_training_records_and_says_so():
    """Before: 200 silos of 8 records at validation_share=0.1 held out none, so no checkpoint
    had records and the check against the constant predictor silently did not run."""
    rng = np.random.default_rng(0)
    n = 1600
    X = rng.normal(size=(n, 3))
    y = (X[:, 0] + rng.normal(size=n) > 0).astype(int)
    s, ids = rng.integers(0, 2, n), np.arange(n) % 200
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NonPrivateFitWarning)
        with pytest.warns(UserWarning, match=r"validation_share=0.1 holds out no record of any silo \(the largest has "
                                             r"8 records.*count the silos' training records instead"):
            # A stated batch runs the epochs given (silos of one round an epoch would stretch "auto"'s).
            m = SteFFLe(epsilon=None, lam=1.0, epochs=4, batch_size=4).fit(X, y, sensitive_features=s, silos=ids)
    assert len(m.checkpoints_) == 4 and m.selected_epoch_ == 4
    total = m.checkpoints_["validation_error"].iloc[-1]
    assert total == pytest.approx(1 - m.score(X, y))  # the table counted every training record
    # One silo large enough to hold out records keeps the held-out check (on its 2 records).
    ids[:20] = 999
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        m = SteFFLe(epsilon=None, lam=1.0, epochs=4, batch_size=4).fit(X, y, sensitive_features=s, silos=ids)
    assert not any("holds out no record" in str(w.message) for w in caught)
    assert len(m.checkpoints_) == 4


def test_float_sensitive_attribute_is_refused_with_binning_advice():
    X, y, s, ids = data()
    age = np.random.default_rng(1).uniform(18, 90, len(y))  # one group per record before the fix
    for fit in (lambda: SteFFLe(**QUICK).fit(X, y, sensitive_features=age),
                lambda: PFLD(epsilon=None, **QUICK).fit(X, y, sensitive_features=age),
                lambda: Federation.from_arrays(X, y, sensitive_features=age, silos=ids)):
        with pytest.raises(ValueError, match=r"sensitive_features has 200 distinct values.*must be categorical"
                                             r".*pd\.cut\(sensitive_features"):
            fit()


def test_many_integer_groups_warn_and_few_do_not():
    X, y, s, ids = data(400)
    many = np.arange(400) % 25  # 25 groups of 16 records: legitimate but unusual
    with pytest.warns(UserWarning, match="sensitive_features has 25 groups.*bin it"):
        Federation.from_arrays(X, y, sensitive_features=many, silos=ids)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        Federation.from_arrays(X, y, sensitive_features=np.arange(400) % 20, silos=ids)
        # Whole-number floats are categories, not a continuous attribute.
        Federation.from_arrays(X, y, sensitive_features=s.astype(float), silos=ids)


@pytest.mark.parametrize("make", [lambda: SteFFLe(**QUICK), lambda: CentralERM(**QUICK)])
def test_continuous_y_is_refused_at_fit(make):
    X, y, s, ids = data()
    income = X[:, 0] * 1000.0 + 20000.5
    name = type(make()).__name__
    with pytest.raises(ValueError, match=rf"y looks continuous \(regression target.*{name} is a classifier"):
        make().fit(X, income, sensitive_features=s)
    # Whole-number float labels are classes.
    make().fit(X, y.astype(float), sensitive_features=s)


def test_huge_lam_warns_naming_lam_and_the_fix():
    """Under the default scaled θ step a huge λ does not diverge: the loss's step falls as 1/λ, so
    the warning says the loss barely trains (the model ends near the constant predictor); under the
    constant step it says θ's fairness step diverges. Each names lam and the fix."""
    X, y, s, ids = data()
    with pytest.warns(UserWarning, match=r"lam=1e\+09: with theta_step='scaled'.*loss barely trains.*"
                                         r"constant predictor.*lower lam \(at most 200\).*max_violation"):
        SteFFLe(lam=1e9, **QUICK).fit(X, y, sensitive_features=s)
    with pytest.warns(UserWarning, match=r"lam=400: with theta_step='scaled'.* = 0.00125 of the loss's gradient"):
        SteFFLe(lam=400, lr_theta=0.5).settings()
    # At λ ≤ λ_c the scaled step is the constant one: a huge lr_theta still diverges.
    with pytest.warns(UserWarning, match=r"lam=1 with lr_theta=1000: each θ step moves by lr_theta·min\(lam, 1\) = 1000"
                                         r".*diverge.*Lower lr_theta"):
        SteFFLe(lam=1.0, lr_theta=1000).settings()
    lr = SteFFLe().lr_theta
    with pytest.warns(UserWarning, match=rf"lam=1e\+09 with lr_theta={lr:g}.*diverge.*lower lam"):
        SteFFLe(lam=1e9, theta_step="constant", **QUICK).fit(X, y, sensitive_features=s)
    with pytest.warns(UserWarning, match="lam=400 with lr_theta=0.5"):
        SteFFLe(lam=400, lr_theta=0.5, theta_step="constant").settings()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        SteFFLe(lam=10.0).settings()
        SteFFLe(lam=200.0).settings()
        SteFFLe(lam=400, lr_theta=0.1, theta_step="constant").settings()  # 40: a small step makes a large lam workable


def test_one_record_silo_with_default_delta_is_refused_before_training():
    X, y, s, ids = data()
    ids = np.where(np.arange(len(y)) == 7, "tiny", "big")
    with pytest.raises(ValueError, match=r"silo 'tiny' has 1 record.*delta = 1/n².*Merge silo 'tiny'.*delta="):
        SteFFLe(epsilon=1.0, **QUICK).fit(X, y, sensitive_features=s, silos=ids)
    # With an explicit delta the one-record silo gets past that check, and refuses next: its one
    # record's gradient under the noise its budget buys is no signal (pfair.exceptions.BudgetTooSmall)
    from pfair.exceptions import BudgetTooSmall

    with pytest.raises(BudgetTooSmall, match=r"silo 1: .*noise-to-signal ratio"):
        SteFFLe(epsilon=1.0, delta=1e-5, **QUICK).fit(X, y, sensitive_features=s, silos=ids)
    # A budget large enough for it trains, at the explicit delta.
    m = SteFFLe(epsilon=8.0, delta=1e-5, **QUICK).fit(X, y, sensitive_features=s, silos=ids)
    assert (m.privacy_report_["delta"] == 1e-5).all()
    # Non-private fits never need delta.
    SteFFLe(epsilon=None, **QUICK).fit(X, y, sensitive_features=s, silos=ids)


def test_silos_as_a_list_of_index_arrays_equals_silo_ids():
    X, y, s, ids = data()
    parts = [np.flatnonzero(ids == j) for j in range(3)]
    a = SteFFLe(epsilon=None, **QUICK).fit(X, y, sensitive_features=s, silos=parts)
    b = SteFFLe(epsilon=None, **QUICK).fit(X, y, sensitive_features=s, silos=ids)
    np.testing.assert_array_equal(a.theta_, b.theta_)
    assert a.privacy_report_.shape[0] == 3
    c = CentralERM(**QUICK).fit(X, y, silos=[list(p) for p in parts])
    np.testing.assert_array_equal(c.theta_, CentralERM(**QUICK).fit(X, y, silos=ids).theta_)


@pytest.mark.parametrize("silos, message", [
    ([np.arange(0, 100), np.arange(90, 200)], "repeats rows already assigned"),
    ([np.arange(0, 100), np.arange(100, 150)], "50 rows .* are in no index array"),
    ([np.arange(0, 100), np.arange(100, 201)], "outside 0..199"),
    ([np.arange(0, 100) + 0.5, np.arange(100, 200)], "not integer row indices"),
    ([[0, 1], 2, 3], "one silo id per record .* or a list of index arrays"),
])
def test_bad_silo_index_arrays_explain_the_format(silos, message):
    X, y, s, ids = data()
    with pytest.raises(ValueError, match=message):
        SteFFLe(**QUICK).fit(X, y, sensitive_features=s, silos=silos)


def test_private_fit_without_sensitive_features_is_refused_unless_lam_is_zero():
    X, y, s, ids = data()
    with pytest.raises(ValueError, match="needs sensitive_features="):
        SteFFLe(epsilon=1.0, **QUICK).fit(X, y, silos=ids)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyWarning)
        m = SteFFLe(lam=0.0, epsilon=1.0, protect="record", noise_seed=0, **QUICK).fit(X, y, silos=ids)
    assert np.isfinite(m.epsilon_spent_) and m.epsilon_spent_ <= 1.0 + 1e-9


def test_inputs_a_pipeline_user_meets_are_refused_naming_the_column_and_the_fix():
    """Before: a text column gave "convert categorical columns first (could not convert string to
    float: 'b')" without its name, a nullable column with pd.NA the same diagnosis, a sparse one-hot
    encoding "use X.toarray()" (impossible inside a Pipeline), and groups mixing 1 and 'a' a bare
    "'<' not supported"."""
    import pandas as pd
    import scipy.sparse as sp

    X, y, s, ids = data()
    frame = pd.DataFrame(X, columns=["a", "b", "c"])
    with pytest.raises(TypeError, match=r"column\(s\) 'city' are not numbers: encode them first.*OneHotEncoder"):
        SteFFLe(**QUICK).fit(frame.assign(city="x"), y, sensitive_features=s, silos=ids)
    holes = frame.assign(c=pd.array([None] + list(X[1:, 2]), dtype="Float64"))
    with pytest.raises(ValueError, match=r"X contains NaN or inf in 1 rows; impute or drop those rows first"):
        SteFFLe(**QUICK).fit(holes, y, sensitive_features=s, silos=ids)
    with pytest.raises(TypeError, match=r"OneHotEncoder\(sparse_output=False\).*sparse_threshold=0"):
        SteFFLe(**QUICK).fit(sp.csr_matrix(X), y, sensitive_features=s, silos=ids)
    mixed = np.array(["one" if v == 1 else 0 for v in s], dtype=object)
    with pytest.raises(TypeError, match=r"sensitive_features mixes values of the types int, str.*astype\(str\)"):
        SteFFLe(**QUICK).fit(X, y, sensitive_features=mixed, silos=ids)
    # Python numbers in an object column are numbers.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        SteFFLe(**QUICK).fit(frame.astype(object), y, sensitive_features=s, silos=ids)


def test_a_batch_larger_than_a_silo_names_the_silo_as_the_other_messages_do():
    """Before: "silo 2, which has 14 records" for a silo the user named 'small' that has 15 (one
    held out for validation)."""
    X, y, s, _ = data()
    ids = np.where(np.arange(len(y)) < 15, "small", "big")
    with pytest.raises(ValueError, match=r"batch_size=64 is larger than silo 'small', which trains on 14 records "
                                         r"\(the rest of its records are held out for validation"):
        SteFFLe(epsilon=None, batch_size=64, epochs=1).fit(X, y, sensitive_features=s, silos=ids)


def test_the_hybrid_topologies_refuse_a_tiny_sensitive_silos_default_delta_and_say_their_checkpoints_are_gone():
    """The review's finds: a sensitive silo of 3 records trained at delta = 1/9 (the default δ check
    read the non-sensitive silos only), and a hybrid topology's validation_share that holds out
    nothing was said to fall back to the training records, which hybrid checkpoints do not do."""
    rng = np.random.default_rng(0)
    n = 600
    X = rng.normal(size=(n, 3))
    y, s = (X[:, 0] > 0).astype(int), rng.integers(0, 2, n)
    silos, sens = np.repeat(np.arange(3), n // 3), np.zeros(n, int)
    sens[:3] = 1  # sensitive silo 1 holds s of 3 records only
    with pytest.raises(ValueError, match=r"silo 'sensitive 1' has 3 records.*which is 0.111 for it"):
        SteFFLe(epochs=2, lam=1.0, epsilon=1.0, mode="hybrid").fit(X, y, sensitive_features=s, silos=silos,
                                                                  sensitive_silos=sens)
    tiny = np.repeat(np.arange(4), 9)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        m = SteFFLe(epochs=3, lam=1.0, epsilon=None, mode="divisions").fit(X[:36], y[:36], sensitive_features=s[:36],
                                                                           silos=tiny)
    said = [str(w.message) for w in caught if "holds out no record" in str(w.message)]
    assert len(said) == 1 and "mode='divisions' then releases no checkpoint" in said[0]
    assert len(m.checkpoints_) == 0


def test_a_fit_that_sends_the_fairness_term_warns_about_a_group_of_few_records():
    """A group of 4 records among 2,000 (a rate read from 4 records is noise; in a private fit the
    two rarest shares set the noise of every row of W): the warning names the group and its
    counts per block of the notion, and in a private fit the factor (1/ρ₁ + 1/ρ₂)^½; a λ = 0 fit,
    which sends no fairness term, and groups of 30 records or more are not warned about."""
    from pfair._fit import SMALL_GROUP_RECORDS
    from pfair._warn import forget

    rng = np.random.default_rng(0)
    n = 2000
    X = rng.normal(size=(n, 3))
    y = (X[:, 0] > 0).astype(int)
    s = np.zeros(n, dtype=int)
    s[:4] = 1
    forget()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NonPrivateFitWarning)
        with pytest.warns(UserWarning, match=r"group 1: 4 of 2,000 in the data\)") as caught:
            SteFFLe(epsilon=None, lam=1.0, epochs=2, validation_share=0.0).fit(X, y, sensitive_features=s)
        assert not any("ρ₁" in str(w.message) for w in caught)
        in_label = [int(np.sum((s == 1) & (y == c))) for c in (0, 1)]
        with pytest.warns(UserWarning, match=rf"group 1: {in_label[0]} of {int(np.sum(y == 0)):,} among records with "
                                             rf"label 0; group 1: {in_label[1]} of {int(np.sum(y == 1)):,}"):
            SteFFLe(epsilon=None, lam=1.0, epochs=2, fairness="equalized_odds", validation_share=0.0).fit(
                X, y, sensitive_features=s)
    # With records held out for validation, the counts are the training records' (what the rounds read).
    from pfair.validation import holdout

    train, _ = holdout(n, 0.1, seed=0, silo=0)
    small = int(np.sum(s[train] == 1))
    rho = np.array([small, train.size - small]) / train.size
    factor = np.sqrt(np.sum(1 / rho))
    with pytest.warns(UserWarning, match=rf"group 1: {small} of {train.size:,} in the data\).*\(1/ρ₁ \+ 1/ρ₂\)\^½: "
                                         rf"{factor:.0f} here against 2"):
        SteFFLe(epsilon=1.0, lam=1.0, epochs=2).fit(X, y, sensitive_features=s)
    enough = s.copy()
    enough[:SMALL_GROUP_RECORDS] = 1
    for lam, groups in ((0.0, s), (1.0, enough)):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            SteFFLe(epsilon=1.0, lam=lam, epochs=2, validation_share=0.0).fit(X, y, sensitive_features=groups)
        assert not any("records of a sensitive group" in str(w.message) for w in caught), lam


def test_a_group_absent_from_a_label_is_refused_private_or_not():
    """Equalized odds compares each group's rates within each label: a group with no record of
    label 1 has no such rate. The non-private fit refused it; the private fit ran on the noisy
    proportions' stand-in and released a violation of 1. Both refuse now, naming the group and the
    label; a λ = 0 fit, which sends no fairness term, runs."""
    rng = np.random.default_rng(0)
    n = 2000
    X = rng.normal(size=(n, 3))
    y = (X[:, 0] > 0).astype(int)
    s = np.zeros(n, dtype=int)
    s[:40], y[:40] = 1, 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for epsilon in (None, 1.0):
            with pytest.raises(ValueError, match="sensitive group 1 has no records among records with label 1"):
                SteFFLe(epsilon=epsilon, lam=1.0, fairness="equalized_odds", epochs=2).fit(X, y, sensitive_features=s)
        m = SteFFLe(epsilon=1.0, lam=0.0, fairness="equalized_odds", epochs=2).fit(X, y, sensitive_features=s)
    assert m.score(X, y) > 0.9  # the λ = 0 fit trained: y reads the first feature
