"""ProPublica COMPAS, two-year recidivism (Broward County, 2013-2014).

The bundled file keeps 16 of the 53 columns of ``compas-scores-two-years.csv`` (7,214 rows):
identifiers such as names and dates of birth and the later case records are not shipped.  Label
1 = re-offended within two years (45.1 %).  Features: age, juvenile felony / misdemeanour / other
counts, prior count, charge degree (F/M) and whichever of sex / race is not sensitive.  The COMPAS
scores themselves (``decile_score``, ``score_text``) are outputs of the tool under audit and are
not features; they stay available in ``compas_frame()``.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ._base import Dataset, build_dataset, encode_categories
from ._files import cached_table, data_path

NUMERIC = ["age", "juv_fel_count", "juv_misd_count", "juv_other_count", "priors_count"]
CATEGORICAL = ["c_charge_degree", "sex", "race"]
SENSITIVE = ("race", "race_all", "sex")
LABEL_NAMES = ["no_recidivism", "recidivism"]
BINARY_RACES = ["African-American", "Caucasian"]


@cached_table
def compas_frame() -> pd.DataFrame:
    """The 7,214 rows of the two-year file, in the 16 bundled columns."""
    return pd.read_csv(data_path("compas-scores-two-years.trimmed.csv.xz"))


def propublica_mask(frame: pd.DataFrame) -> np.ndarray:
    """ProPublica's screening filter (6,172 of 7,214 rows).

    Keep rows whose COMPAS screening is within 30 days of the arrest, with a known recidivism
    status, a felony or misdemeanour charge (not ordinary traffic offences, "O") and a score.
    """
    days = frame["days_b_screening_arrest"]
    return (
        days.between(-30, 30)
        & (frame["is_recid"] != -1)
        & (frame["c_charge_degree"] != "O")
        & (frame["score_text"] != "N/A")
    ).to_numpy()


def load_compas(
    *,
    sensitive: str = "race",
    test_size: float = 0.25,
    seed: int = 0,
    include_sensitive: bool = False,
    propublica_filter: bool = False,
) -> Dataset:
    """COMPAS: label 1 = two-year recidivism.

    ``sensitive``:
      - ``"race"``: the African-American vs Caucasian subset (6,150 of 7,214 rows), k = 2;
      - ``"race_all"``: every row, k = 6 (African-American, Asian, Caucasian, Hispanic,
        Native American, Other);
      - ``"sex"``: every row, k = 2 (Female, Male).
    ``propublica_filter=True`` first applies ProPublica's screening filter (`propublica_mask`).
    Split: stratified by (y, s), reproducible for a ``seed``.
    """
    if sensitive not in SENSITIVE:
        raise ValueError(f"sensitive must be one of {SENSITIVE}, got {sensitive!r}")
    frame = compas_frame()
    if propublica_filter:
        frame = frame[propublica_mask(frame)]
    if sensitive == "race":
        frame = frame[frame["race"].isin(BINARY_RACES)]
    frame = frame.reset_index(drop=True)
    column = "sex" if sensitive == "sex" else "race"
    y = frame["two_year_recid"].to_numpy(dtype=np.int64)
    s, groups = encode_categories(frame[column], argument=f"sensitive {sensitive!r}")
    return build_dataset(
        "compas", frame, y=y, label_names=LABEL_NAMES, s=s, group_names=groups,
        sensitive_name=column, numeric=NUMERIC, categorical=CATEGORICAL,
        sensitive_columns=[column], attr_columns=NUMERIC + ["sex", "race"],
        include_sensitive=include_sensitive, test_size=test_size, seed=seed,
    )
