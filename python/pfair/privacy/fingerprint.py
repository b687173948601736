"""The fingerprint that binds a ledger to its silo's data (never sent anywhere)."""

from __future__ import annotations

import hashlib
from typing import Any, Optional

import numpy as np

__all__ = ["FINGERPRINT_PREFIX", "FINGERPRINT_ROWS", "data_fingerprint", "fingerprint_step", "legacy_fingerprint"]

#: Feature rows a fingerprint reads: every ``ceil(n / FINGERPRINT_ROWS)``-th row of the silo.
FINGERPRINT_ROWS = 256
#: Prefix of fingerprints that read a sample of the rows (older ones hash every row).
FINGERPRINT_PREFIX = "v2:"


def fingerprint_step(n_rows: int) -> int:
    """The stride of the feature rows :func:`data_fingerprint` reads."""
    return max(1, -(-int(n_rows) // FINGERPRINT_ROWS))


def data_fingerprint(X: Any, y: np.ndarray, s: np.ndarray, *, shape: Optional[tuple] = None) -> str:
    """``"v2:"`` + SHA-256 of a silo's shape, its label and group indices (int64, every record) and
    at most :data:`FINGERPRINT_ROWS` of its feature rows (float64, every
    :func:`fingerprint_step`-th row from the first). Binds a ledger to the data it accounts for; it
    is never sent anywhere.

    ``X`` is the feature matrix, or, with ``shape`` (the whole matrix's shape), the rows
    ``X[::fingerprint_step(shape[0])]`` already taken, so that a silo that is rows of a larger
    matrix gathers only those. The sample keeps the cost of binding a ledger independent of the
    number of features times records (it hashed 8 GB at 10⁷ × 100). Two data sets that agree on
    everything hashed share a ledger, which can only charge more, never less: the fingerprint
    guards against passing a silo's ledger to other data, not against a user who wants to."""
    h = hashlib.sha256()
    if shape is None:
        shape = np.shape(X)
        X = np.asarray(X)[:: fingerprint_step(shape[0])]
    sample = np.ascontiguousarray(X, dtype=np.float64)
    if sample.shape[0] != len(range(0, shape[0], fingerprint_step(shape[0]))):
        raise ValueError(f"data_fingerprint: {sample.shape[0]} sampled rows for a matrix of shape {tuple(shape)}; "
                         "pass X[::fingerprint_step(n)] with shape=(n, d), or the whole matrix without shape")
    h.update(np.asarray(shape, dtype=np.int64).tobytes())
    h.update(memoryview(sample).cast("B"))
    for v in (y, s):
        h.update(np.ascontiguousarray(v, dtype=np.int64).tobytes())
    return FINGERPRINT_PREFIX + h.hexdigest()


def legacy_fingerprint(X: Any, y: np.ndarray, s: np.ndarray, *, shape: Optional[tuple] = None) -> str:
    """The fingerprint of ledgers written before :data:`FINGERPRINT_PREFIX` fingerprints: SHA-256
    of the shape, every feature (float64) and the label and group indices (int64). Used only to
    recognise such a ledger's data, once, before it is re-bound with :func:`data_fingerprint`.

    ``X`` is the feature matrix, or an iterable of consecutive blocks of its rows together with
    ``shape`` (the matrix's shape): the digest is the same, without one copy of the whole."""
    h = hashlib.sha256()
    if shape is None:
        X = np.ascontiguousarray(X, dtype=np.float64)
        shape, blocks = X.shape, (X,)
    else:
        blocks = X
    h.update(np.asarray(shape, dtype=np.int64).tobytes())
    for block in blocks:
        h.update(memoryview(np.ascontiguousarray(block, dtype=np.float64)).cast("B"))
    for v in (y, s):
        h.update(np.ascontiguousarray(v, dtype=np.int64).tobytes())
    return h.hexdigest()
