"""`load_csv`: the shipped data sets' preprocessing, applied to a user's own table; `csv_spec` /
`load_csv_spec`: the same call written as one string (``csv:PATH?label=..&sensitive=..``), which is
how a sweep or any other place that takes a data set *name* reads a user's CSV."""

from __future__ import annotations

import dataclasses
import os
import warnings
from typing import Any, Optional, Sequence, Union
from urllib.parse import parse_qsl, urlencode

import numpy as np
import pandas as pd
from pandas.api import types as ptypes

from pfair._validation import MAX_GROUPS, check_groups

from ._base import Dataset, build_dataset, encode_categories


def _as_list(value, argument: str) -> list:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    try:
        return list(value)
    except TypeError:
        raise ValueError(f"{argument} must be a column name or a list of column names") from None


#: The largest share of a table's rows `load_csv` drops for missing values without being told to
#: (``dropna=None``, the default): above it loading is refused with a ``ValueError`` naming the
#: columns, because a model trained on what is left may no longer describe the data (a column
#: 70% empty would silently cost 70% of the records).
MAX_DROPPED_SHARE = 0.05


def _check_columns(frame: pd.DataFrame, columns: Sequence, argument: str) -> None:
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise ValueError(
            f"{argument}: column(s) {missing!r} not in the data (columns: {list(frame.columns)!r})"
        )


def load_csv(
    path_or_dataframe: Union[str, os.PathLike, pd.DataFrame],
    *,
    label: str,
    sensitive: str,
    categorical: Optional[Sequence[str]] = None,
    positive_label=None,
    drop: Optional[Sequence[str]] = None,
    keep: Optional[Sequence[str]] = None,
    test_size: float = 0.25,
    seed: int = 0,
    include_sensitive: bool = False,
    stratify: bool = True,
    name: Optional[str] = None,
    dropna: Optional[bool] = None,
) -> Dataset:
    """Build a `Dataset` from a CSV file (anything ``pandas.read_csv`` reads) or a DataFrame.

    - ``label``: the label column.  Without ``positive_label`` its sorted distinct values become
      classes 0..l-1 (multi-class allowed); with it, y = 1 where the label equals
      ``positive_label`` and 0 elsewhere (label_names ``["<other value>", "<positive>"]`` when the
      column has two values, ``["not <positive>", "<positive>"]`` when several values merge).
    - ``sensitive``: the sensitive column, any dtype; its sorted distinct values become groups
      0..k-1.  It never enters X unless ``include_sensitive``.  Bin continuous attributes first.
    - ``categorical``: columns to one-hot encode.  ``None`` (default) auto-detects: columns of
      object, string, category or bool dtype are categorical, all others numeric.  When a list is
      given, it is taken as complete: a non-numeric column not in it raises ``ValueError``.
    - ``drop``: columns to ignore.  Every remaining column is a feature.
    - ``keep``: columns that are NOT features but stay available raw in ``attrs_train`` /
      ``attrs_test``, e.g. a hospital or region column used only to split the records into silos
      (``Federation.partition(ds, by="region")``).  A column cannot be both kept and dropped.
    - Missing values (in any used column: label, sensitive, features, ``keep``; pfair does not
      impute) are counted per column, and ``dropna`` decides what happens to their rows:
      ``None`` (default) drops them with a ``UserWarning`` saying how many when they are at most
      :data:`MAX_DROPPED_SHARE` (5%) of the rows, and refuses to load (``ValueError`` naming each
      column with its missing share, and the ways out) when they are more; ``True`` drops them
      whatever their share, with the same warning; ``False`` refuses any missing value.  Ways out
      of a refusal: ``drop=[column]`` when a feature column is mostly empty, ``dropna=True``, or
      imputing: build ``X`` yourself and put a ``sklearn.impute.SimpleImputer`` before
      `SteFFLe` in a scikit-learn ``Pipeline``.  ``train_index`` / ``test_index`` are the
      surviving rows' positions in the original file (``frame.iloc``).
    - Split: stratified by (y, s) (``stratify=True``) or plain random, 3:1 for ``test_size=0.25``,
      reproducible for a ``seed``.  Numeric features are standardised with the training split's
      mean and std; categorical ones are one-hot over the categories of the whole table.
    - ``attrs_*``: the raw (unscaled, not one-hot) feature columns, the ``keep`` columns and the
      raw sensitive column, row-aligned with ``X_*``: any of them can be the ``by=`` of
      :meth:`pfair.Federation.partition`.

    Errors (``ValueError``, naming the argument): a missing column; a label or sensitive column
    with fewer than 2 distinct values; ``positive_label`` absent from the label column; an
    undeclared non-numeric column; a group without records in one of the splits; missing values
    in more rows than ``dropna`` allows.
    """
    if isinstance(path_or_dataframe, pd.DataFrame):
        frame = path_or_dataframe
        default_name = "dataframe"
    else:
        frame = pd.read_csv(path_or_dataframe)
        default_name = os.path.splitext(os.path.basename(os.fspath(path_or_dataframe)))[0]
    if dropna is not None and not isinstance(dropna, (bool, np.bool_)):
        raise ValueError(f"dropna must be None (drop at most {MAX_DROPPED_SHARE:.0%} of the rows), True or False, "
                         f"got {dropna!r}")
    dropna = None if dropna is None else bool(dropna)  # numpy's bools too
    if not isinstance(label, str) or not label:
        raise ValueError("label must be a column name")
    if not isinstance(sensitive, str) or not sensitive:
        raise ValueError("sensitive must be a column name")
    _check_columns(frame, [label], "label")
    _check_columns(frame, [sensitive], "sensitive")
    if label == sensitive:
        raise ValueError("label and sensitive must be different columns")
    drop_cols = _as_list(drop, "drop")
    _check_columns(frame, drop_cols, "drop")
    if label in drop_cols or sensitive in drop_cols:
        raise ValueError("drop: cannot drop the label or the sensitive column")
    keep_cols = list(dict.fromkeys(_as_list(keep, "keep")))
    _check_columns(frame, keep_cols, "keep")
    both = [c for c in keep_cols if c in drop_cols]
    if both:
        raise ValueError(f"keep: column(s) {both!r} are also in drop; a kept column must not be dropped")

    features = [
        c for c in frame.columns if c not in drop_cols and c not in keep_cols and c not in (label, sensitive)
    ]
    if categorical is None:
        cat_cols = [
            c for c in features
            if not ptypes.is_numeric_dtype(frame[c]) or ptypes.is_bool_dtype(frame[c])
        ]
    else:
        cat_cols = _as_list(categorical, "categorical")
        _check_columns(frame, cat_cols, "categorical")
        bad = [c for c in cat_cols if c in (label, sensitive) or c in drop_cols or c in keep_cols]
        if bad:
            raise ValueError(
                f"categorical: {bad!r} are the label, the sensitive, dropped or kept (non-feature) columns"
            )
        undeclared = [
            c for c in features
            if c not in cat_cols
            and (not ptypes.is_numeric_dtype(frame[c]) or ptypes.is_bool_dtype(frame[c]))
        ]
        if undeclared:
            raise ValueError(
                f"categorical: non-numeric column(s) {undeclared!r} are not declared categorical; "
                "add them to categorical, drop them, or pass categorical=None to auto-detect"
            )
    num_cols = [c for c in features if c not in cat_cols]

    used = list(dict.fromkeys([label, sensitive] + features + keep_cols))
    frame = frame[used].reset_index(drop=True)
    where = name or default_name
    if len(frame) == 0:
        raise ValueError(f"{where}: the table has its header but no rows (columns {list(frame.columns)!r})")
    infinite = [c for c in num_cols if np.isinf(pd.to_numeric(frame[c], errors="coerce").to_numpy(dtype=float)).any()]
    if infinite:
        from_file = not isinstance(path_or_dataframe, pd.DataFrame)

        def first(c: str) -> str:
            i = int(np.flatnonzero(np.isinf(frame[c].to_numpy(dtype=float)))[0])
            return f"line {i + 2} of the file" if from_file else f"row {i}"  # line 1: the header

        counts = ", ".join(f"{c!r} ({int(np.isinf(frame[c].to_numpy(dtype=float)).sum())} row(s), the first on "
                           f"{first(c)})" for c in infinite)
        raise ValueError(f"{where}: column(s) {counts} hold +inf or -inf, which no model can scale; replace them (by "
                         "a cap, or empty cells to drop those rows) or --drop the column")
    complete = _rows_to_keep(frame, dropna, label=label, sensitive=sensitive, name=name or default_name)
    row_index = np.flatnonzero(complete)
    frame = frame[complete].reset_index(drop=True)
    if len(frame) == 0:
        raise ValueError("no rows left after dropping rows with missing values")

    n_labels = frame[label].nunique()
    if n_labels < 2:
        raise ValueError(f"label: column {label!r} has {n_labels} distinct value(s), need >= 2")
    n_groups = frame[sensitive].nunique()
    if n_groups < 2:
        raise ValueError(
            f"sensitive: column {sensitive!r} has {n_groups} distinct value(s), need >= 2"
        )
    positive_label = _match_dtype(frame[label], positive_label)
    if positive_label is None:
        _check_label_column(frame[label], label)
        y, label_names = encode_categories(frame[label], argument=f"label {label!r}")
    else:
        is_pos = (frame[label] == positive_label).to_numpy()
        if not is_pos.any():
            raise ValueError(
                f"positive_label: {positive_label!r} does not occur in label column {label!r}"
            )
        if is_pos.all():
            raise ValueError(f"positive_label: every row of {label!r} equals {positive_label!r}")
        y = is_pos.astype(np.int64)
        others = pd.unique(frame[label][~is_pos])
        # Two values: the other one names the negative class; "not X" only when several merge.
        negative = str(others[0]) if len(others) == 1 else f"not {positive_label}"
        label_names = [negative, str(positive_label)]
    column = frame[sensitive].to_numpy()
    if column.dtype.kind in "fiu":  # a numeric attribute must be binned first (each value is a group)
        try:
            check_groups(np.unique(column), column, name=f"frame[{sensitive!r}]")
        except ValueError as exc:
            raise ValueError(f"sensitive: {exc}") from None
    s, group_names = encode_categories(frame[sensitive], argument=f"sensitive {sensitive!r}")
    return build_dataset(
        name or default_name, frame, y=y, label_names=label_names, s=s, group_names=group_names,
        sensitive_name=sensitive, numeric=num_cols, categorical=cat_cols,
        sensitive_columns=[sensitive], attr_columns=features + keep_cols + [sensitive],
        include_sensitive=include_sensitive, test_size=test_size, seed=seed, stratify=stratify,
        row_index=row_index,
    )


def _rows_to_keep(frame: pd.DataFrame, dropna: Optional[bool], *, label: str, sensitive: str,
                  name: str) -> np.ndarray:
    """The mask of ``frame``'s rows without a missing value, after `load_csv`'s ``dropna`` rule:
    refuse (``ValueError``) or drop with a ``UserWarning`` that says how many rows and why."""
    missing = frame.isna()
    complete = ~missing.any(axis=1).to_numpy()
    n, n_dropped = len(frame), int((~complete).sum())
    if n_dropped == 0:
        return complete
    counts = missing.sum(axis=0)
    counts = counts[counts > 0].sort_values(ascending=False, kind="stable")
    per_column = ", ".join(f"{c!r} {int(k):,} ({k / n:.1%})" for c, k in counts.items())
    share = n_dropped / n
    what = f"{n_dropped:,} of {n:,} rows ({share:.1%}) of {name!r} have a missing value"
    if dropna is True or (dropna is None and share <= MAX_DROPPED_SHARE):
        why = ("dropna=True" if dropna else
               f"at most {MAX_DROPPED_SHARE:.0%} of the rows (pfair.datasets.MAX_DROPPED_SHARE) are dropped unasked")
        warnings.warn(f"load_csv: {what} and were dropped ({why}); missing per column: {per_column}. "
                      f"{n - n_dropped:,} rows remain; pfair does not impute.", UserWarning, stacklevel=3)
        return complete
    if dropna is None:
        refusal = (f"{what}, more than the {MAX_DROPPED_SHARE:.0%} load_csv drops unasked "
                   "(pfair.datasets.MAX_DROPPED_SHARE)")
    else:
        refusal = f"{what} and dropna=False keeps every row"
    fixes = []
    empty_features = [c for c, k in counts.items() if c not in (label, sensitive) and k / n > MAX_DROPPED_SHARE]
    if empty_features:
        fixes.append(f"leave the column(s) out with drop={empty_features!r} (command line: "
                     f"--drop {' '.join(map(str, empty_features))})")
    fixes.append(f"drop those {n_dropped:,} rows anyway with dropna=True (command line: --dropna)")
    if any(c not in (label, sensitive) for c in counts.index):
        fixes.append("impute the features: build X yourself and fit make_pipeline(SimpleImputer(), SteFFLe(...)) "
                     "from scikit-learn with steffle__sensitive_features=s")
    note = ""
    if label in counts.index or sensitive in counts.index:
        note = f" A row without its {label!r} (label) or {sensitive!r} (sensitive) value can only be dropped."
    ways = "; or ".join(fixes)
    raise ValueError(f"load_csv: {refusal}; missing values per column: {per_column}. "
                     + (f"Either {ways}." if len(fixes) > 1 else f"To load it, {ways}.") + note)


def _match_dtype(column: pd.Series, value: Any) -> Any:
    """``value`` as the label column's type when it was typed as text (a command line, a spec):
    ``"1"`` becomes ``1`` for an integer column, ``"0.5"`` becomes ``0.5`` for a float one."""
    if not isinstance(value, str) or not ptypes.is_numeric_dtype(column) or ptypes.is_bool_dtype(column):
        return value
    try:
        number = float(value)
    except ValueError:
        return value
    return int(number) if ptypes.is_integer_dtype(column) and number.is_integer() else number


#: load_csv options a spec may set, and how the text of each is read.
_CSV_OPTIONS = {
    "label": str, "sensitive": str, "positive_label": str, "categorical": "list", "drop": "list",
    "keep": "list", "partition_by": str, "test_size": float, "seed": int, "include_sensitive": "bool",
    "stratify": "bool", "name": str, "dropna": "bool",
}


def csv_spec(path: Union[str, os.PathLike], *, label: str, sensitive: str, **options: Any) -> str:
    """One string naming a user CSV and the `load_csv` options to read it with, e.g.
    ``csv:/data/loans.csv?label=default&sensitive=sex&positive_label=1&keep=branch&partition_by=branch``.

    ``partition_by`` (not a `load_csv` argument) is the column the data set is split into silos by
    when no ``by=`` is given (:meth:`pfair.Federation.for_dataset`); it is kept out of the features
    unless it is one.  Lists are comma-separated.  `pfair.datasets.load` and ``pfair sweep
    --dataset`` accept the string as a data set name; `load_csv_spec` reads it.
    """
    query: dict[str, str] = {"label": label, "sensitive": sensitive}
    for key, value in options.items():
        if value is None:
            continue
        if key not in _CSV_OPTIONS:
            raise ValueError(f"{key}: not an option of a csv spec; choose from {sorted(_CSV_OPTIONS)}")
        if isinstance(value, (list, tuple)):
            value = ",".join(map(str, value))
        query[key] = str(value)
    return f"csv:{os.fspath(path)}?{urlencode(query)}"


def parse_csv_spec(spec: str) -> tuple[str, dict[str, Any]]:
    """``(path, options)`` of a spec written by `csv_spec`; ``ValueError`` naming the bad part."""
    if not isinstance(spec, str) or not spec.startswith("csv:"):
        raise ValueError(f"dataset: {spec!r} is not a csv spec (csv:PATH?label=COL&sensitive=COL)")
    path, _, query = spec[4:].partition("?")
    if not path:
        raise ValueError(f"dataset: {spec!r} names no file; write csv:PATH?label=COL&sensitive=COL")
    options: dict[str, Any] = {}
    for key, text in parse_qsl(query, keep_blank_values=True):
        kind = _CSV_OPTIONS.get(key)
        if kind is None:
            raise ValueError(f"dataset: {key!r} in {spec!r} is not a csv option; choose from {sorted(_CSV_OPTIONS)}")
        if kind == "list":
            options[key] = [c for c in text.split(",") if c]
        elif kind == "bool":
            if text.lower() not in ("1", "0", "true", "false", "yes", "no"):
                raise ValueError(f"dataset: {key}={text!r} in {spec!r} must be true or false")
            options[key] = text.lower() in ("1", "true", "yes")
        else:
            try:
                options[key] = kind(text)
            except ValueError:
                raise ValueError(f"dataset: {key}={text!r} in {spec!r} must be a {kind.__name__}") from None
    for required in ("label", "sensitive"):
        if not options.get(required):
            raise ValueError(f"dataset: {spec!r} has no {required}=COLUMN; add &{required}=COLUMN")
    return path, options


def _check_label_column(column: pd.Series, label: str) -> None:
    """A label column without ``positive_label`` becomes one class per distinct value: refuse a
    continuous one (float values that are not whole numbers) and warn past :data:`MAX_GROUPS`
    classes, naming the two ways out."""
    values = column.to_numpy()
    distinct = pd.unique(column)
    fix = (f"pass positive_label= (y = 1 where the label equals it) or bin the column first, e.g. "
           f"frame[{label!r}] = pd.cut(frame[{label!r}], bins) or (frame[{label!r}] > threshold)")
    if values.dtype.kind == "f" and not np.all(distinct == np.round(distinct)):
        raise ValueError(
            f"label: column {label!r} looks continuous ({distinct.size} distinct float values, e.g. "
            f"{np.sort(distinct)[:3].tolist()}); pfair trains classifiers, and every distinct value would be a class. "
            f"Either {fix}"
        )
    if distinct.size > MAX_GROUPS:
        warnings.warn(f"label: column {label!r} has {distinct.size} distinct values, so the model gets "
                      f"{distinct.size} classes; if that is not meant, {fix}", UserWarning, stacklevel=3)


def load_csv_spec(spec: str) -> Dataset:
    """The `Dataset` a `csv_spec` string names (`load_csv` with its options), its
    ``partition_by`` recorded on the data set.  The data set's name is the spec itself, so that
    results tables say which file and options they came from."""
    path, options = parse_csv_spec(spec)
    if not os.path.exists(path):
        raise ValueError(f"dataset: file {path!r} of {spec!r} does not exist")
    by = options.pop("partition_by", None)
    options.setdefault("name", spec)
    if by is not None:
        header = pd.read_csv(path, nrows=0).columns
        if by not in header:
            raise ValueError(f"partition_by: column {by!r} not in {path!r} (columns: {list(header)!r})")
        # A partition column that is not a feature must be kept to be available in attrs_*.
        if by in options.get("drop", []):
            options["drop"] = [c for c in options["drop"] if c != by]
            options["keep"] = list(dict.fromkeys(options.get("keep", []) + [by]))
    ds = load_csv(path, **options)
    return dataclasses.replace(ds, partition_by=by) if by is not None else ds
