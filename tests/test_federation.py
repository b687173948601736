"""Federation: global encodings, silo splits, group proportions and their errors."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pfair import partition
from pfair.federation import Federation


def arrays(n=60, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3))
    y = np.array(["no", "yes"])[rng.integers(0, 2, size=n)]
    s = np.array(["f", "m", "x"])[np.arange(n) % 3]
    silos = np.array(["a", "b"])[(np.arange(n) * 7) % 2]
    return X, y, s, silos


def test_from_arrays_splits_records_and_encodes_globally():
    X, y, s, ids = arrays()
    fed = Federation.from_arrays(X, y, sensitive_features=s, silos=ids)
    assert fed.n_silos == 2 and sum(fed.sizes) == 60
    assert list(fed.classes_) == ["no", "yes"] and list(fed.groups_) == ["f", "m", "x"]
    Xp, yp, sp = fed.pooled()
    # Every record is in exactly one silo, unchanged.
    order = np.lexsort(Xp.T)
    ref = np.lexsort(X.T)
    np.testing.assert_array_equal(Xp[order], X[ref])
    np.testing.assert_array_equal(fed.classes_[yp[order]], y[ref])
    np.testing.assert_array_equal(fed.groups_[sp[order]], s[ref])


def test_silo_lacking_a_group_keeps_the_global_index():
    X, y, s, _ = arrays()
    ids = np.where(s == "x", 1, 0)  # silo 0 has no group "x"
    fed = Federation.from_arrays(X, y, sensitive_features=s, silos=ids)
    assert set(fed.silos[0].s.tolist()) == {0, 1}
    assert set(fed.silos[1].s.tolist()) == {2}
    assert fed.n_groups == 3


def test_group_proportions_per_notion():
    X, y, s, ids = arrays(90)
    fed = Federation.from_arrays(X, y, sensitive_features=s, silos=ids)
    dp = fed.group_proportions("demographic_parity")
    np.testing.assert_allclose(dp, [[1 / 3, 1 / 3, 1 / 3]])
    eo = fed.group_proportions("equalized_odds")
    assert eo.shape == (2, 3)
    for c, label in enumerate(fed.classes_):
        counts = pd.Series(s[y == label]).value_counts().reindex(["f", "m", "x"]).to_numpy()
        np.testing.assert_allclose(eo[c], counts / counts.sum())
    eopp = fed.group_proportions("equal_opportunity", positive=1)
    np.testing.assert_allclose(eopp, eo[1:2])


def test_absent_group_in_a_class_is_an_error_naming_it():
    X, y, s, ids = arrays()
    y = np.where(s == "x", "no", y)  # group x never has label yes
    fed = Federation.from_arrays(X, y, sensitive_features=s, silos=ids)
    fed.group_proportions("demographic_parity")
    with pytest.raises(ValueError, match="group 'x' has no records among records with label 'yes'"):
        fed.group_proportions("equalized_odds")


def test_from_dataframe_and_errors():
    X, y, s, ids = arrays()
    df = pd.DataFrame(X, columns=["a", "b", "c"]).assign(label=y, grp=s, silo=ids)
    fed = Federation.from_dataframe(df, label="label", sensitive="grp", silo="silo")
    assert fed.feature_names == ["a", "b", "c"]
    with pytest.raises(ValueError, match="sensitive='nope' is not a column"):
        Federation.from_dataframe(df, label="label", sensitive="nope", silo="silo")


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda X, y, s, i: (X[:-1], y, s, i), "y has 59 entries but X has 59|has 60 entries but X has 59"),
        (lambda X, y, s, i: (np.where(np.arange(60)[:, None] == 3, np.nan, X), y, s, i), "NaN or inf"),
        (lambda X, y, s, i: (X, np.full(60, "a"), s, i), "y has only 1 class"),
        (lambda X, y, s, i: (X, y, np.full(60, "g"), i), "sensitive_features has 1 distinct value"),
        (lambda X, y, s, i: (X[:, 0], y, s, i), "must be 2-D"),
    ],
)
def test_bad_inputs_raise_clear_errors(mutate, message):
    X, y, s, ids = mutate(*arrays())
    with pytest.raises(ValueError, match=message):
        Federation.from_arrays(X, y, sensitive_features=s, silos=ids)


def test_describe_reports_sizes_and_proportions():
    X, y, s, ids = arrays()
    fed = Federation.from_arrays(X, y, sensitive_features=s, silos=ids)
    d = fed.describe()
    assert list(d["size"]) == [30, 30]
    # Columns carry the group and class names, not their codes.
    assert [c for c in d.columns if c.startswith("p(s=")] == [f"p(s={g})" for g in fed.groups_]
    assert [c for c in d.columns if c.startswith("p(y=")] == [f"p(y={c})" for c in fed.classes_]
    p_s = d[[c for c in d.columns if c.startswith("p(s=")]]
    np.testing.assert_allclose(p_s.sum(axis=1), 1.0)
    assert (d["tv(s)"] >= 0).all() and "s_tv" in d.attrs["heterogeneity"]


def test_partition_of_adult_is_exact_and_heterogeneity_grows_with_h(adult):
    scores = []
    for h in (0.0, 0.5, 1.0):
        fed = Federation.partition(adult, 4, heterogeneity=h, by="age", seed=0)
        n = adult.X_train.shape[0]
        assert sorted(fed.sizes) == sorted([n // 4 + (j < n % 4) for j in range(4)])
        d = fed.describe()
        assert "mean(age)" in d.columns
        scores.append(d.attrs["heterogeneity"]["attribute_eta2"])
    assert scores[0] < 0.01 < scores[1] < scores[2]
    # h = 1: silos are contiguous age blocks, so their mean ages are strictly ordered.
    assert d["mean(age)"].is_monotonic_increasing


def test_partition_dirichlet_skews_labels_and_respects_sizes(adult):
    skewed = Federation.partition_dirichlet(adult, 3, alpha=0.1, by="label", seed=1)
    flat = Federation.partition_dirichlet(adult, 3, alpha=1000.0, by="label", seed=1)
    assert skewed.describe().attrs["heterogeneity"]["y_tv"] > 5 * flat.describe().attrs["heterogeneity"]["y_tv"]
    n = adult.X_train.shape[0]
    sized = Federation.partition_dirichlet(adult, 3, alpha=0.5, by="sensitive", sizes=[n - 2000, 1500, 500], seed=0)
    assert sized.sizes == [n - 2000, 1500, 500]
    powered = Federation.partition(adult, 4, heterogeneity=0.75, by="age", seed=0,
                                   sizes=partition.power_law_sizes(n, 4, exponent=1.5))
    assert sum(powered.sizes) == n and powered.sizes == sorted(powered.sizes, reverse=True)
    with pytest.raises(ValueError, match="by='nope' is not a raw attribute"):
        Federation.partition(adult, 3, by="nope")


def test_a_declared_group_with_no_records_is_refused_for_every_notion():
    # A group fixed by the global encoding (groups=) but absent from the data cannot enter the
    # penalty (its p_s^{-1/2} is undefined): fitting must say which group and why.
    from pfair import SteFFLe

    X, y, s, ids = arrays()
    fed = Federation.from_arrays(X, y, sensitive_features=s, silos=ids, groups=sorted(set(s)) + ["absent"])
    assert fed.n_groups == len(set(s)) + 1
    for fairness in ("demographic_parity", "equalized_odds", "equal_opportunity", "false_positive_rate_parity"):
        with pytest.raises(ValueError, match="group 'absent' has no records"):
            SteFFLe(fairness=fairness, epsilon=None, epochs=1, batch_size=8).fit(fed)


def test_non_finite_features_are_refused_with_the_number_of_bad_rows():
    from pfair import _core

    rng = np.random.default_rng(0)
    X = rng.normal(size=(20_000, 7))
    X[[3, 3, 19_999], [0, 6, 2]] = [np.nan, np.inf, -np.inf]  # two bad rows, one with two bad entries
    X[12_345, 5] = np.nan
    s = rng.integers(0, 2, len(X))
    with pytest.raises(ValueError, match=r"X contains NaN or inf in 3 rows"):
        Federation.from_arrays(X, s, sensitive_features=s, silos=np.zeros(len(X), dtype=int))
    assert _core.nonfinite_rows(X) == int((~np.isfinite(X)).any(axis=1).sum()) == 3
    assert _core.nonfinite_rows(X.astype(np.float32)) == 3
    assert _core.nonfinite_rows(np.zeros((0, 3))) == 0
    with pytest.raises(ValueError, match="float64 or float32"):
        _core.nonfinite_rows(np.zeros((2, 3), dtype=np.int64))
    with pytest.raises(ValueError, match="C-contiguous"):
        _core.nonfinite_rows(X[:, ::2])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(-70_000, 70_000), min_size=1, max_size=300),
       st.sampled_from([np.int64, np.int32, np.int16, np.uint16, np.uint64]))
def test_unique_inverse_equals_np_unique(values, dtype):
    """The O(n) encoding of small-range integers gives np.unique's categories and codes (and falls
    back to np.unique for wide ranges and other dtypes)."""
    from pfair._validation import unique_inverse

    import pfair._validation as validation

    info = np.iinfo(dtype)
    # Bounds within the values' own range: NumPy 2.0 (the newest on Python 3.9) cannot clip an
    # int64 array at uint64's maximum.
    arr = np.clip(np.asarray(values), max(int(info.min), -70_000), min(int(info.max), 70_000)).astype(dtype)
    cats, codes = unique_inverse(arr)
    ref_cats, ref_codes = np.unique(arr, return_inverse=True)
    assert cats.dtype == ref_cats.dtype and np.array_equal(cats, ref_cats)
    assert np.array_equal(codes, ref_codes) and np.array_equal(cats[codes], arr)
    assert codes.dtype == np.int32  # half of int64 at 10⁸ records, wide enough for y * k + s
    # Built block by block (no temporary as long as the values): the same with blocks of 7.
    block, validation._CODE_BLOCK = validation._CODE_BLOCK, 7
    try:
        small_cats, small_codes = unique_inverse(arr)
    finally:
        validation._CODE_BLOCK = block
    assert np.array_equal(small_cats, cats) and np.array_equal(small_codes, codes)
    strings = arr.astype(str)
    assert np.array_equal(unique_inverse(strings)[1], np.unique(strings, return_inverse=True)[1])


def test_strided_rows_of_a_shared_matrix_are_gathered_alone():
    """Silo.strided_X: the collapse check's sample of a silo's rows, equal to X[::step], and a
    view (no copy) when the silo's rows are consecutive."""
    from pfair.protocol.convergence import local_prediction_counts

    X = np.arange(200.0).reshape(100, 2)
    y, s = np.arange(100) % 2, np.arange(100) % 3 % 2
    fed = Federation.from_arrays(X, y, sensitive_features=s, silos=np.arange(100) % 2)
    silo = fed.silos[1]  # rows 1, 3, 5, ...: a row list
    np.testing.assert_array_equal(silo.strided_X(7), silo.X[:: -(-50 // 7)])
    assert silo.strided_X(7).shape[0] <= 7 and silo.strided_X(1000).shape[0] == 50
    block = Federation.from_arrays(X, y, sensitive_features=s, silos=np.arange(100) // 50).silos[0]
    assert np.shares_memory(block.strided_X(10), X)
    theta = np.array([0.01, -0.02, 0.1])
    np.testing.assert_array_equal(local_prediction_counts(silo, theta, 2, sample=20),
                                  local_prediction_counts(silo.X, theta, 2, sample=20))


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(-5, 5), min_size=1, max_size=40), st.sampled_from([np.int64, np.int8, np.float64]),
       st.booleans())
def test_encoding_against_given_categories(values, dtype, sort):
    """encode with categories: numeric values and sorted categories take a blockwise binary search,
    others a lookup table; both give each value's index and refuse a value outside the categories."""
    import pfair._validation as validation
    from pfair._validation import encode

    arr = np.asarray(values).astype(dtype)
    cats = np.array([-3, -1, 0, 2, 4], dtype=dtype)
    if not sort:
        cats = cats[::-1].copy()  # unsorted: the table
    known = np.isin(arr, cats)
    block, validation._CODE_BLOCK = validation._CODE_BLOCK, 3
    try:
        if known.all():
            codes, out = encode(arr, "s", cats)
            assert codes.dtype == np.int32 and out is not None
            np.testing.assert_array_equal(cats[codes], arr)
        else:
            with pytest.raises(ValueError, match=rf"s contains {arr[~known][0].item()!r}, which is not among"):
                encode(arr, "s", cats)
    finally:
        validation._CODE_BLOCK = block


def test_float32_features_are_kept_and_fit_as_their_float64_values():
    """A float32 matrix stays float32 (the federation holds the caller's array, no float64 copy),
    silos hand out float64 rows, and a private fit gives the bits of the same values in float64:
    the kernels read float32 rows in place and compute in float64. Dense and one-hot (CSR) data."""
    import warnings

    import pfair
    from pfair.exceptions import PrivacyWarning

    rng = np.random.default_rng(5)
    n = 3000
    dense = rng.normal(size=(n, 5)).astype(np.float32)
    onehot = np.zeros((n, 12), dtype=np.float32)
    onehot[np.arange(n), rng.integers(0, 12, size=n)] = 1.0
    s = rng.integers(0, 2, size=n)
    for X32 in (dense, np.hstack([dense[:, :1], onehot])):
        y = (X32[:, 0] + 0.5 * s + rng.logistic(size=n) > 0.3).astype(int)
        silos = np.arange(n) % 3
        fed = Federation.from_arrays(X32, y, sensitive_features=s, silos=silos)
        assert fed.shared_matrix() is X32
        assert fed.silos[1].X.dtype == np.float64
        np.testing.assert_array_equal(fed.silos[1].X, X32[1::3].astype(np.float64))
        assert fed.pooled()[0].dtype == np.float64
        X64 = X32.astype(np.float64)
        fits = []
        for X in (X32, X64):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", PrivacyWarning)
                fits.append(pfair.SteFFLe(lam=1.0, epsilon=2.0, epochs=3, batch_size=64, noise_seed=3).fit(
                    X, y, sensitive_features=s, silos=silos))
        np.testing.assert_array_equal(fits[0].theta_, fits[1].theta_)
        np.testing.assert_array_equal(fits[0].predict(X32), fits[1].predict(X64))
    bad = dense.copy()
    bad[7, 2] = np.nan
    with pytest.raises(ValueError, match="NaN or inf in 1 rows"):
        Federation.from_arrays(bad, y, sensitive_features=s, silos=silos)
