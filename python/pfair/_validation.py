"""Input validation and encoding at the public boundary: the one place where features, labels,
sensitive groups and silo ids are checked and turned into codes. The estimators, the baselines,
:class:`~pfair.federation.Federation` and :mod:`pfair.metrics` call it. Messages name the argument
and the fix.

Labels and groups are encoded globally, in sorted order of their values (``classes_[c]`` is
class c, ``groups_[r]`` group r); codes are int32 below 2³¹ categories (:data:`CODE_DTYPE`).
"""

from __future__ import annotations

import warnings
from collections.abc import Hashable
from numbers import Integral, Real
from typing import Any, Sequence

import numpy as np
import pandas as pd

from pfair import _core
from pfair.notions import FAIRNESS_NOTIONS, NOTIONS, FairnessNotion

#: More sensitive groups than this is almost always a continuous or identifier column used by mistake.
MAX_GROUPS = 20


def _numbers(column: Any) -> bool:
    """Whether a DataFrame column of another dtype (object: Python numbers, say) holds numbers only."""
    try:
        np.asarray(column, dtype=np.float64)
    except (TypeError, ValueError):
        return False
    return True


def as_features(X: Any, name: str = "X", *, keep_float32: bool = False) -> np.ndarray:
    """A finite C-contiguous float64 matrix ``(n, d)``; with ``keep_float32``, a float32 input
    stays float32 (no copy when it is C-contiguous: half the memory of float64)."""
    if hasattr(X, "columns") and hasattr(X, "dtypes"):  # a DataFrame: name the columns that are not numbers
        text = [str(c) for c, t in X.dtypes.items()
                if not (pd.api.types.is_numeric_dtype(t) or pd.api.types.is_bool_dtype(t) or _numbers(X[c]))]
        if text:
            more = f" and {len(text) - 5} more" if len(text) > 5 else ""
            raise TypeError(f"{name} must be numeric; its column(s) {', '.join(map(repr, text[:5]))}{more} are not "
                            "numbers: encode them first (e.g. OneHotEncoder in a ColumnTransformer, or load the table "
                            "with pfair.datasets.load_frame, which one-hot encodes categorical columns)")
        if any(isinstance(t, pd.api.extensions.ExtensionDtype) for t in X.dtypes):
            X = X.to_numpy(dtype=np.float64, na_value=np.nan)  # nullable columns: pd.NA is a missing number
    if hasattr(X, "to_numpy"):
        X = X.to_numpy()
    if hasattr(X, "toarray") or hasattr(X, "tocsr"):
        raise TypeError(f"Sparse data was passed for {name}, but dense data is required: use {name}.toarray(), or "
                        "in a Pipeline make the encoder's output dense (OneHotEncoder(sparse_output=False), "
                        "ColumnTransformer(..., sparse_threshold=0)) (the Rust kernels take dense rows)")
    try:
        raw = np.asarray(X)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{name} must be a numeric 2-D array; convert categorical columns first ({exc})") from None
    if raw.dtype.kind == "c":
        raise ValueError(f"Complex data not supported: {name} must be real numbers")
    try:
        arr = raw if keep_float32 and raw.dtype == np.float32 else np.asarray(raw, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{name} must be a numeric 2-D array; convert categorical columns first ({exc})") from None
    if arr.ndim == 1:
        raise ValueError(f"{name} must be 2-D (n_samples, n_features), got a 1-D array. Reshape your data: a "
                         f"single feature with {name}.reshape(-1, 1), a single record with {name}.reshape(1, -1)")
    if arr.ndim != 2:
        raise ValueError(f"{name} must be 2-D (n_samples, n_features), got {arr.ndim} dimensions")
    if arr.shape[0] == 0:
        raise ValueError(f"{name} has no rows: 0 sample(s) (shape={arr.shape}) while a minimum of 1 is required.")
    if arr.shape[1] == 0:
        raise ValueError(f"{name} has 0 feature(s) (shape={arr.shape}) while a minimum of 1 is required.")
    arr = np.ascontiguousarray(arr)

    bad = int(_core.nonfinite_rows(arr))  # in parallel, no temporary the size of X
    if bad:
        raise ValueError(f"{name} contains NaN or inf in {bad} rows; impute or drop those rows first (e.g. "
                         "SimpleImputer in a Pipeline)")
    return arr


def _column(v: Any, name: str, n: int | None = None) -> np.ndarray:
    """``v`` as a 1-D array (a one-column 2-D array is flattened), optionally of length ``n``."""
    if hasattr(v, "to_numpy"):
        v = v.to_numpy()
    arr = np.asarray(v)
    if arr.ndim == 2 and arr.shape[1] == 1:
        arr = arr[:, 0]
    if arr.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {arr.shape}")
    if n is not None and arr.shape[0] != n:
        raise ValueError(f"{name} has {arr.shape[0]} entries but X has {n} rows; they must match")
    return arr


def as_vector(v: Any, name: str, n: int | None = None) -> np.ndarray:
    """A 1-D array without missing values, optionally of length ``n``."""
    arr = _column(v, name, n)
    if arr.dtype.kind == "f" and not np.isfinite(arr).all():
        raise ValueError(f"{name} contains NaN or inf")
    if arr.dtype.kind == "O" and any(x is None or (isinstance(x, float) and np.isnan(x)) for x in arr):
        raise ValueError(f"{name} contains missing values")
    return arr


#: Label, group and silo codes, and row indices below 2³¹, are int32: half of int64 at 10⁸ records,
#: and still wide enough that arithmetic on codes (``y * k + s``, ``(y * k + s) * l + p``) cannot
#: overflow, which int8 or int16 codes would do silently (NumPy 2 keeps the narrow type).
CODE_DTYPE = np.int32
#: Entries per block when a code array is made block by block (no temporary of its full length).
_CODE_BLOCK = 1 << 20


def index_dtype(n: int) -> type:
    """The integer type of codes or row indices below ``n``: :data:`CODE_DTYPE`, or int64 from 2³¹."""
    return CODE_DTYPE if n <= np.iinfo(CODE_DTYPE).max else np.int64


def unique_inverse(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(values, return_inverse=True)``, with codes of :func:`index_dtype`, in O(n) for
    integers of a small range.

    Labels, groups and silo ids are usually small integers; ``np.unique`` sorts them (O(n log n),
    0.2 s per call at 2·10⁶ records). For integers spanning at most ``max(2**16, n)`` values the
    same sorted categories and codes come from a table of which values occur, built block by
    block, so that no temporary as long as ``values`` is made (at 10⁸ records each would be 0.8 GB)."""
    n = values.size
    if values.dtype.kind in "iu" and values.ndim == 1 and n:
        lo, hi = int(values.min()), int(values.max())
        if hi - lo <= max(1 << 16, n):
            def offsets(a: int) -> np.ndarray:
                block = values[a : a + _CODE_BLOCK]
                # block - lo cannot overflow: in int64 for signed types (hi - lo is small), in the
                # array's own type for unsigned ones (every value is ≥ lo).
                base = block.astype(np.int64, copy=False) if block.dtype.kind == "i" else block
                return (base - base.dtype.type(lo)).astype(np.intp, copy=False)

            counts = np.zeros(hi - lo + 1, dtype=np.int64)
            for a in range(0, n, _CODE_BLOCK):
                counts += np.bincount(offsets(a), minlength=counts.size)
            present = counts > 0
            cats = (np.flatnonzero(present) + lo).astype(values.dtype)
            lookup = (np.cumsum(present) - 1).astype(index_dtype(cats.size))
            codes = np.empty(n, dtype=lookup.dtype)
            for a in range(0, n, _CODE_BLOCK):
                codes[a : a + _CODE_BLOCK] = lookup[offsets(a)]
            return cats, codes
    cats, codes = np.unique(values, return_inverse=True)
    return cats, codes.reshape(-1).astype(index_dtype(cats.size), copy=False)


def encode(values: np.ndarray, name: str, categories: Sequence[Any] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Integer codes ``0..c-1`` of ``values`` (:func:`index_dtype`) and the sorted categories
    (global encoding)."""
    if categories is None:
        try:
            cats, codes = unique_inverse(values)
        except TypeError:  # np.unique sorts: 1 < "a" fails
            kinds = sorted({type(v).__name__ for v in np.asarray(values, dtype=object).tolist()})
            raise TypeError(f"{name} mixes values of the types {', '.join(kinds)}, which cannot be sorted into "
                            f"categories (e.g. 1 and 'a'); make them one type (all strings: {name}.astype(str))"
                            ) from None
    else:
        cats = np.asarray(categories)
        codes = _codes_among(values, cats, name)
    if len(cats) < 2:
        if name == "y":
            raise ValueError(f"y has only 1 class ({cats.tolist()[0]!r}); a classifier needs at least 2 classes "
                             "in the training labels")
        raise ValueError(f"{name} has {len(cats)} distinct value(s); at least 2 are needed")
    return codes, cats


def _codes_among(values: np.ndarray, cats: np.ndarray, name: str) -> np.ndarray:
    """The index of each value in the given categories; a value outside them is refused."""
    dtype = index_dtype(cats.size)
    numeric = values.dtype.kind in "iuf" and cats.dtype.kind in "iuf" and cats.ndim == 1
    if not (numeric and cats.size and np.all(cats[:-1] < cats[1:])):
        lookup = {c: i for i, c in enumerate(cats.tolist())}
        try:
            return np.fromiter((lookup[v] for v in values.tolist()), dtype=dtype, count=len(values))
        except KeyError as exc:
            raise ValueError(f"{name} contains {exc.args[0]!r}, which is not among the known categories "
                             f"{cats.tolist()}") from None
    # Numeric values and sorted categories: a binary search per value, block by block.
    codes = np.empty(values.size, dtype=dtype)
    for a in range(0, values.size, _CODE_BLOCK):
        block = values[a : a + _CODE_BLOCK]
        at = np.minimum(np.searchsorted(cats, block), cats.size - 1)
        bad = cats[at] != block
        if bad.any():
            raise ValueError(f"{name} contains {block[bad][0].item()!r}, which is not among the known categories "
                             f"{cats.tolist()}")
        codes[a : a + _CODE_BLOCK] = at
    return codes


def as_labels(y: Any, n: int | None = None, *, estimator: str = "SteFFLe") -> np.ndarray:
    """Class labels ``y`` for a classifier's ``fit``: 1-D (a column vector is accepted with
    scikit-learn's ``DataConversionWarning``), of length ``n``, and not a continuous target."""
    if hasattr(y, "to_numpy"):
        y = y.to_numpy()
    arr = np.asarray(y)
    if arr.ndim == 2 and arr.shape[1] == 1:
        from sklearn.exceptions import DataConversionWarning  # lazy: keeps scikit-learn out of a ClientApp's start

        warnings.warn("A column-vector y was passed when a 1d array was expected; pass y.ravel() (shape (n,))",
                      DataConversionWarning, stacklevel=3)
    arr = as_vector(arr, "y", n)
    if arr.dtype.kind == "f":
        values = np.unique(arr)
        if not np.all(values == np.round(values)):
            raise ValueError(
                f"Unknown label type: y looks continuous (regression target; {values.size} distinct float values, "
                f"e.g. {values[:3].tolist()}); {estimator} is a classifier. Pass class labels (e.g. "
                "(y > threshold).astype(int), or pd.cut(y, bins) for several classes)"
            )
    return arr


def check_groups(groups: np.ndarray, values: np.ndarray, name: str = "sensitive_features", *,
                 stacklevel: int = 4) -> None:
    """A sensitive attribute must be categorical: each distinct value is a group, and every group
    enters the fairness penalty. A continuous column (or one group per record) is refused; more
    than :data:`MAX_GROUPS` groups is warned."""
    k, n = len(groups), len(values)
    if k <= MAX_GROUPS:
        return
    continuous = values.dtype.kind == "f" and not np.all(groups == np.round(groups))
    fix = (f"bin it into a few categories first, e.g. pd.cut({name}, bins=[0, 25, 45, 65, 120]) or "
           f"np.digitize({name}, bins)")
    if continuous or k == n:
        what = "float values that are not whole numbers" if continuous else "one group per record"
        raise ValueError(
            f"{name} has {k} distinct values among {n} records ({what}, e.g. {groups[:3].tolist()}); it must be "
            f"categorical: every distinct value is one group, and each group needs many records. {fix}"
        )
    warnings.warn(
        f"{name} has {k} groups (more than {MAX_GROUPS}); every distinct value is one group and each needs records "
        f"in every silo's fairness term. If it is a numeric attribute, {fix}",
        UserWarning,
        stacklevel=stacklevel,
    )


def encode_sensitive(values: np.ndarray, groups: Sequence[Any] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Group codes of a sensitive attribute and its sorted groups (:func:`encode`). Groups the
    caller fixes (``groups=``) are taken as given; found ones are checked by :func:`check_groups`."""
    codes, cats = encode(values, "sensitive_features", groups)
    if groups is None:
        check_groups(cats, values, stacklevel=5)  # the warning points where it did before this helper
    return codes, cats


#: The group code of a record whose sensitive value is missing (or was never given).
MISSING = -1


def is_missing(values: np.ndarray) -> np.ndarray:
    """Which entries are missing sensitive values: ``-1``, ``NaN`` or ``None``."""
    if values.dtype.kind == "f":
        return np.isnan(values) | (values == MISSING)
    if values.dtype.kind in "iu":
        return values == MISSING
    if values.dtype.kind == "O":
        return np.array([v is None or v == MISSING or (isinstance(v, float) and np.isnan(v)) for v in values])
    return np.zeros(values.shape[0], dtype=bool)


def encode_groups(values: Any, n: int, *, allow_missing: bool) -> tuple[np.ndarray, np.ndarray]:
    """Group codes of ``sensitive_features`` (:data:`MISSING` where a value is missing, which only
    ``allow_missing`` accepts: PF-LD's setting) and the sorted groups of the known values."""
    arr = _column(values, "sensitive_features", n)
    missing = is_missing(arr)
    if missing.any() and not allow_missing:
        raise ValueError(
            f"sensitive_features has {int(missing.sum())} missing values (-1, NaN or None); this estimator "
            "needs every record's group (PFLD accepts missing values)"
        )
    if missing.all():
        raise ValueError("sensitive_features is missing for every record; at least 2 groups must be observed")
    codes = np.full(n, MISSING, dtype=np.int64)
    known, cats = encode_sensitive(arr[~missing])
    codes[~missing] = known
    return codes, cats


def label_indices(y: np.ndarray, classes: np.ndarray) -> np.ndarray:
    """The index in ``classes`` (a fitted model's ``classes_``) of each label of ``y``; a label
    the model never saw is refused."""
    try:
        return _codes_among(np.asarray(y), np.asarray(classes), "y").astype(np.int64, copy=False)
    except ValueError:
        known = set(np.asarray(classes).tolist())
        unseen = next(v for v in np.asarray(y).tolist() if v not in known)
        raise ValueError(f"y contains {unseen!r}, a label not seen in fit") from None


def silo_ids(silos: Any, n: int) -> np.ndarray:
    """One silo id per record. ``silos`` is one id per record (any hashable values), or a list of
    index arrays (the row indices of each silo, together every row exactly once): silo j gets
    id j."""
    if silos is None:
        return np.zeros(n, dtype=np.int64)
    if isinstance(silos, (list, tuple)) and len(silos) > 0 and all(
        not np.isscalar(part) and np.ndim(part) == 1 for part in silos
    ):
        ids = np.full(n, -1, dtype=np.int64)
        for j, part in enumerate(silos):
            idx = np.asarray(part)
            if idx.dtype.kind not in "iu":
                raise ValueError(
                    f"silos as a list of index arrays: entry {j} has dtype {idx.dtype}, not integer row indices. "
                    "Pass either one silo id per record (silos=[0, 0, 1, ...]) or one array of row indices "
                    "per silo (silos=[np.array([0, 1]), np.array([2, 3])])"
                )
            if idx.size and (idx.min() < 0 or idx.max() >= n):
                raise ValueError(f"silos: index array {j} has row indices outside 0..{n - 1} (X has {n} rows)")
            if np.any(ids[idx] != -1) or np.unique(idx).size != idx.size:
                raise ValueError(f"silos: index array {j} repeats rows already assigned to a silo; every row "
                                 "must belong to exactly one silo")
            ids[idx] = j
        missing = np.flatnonzero(ids < 0)
        if missing.size:
            raise ValueError(
                f"silos: {missing.size} rows (e.g. row {int(missing[0])}) are in no index array; every row must "
                "belong to exactly one silo (drop the rows from X, y and sensitive_features, or add them to a silo)"
            )
        return ids
    mixed = ValueError(
        "silos must be one silo id per record (silos=[0, 0, 1, ...]) or a list of index arrays, one per "
        "silo (silos=[np.array([0, 1]), np.array([2, 3])])"
    )
    # Ids mixed with index arrays: NumPy >= 1.24 refuses the ragged array, older NumPy makes an
    # object array of it; refuse it here so the message does not depend on the NumPy version.
    if isinstance(silos, (list, tuple)) and any(
        isinstance(p, (list, tuple)) or (isinstance(p, np.ndarray) and p.ndim > 0) for p in silos
    ):
        raise mixed
    try:
        return as_vector(silos, "silos", n)
    except ValueError as exc:
        if "inhomogeneous" in str(exc) or "sequence" in str(exc):
            raise mixed from None
        raise


#: The fewest records a silo may have for a private fit with ``delta=None``, whose δ is ``1/n²``:
#: at 10 records that is 0.01, and a δ above it is no guarantee worth the name (a mechanism that
#: publishes one of the silo's records outright with probability δ meets it).
MIN_DEFAULT_DELTA_RECORDS = 10


def check_default_delta(sizes: Sequence[int], names: Sequence[Any] | None = None) -> None:
    """A private fit with ``delta=None`` uses ``1/n_j²`` for silo j: 1 (no privacy) for a silo of
    one record, above 0.01 for fewer than :data:`MIN_DEFAULT_DELTA_RECORDS`. Refuse before anything
    runs, naming the silo and the fix."""
    for j, n_j in enumerate(sizes):
        if n_j < MIN_DEFAULT_DELTA_RECORDS:
            label = names[j] if names is not None else j
            label = label.item() if hasattr(label, "item") else label
            delta = 1.0 / max(int(n_j), 1) ** 2
            raise ValueError(
                f"silo {label!r} has {n_j} record{'s' if n_j != 1 else ''}; a private fit with delta=None uses "
                f"delta = 1/n² per silo, which is {delta:.3g} for it"
                + (" (no privacy)" if n_j < 2 else f": a guarantee that allows publishing one of its records outright "
                   f"with probability {delta:.3g}")
                + f". Merge silo {label!r} with another silo, or pass delta= explicitly (e.g. delta=1e-6, below "
                "1/total records)"
            )


def positive_class_index(value: Any, classes: np.ndarray) -> int:
    """The class index ``positive_class`` names: an integer is an index into ``classes`` (the sorted
    labels, ``classes_``); any other value is a label, looked up among them. Raises naming the
    argument and the labels."""
    labels = np.asarray(classes).tolist()
    if isinstance(value, Integral) and not isinstance(value, bool):
        if not 0 <= int(value) < len(labels):
            hint = (f"; positive_class is an index into classes_, and label {value!r} is index {labels.index(value)}"
                    if value in labels else "")
            raise ValueError(f"positive_class={value!r} is not a class index in 0..{len(labels) - 1} (classes_ = "
                             f"{labels}){hint}")
        return int(value)
    return code_of(np.asarray(classes), value, "positive_class", "labels of y (classes_)")


def check_positive(value: Any, name: str, *, allow_none: bool = False, allow_zero: bool = False) -> None:
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, Real):
        raise TypeError(f"{name} must be a number, got {type(value).__name__}")
    ok = value >= 0 if allow_zero else value > 0
    if not ok or not np.isfinite(value):
        raise ValueError(f"{name} must be {'>= 0' if allow_zero else '> 0'} and finite, got {value}")


def check_int(value: Any, name: str, *, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise TypeError(f"{name} must be an integer, got {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


def check_choice(value: Any, name: str, choices: Sequence[str]) -> str:
    if value not in choices:
        raise ValueError(f"{name}={value!r} is not supported; choose one of {', '.join(map(repr, choices))}")
    return value


def resolve_fairness(fairness: Any, positive_class: int = 1) -> FairnessNotion:
    """The fairness notion of a public name (``fairness="equalized_odds"``), with the positive
    class index its blocks may read: the one place a name becomes a
    :class:`pfair.notions.FairnessNotion`. A notion object is returned as it is."""
    if isinstance(fairness, FairnessNotion):
        return fairness
    check_choice(fairness, "fairness", FAIRNESS_NOTIONS)
    return NOTIONS[fairness](positive=positive_class)


# --------------------------------------------------------------------------------------------
# The inputs of the metrics (:mod:`pfair.metrics`): any hashable values numpy can sort
# --------------------------------------------------------------------------------------------


def as_records(values: Any, name: str) -> np.ndarray:
    """``values`` as a non-empty 1-D array, one entry per record, without missing values
    (``NaN``/``None``), or an error naming the argument ``name``."""
    if values is None:
        raise TypeError(f"{name} is None; pass a 1-D array-like with one entry per record.")
    if isinstance(values, (str, bytes)) or np.isscalar(values):
        raise TypeError(
            f"{name} must be a 1-D array-like with one entry per record, "
            f"got a scalar of type {type(values).__name__}."
        )
    if isinstance(values, (pd.Series, pd.Index)):
        arr = values.to_numpy()
    elif isinstance(values, pd.DataFrame):
        if values.shape[1] != 1:
            raise ValueError(
                f"{name} is a DataFrame with {values.shape[1]} columns; pass a single column "
                "(to use an intersection of attributes, combine the columns into one label first, "
                "e.g. df.astype(str).agg('|'.join, axis=1))."
            )
        arr = values.iloc[:, 0].to_numpy()
    else:
        arr = np.asarray(values)
    if arr.ndim == 2 and arr.shape[1] == 1:
        arr = arr[:, 0]
    if arr.ndim != 1:
        raise ValueError(
            f"{name} must be 1-D (one entry per record), got an array of shape {arr.shape}."
        )
    if arr.shape[0] == 0:
        raise ValueError(f"{name} is empty; pass at least one record.")
    missing = pd.isna(arr)
    if np.any(missing):
        first = int(np.flatnonzero(missing)[0])
        raise ValueError(
            f"{name} contains {int(missing.sum())} missing value(s) (NaN/None), the first at "
            f"position {first}; drop those records or impute them before computing metrics."
        )
    return arr


def check_same_length(**arrays: np.ndarray) -> None:
    """Every array has one entry per record (the same length), or an error naming each length."""
    lengths = {name: arr.shape[0] for name, arr in arrays.items()}
    if len(set(lengths.values())) > 1:
        shown = ", ".join(f"{name} has {n}" for name, n in lengths.items())
        raise ValueError(
            f"Inconsistent numbers of records: {shown}; pass arrays with one entry per record."
        )


def sorted_codes(values: np.ndarray, name: str) -> tuple[np.ndarray, np.ndarray]:
    """The sorted distinct values and each entry's code (:func:`unique_inverse`); values of
    types that cannot be sorted together are refused."""
    try:
        return unique_inverse(values)
    except TypeError as exc:  # e.g. a mix of str and int in an object array
        raise TypeError(
            f"{name} mixes values that cannot be sorted together ({exc}); "
            "use a single type for all entries, e.g. all str or all int."
        ) from None


def encode_label_pair(y_true: np.ndarray | None, y_pred: np.ndarray
                      ) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
    """The labels of ``y_true`` and ``y_pred`` together, and the codes of each: one shared label
    index, so that ``y == ŷ`` compares codes."""
    if y_true is None:
        labels, pred_codes = sorted_codes(y_pred, "y_pred")
        return labels, None, pred_codes
    try:
        both = np.concatenate([y_true, y_pred])
    except TypeError:
        both = np.concatenate([y_true.astype(object), y_pred.astype(object)])
    labels, codes = sorted_codes(both, "y_true and y_pred")
    n = y_true.shape[0]
    return labels, codes[:n], codes[n:]


def encode_metric_groups(sensitive_features: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The sorted groups and group codes of a metric's ``sensitive_features``: at least 2 groups
    (a gap between groups needs two)."""
    groups, codes = sorted_codes(sensitive_features, "sensitive_features")
    if groups.shape[0] < 2:
        raise ValueError(
            f"sensitive_features has a single group ({groups.tolist()[0]!r}); a fairness gap needs at "
            "least 2 groups. Pass the sensitive attribute of a sample that contains 2 or more "
            "groups."
        )
    return groups, codes


def code_of(categories: np.ndarray, value: Hashable, name: str, among: str) -> int:
    """The code of ``value`` (the argument ``name``) among ``categories``, described as
    ``among`` (e.g. ``"labels found in y_true/y_pred"``) in the error when it is not one of them."""
    hits = np.flatnonzero(np.array([v == value for v in categories.tolist()], dtype=bool))
    if hits.size == 0:
        kind = among.split()[0]
        raise ValueError(
            f"{name}={value!r} is not among the {among} {categories.tolist()}; pass {name}= one of those {kind}."
        )
    return int(hits[0])


#: How far from 1 user-given proportions may sum (rounding of typed figures such as 0.33, 0.67).
DISTRIBUTION_TOLERANCE = 0.01


def check_distribution(values: Any, name: str) -> None:
    """Refuse proportions that are not a distribution: finite, > 0 and summing to 1 within
    :data:`DISTRIBUTION_TOLERANCE` (they are rescaled to sum to 1 afterwards). Proportions that
    sum to 1.1 are a typo or counts, and rescaling them silently would hide it."""
    a = np.asarray(values, dtype=np.float64).ravel()
    total = float(a.sum())
    if np.all(np.isfinite(a)) and abs(total - 1.0) > DISTRIBUTION_TOLERANCE:
        raise ValueError(f"{name} must be proportions summing to 1 (within {DISTRIBUTION_TOLERANCE:g}), got "
                         f"{a.tolist()} summing to {total:.6g}; give p(s) over the groups (with equalized odds "
                         "p(s | y) per class, each row summing to 1)")
