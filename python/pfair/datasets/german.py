"""Statlog German Credit (Hofmann 1994): 1,000 loan applicants, 700 good and 300 bad risks.

Label 1 = good credit risk (the favourable outcome).  The 20 attributes keep their UCI codes
(``A11`` ... ``A202``, documented in UCI's ``german.doc``); 7 are numeric and standardised, 13
categorical and one-hot.  Sex is not a column of its own: it is part of ``personal_status``
(A91, A93, A94 male; A92, A95 female), so with ``sensitive="sex"`` the whole ``personal_status``
column leaves X.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ._base import Dataset, build_dataset, encode_categories
from ._files import cached_table, data_path

COLUMNS = [
    "status", "duration", "credit_history", "purpose", "credit_amount", "savings", "employment",
    "installment_rate", "personal_status", "other_debtors", "residence_since", "property", "age",
    "other_installment_plans", "housing", "existing_credits", "job", "num_dependents",
    "telephone", "foreign_worker", "credit_risk",
]
NUMERIC = [
    "duration", "credit_amount", "installment_rate", "residence_since", "age", "existing_credits",
    "num_dependents",
]
CATEGORICAL = [c for c in COLUMNS if c not in NUMERIC and c != "credit_risk"]
SENSITIVE = ("sex", "age")
LABEL_NAMES = ["bad", "good"]
FEMALE_CODES = ("A92", "A95")


@cached_table
def german_frame() -> pd.DataFrame:
    """The 1,000 rows of ``german.data`` with named columns and a derived ``sex`` column.

    ``credit_risk`` is the UCI code: 1 = good, 2 = bad.
    """
    frame = pd.read_csv(data_path("german.data.xz"), sep=" ", header=None, names=COLUMNS)
    frame["sex"] = np.where(frame["personal_status"].isin(FEMALE_CODES), "female", "male")
    return frame


def load_german(
    *,
    sensitive: str = "sex",
    test_size: float = 0.25,
    seed: int = 0,
    include_sensitive: bool = False,
    age_threshold: int = 25,
) -> Dataset:
    """German credit: label 1 = good risk; sensitive ``"sex"`` (female, male) or ``"age"``.

    ``"age"`` groups are ``<25`` (index 0) and ``>=25`` (index 1) for the default
    ``age_threshold=25``; the numeric ``age`` column then leaves X (it stays in ``attrs_*``).
    Split: stratified by (y, s), reproducible for a ``seed``.
    """
    if sensitive not in SENSITIVE:
        raise ValueError(f"sensitive must be one of {SENSITIVE}, got {sensitive!r}")
    frame = german_frame()
    y = (frame["credit_risk"].to_numpy() == 1).astype(np.int64)
    if sensitive == "sex":
        s, groups = encode_categories(frame["sex"], ["female", "male"], argument="sensitive 'sex'")
        source = ["personal_status", "sex"]
    else:
        groups = [f"<{age_threshold}", f">={age_threshold}"]
        s = (frame["age"].to_numpy() >= age_threshold).astype(np.int64)
        frame = frame.assign(age_group=np.asarray(groups, dtype=object)[s])
        source = ["age", "age_group"]
    return build_dataset(
        "german", frame, y=y, label_names=LABEL_NAMES, s=s, group_names=groups,
        sensitive_name=sensitive, numeric=NUMERIC, categorical=CATEGORICAL,
        sensitive_columns=source, attr_columns=NUMERIC + ["sex", "personal_status"],
        include_sensitive=include_sensitive, test_size=test_size, seed=seed,
    )
