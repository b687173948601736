"""pfair.datasets: bundled tables against their published figures, the shared preprocessing
contract (global encodings, 3:1 reproducible split, train-only standardisation, s kept out of X),
load_csv's errors, and make_synthetic's dependence knob."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest

from pfair import datasets as pds
from pfair.datasets import (
    Dataset,
    csv_spec,
    list_datasets,
    load,
    load_csv,
    load_frame,
    make_synthetic,
    parse_csv_spec,
)

# ----------------------------------------------------------------------------------------------
# Loaded once per module: KDD census (~300k rows) is the slow one.

CONFIGS = {
    "adult_sex": ("adult", {"sensitive": "sex"}),
    "adult_race": ("adult", {"sensitive": "race"}),
    "compas_race": ("compas", {"sensitive": "race"}),
    "compas_race_all": ("compas", {"sensitive": "race_all"}),
    "compas_sex": ("compas", {"sensitive": "sex"}),
    "german_sex": ("german", {"sensitive": "sex"}),
    "german_age": ("german", {"sensitive": "age"}),
    "census_kdd_sex": ("census_kdd", {"sensitive": "sex"}),
    "census_kdd_race": ("census_kdd", {"sensitive": "race"}),
    "credit_card_sex": ("credit_card", {"sensitive": "sex"}),
    "credit_card_age": ("credit_card", {"sensitive": "age"}),
    "credit_card_education": ("credit_card", {"sensitive": "education"}),
    "credit_card_marriage": ("credit_card", {"sensitive": "marriage"}),
    "law_school_race": ("law_school", {"sensitive": "race"}),
    "law_school_race_all": ("law_school", {"sensitive": "race_all"}),
    "law_school_sex": ("law_school", {"sensitive": "sex"}),
    "bank_age": ("bank", {"sensitive": "age"}),
    "bank_age5": ("bank", {"sensitive": "age5"}),
    "bank_marital": ("bank", {"sensitive": "marital"}),
}

_CACHE: dict = {}


def get(config: str) -> Dataset:
    if config not in _CACHE:
        name, kwargs = CONFIGS[config]
        _CACHE[config] = load(name, **kwargs)
    return _CACHE[config]


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def ds(request) -> Dataset:
    return get(request.param)


def _all(ds: Dataset, which: str) -> np.ndarray:
    return np.concatenate([getattr(ds, f"{which}_train"), getattr(ds, f"{which}_test")])


def _group_counts(ds: Dataset) -> dict:
    counts = np.bincount(_all(ds, "s"), minlength=ds.n_groups)
    return dict(zip(ds.group_names, counts.tolist()))


# ----------------------------------------------------------------------------------------------
# Registry


def test_list_datasets_and_dispatcher():
    names = list_datasets()
    assert names == sorted(
        ["adult", "bank", "census_kdd", "compas", "credit_card", "german", "law_school"]
    )
    assert load("German", seed=0).name == "german"  # case and '-' / '_' insensitive
    assert load("credit-card").name == "credit_card"
    assert load("synthetic", n=1000, d=3).name == "synthetic"
    with pytest.raises(ValueError, match="name"):
        load("dutch")
    with pytest.raises(ValueError, match="sensitive"):
        load("adult", sensitive="age")


# ----------------------------------------------------------------------------------------------
# Published figures


def test_adult_published_figures():
    raw = load_frame("adult")
    assert len(raw) == 48_842  # 32,561 + 16,281
    assert (raw["source"] == "adult.data").sum() == 32_561
    ds = get("adult_sex")
    assert ds.n_train + ds.n_test == 45_222  # after dropping rows with '?'
    assert _all(ds, "y").mean() == pytest.approx(0.2478, abs=0.002)
    assert ds.label_names == ["<=50K", ">50K"]
    assert _group_counts(ds) == {"Female": 14_695, "Male": 30_527}
    assert ds.n_features == 102  # Gupta et al. 2024, App. E: "102 input features"
    race = get("adult_race")
    assert race.group_names == [
        "Amer-Indian-Eskimo", "Asian-Pac-Islander", "Black", "Other", "White"
    ]
    assert _group_counts(race)["White"] == 38_903


def test_compas_published_figures():
    raw = load_frame("compas")
    assert len(raw) == 7_214
    assert raw["two_year_recid"].mean() == pytest.approx(0.4507, abs=0.001)
    sex = get("compas_sex")
    assert sex.n_train + sex.n_test == 7_214
    assert _group_counts(sex) == {"Female": 1_395, "Male": 5_819}
    race = get("compas_race")  # African-American vs Caucasian subset
    assert _group_counts(race) == {"African-American": 3_696, "Caucasian": 2_454}
    assert get("compas_race_all").n_groups == 6
    assert _all(get("compas_race_all"), "y").mean() == pytest.approx(0.4507, abs=0.001)
    # ProPublica's screening filter keeps 6,172 rows, 5,278 of them African-American or Caucasian.
    assert pds.compas.propublica_mask(raw).sum() == 6_172
    filtered = load("compas", sensitive="race", propublica_filter=True)
    assert filtered.n_train + filtered.n_test == 5_278


def test_german_published_figures():
    ds = get("german_sex")
    assert ds.n_train + ds.n_test == 1_000
    assert _all(ds, "y").mean() == pytest.approx(0.70, abs=1e-12)  # 700 good, 300 bad
    assert ds.label_names == ["bad", "good"]
    assert _group_counts(ds) == {"female": 310, "male": 690}
    assert not any(f.startswith("personal_status") for f in ds.feature_names)
    age = get("german_age")
    assert _group_counts(age) == {"<25": 149, ">=25": 851}
    assert "age" not in age.feature_names


def test_credit_card_published_figures():
    ds = get("credit_card_sex")
    assert ds.n_train + ds.n_test == 30_000
    assert _all(ds, "y").mean() == pytest.approx(0.2212, abs=1e-4)  # 6,636 defaults
    assert ds.label_names == ["no_default", "default"]
    # UCI: 18,112 female and 11,888 male clients; code 1 of the bundled SEX column is female.
    assert _group_counts(ds) == {"female": 18_112, "male": 11_888}
    raw = load_frame("credit_card")
    assert (raw["SEX"] == 1).sum() == 18_112
    assert raw.loc[raw["ID"] == 1, "sex"].item() == "female"
    assert ds.n_features == 85  # Gupta et al. 2024, App. E: "85 input features"
    assert _group_counts(get("credit_card_education")) == {
        "graduate_school": 10_585, "high_school": 4_917, "other": 468, "university": 14_030
    }
    assert _group_counts(get("credit_card_marriage")) == {
        "married": 13_659, "other": 377, "single": 15_964
    }
    assert _group_counts(get("credit_card_age")) == {"<25": 2_685, ">=25": 27_315}


def test_law_school_published_figures():
    ds = get("law_school_sex")
    assert ds.n_train + ds.n_test == 21_791
    assert _group_counts(ds) == {"female": 9_537, "male": 12_254}
    assert _all(ds, "y").mean() == pytest.approx(19_360 / 21_791, abs=1e-12)
    race = get("law_school_race")
    assert _group_counts(race) == {"non-white": 3_506, "white": 18_285}
    assert get("law_school_race_all").n_groups == 8
    assert race.feature_names == ["LSAT", "UGPA", "ZFYA", "sex=female", "sex=male"]


@pytest.mark.slow
def test_census_kdd_published_figures():
    ds = get("census_kdd_sex")
    source = pd.concat([ds.attrs_train["source"], ds.attrs_test["source"]])
    assert (source == "train").sum() == 199_523
    assert (source == "test").sum() == 99_762
    assert _all(ds, "y").mean() == pytest.approx(0.062, abs=0.001)
    race = get("census_kdd_race")
    assert race.n_groups == 5
    assert race.group_names == [
        "Amer Indian Aleut or Eskimo", "Asian or Pacific Islander", "Black", "Other", "White"
    ]
    assert "instance_weight" not in ds.feature_names


def test_bank_published_figures():
    ds = get("bank_age")
    assert ds.n_train + ds.n_test == 4_521
    assert _all(ds, "y").sum() == 521  # 11.5 % "yes"
    assert _all(ds, "y").mean() == pytest.approx(0.115, abs=0.001)
    assert ds.group_names == ["<25|>60", "25-60"]
    assert _group_counts(ds)["<25|>60"] == 194
    assert get("bank_age5").n_groups == 5
    assert _group_counts(get("bank_marital")) == {
        "divorced": 528, "married": 2_797, "single": 1_196
    }
    assert "duration" not in load("bank", drop_duration=True).feature_names


# ----------------------------------------------------------------------------------------------
# The preprocessing contract, for every configuration


def test_types_shapes_and_finiteness(ds):
    for split in ("train", "test"):
        X, y, s = (getattr(ds, f"{v}_{split}") for v in ("X", "y", "s"))
        attrs = getattr(ds, f"attrs_{split}")
        assert X.dtype == np.float64 and y.dtype == np.int64 and s.dtype == np.int64
        assert X.ndim == 2 and X.shape[1] == ds.n_features == len(ds.feature_names)
        assert X.shape[0] == y.shape[0] == s.shape[0] == len(attrs)
        assert np.isfinite(X).all()
        assert y.min() >= 0 and y.max() < ds.n_classes
        assert s.min() >= 0 and s.max() < ds.n_groups
        # Every group has records in both splits.
        assert (np.bincount(s, minlength=ds.n_groups) > 0).all()
    assert ds.n_classes == len(ds.label_names) >= 2
    assert ds.n_groups == len(ds.group_names) >= 2
    assert len(set(ds.feature_names)) == ds.n_features


def test_split_is_three_to_one_and_stratified(ds):
    n = ds.n_train + ds.n_test
    assert ds.n_test / n == pytest.approx(0.25, abs=0.002)
    # Stratified by (y, s): each stratum's test share is 1/4 up to rounding of that stratum.
    for u in range(ds.n_classes):
        for r in range(ds.n_groups):
            n_tr = np.sum((ds.y_train == u) & (ds.s_train == r))
            n_te = np.sum((ds.y_test == u) & (ds.s_test == r))
            if n_tr + n_te >= 2:
                assert abs(n_te - 0.25 * (n_tr + n_te)) <= 1


def test_standardisation_fitted_on_train(ds):
    numeric = [
        j for j, f in enumerate(ds.feature_names)
        if "=" not in f and np.unique(ds.X_train[:, j]).size > 2
    ]
    assert numeric, "every shipped data set has numeric features"
    Xn = ds.X_train[:, numeric]
    np.testing.assert_allclose(Xn.mean(axis=0), 0.0, atol=1e-9)
    np.testing.assert_allclose(Xn.std(axis=0), 1.0, atol=1e-9)
    # The test split is transformed with the training statistics, so its mean is only near 0.
    assert np.all(np.abs(ds.X_test[:, numeric].mean(axis=0)) < 0.2)
    # One-hot blocks are exact 0/1.
    onehot = [j for j, f in enumerate(ds.feature_names) if "=" in f]
    assert set(np.unique(ds.X_train[:, onehot])) <= {0.0, 1.0}


def test_attrs_are_raw_and_row_aligned(ds):
    # A raw numeric attribute, standardised with train statistics, is the X column of that name.
    shared = [f for f in ds.feature_names if f in ds.attrs_train.columns]
    assert shared
    for f in shared[:3]:
        j = ds.feature_names.index(f)
        raw = ds.attrs_train[f].to_numpy(dtype=np.float64)
        std = raw.std() if raw.std() > 0 else 1.0
        np.testing.assert_allclose((raw - raw.mean()) / std, ds.X_train[:, j], atol=1e-9)
        raw_test = ds.attrs_test[f].to_numpy(dtype=np.float64)
        np.testing.assert_allclose((raw_test - raw.mean()) / std, ds.X_test[:, j], atol=1e-9)


def test_sensitive_attribute_not_in_features(ds):
    sens = ds.sensitive_name
    assert not any(f == sens or f.startswith(sens + "=") for f in ds.feature_names)
    # No feature (or one-hot block) reproduces s exactly.
    for j in range(ds.n_features):
        col = ds.X_train[:, j]
        if ds.n_groups == 2 and np.unique(col).size == 2:
            assert not np.array_equal(col > col.min(), ds.s_train == 1)
            assert not np.array_equal(col > col.min(), ds.s_train == 0)


def test_split_reproducible_and_seed_dependent():
    a = load("german", sensitive="sex", seed=0)
    b = load("german", sensitive="sex", seed=0)
    c = load("german", sensitive="sex", seed=1)
    np.testing.assert_array_equal(a.X_train, b.X_train)
    np.testing.assert_array_equal(a.y_test, b.y_test)
    pd.testing.assert_frame_equal(a.attrs_train, b.attrs_train)
    assert not np.array_equal(a.X_train, c.X_train)
    ids_a = set(map(tuple, a.attrs_test.to_numpy().tolist()))
    ids_c = set(map(tuple, c.attrs_test.to_numpy().tolist()))
    assert ids_a != ids_c
    # The encodings are global: identical whatever the seed.
    assert a.group_names == c.group_names and a.label_names == c.label_names
    assert a.feature_names == c.feature_names
    d = load("adult", sensitive="sex", seed=0)
    np.testing.assert_array_equal(d.s_test, get("adult_sex").s_test)


def test_test_size_changes_split():
    ds = load("law_school", sensitive="sex", test_size=0.5, seed=3)
    assert ds.n_test / (ds.n_train + ds.n_test) == pytest.approx(0.5, abs=0.001)
    with pytest.raises(ValueError, match="test_size"):
        load("german", test_size=1.5)


def test_include_sensitive_appends_group_one_hot():
    ds = load("compas", sensitive="sex", include_sensitive=True)
    names = ds.feature_names[-2:]
    assert names == ["sex=Female", "sex=Male"]
    np.testing.assert_array_equal(ds.X_train[:, -1], (ds.s_train == 1).astype(float))
    assert ds.n_features == get("compas_sex").n_features + 2


def test_describe_and_to_frame():
    ds = get("credit_card_sex")
    desc = ds.describe()
    assert list(desc.index) == ["train", "test", "all"]
    assert desc.loc["all", "n"] == 30_000
    assert desc.loc["all", "n[sex=female]"] == 18_112
    assert desc.loc["train", "n"] == ds.n_train
    assert desc.loc["all", "p(y=default)"] == pytest.approx(0.2212, abs=1e-4)
    frame = ds.to_frame("test")
    assert frame.shape == (ds.n_test, ds.n_features + 2)
    np.testing.assert_array_equal(frame["s"].to_numpy(), ds.s_test)
    assert "n_train=22500" in repr(ds)


# ----------------------------------------------------------------------------------------------
# load_csv


def _toy_frame(n: int = 400, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame({
        "age": rng.integers(18, 80, n),
        "income": rng.normal(50.0, 10.0, n),
        "city": rng.choice(["Oslo", "Lima", "Pune"], n),
        "gender": rng.choice(["f", "m", "x"], n, p=[0.45, 0.45, 0.1]),
        "approved": rng.choice(["no", "yes"], n),
        "note": ["free text"] * n,
    })


def test_load_csv_dataframe_and_file(tmp_path):
    frame = _toy_frame()
    ds = load_csv(frame, label="approved", sensitive="gender", drop=["note"], positive_label="yes")
    assert ds.label_names == ["no", "yes"]  # two values: the other one names the negative class
    assert ds.group_names == ["f", "m", "x"]
    assert ds.feature_names == ["age", "income", "city=Lima", "city=Oslo", "city=Pune"]
    np.testing.assert_allclose(ds.X_train[:, :2].mean(axis=0), 0.0, atol=1e-9)
    np.testing.assert_array_equal(
        _all(ds, "y").sum(), (frame["approved"] == "yes").sum()
    )
    assert set(ds.attrs_train.columns) == {"age", "income", "city", "gender"}
    path = tmp_path / "toy.csv"
    frame.to_csv(path, index=False)
    ds2 = load_csv(path, label="approved", sensitive="gender", drop="note",
                   categorical=["city"], positive_label="yes")
    assert ds2.name == "toy"
    np.testing.assert_allclose(ds2.X_train, ds.X_train)
    # Without positive_label the sorted distinct values are the classes (multi-class works).
    multi = load_csv(frame, label="city", sensitive="gender", drop=["note"])
    assert multi.label_names == ["Lima", "Oslo", "Pune"] and multi.n_classes == 3


def test_load_csv_positive_label_names_the_negative_class():
    frame = _toy_frame().drop(columns=["note"])
    frame["flag"] = (frame["approved"] == "yes").astype(int)
    ints = load_csv(frame.drop(columns=["approved"]), label="flag", sensitive="gender", positive_label=1)
    assert ints.label_names == ["0", "1"]
    frame["income_band"] = np.where(frame["income"] > 50, ">50K", "<=50K")
    bands = load_csv(frame.drop(columns=["approved", "flag"]), label="income_band", sensitive="gender",
                     positive_label=">50K")
    assert bands.label_names == ["<=50K", ">50K"]
    # More than two values merged into the negative class: "not <positive>".
    merged = load_csv(frame.drop(columns=["approved", "flag", "income_band"]), label="city", sensitive="gender",
                      positive_label="Oslo")
    assert merged.label_names == ["not Oslo", "Oslo"]
    np.testing.assert_array_equal(_all(merged, "y").sum(), (frame["city"] == "Oslo").sum())


def test_load_csv_drops_a_few_rows_with_missing_values_and_says_so():
    frame = _toy_frame().drop(columns=["note"])
    frame.loc[:9, "income"] = np.nan  # 10 of 400 rows: 2.5%, under MAX_DROPPED_SHARE
    with pytest.warns(UserWarning, match=r"10 of 400 rows \(2\.5%\).*dropped.*'income' 10 \(2\.5%\).*390 rows remain"):
        ds = load_csv(frame, label="approved", sensitive="gender")
    assert ds.n_train + ds.n_test == len(frame) - 10
    assert np.isfinite(ds.X_train).all()
    # A complete table loads without a word.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        load_csv(frame.dropna(), label="approved", sensitive="gender")


def _mostly_empty_frame(n: int = 400) -> pd.DataFrame:
    """The issue's table in small: one feature column 70% empty."""
    frame = _toy_frame(n=n, seed=3).drop(columns=["note"])
    frame["income"] = frame["income"].astype(float)
    frame.loc[np.random.default_rng(1).random(n) < 0.7, "income"] = np.nan
    return frame


def test_load_csv_refuses_to_drop_more_than_the_threshold_and_names_the_column_and_the_fixes():
    from pfair.datasets import MAX_DROPPED_SHARE

    assert MAX_DROPPED_SHARE == 0.05
    frame = _mostly_empty_frame()
    n_missing = int(frame["income"].isna().sum())
    share = n_missing / len(frame)
    with pytest.raises(ValueError) as info:
        load_csv(frame, label="approved", sensitive="gender")
    message = str(info.value)
    assert f"{n_missing:,} of 400 rows ({share:.1%})" in message
    assert f"'income' {n_missing} ({share:.1%})" in message and "more than the 5%" in message
    for fix in ("drop=['income']", "--drop income", "dropna=True", "--dropna", "make_pipeline(SimpleImputer()"):
        assert fix in message, fix
    # Missing labels are named too, and can only be dropped.
    frame.loc[:1, "approved"] = np.nan
    with pytest.raises(ValueError, match="'approved' 2 .*'approved' \\(label\\).*can only be dropped"):
        load_csv(frame, label="approved", sensitive="gender")


def test_load_csv_dropna_true_drops_every_incomplete_row_with_a_warning_and_false_keeps_all():
    frame = _mostly_empty_frame()
    n_missing = int(frame["income"].isna().sum())
    with pytest.warns(UserWarning, match=f"{n_missing} of 400 rows .*dropped \\(dropna=True\\)"):
        ds = load_csv(frame, label="approved", sensitive="gender", dropna=True)
    assert ds.n_train + ds.n_test == 400 - n_missing
    with pytest.warns(UserWarning, match="dropna=True"):  # a numpy bool is a bool
        load_csv(frame, label="approved", sensitive="gender", dropna=np.bool_(True))
    # Only labels missing: the one way out is named.
    labels_gone = frame.assign(income=frame["income"].fillna(0.0))
    labels_gone.loc[:99, "approved"] = np.nan
    with pytest.raises(ValueError, match="To load it, drop those 100 rows anyway with dropna=True.*can only be dropped"):
        load_csv(labels_gone, label="approved", sensitive="gender")
    # Leaving the column out keeps every row, silently.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        full = load_csv(frame, label="approved", sensitive="gender", drop=["income"])
    assert full.n_train + full.n_test == 400
    # dropna=False refuses even one missing value; anything but None/True/False is refused.
    one_gap = frame.assign(income=frame["income"].fillna(0.0))
    one_gap.loc[5, "age"] = np.nan
    with pytest.raises(ValueError, match="1 of 400 rows .*dropna=False keeps every row.*'age' 1"):
        load_csv(one_gap, label="approved", sensitive="gender", dropna=False)
    with pytest.raises(ValueError, match="dropna must be None"):
        load_csv(one_gap, label="approved", sensitive="gender", dropna="yes")


def test_csv_spec_carries_dropna(tmp_path):
    path = tmp_path / "gaps.csv"
    _mostly_empty_frame().to_csv(path, index=False)
    spec = csv_spec(path, label="approved", sensitive="gender", dropna=True)
    assert "dropna=True" in spec and parse_csv_spec(spec)[1]["dropna"] is True
    with pytest.warns(UserWarning, match="dropna=True"):
        ds = load(spec)
    assert ds.n_train + ds.n_test < 200
    with pytest.raises(ValueError, match="'income'"):
        load(csv_spec(path, label="approved", sensitive="gender"))


@pytest.mark.parametrize(
    "kwargs, argument",
    [
        ({"label": "missing", "sensitive": "gender", "drop": ["note"]}, "label"),
        ({"label": "approved", "sensitive": "missing", "drop": ["note"]}, "sensitive"),
        ({"label": "approved", "sensitive": "gender", "drop": ["nope"]}, "drop"),
        ({"label": "approved", "sensitive": "gender", "categorical": ["nope"]}, "categorical"),
        # 'city' and 'note' are text but only 'city' is declared categorical.
        ({"label": "approved", "sensitive": "gender", "categorical": ["city"]}, "categorical"),
        ({"label": "approved", "sensitive": "gender", "drop": ["note"],
          "positive_label": "maybe"}, "positive_label"),
        ({"label": "note", "sensitive": "gender"}, "label"),  # one distinct value
    ],
)
def test_load_csv_errors_name_the_argument(kwargs, argument):
    with pytest.raises(ValueError, match=argument):
        load_csv(_toy_frame(), **kwargs)


def test_load_csv_constant_sensitive_and_empty_group():
    frame = _toy_frame().drop(columns=["note"])
    with pytest.raises(ValueError, match="sensitive"):
        load_csv(frame.assign(gender="f"), label="approved", sensitive="gender")
    # A group with a single record cannot be in both splits.
    lonely = frame.copy()
    lonely.loc[:, "gender"] = "f"
    lonely.loc[0, "gender"] = "m"
    with pytest.raises(ValueError, match="no records in the test split"):
        load_csv(lonely, label="approved", sensitive="gender")


# ----------------------------------------------------------------------------------------------
# make_synthetic


def _max_abs_corr_sx(ds: Dataset) -> float:
    s = ds.s_train.astype(float)
    return max(abs(np.corrcoef(s, ds.X_train[:, j])[0, 1]) for j in range(ds.n_features))


def test_synthetic_dependence_increases_correlations():
    corr_sy, corr_sx = [], []
    for dep in (0.0, 0.5, 1.0, 2.0):
        ds = make_synthetic(100_000, 8, dependence=dep, seed=7)
        corr_sy.append(abs(np.corrcoef(ds.s_train, ds.y_train)[0, 1]))
        corr_sx.append(_max_abs_corr_sx(ds))
    # dependence = 0: s independent of x and y (sampling error ~ 1/sqrt(75,000) = 0.004).
    assert corr_sy[0] < 0.015 and corr_sx[0] < 0.02
    assert all(b > a + 0.05 for a, b in zip(corr_sy, corr_sy[1:])), corr_sy
    assert all(b > a + 0.05 for a, b in zip(corr_sx, corr_sx[1:])), corr_sx


def test_synthetic_shapes_and_general_k_l():
    ds = make_synthetic(20_000, 6, k=5, l=4, silos=7, dependence=1.0, seed=3)
    assert ds.X_train.shape == (15_000, 6) and ds.X_test.shape == (5_000, 6)
    assert ds.X_train.dtype == np.float64
    assert ds.y_train.dtype == np.int64 and ds.s_train.dtype == np.int64
    assert ds.n_groups == 5 and ds.n_classes == 4
    assert (np.bincount(ds.s_test, minlength=5) > 0).all()
    assert (np.bincount(ds.y_train, minlength=4) > 0).all()
    silo_sizes = np.bincount(ds.attrs_train["silo"], minlength=7)
    assert silo_sizes.max() - silo_sizes.min() <= 1 and silo_sizes.sum() == 15_000
    assert set(ds.attrs_test["silo"]) == set(range(7))
    # Each silo is a block of consecutive records in each split (an index range of X).
    for part in (ds.attrs_train["silo"], ds.attrs_test["silo"]):
        assert (np.diff(part.to_numpy()) >= 0).all() and part.iloc[0] == 0 and part.iloc[-1] == 6
    np.testing.assert_array_equal(ds.attrs_train["s"].to_numpy(), ds.s_train)
    # With k groups of score -1..1 and classes -1..1, higher groups get higher classes.
    assert np.corrcoef(ds.s_train, ds.y_train)[0, 1] > 0.1


def test_synthetic_deterministic_and_seeded():
    a = make_synthetic(5_000, 4, k=3, l=3, seed=11)
    b = make_synthetic(5_000, 4, k=3, l=3, seed=11)
    c = make_synthetic(5_000, 4, k=3, l=3, seed=12)
    np.testing.assert_array_equal(a.X_train, b.X_train)
    np.testing.assert_array_equal(a.y_test, b.y_test)
    np.testing.assert_array_equal(a.s_train, b.s_train)
    assert not np.array_equal(a.X_train, c.X_train)


def test_synthetic_rejects_bad_arguments():
    with pytest.raises(ValueError, match="k"):
        make_synthetic(100, 2, k=1)
    with pytest.raises(ValueError, match="l"):
        make_synthetic(100, 2, l=1)
    with pytest.raises(ValueError, match="dependence"):
        make_synthetic(100, 2, dependence=-1)
    with pytest.raises(ValueError, match="no records"):
        make_synthetic(4, 2, k=4)


def test_load_csv_keep_keeps_a_partition_column_out_of_the_features():
    frame = _toy_frame()
    frame["hospital"] = np.where(frame["age"] < 40, "A", np.where(frame["age"] < 60, "B", "C"))
    ds = load_csv(frame, label="approved", sensitive="gender", drop=["note"], keep=["hospital"])
    assert not any(name.startswith("hospital") for name in ds.feature_names)
    assert ds.n_features == load_csv(frame.drop(columns="hospital"), label="approved", sensitive="gender",
                                     drop=["note"]).n_features
    assert {"hospital", "city", "age", "gender"} <= set(ds.attrs_train.columns)
    # The kept column is row-aligned with the records, through the public split indices.
    np.testing.assert_array_equal(ds.attrs_train["hospital"].to_numpy(),
                                  frame["hospital"].to_numpy()[ds.train_index])
    np.testing.assert_array_equal(ds.attrs_test["hospital"].to_numpy(), frame["hospital"].to_numpy()[ds.test_index])
    with pytest.raises(ValueError, match="keep: column"):
        load_csv(frame, label="approved", sensitive="gender", drop=["note"], keep=["ward"])
    with pytest.raises(ValueError, match="keep: .*also in drop"):
        load_csv(frame, label="approved", sensitive="gender", drop=["note", "hospital"], keep=["hospital"])


def test_split_indices_point_into_the_users_file_after_dropped_rows(tmp_path):
    frame = _toy_frame(n=300, seed=4)
    frame["income"] = frame["income"].astype(float)
    frame.loc[[3, 10, 250], "income"] = np.nan  # three rows with a missing value are dropped
    path = tmp_path / "with_gaps.csv"
    frame.to_csv(path, index=False)
    with pytest.warns(UserWarning, match="3 of 300 rows"):
        ds = load_csv(path, label="approved", sensitive="gender", drop=["note"])
    rows = np.concatenate([ds.train_index, ds.test_index])
    assert sorted(rows.tolist()) == sorted(set(range(300)) - {3, 10, 250})
    assert len(ds.train_index) == ds.n_train and len(ds.test_index) == ds.n_test
    np.testing.assert_array_equal(frame["age"].to_numpy()[ds.train_index], ds.attrs_train["age"].to_numpy())
    expected_y = (frame["approved"].to_numpy()[ds.test_index] == "yes").astype(int)
    np.testing.assert_array_equal(ds.y_test, expected_y)
    # Bundled loaders and synthetic data have them too.
    syn = make_synthetic(n=1000, d=3, seed=0)
    assert len(syn.train_index) == syn.n_train and len(syn.test_index) == syn.n_test


# ---------------------------------------------------------------------- continuous label and sensitive columns


def _income_table(n=400, seed=0):
    import pandas as pd

    rng = np.random.default_rng(seed)
    return pd.DataFrame({"income": rng.normal(50, 10, n).round(3), "sex": rng.choice(["f", "m"], n),
                         "age": rng.integers(18, 90, n) + 0.5, "x": rng.normal(size=n),
                         "default": rng.integers(0, 2, n), "zip": rng.integers(0, 40, n)})


def test_a_continuous_label_column_is_refused_naming_positive_label_and_binning(tmp_path, capsys):
    from pfair.cli import main
    from pfair.datasets import load_csv

    frame = _income_table()
    with pytest.raises(ValueError, match=r"label: column 'income' looks continuous .*positive_label=.*pd\.cut"):
        load_csv(frame, label="income", sensitive="sex")
    frame.to_csv(tmp_path / "t.csv", index=False)
    code = main(["train", "--csv", str(tmp_path / "t.csv"), "--label", "income", "--sensitive", "sex", "--epochs", "1"])
    err = capsys.readouterr().err
    assert code == 2 and "looks continuous" in err and "pos_label" not in err
    # A binned label, or positive_label, is fine; many whole-number classes only warn.
    load_csv(frame.assign(income=(frame.income > 50).astype(int)), label="income", sensitive="sex")
    with pytest.warns(UserWarning, match=r"label: column 'zip' has 40 distinct values.*positive_label="):
        load_csv(frame, label="zip", sensitive="sex")


def test_a_continuous_sensitive_column_is_refused_with_binning_advice(tmp_path, capsys):
    from pfair.cli import main
    from pfair.datasets import load_csv

    frame = _income_table()
    with pytest.raises(ValueError, match=r"sensitive: frame\['age'\] has 72 distinct values .*pd\.cut\(frame\['age'\]"):
        load_csv(frame, label="default", sensitive="age")
    frame.to_csv(tmp_path / "t.csv", index=False)
    code = main(["train", "--csv", str(tmp_path / "t.csv"), "--label", "default", "--sensitive", "income",
                 "--epochs", "1"])
    err = capsys.readouterr().err
    assert code == 2 and "must be categorical" in err and "no records in the test split" not in err
    binned = frame.assign(age=np.digitize(frame.age, [30, 50, 70]))
    assert load_csv(binned, label="default", sensitive="age").n_groups == 4
