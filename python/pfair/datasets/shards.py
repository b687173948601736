"""One silo's shard on disk: preprocessed numeric features plus the global label and group codes.

A deployed silo (:mod:`pfair.flower`) reads only its own shard. Features must already be
numeric and preprocessed with a specification shared by every silo (the same one-hot columns,
the same scaling), and ``label`` / ``sensitive`` hold the *global* codes 0..l-1 and 0..k-1, so
that a silo lacking a group still uses the global index. :func:`write_shard` writes what
:func:`pfair.Federation.partition` produced; :func:`read_shard` reads CSV or Parquet (the latter
needs ``pyarrow``, installed with ``pfair[flower]``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd

LABEL, SENSITIVE = "label", "sensitive"


def write_shard(path: str | os.PathLike, X: np.ndarray, y: np.ndarray, s: np.ndarray,
                feature_names: Sequence[str] | None = None) -> Path:
    """Write a shard as CSV (``.csv``, ``.csv.gz``) or Parquet (``.parquet``)."""
    path = Path(path)
    X = np.asarray(X, dtype=np.float64)
    names = list(feature_names) if feature_names is not None else [f"x{i}" for i in range(X.shape[1])]
    if len(names) != X.shape[1]:
        raise ValueError(f"feature_names has {len(names)} names but X has {X.shape[1]} columns")
    clash = {LABEL, SENSITIVE} & set(names)
    if clash:
        raise ValueError(f"feature_names must not use the reserved column names {sorted(clash)}")
    frame = pd.DataFrame(X, columns=names)
    frame[LABEL] = np.asarray(y, dtype=np.int64)
    frame[SENSITIVE] = np.asarray(s, dtype=np.int64)
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".parquet":
        frame.to_parquet(path, index=False)
    else:
        frame.to_csv(path, index=False, float_format="%.17g")
    return path


def read_shard(path: str | os.PathLike, *, n_groups: int | None = None, n_classes: int | None = None
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[str]]:
    """``(X, y, s, feature_names)`` of a shard written by :func:`write_shard` (or by hand in the
    same layout). Codes are checked against ``n_groups``/``n_classes`` when given."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"shard {str(path)!r} does not exist; write it with pfair.datasets.write_shard")
    # round_trip: the features come back bit for bit from write_shard's %.17g with every pandas
    # (pandas 2.0's default parser can be one unit in the last place off).
    frame = (pd.read_parquet(path) if path.suffix == ".parquet"
             else pd.read_csv(path, float_precision="round_trip"))
    for col in (LABEL, SENSITIVE):
        if col not in frame.columns:
            raise ValueError(f"shard {str(path)!r} has no {col!r} column (columns: {list(frame.columns)[:10]}...)")
    names = [c for c in frame.columns if c not in (LABEL, SENSITIVE)]
    X = np.ascontiguousarray(frame[names].to_numpy(dtype=np.float64))
    if not np.all(np.isfinite(X)):
        raise ValueError(f"shard {str(path)!r} has NaN or inf features; impute or drop them before deploying")
    y = frame[LABEL].to_numpy()
    s = frame[SENSITIVE].to_numpy()
    for arr, col, bound in ((y, LABEL, n_classes), (s, SENSITIVE, n_groups)):
        if arr.dtype.kind not in "iu" and not np.all(np.mod(arr, 1) == 0):
            raise ValueError(f"shard {str(path)!r}: column {col!r} must hold integer codes")
        if arr.size and (arr.min() < 0 or (bound is not None and arr.max() >= bound)):
            raise ValueError(f"shard {str(path)!r}: column {col!r} has codes outside 0..{(bound or 1) - 1}")
    return X, y.astype(np.int64), s.astype(np.int64), names
