"""UCI Census-Income (KDD), the 1994-1995 Current Population Surveys: predict income > $50K.

199,523 training and 99,762 test rows (299,285 in all, 6.2 % positives), combined and split again
like the other data sets (the original split is kept as ``attrs_*["source"]``).  The large data set
here, for scale tests.

Of the 40 attributes, kept: 7 numeric (age, wage per hour, capital gains and losses, dividends,
persons worked for employer, weeks worked) and 22 categorical with few levels (race and sex
included), 155-158 features after one-hot, depending on the sensitive attribute.  Left out:
``instance_weight`` (a survey sampling weight that UCI says not to use as a feature; kept in
``attrs_*``), the detailed industry / occupation recodes and the detailed household
status (the major codes and the household summary are kept), the state of previous residence (the
region is kept), the four migration columns (about half ``?``) and the three countries of birth
(citizenship is kept).  ``?`` in a kept column is its own category; no row is dropped.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ._base import Dataset, build_dataset, encode_categories
from ._files import cached_table, data_path

COLUMNS = [
    "age", "class_of_worker", "detailed_industry_recode", "detailed_occupation_recode",
    "education", "wage_per_hour", "enroll_in_edu_inst_last_wk", "marital_stat",
    "major_industry_code", "major_occupation_code", "race", "hispanic_origin", "sex",
    "member_of_a_labor_union", "reason_for_unemployment", "full_or_part_time_employment_stat",
    "capital_gains", "capital_losses", "dividends_from_stocks", "tax_filer_stat",
    "region_of_previous_residence", "state_of_previous_residence",
    "detailed_household_and_family_stat", "detailed_household_summary_in_household",
    "instance_weight", "migration_code_change_in_msa", "migration_code_change_in_reg",
    "migration_code_move_within_reg", "live_in_this_house_1_year_ago",
    "migration_prev_res_in_sunbelt", "num_persons_worked_for_employer",
    "family_members_under_18", "country_of_birth_father", "country_of_birth_mother",
    "country_of_birth_self", "citizenship", "own_business_or_self_employed",
    "fill_inc_questionnaire_for_veterans_admin", "veterans_benefits", "weeks_worked_in_year",
    "year", "income",
]
NUMERIC = [
    "age", "wage_per_hour", "capital_gains", "capital_losses", "dividends_from_stocks",
    "num_persons_worked_for_employer", "weeks_worked_in_year",
]
CATEGORICAL = [
    "class_of_worker", "education", "enroll_in_edu_inst_last_wk", "marital_stat",
    "major_industry_code", "major_occupation_code", "race", "hispanic_origin", "sex",
    "member_of_a_labor_union", "reason_for_unemployment", "full_or_part_time_employment_stat",
    "tax_filer_stat", "region_of_previous_residence", "detailed_household_summary_in_household",
    "live_in_this_house_1_year_ago", "family_members_under_18", "citizenship",
    "own_business_or_self_employed", "fill_inc_questionnaire_for_veterans_admin",
    "veterans_benefits", "year",
]
SENSITIVE = ("sex", "race")
LABEL_NAMES = ["<=50K", ">50K"]
_RAW_LABELS = {"- 50000.": "<=50K", "50000+.": ">50K"}


def _read(filename: str) -> pd.DataFrame:
    dtypes = {c: "category" for c in COLUMNS}
    dtypes.update({c: np.float64 for c in NUMERIC + ["instance_weight"]})
    dtypes["income"] = str
    return pd.read_csv(
        data_path(filename), header=None, names=COLUMNS, skipinitialspace=True,
        keep_default_na=False, dtype=dtypes,
    )


@cached_table
def census_kdd_frame() -> pd.DataFrame:
    """All 299,285 rows, train file first; ``income`` normalised to ``<=50K`` / ``>50K``.

    Categorical columns are pandas categoricals (memory); ``source`` is the original file.
    """
    train = _read("census_income_1994_1995_train.csv.xz")
    test = _read("census_income_1994_1995_test.csv.xz")
    frame = pd.concat([train.assign(source="train"), test.assign(source="test")],
                      ignore_index=True)
    # concat of categoricals with different category sets gives object columns; restore.
    for c in COLUMNS:
        if c not in NUMERIC and c not in ("instance_weight", "income"):
            frame[c] = frame[c].astype("category")
    frame["source"] = frame["source"].astype("category")
    frame["income"] = frame["income"].map(_RAW_LABELS)
    return frame


def load_census_kdd(
    *,
    sensitive: str = "sex",
    test_size: float = 0.25,
    seed: int = 0,
    include_sensitive: bool = False,
) -> Dataset:
    """KDD Census-Income: label 1 = income >50K; sensitive ``"sex"`` or ``"race"`` (5 groups).

    Race groups (sorted): Amer Indian Aleut or Eskimo, Asian or Pacific Islander, Black, Other,
    White.  Split: stratified by (y, s), reproducible for a ``seed``.  X is about 300k x 150 float64
    (about 350 MB); ``attrs_*`` hold age, the other numerics, sex, race, instance_weight, source.
    """
    if sensitive not in SENSITIVE:
        raise ValueError(f"sensitive must be one of {SENSITIVE}, got {sensitive!r}")
    frame = census_kdd_frame()
    y, _ = encode_categories(frame["income"], LABEL_NAMES, argument="label 'income'")
    s, groups = encode_categories(frame[sensitive], argument=f"sensitive {sensitive!r}")
    return build_dataset(
        "census_kdd", frame, y=y, label_names=LABEL_NAMES, s=s, group_names=groups,
        sensitive_name=sensitive, numeric=NUMERIC, categorical=CATEGORICAL,
        sensitive_columns=[sensitive],
        attr_columns=NUMERIC + ["sex", "race", "instance_weight", "source"],
        include_sensitive=include_sensitive, test_size=test_size, seed=seed,
    )
