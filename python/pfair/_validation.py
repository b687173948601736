"""Input validation at the public boundary. Messages name the argument and the fix."""

from __future__ import annotations

import warnings
from numbers import Integral, Real
from typing import Any, Sequence

import numpy as np

#: More sensitive groups than this is almost always a continuous or identifier column used by mistake.
MAX_GROUPS = 20


def as_features(X: Any, name: str = "X", *, keep_float32: bool = False) -> np.ndarray:
    """A finite C-contiguous float64 matrix ``(n, d)``; with ``keep_float32``, a float32 input
    stays float32 (no copy when it is C-contiguous: half the memory of float64)."""
    if hasattr(X, "to_numpy"):
        X = X.to_numpy()
    if hasattr(X, "toarray") or hasattr(X, "tocsr"):
        raise TypeError(f"Sparse data was passed for {name}, but dense data is required: use {name}.toarray() "
                        "(the Rust kernels take dense float64 rows)")
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
    from pfair import _core

    bad = int(_core.nonfinite_rows(arr))  # in parallel, no temporary the size of X
    if bad:
        raise ValueError(f"{name} contains NaN or inf in {bad} rows; impute or drop them before fitting")
    return arr


def as_vector(v: Any, name: str, n: int | None = None) -> np.ndarray:
    """A 1-D array without missing values, optionally of length ``n``."""
    if hasattr(v, "to_numpy"):
        v = v.to_numpy()
    arr = np.asarray(v)
    if arr.ndim == 2 and arr.shape[1] == 1:
        arr = arr[:, 0]
    if arr.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {arr.shape}")
    if n is not None and arr.shape[0] != n:
        raise ValueError(f"{name} has {arr.shape[0]} entries but X has {n} rows; they must match")
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
        cats, codes = unique_inverse(values)
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
        from sklearn.exceptions import DataConversionWarning

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


def check_groups(groups: np.ndarray, values: np.ndarray, name: str = "sensitive_features") -> None:
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
        stacklevel=4,
    )


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
    try:
        return as_vector(silos, "silos", n)
    except ValueError as exc:
        if "inhomogeneous" in str(exc) or "sequence" in str(exc):
            raise ValueError(
                "silos must be one silo id per record (silos=[0, 0, 1, ...]) or a list of index arrays, one per "
                "silo (silos=[np.array([0, 1]), np.array([2, 3])])"
            ) from None
        raise


def check_default_delta(sizes: Sequence[int], names: Sequence[Any] | None = None) -> None:
    """A private fit with ``delta=None`` uses ``1/n_j²`` for silo j, undefined for a silo of one
    record: refuse before anything runs, naming the silo and the fix."""
    for j, n_j in enumerate(sizes):
        if n_j < 2:
            label = names[j] if names is not None else j
            label = label.item() if hasattr(label, "item") else label
            raise ValueError(
                f"silo {label!r} has {n_j} record; a private fit with delta=None uses delta = 1/n² per silo, "
                f"which is 1 for it (no privacy). Merge silo {label!r} with another silo, or pass delta= "
                "explicitly (e.g. delta=1e-6, below 1/total records)"
            )


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
