"""Data sets for private and fair learning: bundled real tables, your own CSV, synthetic data.

Every loader returns a `Dataset` (see `pfair.datasets._base`): float64 features X without the
sensitive attribute, int64 labels y in 0..l-1 and int64 groups s in 0..k-1 (encodings fixed from
the whole table before the split), a reproducible 3:1 train/test split stratified by (y, s), numeric
features standardised with training-split statistics, and raw attributes (e.g. age) for
partitioning into silos.  The real tables ship inside the package (``data/``; provenance and
licences in ``DATASETS.md``); nothing is downloaded.

>>> from pfair.datasets import load
>>> ds = load("adult", sensitive="sex")          # doctest: +SKIP
>>> ds.describe()                                # doctest: +SKIP
"""

from __future__ import annotations

from typing import Callable, Dict

import pandas as pd

from ._base import Dataset
from ._preprocess import TablePreprocessor
from ._csv import MAX_DROPPED_SHARE, csv_spec, load_csv, load_csv_spec, parse_csv_spec
from ._synthetic import make_synthetic
from .adult import adult_frame, load_adult
from .bank import bank_frame, load_bank
from .census_kdd import census_kdd_frame, load_census_kdd
from .compas import compas_frame, load_compas
from .credit_card import credit_card_frame, load_credit_card
from .german import german_frame, load_german
from .law_school import law_school_frame, load_law_school
from .shards import read_shard, write_shard

LOADERS: Dict[str, Callable[..., Dataset]] = {
    "adult": load_adult,
    "bank": load_bank,
    "census_kdd": load_census_kdd,
    "compas": load_compas,
    "credit_card": load_credit_card,
    "german": load_german,
    "law_school": load_law_school,
}

FRAMES: Dict[str, Callable[[], pd.DataFrame]] = {
    "adult": adult_frame,
    "bank": bank_frame,
    "census_kdd": census_kdd_frame,
    "compas": compas_frame,
    "credit_card": credit_card_frame,
    "german": german_frame,
    "law_school": law_school_frame,
}


def _key(name: str) -> str:
    return str(name).strip().lower().replace("-", "_")


def list_datasets() -> list:
    """Names of the bundled data sets, sorted; each is a valid ``load(name)``.

    ``load("synthetic", n=..., d=...)`` is also accepted (see `make_synthetic`).
    """
    return sorted(LOADERS)


def load(name: str, **kwargs) -> Dataset:
    """Load a bundled data set by name (``-`` and ``_`` are interchangeable, case ignored),
    ``"synthetic"`` (forwarded to `make_synthetic`), or a user CSV named by a spec
    ``"csv:PATH?label=COL&sensitive=COL&..."`` (see `csv_spec`).  Keyword arguments go to the
    loader, e.g. ``load("compas", sensitive="race_all", seed=3)``."""
    if isinstance(name, str) and name.startswith("csv:"):
        if kwargs:
            raise ValueError(f"{sorted(kwargs)}: a csv spec takes its options inside the string, e.g. &seed=3")
        return load_csv_spec(name)
    key = _key(name)
    if key == "synthetic":
        return make_synthetic(**kwargs)
    if key not in LOADERS:
        raise ValueError(
            f"name: unknown data set {name!r}; choose from {list_datasets()} or 'synthetic'"
        )
    return LOADERS[key](**kwargs)


def load_frame(name: str) -> pd.DataFrame:
    """The raw table a bundled loader starts from: every row of the source file(s), before rows
    with missing values are dropped, before encoding and splitting (a new copy per call)."""
    key = _key(name)
    if key not in FRAMES:
        raise ValueError(f"name: unknown data set {name!r}; choose from {list_datasets()}")
    return FRAMES[key]()


__all__ = [
    "Dataset",
    "TablePreprocessor",
    "MAX_DROPPED_SHARE",
    "list_datasets",
    "load",
    "load_adult",
    "load_bank",
    "load_census_kdd",
    "load_compas",
    "load_credit_card",
    "load_csv",
    "load_csv_spec",
    "csv_spec",
    "parse_csv_spec",
    "load_frame",
    "load_german",
    "load_law_school",
    "read_shard",
    "write_shard",
    "make_synthetic",
]
