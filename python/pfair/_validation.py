"""Input validation at the public boundary. Messages name the argument and the fix."""

from __future__ import annotations

from numbers import Integral, Real
from typing import Any, Sequence

import numpy as np


def as_features(X: Any, name: str = "X") -> np.ndarray:
    """A finite C-contiguous float64 matrix ``(n, d)``."""
    if hasattr(X, "to_numpy"):
        X = X.to_numpy()
    try:
        arr = np.asarray(X, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{name} must be a numeric 2-D array; convert categorical columns first ({exc})") from None
    if arr.ndim == 1:
        raise ValueError(f"{name} must be 2-D (n_samples, n_features); reshape a single feature with {name}.reshape(-1, 1)")
    if arr.ndim != 2:
        raise ValueError(f"{name} must be 2-D (n_samples, n_features), got {arr.ndim} dimensions")
    if arr.shape[0] == 0:
        raise ValueError(f"{name} has no rows")
    if not np.isfinite(arr).all():
        bad = int((~np.isfinite(arr)).any(axis=1).sum())
        raise ValueError(f"{name} contains NaN or inf in {bad} rows; impute or drop them before fitting")
    return np.ascontiguousarray(arr)


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


def encode(values: np.ndarray, name: str, categories: Sequence[Any] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Integer codes ``0..c-1`` of ``values`` and the sorted categories (global encoding)."""
    if categories is None:
        cats, codes = np.unique(values, return_inverse=True)
    else:
        cats = np.asarray(categories)
        lookup = {c: i for i, c in enumerate(cats.tolist())}
        try:
            codes = np.fromiter((lookup[v] for v in values.tolist()), dtype=np.int64, count=len(values))
        except KeyError as exc:
            raise ValueError(f"{name} contains {exc.args[0]!r}, which is not among the known categories {cats.tolist()}") from None
    if len(cats) < 2:
        raise ValueError(f"{name} has {len(cats)} distinct value(s); at least 2 are needed")
    return codes.astype(np.int64), cats


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
