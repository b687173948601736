"""Silos and their data.

A :class:`Federation` is N silos holding disjoint shards ``(X_j, y_j, s_j)``. Labels and
sensitive groups are encoded once, globally, before anything else happens: a silo that
lacks a group still uses the global index, and every group enters the fairness penalty.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Sequence

import numpy as np
import pandas as pd

from pfair import _core, partition
from pfair._validation import (as_features, as_labels, as_vector, encode, encode_sensitive, resolve_fairness, silo_ids,
                               unique_inverse)

from pfair.notions import FAIRNESS_NOTIONS, FairnessNotion, _plain  # noqa: F401  (the vocabulary lives in pfair.notions)
from pfair.partition import describe_partition
from pfair.privacy.fingerprint import FINGERPRINT_PREFIX, FINGERPRINT_ROWS, data_fingerprint, legacy_fingerprint


class Silo:
    """One silo's shard: features, label indices, group indices and optional raw attributes.

    ``ledger`` is the silo's persistent privacy ledger (:class:`pfair.privacy.PrivacyLedger`),
    created by its first private fit and charged by every later one, so a budget spent on one fit
    is not available to the next.

    A silo made by :meth:`Federation.from_arrays` does not copy its features: it holds rows of the
    federation's one feature matrix (:meth:`rows_of`), float64 or float32. ``X`` is float64: a view
    when the rows are consecutive and the matrix is float64, and otherwise a fresh copy on each
    access (training reads the matrix in place and never asks for it)."""

    def __init__(self, X: np.ndarray | None, y: np.ndarray, s: np.ndarray, attrs: pd.DataFrame | None = None,
                 ledger: Any = None) -> None:
        self._X = X
        self.y = y
        self.s = s
        self.attrs = attrs
        self.ledger = ledger
        self._base: np.ndarray | None = None
        self._rows: np.ndarray | None = None
        self._fingerprint: str | None = None

    @classmethod
    def rows_of(cls, base: np.ndarray, rows: np.ndarray, y: np.ndarray, s: np.ndarray,
                attrs: pd.DataFrame | None = None) -> "Silo":
        """The silo holding rows ``rows`` (increasing, int32 or int64) of the matrix ``base``,
        without a copy."""
        rows = np.asarray(rows)
        if rows.dtype not in (np.int32, np.int64):
            rows = rows.astype(np.int64)
        silo = cls(None, y, s, attrs)
        silo._base, silo._rows = base, rows
        if rows.size and rows[-1] - rows[0] + 1 == rows.size:
            silo._X = base[rows[0] : rows[-1] + 1]  # consecutive rows: a view
        return silo

    @property
    def X(self) -> np.ndarray:
        """The silo's features ``(n_j, d)``."""
        if self._X is not None:
            return np.asarray(self._X, dtype=np.float64)
        assert self._base is not None and self._rows is not None
        return self._base[self._rows].astype(np.float64, copy=False)

    def features_in_place(self) -> tuple[np.ndarray, np.ndarray | None]:
        """``(matrix, rows)``: the silo's features without a copy, in their stored dtype (float64
        or float32): its own array and None, or the federation's shared matrix and the silo's
        row indices into it."""
        if self._X is not None:
            return self._X, None
        assert self._base is not None and self._rows is not None
        return self._base, self._rows

    def strided_X(self, sample: int) -> np.ndarray:
        """At most ``sample`` of the silo's feature rows, every ``ceil(n / sample)``-th one: a view,
        or a gather of those rows only (never a copy of the whole silo)."""
        step = max(1, -(-len(self) // max(1, int(sample))))
        if self._X is not None:
            return np.asarray(self._X[::step], dtype=np.float64)
        assert self._base is not None and self._rows is not None
        return self._base[self._rows[::step]].astype(np.float64, copy=False)

    def X_rows(self, idx: np.ndarray) -> np.ndarray:
        """The silo's feature rows ``idx`` (float64), gathered without the others."""
        if self._X is not None:
            return np.asarray(self._X[idx], dtype=np.float64)
        assert self._base is not None and self._rows is not None
        return self._base[self._rows[idx]].astype(np.float64, copy=False)

    def subset(self, idx: np.ndarray) -> "Silo":
        """The silo of its records ``idx`` (increasing): rows of the same matrix when it holds rows
        of one (no copy of the features), else its arrays' rows. Its ledger is not carried over:
        the ledger belongs to the whole silo."""
        idx = np.asarray(idx, dtype=np.int64)
        attrs = self.attrs.iloc[idx].reset_index(drop=True) if self.attrs is not None else None
        if self._base is not None and self._rows is not None:
            return Silo.rows_of(self._base, self._rows[idx], self.y[idx], self.s[idx], attrs)
        return Silo(np.asarray(self._X)[idx], self.y[idx], self.s[idx], attrs)

    @X.setter
    def X(self, value: np.ndarray) -> None:
        self._X, self._base, self._rows = value, None, None
        self._fingerprint = None

    @property
    def n_features(self) -> int:
        return int((self._base if self._base is not None else self._X).shape[1])

    def __len__(self) -> int:
        return int(self.y.shape[0])

    def __repr__(self) -> str:
        return f"Silo(n_records={len(self)}, n_features={self.n_features})"

    def fingerprint(self) -> str:
        """The silo's :func:`pfair.privacy.ledger.data_fingerprint`, cached. Only the sampled
        feature rows are read (a view, or a gather of those rows alone)."""
        if self._fingerprint is None:
            sample = self.strided_X(FINGERPRINT_ROWS)  # every fingerprint_step(n)-th row
            self._fingerprint = data_fingerprint(sample, self.y, self.s, shape=(len(self), self.n_features))
        return self._fingerprint

    def legacy_fingerprint(self) -> str:
        """The silo's :func:`pfair.privacy.ledger.legacy_fingerprint` (every feature hashed), to
        recognise a ledger bound by an older pfair. A silo that is rows of a larger matrix is
        hashed in blocks of rows, without gathering its features into one copy."""
        if self._X is None and self._base is not None and self._rows is not None:
            base, rows = self._base, self._rows
            blocks = (base[rows[i : i + _HASH_ROWS]] for i in range(0, rows.size, _HASH_ROWS))
            return legacy_fingerprint(blocks, self.y, self.s, shape=(rows.size, base.shape[1]))
        return legacy_fingerprint(self.X, self.y, self.s)

    def holds_data_of(self, fingerprint: str) -> bool:
        """Whether ``fingerprint`` (current or legacy form) is this silo's."""
        if fingerprint == self.fingerprint():
            return True
        return not fingerprint.startswith(FINGERPRINT_PREFIX) and fingerprint == self.legacy_fingerprint()


def silo_order(codes: np.ndarray, n_silos: int) -> tuple[np.ndarray, np.ndarray]:
    """The records sorted by silo code, each silo's in their input order (a stable sort), and the
    ``n_silos + 1`` silo start offsets. Below 2³¹ records a counting sort in Rust gives int32
    indices directly (``numpy.argsort`` would make an int64 array of the records' length first:
    0.8 GB at 10⁸)."""
    if codes.dtype == np.int32:
        return _core.silo_order(np.ascontiguousarray(codes), int(n_silos))
    order = np.argsort(codes, kind="stable")
    return order, np.concatenate([[0], np.cumsum(np.bincount(codes, minlength=n_silos))])


def silo_set_of(silos: Sequence[Silo], *, n_groups: int, n_classes: int,
                fairness: FairnessNotion | str = "demographic_parity", positive: int = 1) -> Any:
    """The Rust :class:`pfair._core.SiloSet` of ``silos`` (each with at least one record) for the
    fairness notion ``fairness`` (an object of :mod:`pfair.notions` or its public name). Silos that
    are rows of one matrix are read in place, in its dtype (no copy; sparse data become CSR);
    others are handed over as float64 arrays."""
    notion = resolve_fairness(fairness, positive)
    base = silos[0]._base if silos else None
    if base is None or any(silo._base is not base for silo in silos):
        return _core.SiloSet([(s.X, _indices(s.y), _indices(s.s)) for s in silos], n_groups=n_groups,
                             n_classes=n_classes, **notion.core_args())
    ys, ss = [_indices(silo.y) for silo in silos], [_indices(silo.s) for silo in silos]
    return _core.SiloSet.from_matrix(base, ys, ss, [_indices(silo._rows) for silo in silos], n_groups=n_groups,
                                     n_classes=n_classes, **notion.core_args())


def _indices(v: np.ndarray) -> np.ndarray:
    """``v`` as the Rust core takes codes and row indices: contiguous int32 or int64 (a view when
    it is one already, as :meth:`Federation.from_arrays` makes them)."""
    v = np.asarray(v)
    if v.dtype in (np.int32, np.int64) and v.flags.c_contiguous:
        return v
    return np.ascontiguousarray(v, dtype=np.int64)


#: Rows per block when a silo that is rows of a larger matrix is hashed whole (legacy fingerprint).
_HASH_ROWS = 8192


def silo_fingerprints(silos: Sequence[Silo]) -> list[str]:
    """Every silo's :meth:`Silo.fingerprint`, those not cached yet computed on a thread per core
    (hashlib and NumPy's row gathers release the GIL, so the silos are hashed in parallel)."""
    todo = [silo for silo in silos if silo._fingerprint is None]
    workers = min(len(todo), os.cpu_count() or 1)
    if workers > 1:
        with ThreadPoolExecutor(max_workers=workers) as pool:
            list(pool.map(Silo.fingerprint, todo))
    return [silo.fingerprint() for silo in silos]


class Federation:
    """N silos with globally encoded labels and sensitive groups.

    Build one with :meth:`from_arrays` (arrays plus a silo id per record), :meth:`from_dataframe`,
    :meth:`from_dataset` or :meth:`partition`.

    Attributes
    ----------
    silos : list of Silo
    classes_ : ndarray of the label categories; index ``c`` is class ``c``.
    groups_ : ndarray of the sensitive categories; index ``r`` is group ``r``.
    feature_names : list of str
    """

    def __init__(
        self,
        silos: Sequence[Silo],
        *,
        classes: Sequence[Any],
        groups: Sequence[Any],
        feature_names: Sequence[str] | None = None,
        sensitive_name: str = "s",
    ) -> None:
        if len(silos) == 0:
            raise ValueError("silos is empty; a federation needs at least one silo")
        d = silos[0].n_features
        for j, silo in enumerate(silos):
            if len(silo) == 0:
                raise ValueError(f"silo {j} has no records; drop it or change the silo assignment")
            if silo.n_features != d:
                raise ValueError(f"silo {j} has {silo.n_features} features but silo 0 has {d}")
        self.silos = list(silos)
        self.classes_ = np.asarray(classes)
        self.groups_ = np.asarray(groups)
        self.feature_names = list(feature_names) if feature_names is not None else [f"x{i}" for i in range(d)]
        self.sensitive_name = sensitive_name
        if len(self.classes_) < 2:
            raise ValueError("need at least 2 label classes")
        if len(self.groups_) < 2:
            raise ValueError("need at least 2 sensitive groups")

    # ------------------------------------------------------------------ constructors
    @classmethod
    def from_arrays(
        cls,
        X: Any,
        y: Any,
        *,
        sensitive_features: Any,
        silos: Any,
        feature_names: Sequence[str] | None = None,
        attrs: pd.DataFrame | None = None,
        classes: Sequence[Any] | None = None,
        groups: Sequence[Any] | None = None,
    ) -> "Federation":
        """Split arrays into silos by ``silos``: one silo id per record (any hashable values), or a
        list of index arrays, one per silo (the row indices it holds; together every row once).

        ``classes``/``groups`` fix the global encodings (defaults: the sorted distinct values).

        A float32 ``X`` is kept as float32 (half the memory; the Rust kernels read it in place and
        compute in float64); anything else is converted to float64.

        ``X`` is not copied: each silo holds row indices of it. For data far larger than the
        processor's caches, rows grouped by silo (each silo's records consecutive) make an epoch
        about a quarter faster than records of the silos interleaved (``docs/performance.md``);
        sort once before calling this if the memory for one more copy is there.
        """
        if hasattr(X, "columns") and feature_names is None:
            feature_names = [str(c) for c in X.columns]
        Xa = as_features(X, keep_float32=True)
        n = Xa.shape[0]
        y_raw = as_labels(y, n, estimator="every pfair estimator")
        s_raw = as_vector(sensitive_features, "sensitive_features", n)
        ids = silo_ids(silos, n)
        silo_names, silo_codes = unique_inverse(ids)
        del ids
        order, bounds = silo_order(silo_codes, len(silo_names))
        del silo_codes
        # Labels and groups encoded after the sort (so that their codes and the sort's arrays do
        # not coexist), then put in silo order once; each silo holds views of them. Codes and
        # the order are int32 (below 2³¹ records): at 10⁸ records each is 0.4 GB, not 0.8.
        y_codes, cats_y = encode(y_raw, "y", classes)
        y_codes = y_codes[order]
        s_codes, cats_s = encode_sensitive(s_raw, groups)
        s_codes = s_codes[order]
        shards = []
        for j in range(len(silo_names)):
            a, b = bounds[j], bounds[j + 1]
            rows = order[a:b]
            sub = attrs.iloc[rows].reset_index(drop=True) if attrs is not None else None
            # The silos hold rows of the one matrix Xa: no copy of the features.
            shards.append(Silo.rows_of(Xa, rows, y_codes[a:b], s_codes[a:b], sub))
        fed = cls(shards, classes=cats_y, groups=cats_s, feature_names=feature_names)
        fed.silo_names_ = silo_names
        fed.row_order_ = order  # input row of each pooled record (pooled order = silo order)
        return fed

    @classmethod
    def from_dataframe(
        cls,
        df: pd.DataFrame,
        *,
        label: str,
        sensitive: str,
        silo: str,
        features: Sequence[str] | None = None,
    ) -> "Federation":
        """Build from a numeric DataFrame with label, sensitive and silo-id columns."""
        for arg, col in (("label", label), ("sensitive", sensitive), ("silo", silo)):
            if col not in df.columns:
                raise ValueError(f"{arg}={col!r} is not a column of df; columns are {list(df.columns)[:20]}")
        if features is None:
            features = [c for c in df.columns if c not in (label, sensitive, silo)]
        missing = [c for c in features if c not in df.columns]
        if missing:
            raise ValueError(f"features {missing} are not columns of df")
        return cls.from_arrays(df[list(features)], df[label], sensitive_features=df[sensitive], silos=df[silo])

    @classmethod
    def from_dataset(cls, dataset: Any, silos: Any) -> "Federation":
        """Build from the training split of a :class:`pfair.datasets.Dataset` and silo ids."""
        fed = cls.from_arrays(
            dataset.X_train,
            dataset.y_train,
            sensitive_features=dataset.s_train,
            silos=silos,
            feature_names=dataset.feature_names,
            attrs=dataset.attrs_train,
            classes=np.arange(len(dataset.label_names)),
            groups=np.arange(len(dataset.group_names)),
        )
        fed.label_names = list(dataset.label_names)
        fed.group_names = list(dataset.group_names)
        fed.sensitive_name = dataset.sensitive_name
        return fed

    @classmethod
    def partition(
        cls, dataset: Any, n_silos: int = 3, *, heterogeneity: float = 0.0, by: str | None = None, seed: int = 0,
        sizes: Sequence[int] | None = None,
    ) -> "Federation":
        """Split a data set's training records with the paper's heterogeneity partitioner
        (:func:`pfair.partition.heterogeneous`, Algorithm 3 of Gupta et al. 2024): sort by the raw
        attribute ``by`` (any column of ``dataset.attrs_train``, numeric or categorical), silo k
        takes a fraction ``heterogeneity`` of its records from the k-th block, the rest at random.
        ``heterogeneity=0``: homogeneous silos; 1: silos are contiguous blocks of ``by``.
        ``by=None``: ``"age"`` when the data set has it; otherwise only ``heterogeneity=0`` is
        allowed (no column to be heterogeneous along). ``sizes`` gives unequal silo sizes (summing
        to the number of training records, e.g. :func:`pfair.partition.power_law_sizes`); default:
        equal sizes."""
        by = by or getattr(dataset, "partition_by", None)
        if by is None and "age" not in dataset.attrs_train.columns:
            if heterogeneity != 0:
                raise ValueError(
                    f"by: heterogeneity={heterogeneity} needs a column to be heterogeneous along; pass by= one "
                    f"of {list(dataset.attrs_train.columns)} (load_csv(..., keep=[...]) keeps a non-feature column)")
            values = np.zeros(len(dataset.y_train))  # h = 0: the order does not matter
        else:
            by = by or "age"
            values = _attribute(dataset, by)
        ids = partition.heterogeneous(values, n_silos, heterogeneity=heterogeneity, seed=seed, sizes=sizes)
        fed = cls.from_dataset(dataset, ids)
        fed.partition_by = by
        return fed

    @classmethod
    def for_dataset(
        cls, dataset: Any, n_silos: int, *, heterogeneity: float = 0.0, by: str | None = None, seed: int = 0
    ) -> "Federation":
        """Silos for a data set as the command line and the sweeps build them: the paper's
        partitioner (:meth:`partition`) sorted by ``by``, default the data set's ``partition_by``,
        else ``"age"`` when the data set has that raw attribute; without a partition attribute,
        each record goes to a uniformly random silo (seeded by ``seed``), which is only allowed
        with ``heterogeneity=0``."""
        column = by or getattr(dataset, "partition_by", None)
        column = column or ("age" if "age" in dataset.attrs_train.columns else None)
        if column is not None:
            return cls.partition(dataset, n_silos, heterogeneity=heterogeneity, by=column, seed=seed)
        if heterogeneity != 0:
            raise ValueError(f"heterogeneity={heterogeneity} needs a partition attribute (by=, --partition-by): "
                             f"{dataset.name} has no 'age' attribute; choose from {list(dataset.attrs_train.columns)}")
        ids = np.random.default_rng(seed).integers(0, n_silos, size=len(dataset.y_train))
        return cls.from_dataset(dataset, ids)

    @classmethod
    def partition_dirichlet(
        cls,
        dataset: Any,
        n_silos: int = 3,
        *,
        alpha: float,
        by: str = "label",
        sizes: Sequence[int] | None = None,
        seed: int = 0,
    ) -> "Federation":
        """Split with Dirichlet(``alpha``) skew (:func:`pfair.partition.dirichlet`) of ``by``:
        ``"label"``, ``"sensitive"`` or a categorical raw attribute. Small ``alpha``: skewed silos;
        large: homogeneous. ``sizes`` fixes the silo sizes exactly (e.g.
        :func:`pfair.partition.power_law_sizes`)."""
        if by == "label":
            groups = dataset.y_train
        elif by == "sensitive":
            groups = dataset.s_train
        else:
            groups = _attribute(dataset, by)
        ids = partition.dirichlet(groups, n_silos, alpha=alpha, seed=seed, sizes=sizes)
        if np.unique(ids).shape[0] < n_silos:
            raise ValueError(
                f"alpha={alpha} left some of the {n_silos} silos empty; raise alpha or pass sizes= to fix silo sizes"
            )
        fed = cls.from_dataset(dataset, ids)
        fed.partition_by = by if by not in ("label", "sensitive") else None
        return fed

    # ------------------------------------------------------------------ properties
    @property
    def n_silos(self) -> int:
        return len(self.silos)

    @property
    def n_features(self) -> int:
        return self.silos[0].n_features

    @property
    def n_groups(self) -> int:
        return len(self.groups_)

    @property
    def n_classes(self) -> int:
        return len(self.classes_)

    @property
    def sizes(self) -> list[int]:
        return [len(s) for s in self.silos]

    @property
    def n_records(self) -> int:
        return sum(self.sizes)

    def shared_matrix(self) -> np.ndarray | None:
        """The one feature matrix every silo holds rows of, or None when the silos hold their own
        arrays (e.g. built from :class:`Silo` objects)."""
        base = self.silos[0]._base
        if base is None or any(silo._base is not base for silo in self.silos):
            return None
        return base

    def silo_set(self, fairness: FairnessNotion | str = "demographic_parity", positive: int = 1) -> Any:
        """The silos' data handed to the Rust core (:class:`pfair._core.SiloSet`) for the fairness
        notion ``fairness`` (an object of :mod:`pfair.notions` or its public name, with the
        positive class index ``positive``). When the silos are rows of one matrix (:meth:`shared_matrix`), Rust
        reads it in place: no copy."""
        return silo_set_of(self.silos, n_groups=self.n_groups, n_classes=self.n_classes, fairness=fairness,
                           positive=positive)

    def pooled(self, rows: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """All silos' records stacked (for evaluation in simulations only); with ``rows``, only
        those records of the stacked order, gathered without stacking the others' features."""
        y = np.concatenate([s.y for s in self.silos])
        s_ = np.concatenate([s.s for s in self.silos])
        base = self.shared_matrix()
        if base is not None:
            order = np.concatenate([s._rows for s in self.silos])
            X = base[order if rows is None else order[rows]].astype(np.float64, copy=False)
        elif rows is None:
            X = np.concatenate([s.X for s in self.silos])
        else:
            bounds = np.concatenate([[0], np.cumsum(self.sizes)])
            X = np.concatenate([silo.X_rows(rows[(rows >= a) & (rows < b)] - a)
                                for silo, a, b in zip(self.silos, bounds[:-1], bounds[1:])])
        return (X, y, s_) if rows is None else (X, y[rows], s_[rows])

    # ------------------------------------------------------------------ group statistics
    def group_counts(self, fairness: FairnessNotion | str, positive: int = 1) -> np.ndarray:
        """Counts of group ``r`` in each ψ block (``blocks × k``) of the notion ``fairness`` (an
        object of :mod:`pfair.notions` or its public name, with the positive class index
        ``positive``), summed over silos (:meth:`pfair.notions.FairnessNotion.group_counts`)."""
        notion = resolve_fairness(fairness, positive)
        k, l = self.n_groups, self.n_classes
        return sum(notion.group_counts(s.y, s.s, n_groups=k, n_classes=l) for s in self.silos)

    def group_proportions(self, fairness: FairnessNotion | str, positive: int = 1) -> np.ndarray:
        """``p(s = r | block)`` (``blocks × k``); raises if a group has no records in a block."""
        notion = resolve_fairness(fairness, positive)
        counts = self.group_counts(notion)
        check_group_counts(counts, notion, self.groups_, self.classes_)
        return counts / counts.sum(axis=1, keepdims=True)

    def describe(self) -> pd.DataFrame:
        """Per-silo size, ``p(s=…)`` and ``p(y=…)`` (by group and class name), each silo's
        heterogeneity ``tv(s)``, ``tv(y)`` (total-variation distance from the pooled mix) and the
        partition attribute's mean (:func:`pfair.partition.describe_partition`).
        ``df.attrs["heterogeneity"]`` holds the federation-wide scores (size-weighted mean TV of
        p(s) and p(y), and the between-silo share η² of the partition attribute's variance)."""
        _, y, s = self.pooled()
        ids = np.repeat(np.arange(self.n_silos), self.sizes)
        by = getattr(self, "partition_by", None)
        attribute = None
        if by is not None and all(silo.attrs is not None and by in silo.attrs
                                  and pd.api.types.is_numeric_dtype(silo.attrs[by]) for silo in self.silos):
            attribute = np.concatenate([silo.attrs[by].to_numpy(dtype=float) for silo in self.silos])
        df = describe_partition(ids, y=self.classes_[y], sensitive_features=self.groups_[s], attribute=attribute)
        if attribute is not None:
            df = df.rename(columns={"attribute_mean": f"mean({by})"})
        return df

    def __repr__(self) -> str:
        return (
            f"Federation(n_silos={self.n_silos}, sizes={self.sizes}, n_features={self.n_features}, "
            f"n_groups={self.n_groups}, n_classes={self.n_classes})"
        )


def _attribute(dataset: Any, by: str) -> np.ndarray:
    attrs = dataset.attrs_train
    if by not in attrs.columns:
        raise ValueError(f"by={by!r} is not a raw attribute of {dataset.name}; choose one of {list(attrs.columns)}, "
                         f"or keep the column with load_csv(..., keep=[{by!r}]) if it is not a feature")
    col = attrs[by]
    numeric = pd.api.types.is_numeric_dtype(col.dtype) and not pd.api.types.is_bool_dtype(col.dtype)
    return col.to_numpy(dtype=float) if numeric else col.astype(object).to_numpy()


def check_group_counts(counts: np.ndarray, notion: FairnessNotion, groups: np.ndarray, classes: np.ndarray) -> None:
    """Every group must have records in every ψ block, or its ``p_s^{-1/2}`` is undefined."""
    for b, row in enumerate(counts):
        empty = np.flatnonzero(row <= 0)
        if empty.size:
            raise ValueError(
                f"sensitive group {_plain(groups[empty[0]])!r} has no records {notion.describe_block(b, classes)}; "
                "every group must be present (drop the group from sensitive_features or merge it with another)"
            )
