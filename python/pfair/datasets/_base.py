"""The `Dataset` type and the preprocessing every loader shares.

A loader turns one cleaned table (one row per record, raw values) into a `Dataset` in four steps:

1. global encodings: the label y and the sensitive attribute s are mapped to 0..l-1 and 0..k-1 from
   the WHOLE table, before any split, so every split and every silo uses the same indices;
2. a reproducible 3:1 split (`split_indices`), stratified by the pair (y, s) unless told otherwise;
3. features: categorical columns one-hot encoded over the categories seen in the whole table,
   numeric columns standardised with mean and standard deviation of the TRAINING split only
   (`encode_features`); the column(s) the sensitive attribute comes from never enter X unless
   ``include_sensitive=True``;
4. checks: X is finite float64, y and s are int64, every group has records in both splits.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Sequence

import numpy as np
import pandas as pd

from ._preprocess import TablePreprocessor, category_order

__all__ = ["Dataset", "split_indices", "encode_features", "encode_categories", "build_dataset"]


@dataclass(frozen=True, eq=False)
class Dataset:
    """A supervised data set with one discrete sensitive attribute, already split and encoded.

    Records are (x, y, s): ``X_*[i]`` holds the preprocessed non-sensitive features, ``y_*[i]`` the
    label index in 0..l-1 and ``s_*[i]`` the sensitive-group index in 0..k-1.  The index maps are
    global: ``label_names[y]`` and ``group_names[s]`` give the category, identical in both splits.
    ``attrs_*`` keep raw (unscaled) attributes row-aligned with ``X_*``, e.g. ``age`` for the
    heterogeneity partitioner (:meth:`pfair.Federation.partition` ``by=``), and the raw sensitive
    column(s).

    ``train_index`` / ``test_index`` are the split's row positions in the table the loader read:
    for :func:`pfair.datasets.load_csv`, positions (0-based, ``frame.iloc``) in your CSV file or
    DataFrame, rows dropped for missing values never appearing; for a bundled loader, positions in
    its cleaned table.  ``X_train[i]`` is row ``train_index[i]``, so
    ``frame.iloc[ds.train_index]`` lines your own columns up with the training records.

    ``preprocessor`` is the fitted :class:`~pfair.datasets.TablePreprocessor` that made ``X_*``
    from the table's feature columns (``preprocessor.transform(frame.iloc[ds.test_index])`` is
    ``X_test``), to apply to new rows and to save with a model (:func:`pfair.save_model`); None for
    a data set loaded with ``include_sensitive=True`` (its sensitive block is made from s, not from
    a column) or built by hand.

    ``partition_by``, when set, is the column of ``attrs_*`` that
    :meth:`pfair.Federation.partition` and :meth:`~pfair.Federation.for_dataset` split by when
    no ``by=`` is given (set by a csv spec, see :func:`pfair.datasets.csv_spec`).
    """

    name: str
    X_train: np.ndarray
    y_train: np.ndarray
    s_train: np.ndarray
    X_test: np.ndarray
    y_test: np.ndarray
    s_test: np.ndarray
    feature_names: list[str]
    label_names: list[str]
    sensitive_name: str
    group_names: list[str]
    attrs_train: pd.DataFrame = field(repr=False)
    attrs_test: pd.DataFrame = field(repr=False)
    train_index: Optional[np.ndarray] = field(default=None, repr=False)
    test_index: Optional[np.ndarray] = field(default=None, repr=False)
    partition_by: Optional[str] = field(default=None, repr=False)
    preprocessor: Optional["TablePreprocessor"] = field(default=None, repr=False)

    @property
    def n_features(self) -> int:
        """d, the number of columns of X."""
        return int(self.X_train.shape[1])

    @property
    def n_groups(self) -> int:
        """k, the number of sensitive groups."""
        return len(self.group_names)

    @property
    def n_classes(self) -> int:
        """l, the number of label classes."""
        return len(self.label_names)

    @property
    def n_train(self) -> int:
        return int(self.X_train.shape[0])

    @property
    def n_test(self) -> int:
        return int(self.X_test.shape[0])

    def __repr__(self) -> str:
        return (
            f"Dataset(name={self.name!r}, n_train={self.n_train}, n_test={self.n_test}, "
            f"d={self.n_features}, sensitive={self.sensitive_name!r} (k={self.n_groups}), "
            f"l={self.n_classes})"
        )

    def describe(self) -> pd.DataFrame:
        """Sizes, group counts and label balance per split (rows ``train``, ``test``, ``all``).

        Columns: ``n``; ``n[<sensitive>=<group>]`` record counts per group; ``p(y=<label>)`` label
        fractions; ``p(y=<label_names[-1]>|<group>)`` the last class's rate inside each group (for a
        binary task, the positive rate per group, whose spread is the data's own DP gap).
        """
        rows = {}
        for split, y, s in (
            ("train", self.y_train, self.s_train),
            ("test", self.y_test, self.s_test),
            ("all", np.concatenate([self.y_train, self.y_test]),
             np.concatenate([self.s_train, self.s_test])),
        ):
            row: dict = {"n": int(y.shape[0])}
            group_counts = np.bincount(s, minlength=self.n_groups)
            for r, g in enumerate(self.group_names):
                row[f"n[{self.sensitive_name}={g}]"] = int(group_counts[r])
            label_counts = np.bincount(y, minlength=self.n_classes)
            for u, lab in enumerate(self.label_names):
                row[f"p(y={lab})"] = label_counts[u] / max(len(y), 1)
            last = self.n_classes - 1
            for r, g in enumerate(self.group_names):
                in_group = s == r
                row[f"p(y={self.label_names[last]}|{g})"] = (
                    float(np.mean(y[in_group] == last)) if in_group.any() else float("nan")
                )
            rows[split] = row
        return pd.DataFrame.from_dict(rows, orient="index")

    def to_frame(self, split: str = "train") -> pd.DataFrame:
        """The encoded features of one split as a DataFrame, plus columns ``y`` and ``s``."""
        if split not in ("train", "test"):
            raise ValueError(f"split must be 'train' or 'test', got {split!r}")
        X, y, s = (
            (self.X_train, self.y_train, self.s_train)
            if split == "train"
            else (self.X_test, self.y_test, self.s_test)
        )
        frame = pd.DataFrame(X, columns=list(self.feature_names))
        frame["y"] = y
        frame["s"] = s
        return frame


# ----------------------------------------------------------------------------------------------
# Encodings


def encode_categories(
    values: pd.Series, order: Optional[Sequence] = None, *, argument: str = "column"
) -> tuple[np.ndarray, list]:
    """Map a column to int64 indices 0..m-1 fixed from ALL its values.

    Without ``order`` the categories are the sorted distinct values (numbers numerically, anything
    else by its string form), so the encoding is deterministic.  With ``order`` the given sequence
    is the index map and any value outside it raises ``ValueError``.
    """
    if order is None:
        uniques = pd.unique(values.dropna())
        try:
            order = sorted(uniques)
        except TypeError:  # mixed types: fall back to the string form
            order = sorted(uniques, key=str)
    order = list(order)
    codes = pd.Categorical(values, categories=order).codes.astype(np.int64)
    if (codes < 0).any():
        bad = pd.unique(values[codes < 0])[:5]
        raise ValueError(f"{argument}: values {list(bad)!r} are outside the categories {order!r}")
    return codes, [str(c) if not isinstance(c, str) else c for c in order]


def split_indices(
    n: int,
    test_size: float = 0.25,
    seed: int = 0,
    strata: Optional[np.ndarray] = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Reproducible train/test row indices for ``n`` records.

    With ``strata`` (an int array of length n, e.g. ``y * k + s``) each stratum is shuffled and
    ``round(test_size * n_stratum)`` of its records go to the test split, at least one and at most
    n_stratum - 1 when the stratum has two or more records; a single-record stratum goes to train.
    Without strata it is a plain random split with ``round(test_size * n)`` test records.  Both
    index arrays come back in a random order (not the file order), generated by
    ``numpy.random.default_rng(seed)``.
    """
    if not 0.0 < test_size < 1.0:
        raise ValueError(f"test_size must be in (0, 1), got {test_size!r}")
    rng = np.random.default_rng(seed)
    if strata is None:
        perm = rng.permutation(n)
        n_test = int(round(test_size * n))
        return perm[n_test:], perm[:n_test]
    strata = np.asarray(strata)
    order = np.argsort(strata, kind="stable")
    bounds = np.flatnonzero(np.diff(strata[order])) + 1
    train_parts, test_parts = [], []
    for members in np.split(order, bounds):
        members = rng.permutation(members)
        m = members.shape[0]
        n_test = int(round(test_size * m))
        if m >= 2:
            n_test = min(max(n_test, 1), m - 1)
        else:
            n_test = 0
        test_parts.append(members[:n_test])
        train_parts.append(members[n_test:])
    train = rng.permutation(np.concatenate(train_parts))
    test = rng.permutation(np.concatenate(test_parts))
    return train, test


def encode_features(
    frame: pd.DataFrame,
    numeric: Sequence[str],
    categorical: Sequence[str],
    train_idx: np.ndarray,
    test_idx: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, list]:
    """One-hot ``categorical`` and standardise ``numeric`` columns; return X_train, X_test, names.

    Numeric column j becomes (v - mean_train) / std_train, both computed on ``train_idx`` rows only
    (population std; a constant column gets std 1, i.e. it is only centred).  Categorical column c
    becomes one 0/1 column ``c=<value>`` per category seen in the whole table (sorted), so a
    category absent from train gives an all-zero training column rather than an unseen-value error.
    Numeric columns come first, then the categorical blocks in the order given.
    """
    names: list = []
    blocks_width = []
    codes_list = []
    for c in categorical:
        codes, cats = encode_categories(frame[c], argument=f"categorical column {c!r}")
        codes_list.append(codes)
        blocks_width.append(len(cats))
        names.extend(f"{c}={v}" for v in cats)
    d_num = len(numeric)
    d = d_num + sum(blocks_width)
    out = []
    for idx in (train_idx, test_idx):
        X = np.zeros((idx.shape[0], d), dtype=np.float64)
        if d_num:
            X[:, :d_num] = frame[list(numeric)].to_numpy(dtype=np.float64)[idx]
        offset = d_num
        rows = np.arange(idx.shape[0])
        for codes, width in zip(codes_list, blocks_width):
            X[rows, offset + codes[idx]] = 1.0
            offset += width
        out.append(X)
    X_train, X_test = out
    if d_num:
        mean = X_train[:, :d_num].mean(axis=0)
        std = X_train[:, :d_num].std(axis=0)
        std[~(std > 0)] = 1.0
        X_train[:, :d_num] = (X_train[:, :d_num] - mean) / std
        X_test[:, :d_num] = (X_test[:, :d_num] - mean) / std
    return X_train, X_test, list(numeric) + names


def build_dataset(
    name: str,
    frame: pd.DataFrame,
    *,
    y: np.ndarray,
    label_names: Sequence[str],
    s: np.ndarray,
    group_names: Sequence[str],
    sensitive_name: str,
    numeric: Sequence[str],
    categorical: Sequence[str],
    sensitive_columns: Sequence[str],
    attr_columns: Sequence[str],
    include_sensitive: bool = False,
    test_size: float = 0.25,
    seed: int = 0,
    stratify: bool = True,
    row_index: Optional[np.ndarray] = None,
) -> Dataset:
    """Split, encode and check; the common tail of every loader.

    ``y`` and ``s`` are already globally encoded int arrays aligned with ``frame``.
    ``sensitive_columns`` are the raw columns s is derived from: they are removed from the feature
    lists (and their one-hot / numeric values appended only when ``include_sensitive``).
    ``attr_columns`` are copied raw into ``attrs_train`` / ``attrs_test``.
    ``row_index`` (default ``0..len(frame)-1``) maps each row of ``frame`` to its position in the
    table the user gave; ``Dataset.train_index`` / ``test_index`` are taken from it.
    """
    y = np.asarray(y, dtype=np.int64)
    s = np.asarray(s, dtype=np.int64)
    k, l = len(group_names), len(label_names)  # noqa: E741 (the paper's names: k groups, l labels)
    if len(frame) != y.shape[0] or y.shape != s.shape:
        raise ValueError("frame, y and s must have the same number of rows")
    if l < 2:
        raise ValueError(f"label: need at least 2 distinct values, got {list(label_names)!r}")
    if k < 2:
        raise ValueError(f"sensitive: need at least 2 distinct groups, got {list(group_names)!r}")
    sens = set(sensitive_columns)
    numeric = [c for c in numeric if c not in sens]
    categorical = [c for c in categorical if c not in sens]
    if include_sensitive:
        # s enters X as its own one-hot block, after the other features.
        frame = frame.assign(**{f"__{sensitive_name}": np.asarray(group_names, dtype=object)[s]})
        categorical = categorical + [f"__{sensitive_name}"]

    strata = y * k + s if stratify else None
    train_idx, test_idx = split_indices(len(frame), test_size, seed, strata)
    for split, idx in (("train", train_idx), ("test", test_idx)):
        counts = np.bincount(s[idx], minlength=k)
        empty = [group_names[r] for r in range(k) if counts[r] == 0]
        if empty:
            raise ValueError(
                f"sensitive: group(s) {empty!r} have no records in the {split} split "
                f"(test_size={test_size}, seed={seed}); merge rare groups or change the split"
            )

    preprocessor = None
    if include_sensitive:
        X_train, X_test, feature_names = encode_features(frame, numeric, categorical, train_idx, test_idx)
    else:
        # The same encoding as encode_features, kept as a transformer for new rows: categories of
        # the whole table, statistics of the training rows.
        preprocessor = TablePreprocessor(
            numeric=list(numeric), categorical=list(categorical),
            categories=[category_order(frame[c]) for c in categorical],
        ).fit(frame.iloc[train_idx])
        X_train = preprocessor.transform(frame.iloc[train_idx])
        X_test = preprocessor.transform(frame.iloc[test_idx])
        feature_names = list(preprocessor.get_feature_names_out())
    if include_sensitive:
        prefix = f"__{sensitive_name}="
        feature_names = [
            f"{sensitive_name}={n[len(prefix):]}" if n.startswith(prefix) else n
            for n in feature_names
        ]
    if not (np.isfinite(X_train).all() and np.isfinite(X_test).all()):
        raise ValueError(f"{name}: features contain NaN or inf after preprocessing")

    rows = np.arange(len(frame), dtype=np.int64) if row_index is None else np.asarray(row_index, dtype=np.int64)
    if rows.shape != (len(frame),):
        raise ValueError("row_index must have one entry per row of frame")
    attrs = frame[list(dict.fromkeys(attr_columns))]
    attrs_train = attrs.iloc[train_idx].reset_index(drop=True)
    attrs_test = attrs.iloc[test_idx].reset_index(drop=True)
    return Dataset(
        name=name,
        X_train=X_train,
        y_train=y[train_idx],
        s_train=s[train_idx],
        X_test=X_test,
        y_test=y[test_idx],
        s_test=s[test_idx],
        feature_names=feature_names,
        label_names=list(label_names),
        sensitive_name=sensitive_name,
        group_names=list(group_names),
        attrs_train=attrs_train,
        attrs_test=attrs_test,
        train_index=rows[train_idx],
        test_index=rows[test_idx],
        preprocessor=preprocessor,
    )
