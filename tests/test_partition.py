"""Tests of pfair.partition: exact sizes, one silo per record, determinism, heterogeneity that
moves monotonically with h and alpha, homogeneity at h = 0, sorted blocks at h = 1."""

from __future__ import annotations

import os
import sys

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

import pfair.partition as partition

sys.path.insert(0, os.path.dirname(__file__))
from partition_reference import heterogeneous_numpy  # noqa: E402

H_LEVELS = [0.0, 0.25, 0.5, 0.75, 1.0]


def _adult_like(n: int, seed: int = 0):
    """Age, a binary label correlated with age, and a sensitive attribute."""
    rng = np.random.default_rng(seed)
    age = np.floor(rng.uniform(17, 90, n))
    y = (rng.uniform(size=n) < 0.1 + 0.4 * (age - 17) / 73).astype(np.int64)
    s = (rng.uniform(size=n) < 0.33).astype(np.int64)
    return age, y, s


# ---- heterogeneous (Algorithm 3) -------------------------------------------------------------


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(1, 3000),
    k_frac=st.floats(0.0, 1.0),
    h=st.floats(0.0, 1.0),
    seed=st.integers(0, 2**64 - 1),
)
def test_heterogeneous_sizes_are_exact_and_every_record_has_one_silo(n, k_frac, h, seed):
    k = max(1, min(n, 1 + int(k_frac * 20)))
    values = np.random.default_rng(n).normal(size=n).round(1)  # with ties
    ids = partition.heterogeneous(values, k, heterogeneity=h, seed=seed)
    assert ids.dtype == np.int64 and ids.shape == (n,)
    assert ids.min() >= 0 and ids.max() < k
    expected = np.full(k, n // k)
    expected[: n % k] += 1
    np.testing.assert_array_equal(np.bincount(ids, minlength=k), expected)


def test_heterogeneous_given_sizes_are_exact():
    age, _, _ = _adult_like(10_000)
    sizes = partition.power_law_sizes(10_000, 6, exponent=1.0)
    ids = partition.heterogeneous(age, 6, heterogeneity=0.6, seed=3, sizes=sizes)
    np.testing.assert_array_equal(np.bincount(ids, minlength=6), sizes)


def test_heterogeneous_same_seed_same_partition_other_seed_other_partition():
    age, _, _ = _adult_like(50_000)
    a = partition.heterogeneous(age, 5, heterogeneity=0.5, seed=7)
    b = partition.heterogeneous(age, 5, heterogeneity=0.5, seed=7)
    c = partition.heterogeneous(age, 5, heterogeneity=0.5, seed=8)
    np.testing.assert_array_equal(a, b)
    assert (a != c).mean() > 0.3


def test_heterogeneous_h1_gives_sorted_contiguous_blocks():
    age, _, _ = _adult_like(10_005)
    ids = partition.heterogeneous(age, 7, heterogeneity=1.0, seed=1)
    order = np.argsort(age, kind="stable")
    # Along the stable order the silo ids are 0, 0, …, 1, 1, …: contiguous and increasing.
    along = ids[order]
    assert (np.diff(along) >= 0).all()
    np.testing.assert_array_equal(np.bincount(along), [1430, 1430, 1429, 1429, 1429, 1429, 1429])
    # Silos cover disjoint age ranges (ties may straddle a boundary).
    for k in range(6):
        assert age[ids == k].max() <= age[ids == k + 1].min()


def test_heterogeneous_h0_silos_match_the_global_distribution():
    n, k = 60_000, 4
    age, y, s = _adult_like(n, seed=2)
    ids = partition.heterogeneous(age, k, heterogeneity=0.0, seed=11)
    for col in (y, s):
        # Chi-square test of independence of silo and column: a random partition passes.
        table = pd.crosstab(ids, col).to_numpy()
        # [1]: the p-value (scipy < 1.11 returns a tuple, later ones a result that indexes the same).
        assert stats.chi2_contingency(table)[1] > 1e-3
    # Silo mean age within 5 standard errors of the global mean.
    se = age.std() / np.sqrt(n / k)
    for j in range(k):
        assert abs(age[ids == j].mean() - age.mean()) < 5 * se


def test_heterogeneity_rises_with_h():
    age, y, _ = _adult_like(40_000, seed=3)
    eta2, tv = [], []
    for h in H_LEVELS:
        runs = [partition.heterogeneous(age, 5, heterogeneity=h, seed=seed) for seed in range(4)]
        eta2.append(np.mean([partition.heterogeneity_score(r, age, kind="eta2") for r in runs]))
        tv.append(np.mean([partition.heterogeneity_score(r, y, kind="tv") for r in runs]))
    assert all(a < b for a, b in zip(eta2, eta2[1:])), eta2
    assert all(a < b for a, b in zip(tv, tv[1:])), tv
    assert eta2[0] < 1e-3 and eta2[-1] > 0.9
    # Silo means move by h·(block mean − mean), so eta2 ≈ h²·eta2(h=1).
    assert abs(eta2[2] / eta2[-1] - 0.25) < 0.03


def test_rust_and_numpy_reference_agree_in_distribution():
    age, y, _ = _adult_like(20_000, seed=4)
    for h in (0.3, 0.8):
        rust = np.mean([partition.heterogeneity_score(partition.heterogeneous(age, 4, heterogeneity=h, seed=s), age) for s in range(5)])
        ref = np.mean([partition.heterogeneity_score(heterogeneous_numpy(age, 4, h, seed=s), age) for s in range(5)])
        assert abs(rust - ref) < 0.02, (h, rust, ref)
    np.testing.assert_array_equal(heterogeneous_numpy(age, 4, 1.0), partition.heterogeneous(age, 4, heterogeneity=1.0))


# ---- dirichlet -------------------------------------------------------------------------------


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(1, 3000),
    k=st.integers(1, 12),
    n_groups=st.integers(1, 6),
    log_alpha=st.floats(-3, 3),
    seed=st.integers(0, 2**32),
    given_sizes=st.booleans(),
)
def test_dirichlet_sizes_are_exact_and_every_record_has_one_silo(n, k, n_groups, log_alpha, seed, given_sizes):
    k = min(k, n)
    groups = np.random.default_rng(seed).integers(0, n_groups, n)
    sizes = partition.power_law_sizes(n, k, exponent=0.7) if given_sizes else None
    ids = partition.dirichlet(groups, k, alpha=10.0**log_alpha, seed=seed, sizes=sizes)
    assert ids.dtype == np.int64 and ids.shape == (n,)
    assert ids.min() >= 0 and ids.max() < k
    if given_sizes:
        np.testing.assert_array_equal(np.bincount(ids, minlength=k), sizes)
    # Each category's records are all dealt out (n_c in total over the silos).
    np.testing.assert_array_equal(
        pd.crosstab(ids, groups).to_numpy().sum(axis=0), np.bincount(groups)[np.unique(groups)]
    )


def test_dirichlet_accepts_any_labels_and_is_deterministic():
    groups = np.array(["a", "b", "c", "a"] * 2500)
    a = partition.dirichlet(groups, 4, alpha=0.5, seed=1)
    np.testing.assert_array_equal(a, partition.dirichlet(groups, 4, alpha=0.5, seed=1))
    assert (a != partition.dirichlet(groups, 4, alpha=0.5, seed=2)).mean() > 0.3


def test_heterogeneity_falls_with_alpha():
    _, _, s = _adult_like(30_000, seed=5)
    y = np.random.default_rng(5).integers(0, 4, 30_000)
    for sizes in (None, np.full(6, 5_000)):
        tvs = []
        for alpha in (0.05, 0.3, 1.0, 10.0, 1000.0):
            tvs.append(np.mean([
                partition.heterogeneity_score(partition.dirichlet(y, 6, alpha=alpha, seed=seed, sizes=sizes), y, kind="tv")
                for seed in range(4)
            ]))
        assert all(a > b for a, b in zip(tvs, tvs[1:])), (sizes, tvs)
        assert tvs[-1] < 0.02


def test_dirichlet_large_alpha_is_homogeneous():
    y = np.random.default_rng(6).integers(0, 3, 60_000)
    ids = partition.dirichlet(y, 4, alpha=1e6, seed=0, sizes=[15_000] * 4)
    assert stats.chi2_contingency(pd.crosstab(ids, y).to_numpy())[1] > 1e-3


# ---- sizes, scores, description ------------------------------------------------------------


def test_power_law_sizes():
    s = partition.power_law_sizes(1100, 3, exponent=1.0, min_size=0)
    np.testing.assert_array_equal(s, [600, 300, 200])
    s = partition.power_law_sizes(10**6, 1000, exponent=1.5, min_size=10)
    assert s.sum() == 10**6 and s.min() >= 10 and (np.diff(s) <= 0).all()
    np.testing.assert_array_equal(partition.power_law_sizes(9, 3, exponent=0.0), [3, 3, 3])


def test_heterogeneity_score_known_values():
    assert partition.heterogeneity_score([0, 0, 1, 1], [0, 0, 1, 1], kind="tv") == pytest.approx(0.5)
    assert partition.heterogeneity_score([0, 0, 1, 1], ["a", "b", "a", "b"]) == pytest.approx(0.0)
    assert partition.heterogeneity_score([0, 0, 1, 1], [0.0, 1.0, 2.0, 3.0]) == pytest.approx(0.8)


def test_describe_partition():
    age, y, s = _adult_like(9_000, seed=7)
    ids = partition.heterogeneous(age, 3, heterogeneity=0.75, seed=0)
    df = partition.describe_partition(ids, y=y, sensitive_features=s, attribute=age)
    assert list(df.columns) == ["size", "p(s=0)", "p(s=1)", "tv(s)", "p(y=0)", "p(y=1)", "tv(y)", "attribute_mean"]
    np.testing.assert_array_equal(df["size"], [3000, 3000, 3000])
    for k in range(3):
        assert df.loc[k, "p(y=1)"] == pytest.approx(y[ids == k].mean())
        assert df.loc[k, "attribute_mean"] == pytest.approx(age[ids == k].mean())
    np.testing.assert_allclose(df[["p(s=0)", "p(s=1)"]].sum(axis=1), 1.0)
    assert (np.diff(df["attribute_mean"]) > 0).all()  # sorted blocks show through at h = 0.75
    h = df.attrs["heterogeneity"]
    assert set(h) == {"s_tv", "y_tv", "attribute_eta2"} and h["attribute_eta2"] > 0.3
    # Per-silo TV distances from the pooled mix, size-weighted, are the Rust score.
    for col, key in (("tv(s)", "s_tv"), ("tv(y)", "y_tv")):
        assert np.average(df[col], weights=df["size"]) == pytest.approx(h[key], rel=1e-12)
        p1 = df[f"p({col[3]}=1)"]
        np.testing.assert_allclose(df[col], np.abs(p1 - df.attrs["global"][f"p({col[3]}=1)"]))
    assert df.attrs["global"]["p(y=1)"] == pytest.approx(y.mean())


# ---- validation ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "call, argument",
    [
        (lambda: partition.heterogeneous([1.0, 2.0], 1, heterogeneity=1.1), "heterogeneity"),
        (lambda: partition.heterogeneous([1.0, 2.0], 1, heterogeneity=-0.1), "heterogeneity"),
        (lambda: partition.heterogeneous([1.0, 2.0], 0, heterogeneity=0.5), "n_silos"),
        (lambda: partition.heterogeneous([1.0, 2.0], 3, heterogeneity=0.5), "n_silos"),
        (lambda: partition.heterogeneous([[1.0, 2.0]], 1, heterogeneity=0.5), "values"),
        (lambda: partition.heterogeneous([1.0, np.nan], 1, heterogeneity=0.5), "values"),
        (lambda: partition.heterogeneous([1.0, 2.0], 2, heterogeneity=0.5, sizes=[1, 2]), "sizes"),
        (lambda: partition.heterogeneous([1.0, 2.0], 1, heterogeneity=0.5, seed=-1), "seed"),
        (lambda: partition.dirichlet([0, 1], 2, alpha=0.0), "alpha"),
        (lambda: partition.dirichlet([0, 1], 2, alpha=-1.0), "alpha"),
        (lambda: partition.dirichlet([0.0, np.nan], 1, alpha=1.0), "groups"),
        (lambda: partition.dirichlet(np.zeros((2, 2)), 1, alpha=1.0), "groups"),
        (lambda: partition.dirichlet([0, 1, 1], 2, alpha=1.0, sizes=[1, 1]), "sizes"),
        (lambda: partition.dirichlet([0, 1, 1], 2, alpha=1.0, sizes=[4, -1]), "sizes"),
        (lambda: partition.dirichlet([0, 1, 1], 4, alpha=1.0), "n_silos"),
        (lambda: partition.power_law_sizes(10, 3, exponent=1.0, min_size=4), "min_size"),
        (lambda: partition.power_law_sizes(10, 3, exponent=-1.0), "exponent"),
        (lambda: partition.heterogeneity_score([0, 1], [0, 1], kind="gini"), "kind"),
        (lambda: partition.heterogeneity_score([0, 1], [0, 1, 2]), "values_or_groups"),
        (lambda: partition.describe_partition([0, 1], y=[0], sensitive_features=None), "y"),
    ],
)
def test_bad_arguments_raise_value_error_naming_them(call, argument):
    with pytest.raises(ValueError, match=f"^{argument}: "):
        call()


def test_rust_layer_also_rejects_bad_arguments():
    # The binding validates on its own (for callers of pfair._core) and never panics.
    from pfair import _core

    with pytest.raises(ValueError, match="^heterogeneity: "):
        _core.partition_heterogeneous(np.array([1.0, 2.0]), 1, 2.0, 0)
    with pytest.raises(ValueError, match="^groups: "):
        _core.partition_dirichlet(np.array([0, -3]), 1, 1.0, 0)
    with pytest.raises(ValueError, match="^values: "):
        _core.partition_heterogeneous(np.arange(10.0)[::2], 1, 0.5, 0)


def test_heterogeneous_accepts_a_categorical_attribute():
    rng = np.random.default_rng(3)
    region = rng.choice(["east", "north", "south", "west"], size=4000)
    ids = partition.heterogeneous(region, 4, heterogeneity=1.0, seed=1)
    # h = 1: silos are contiguous blocks of the sorted categories; four equal regions, four silos.
    for k in range(4):
        counts = pd.Series(region[ids == k]).value_counts()
        assert counts.iloc[0] / counts.sum() > 0.9  # regions are only about equal in size
    assert partition.heterogeneity_score(ids, region) > 0.7
    ids0 = partition.heterogeneous(region, 4, heterogeneity=0.0, seed=1)
    assert partition.heterogeneity_score(ids0, region) < 0.05
    # The category order is the sorted one: same silos as the codes of the sorted categories.
    codes = np.unique(region, return_inverse=True)[1]
    np.testing.assert_array_equal(ids, partition.heterogeneous(codes, 4, heterogeneity=1.0, seed=1))


def _user_frame(n: int = 4000, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    region = rng.choice(["east", "north", "south"], size=n)
    return pd.DataFrame({
        "income": rng.normal(50.0, 10.0, n) + (region == "south") * 15.0,
        "years": rng.integers(0, 40, n),
        "region": region,
        "sex": rng.choice(["f", "m"], size=n),
        "hired": rng.choice(["no", "yes"], size=n),
    })


@pytest.mark.parametrize("by", ["region", "income", "years"])
def test_federation_partition_by_any_column_numeric_or_categorical(by):
    from pfair.datasets import load_csv
    from pfair.federation import Federation

    frame = _user_frame()
    ds = load_csv(frame, label="hired", sensitive="sex", keep=["region"] if by == "region" else None,
                  drop=None if by == "region" else ["region"])
    flat = Federation.partition(ds, 3, by=by, heterogeneity=0.0, seed=2)
    skew = Federation.partition(ds, 3, by=by, heterogeneity=0.75, seed=2)
    assert skew.sizes == flat.sizes and sum(skew.sizes) == ds.n_train and max(skew.sizes) - min(skew.sizes) <= 1
    assert skew.partition_by == by

    def score(fed):
        ids = np.repeat(np.arange(fed.n_silos), fed.sizes)
        values = np.concatenate([s.attrs[by].to_numpy() for s in fed.silos])
        return partition.heterogeneity_score(ids, values if by == "region" else values.astype(float))

    assert score(skew) > 10 * score(flat)
    skew.describe()  # numeric or not, describe works


def test_federation_partition_names_by_when_the_column_is_missing():
    from pfair.datasets import load_csv
    from pfair.federation import Federation

    ds = load_csv(_user_frame(), label="hired", sensitive="sex", drop=["region"])
    with pytest.raises(ValueError, match=r"by='region' is not a raw attribute.*keep=\['region'\]"):
        Federation.partition(ds, 3, by="region", heterogeneity=0.5)
    # No age column and no by: only a homogeneous split is meaningful.
    with pytest.raises(ValueError, match="by: heterogeneity=0.5 needs a column"):
        Federation.partition(ds, 3, heterogeneity=0.5)
    assert sum(Federation.partition(ds, 3).sizes) == ds.n_train
