"""UCI Bank Marketing (Moro et al. 2014), the 4,521-row sample ``bank.csv``.

Portuguese bank telemarketing calls, 2008-2010; label 1 = the client subscribed a term deposit
(``y == "yes"``, 11.5 %).  Only the 10 % sample is available inside a PyPI package (the full
45,211-row file is not shipped).  Features: the 16 attributes minus the sensitive one; ``unknown``
stays a category.  Note that ``duration`` (length of the call) is known only after the call, so UCI
advises dropping it for realistic prediction; the PF-LD paper (Tran et al. 2021) keeps it, so do we, and
``drop_duration=True`` removes it.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ._base import Dataset, build_dataset, encode_categories
from ._files import cached_table, data_path

NUMERIC = ["age", "balance", "day", "duration", "campaign", "pdays", "previous"]
CATEGORICAL = ["job", "marital", "education", "default", "housing", "loan", "contact", "month",
               "poutcome"]
LABEL_NAMES = ["no", "yes"]
# Age groups of the PF-LD paper (Tran et al. 2021, Bank / M-Bank^3 / M-Bank^5), listed as (name, lo, hi)
# inclusive; the "other" group (under 25 or over 60) comes first.
AGE_GROUPS = {
    "age": [("<25|>60", None, None), ("25-60", 25, 60)],
    "age3": [("<25|>60", None, None), ("25-40", 25, 40), ("41-60", 41, 60)],
    "age5": [("<25|>60", None, None), ("25-33", 25, 33), ("34-40", 34, 40), ("41-48", 41, 48),
             ("49-60", 49, 60)],
}
SENSITIVE = ("age", "age3", "age5", "marital")


@cached_table
def bank_frame() -> pd.DataFrame:
    """The 4,521 rows of the sample (the file's ``id`` column dropped)."""
    return pd.read_csv(data_path("bank-uci.csv.gz")).drop(columns=["id"])


def age_groups(age: np.ndarray, scheme: str) -> tuple[np.ndarray, list]:
    """Group index per record for an `AGE_GROUPS` scheme; ages outside every range go to group 0."""
    spec = AGE_GROUPS[scheme]
    s = np.zeros(age.shape[0], dtype=np.int64)
    for r, (_, lo, hi) in enumerate(spec):
        if lo is not None:
            s[(age >= lo) & (age <= hi)] = r
    return s, [name for name, _, _ in spec]


def load_bank(
    *,
    sensitive: str = "age",
    test_size: float = 0.25,
    seed: int = 0,
    include_sensitive: bool = False,
    drop_duration: bool = False,
) -> Dataset:
    """Bank marketing: label 1 = subscribed.

    ``sensitive``: ``"age"`` (``<25|>60``, ``25-60``; Tran et al.'s Bank), ``"age3"`` and ``"age5"``
    (Tran et al.'s M-Bank^3 and M-Bank^5 groups) or ``"marital"`` (divorced, married, single).
    With an age scheme the numeric ``age`` leaves X.  Split: stratified by (y, s), reproducible for
    a ``seed``.
    """
    if sensitive not in SENSITIVE:
        raise ValueError(f"sensitive must be one of {SENSITIVE}, got {sensitive!r}")
    frame = bank_frame()
    y, _ = encode_categories(frame["y"], LABEL_NAMES, argument="label 'y'")
    if sensitive == "marital":
        s, groups = encode_categories(frame["marital"], argument="sensitive 'marital'")
        source = ["marital"]
    else:
        s, groups = age_groups(frame["age"].to_numpy(), sensitive)
        source = ["age"]
    numeric = [c for c in NUMERIC if not (drop_duration and c == "duration")]
    return build_dataset(
        "bank", frame, y=y, label_names=LABEL_NAMES, s=s, group_names=groups,
        sensitive_name="age" if sensitive.startswith("age") else sensitive,
        numeric=numeric, categorical=CATEGORICAL, sensitive_columns=source,
        attr_columns=NUMERIC + ["marital"],
        include_sensitive=include_sensitive, test_size=test_size, seed=seed,
    )
