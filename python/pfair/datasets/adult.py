"""UCI Adult (census income, 1994): predict income > $50K.

Source files ``adult.data`` (32,561 rows) and ``adult.test`` (16,281 rows) are combined (48,842
rows) and the 3,620 rows with a missing value (``?`` in workclass, occupation or native_country)
are dropped, leaving 45,222 records with 24.8 % positives.  This is the preprocessing of the FERMI
line of work (Lowy et al. 2022, Gupta et al. 2024, App. E): all categoricals one-hot, ``fnlwgt`` kept as a
numeric feature, giving 102 features when ``sex`` is the sensitive attribute.
"""

from __future__ import annotations

import pandas as pd

from ._base import Dataset, build_dataset, encode_categories
from ._files import cached_table, data_path

COLUMNS = [
    "age", "workclass", "fnlwgt", "education", "education_num", "marital_status", "occupation",
    "relationship", "race", "sex", "capital_gain", "capital_loss", "hours_per_week",
    "native_country", "income",
]
NUMERIC = ["age", "fnlwgt", "education_num", "capital_gain", "capital_loss", "hours_per_week"]
CATEGORICAL = [
    "workclass", "education", "marital_status", "occupation", "relationship", "race", "sex",
    "native_country",
]
SENSITIVE = ("sex", "race")
LABEL_NAMES = ["<=50K", ">50K"]


def _read(filename: str, skiprows: int) -> pd.DataFrame:
    return pd.read_csv(
        data_path(filename), header=None, names=COLUMNS, skiprows=skiprows,
        skipinitialspace=True, na_values=["?"], keep_default_na=False,
    )


@cached_table
def adult_frame() -> pd.DataFrame:
    """All 48,842 raw rows (``adult.data`` then ``adult.test``), NaN where the file has ``?``.

    The label column ``income`` is normalised to ``<=50K`` / ``>50K`` (the test file appends a
    period); ``source`` says which file a row came from.
    """
    train = _read("adult.data.xz", 0)
    # adult.test starts with a one-line banner ("|1x3 Cross validator").
    test = _read("adult.test.xz", 1)
    frame = pd.concat([train.assign(source="adult.data"), test.assign(source="adult.test")],
                      ignore_index=True)
    frame["income"] = frame["income"].str.rstrip(".")
    return frame


def load_adult(
    *,
    sensitive: str = "sex",
    test_size: float = 0.25,
    seed: int = 0,
    include_sensitive: bool = False,
) -> Dataset:
    """UCI Adult: label 1 = income >50K; sensitive ``"sex"`` (Female, Male) or ``"race"`` (k = 5).

    Rows with any missing value are dropped (45,222 remain).  Split: stratified by (y, s), 3:1 for
    the default ``test_size=0.25``, reproducible for a ``seed``.  The sensitive column is left out
    of X unless ``include_sensitive``; the other one (race or sex) stays as a feature.
    ``attrs_*`` hold the raw numeric columns plus ``sex`` and ``race``.
    """
    if sensitive not in SENSITIVE:
        raise ValueError(f"sensitive must be one of {SENSITIVE}, got {sensitive!r}")
    frame = adult_frame().dropna().reset_index(drop=True)
    y, _ = encode_categories(frame["income"], LABEL_NAMES, argument="label 'income'")
    s, groups = encode_categories(frame[sensitive], argument=f"sensitive {sensitive!r}")
    return build_dataset(
        "adult", frame, y=y, label_names=LABEL_NAMES, s=s, group_names=groups,
        sensitive_name=sensitive, numeric=NUMERIC, categorical=CATEGORICAL,
        sensitive_columns=[sensitive], attr_columns=NUMERIC + ["sex", "race"],
        include_sensitive=include_sensitive, test_size=test_size, seed=seed,
    )
