"""Split one data set across silos with controlled heterogeneity.

Every partitioner returns one silo id per record (an ``int64`` array), so
``X[silo_ids == k]`` is silo k's data. The work happens in Rust (``rust/src/partition.rs``),
in parallel and without the GIL; the same seed gives the same partition on any machine.

* :func:`heterogeneous` -- the partitioner of Gupta, Poornash, Razaviyayn and Lowy, "A Stochastic
  Optimization Framework for Private and Fair Learning From Decentralized Data" (2024, App. E.2.3,
  Algorithm 3), with a heterogeneity level ``h`` in [0, 1] along a partition attribute (age in the
  paper; any numeric or categorical column here).
* :func:`dirichlet` -- Dirichlet(alpha) skew of a label or sensitive attribute, as in
  flwr-datasets, optionally with exact silo sizes.
* :func:`power_law_sizes` -- unequal (Zipf) silo sizes summing exactly to n.
* :func:`heterogeneity_score`, :func:`describe_partition` -- how different the silos are.
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np
import numpy.typing as npt
import pandas as pd

from pfair import _core

__all__ = [
    "heterogeneous",
    "dirichlet",
    "power_law_sizes",
    "heterogeneity_score",
    "describe_partition",
]

_MAX_SEED = 2**64 - 1


def _one_d(name: str, x: Any) -> np.ndarray:
    a = np.asarray(x)
    if a.ndim != 1:
        raise ValueError(f"{name}: must be a 1-D array, got shape {a.shape}")
    return a


def _seed(seed: Any) -> int:
    if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer)):
        raise ValueError(f"seed: must be an integer, got {seed!r}")
    if not 0 <= int(seed) <= _MAX_SEED:
        raise ValueError(f"seed: must be in [0, 2**64), got {seed}")
    return int(seed)


def _n_silos(n_silos: Any, n: int) -> int:
    if isinstance(n_silos, (bool, np.bool_)) or not isinstance(n_silos, (int, np.integer)):
        raise ValueError(f"n_silos: must be an integer, got {n_silos!r}")
    if not 1 <= n_silos <= n:
        raise ValueError(f"n_silos: must be in [1, n] = [1, {n}], got {n_silos}")
    return int(n_silos)


def _numeric(name: str, x: Any, check_nan: bool = True) -> np.ndarray:
    """A contiguous float64 view (or copy) of a 1-D numeric array, checked for NaN unless the Rust
    side checks it anyway (``check_nan=False``, saving a pass over large inputs)."""
    a = _one_d(name, x)
    if a.dtype.kind not in "biuf":
        raise ValueError(f"{name}: must be numeric, got dtype {a.dtype}")
    a = np.ascontiguousarray(a, dtype=np.float64)
    if check_nan and np.isnan(a).any():
        raise ValueError(f"{name}: contains NaN (first at index {int(np.argmax(np.isnan(a)))})")
    return a


def _codes(name: str, x: Any) -> tuple[np.ndarray, np.ndarray]:
    """(categories, int64 codes in [0, n_categories)) of a 1-D categorical array."""
    a = _one_d(name, x)
    if a.dtype.kind == "f" and np.isnan(a).any():
        raise ValueError(f"{name}: contains NaN (first at index {int(np.argmax(np.isnan(a)))})")
    try:
        categories, codes = np.unique(a, return_inverse=True)
    except TypeError as e:  # e.g. a mix of None and str
        raise ValueError(f"{name}: values must be sortable categories ({e})") from None
    return categories, np.ascontiguousarray(codes.reshape(-1), dtype=np.int64)


def _sizes(sizes: Any, n_silos: int, n: int) -> Optional[np.ndarray]:
    if sizes is None:
        return None
    s = _one_d("sizes", sizes)
    if s.dtype.kind not in "iu" and not (s.dtype.kind == "f" and np.all(s == np.round(s))):
        raise ValueError(f"sizes: must be integers, got dtype {s.dtype}")
    s = np.ascontiguousarray(s, dtype=np.int64)
    if s.shape[0] != n_silos:
        raise ValueError(f"sizes: needs one size per silo ({n_silos}), got {s.shape[0]}")
    if (s < 0).any():
        raise ValueError(f"sizes: must be >= 0, got {int(s.min())}")
    if int(s.sum()) != n:
        raise ValueError(f"sizes: must sum to the number of records {n}, got {int(s.sum())}")
    return s


def heterogeneous(
    values: npt.ArrayLike,
    n_silos: int,
    *,
    heterogeneity: float,
    seed: int = 0,
    sizes: Optional[npt.ArrayLike] = None,
) -> np.ndarray:
    """Silo ids of the heterogeneity partitioner of Gupta, Poornash, Razaviyayn and Lowy, "A
    Stochastic Optimization Framework for Private and Fair Learning From Decentralized Data" (2024),
    App. E.2.3, Algorithm 3.

    1. Order the records by ``values`` (the partition attribute, e.g. age; ties by position) and
       cut the order into ``n_silos`` contiguous prior blocks, block k holding the k-th lowest
       range of the attribute.
    2. Silo k takes ``floor(s_k * h)`` records drawn uniformly without replacement from block k.
    3. Every silo fills up to its size ``s_k`` with records drawn uniformly without replacement
       from the pool of records not yet assigned.

    ``h = 0`` gives a uniformly random (homogeneous) partition, ``h = 1`` the sorted contiguous
    blocks. Sizes are exact: ``sizes`` if given, else ``n // n_silos`` each with the first
    ``n % n_silos`` silos getting one more record.

    A categorical ``values`` (strings, objects, pandas categories) is ordered by its sorted
    distinct values (:func:`numpy.unique`), so at ``h = 1`` each silo holds a contiguous range of
    categories, e.g. one region per silo when there are as many regions as silos of equal size.

    Parameters
    ----------
    values : 1-D numeric array, no NaN (infinities sort to the ends), or 1-D array of sortable
        categories.
    n_silos : number of silos K, ``1 <= K <= n``.
    heterogeneity : h in [0, 1].
    seed : non-negative integer; the same seed gives the same partition.
    sizes : optional silo sizes (non-negative integers summing to n).

    Returns
    -------
    ``int64`` array of length n with values in ``[0, n_silos)``.
    """
    raw = _one_d("values", values)
    if raw.dtype.kind in "biuf":
        v = _numeric("values", raw, check_nan=False)  # rust/src/partition.rs rejects NaN
    else:  # categorical: sort by category, the rank is the partition attribute
        v = _codes("values", raw)[1].astype(np.float64)
    k = _n_silos(n_silos, v.shape[0])
    h = float(heterogeneity)
    if not 0.0 <= h <= 1.0:
        raise ValueError(f"heterogeneity: must be in [0, 1], got {heterogeneity}")
    return _core.partition_heterogeneous(v, k, h, _seed(seed), _sizes(sizes, k, v.shape[0]))


def dirichlet(
    groups: npt.ArrayLike,
    n_silos: int,
    *,
    alpha: float,
    seed: int = 0,
    sizes: Optional[npt.ArrayLike] = None,
) -> np.ndarray:
    """Silo ids with Dirichlet(alpha) skew of a categorical column (label or sensitive attribute).

    For each category c, silo proportions ``p_c ~ Dirichlet(alpha, ..., alpha)`` are drawn (as in
    flwr-datasets' ``DirichletPartitioner``) and c's records, shuffled, are dealt out as
    ``n_c * p_c`` records per silo (rounded by largest remainder, so all n_c are used).

    Without ``sizes`` silo sizes are whatever the draws give -- a silo can be small or empty when
    alpha is small. With ``sizes`` both margins are met exactly: the real matrix
    ``n_c * p_{c,k}`` is fitted by iterative proportional fitting to row sums ``n_c`` and column
    sums ``sizes`` (the matrix with those margins closest to it in KL divergence), rounded per
    category, and the few rounding units left over are moved between silos inside one category
    each; so every silo gets exactly ``sizes[k]`` records and every record one silo.

    Large alpha gives homogeneous silos, small alpha puts each category on few silos.

    Parameters
    ----------
    groups : 1-D array of categories (any sortable dtype, no NaN).
    n_silos : number of silos K, ``1 <= K <= n``.
    alpha : concentration, > 0.
    seed : non-negative integer.
    sizes : optional silo sizes (non-negative integers summing to n).
    """
    _, codes = _codes("groups", groups)
    n = codes.shape[0]
    k = _n_silos(n_silos, n)
    a = float(alpha)
    if not (np.isfinite(a) and a > 0):
        raise ValueError(f"alpha: must be finite and > 0, got {alpha}")
    return _core.partition_dirichlet(codes, k, a, _seed(seed), _sizes(sizes, k, n))


def power_law_sizes(n: int, n_silos: int, *, exponent: float = 1.0, min_size: int = 1) -> np.ndarray:
    """Zipf silo sizes: ``s_k = min_size + (n - K*min_size) * (k+1)**-exponent / sum_j (j+1)**-exponent``.

    Rounded by largest remainder so that ``sum(s) == n`` exactly; non-increasing in k;
    ``exponent = 0`` gives (almost) equal sizes. Deterministic. Pass the result as ``sizes=`` to
    :func:`heterogeneous` or :func:`dirichlet`.
    """
    for name, v in (("n", n), ("n_silos", n_silos), ("min_size", min_size)):
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)) or v < 0:
            raise ValueError(f"{name}: must be a non-negative integer, got {v!r}")
    _n_silos(n_silos, int(n))
    e = float(exponent)
    if not (np.isfinite(e) and e >= 0):
        raise ValueError(f"exponent: must be finite and >= 0, got {exponent}")
    if n_silos * min_size > n:
        raise ValueError(f"min_size: n_silos * min_size = {n_silos * min_size} exceeds n = {n}")
    return _core.partition_power_law_sizes(int(n), int(n_silos), e, int(min_size))


def _silo_ids(silo_ids: Any) -> np.ndarray:
    s = _one_d("silo_ids", silo_ids)
    if s.dtype.kind not in "iu":
        raise ValueError(f"silo_ids: must be integers, got dtype {s.dtype}")
    if s.size and (s.min() < 0 or s.max() >= s.shape[0]):
        raise ValueError("silo_ids: must be in [0, n)")
    return np.ascontiguousarray(s, dtype=np.int64)


def heterogeneity_score(silo_ids: npt.ArrayLike, values_or_groups: npt.ArrayLike, *, kind: str = "auto") -> float:
    """How different the silos are, 0 for identical silos.

    ``kind="tv"`` (categorical column): size-weighted mean total-variation distance between each
    silo's distribution and the pooled one, ``sum_k (n_k/n) * 1/2 * sum_c |p(c|k) - p(c)|``.

    ``kind="eta2"`` (numeric column): correlation ratio, the share of the variance lying between
    silos, ``sum_k n_k (mean_k - mean)**2 / sum_i (x_i - mean)**2`` in [0, 1]. For
    :func:`heterogeneous` silo means move by about ``h * (block mean - mean)``, so it grows like
    ``h**2``; it is about ``(K-1)/(n-1)`` for a random partition.

    ``kind="auto"``: ``"eta2"`` for floating-point columns, ``"tv"`` for anything else.
    Both fall with alpha for :func:`dirichlet` (on its grouping column) and rise with h for
    :func:`heterogeneous` (eta2 on its attribute, tv on columns correlated with it).
    """
    s = _silo_ids(silo_ids)
    x = _one_d("values_or_groups", values_or_groups)
    if x.shape[0] != s.shape[0]:
        raise ValueError(f"values_or_groups: needs one entry per record ({s.shape[0]}), got {x.shape[0]}")
    if s.shape[0] == 0:
        raise ValueError("silo_ids: is empty")
    if kind == "auto":
        kind = "eta2" if x.dtype.kind == "f" else "tv"
    if kind == "tv":
        _, codes = _codes("values_or_groups", x)
        return float(_core.partition_heterogeneity_tv(s, codes))
    if kind == "eta2":
        v = _numeric("values_or_groups", x)
        if not np.isfinite(v).all():
            raise ValueError("values_or_groups: must be finite for kind='eta2'")
        return float(_core.partition_heterogeneity_eta2(s, v))
    raise ValueError(f"kind: must be 'auto', 'tv' or 'eta2', got {kind!r}")


def describe_partition(
    silo_ids: npt.ArrayLike,
    *,
    y: Optional[npt.ArrayLike],
    sensitive_features: Optional[npt.ArrayLike],
    attribute: Optional[npt.ArrayLike] = None,
) -> pd.DataFrame:
    """Per-silo statistics: one row per silo ``0..max(silo_ids)``.

    Columns: ``size``; ``p(s=r)`` for each group r of ``sensitive_features``; ``p(y=c)`` for each
    class c of ``y``; ``tv(s)`` and ``tv(y)``, each silo's total-variation distance
    ``½ Σ_c |p̂(c | k) − p̂(c)|`` from the pooled mix (its heterogeneity); ``attribute_mean`` if
    ``attribute`` is given. Empty silos have NaN proportions. ``df.attrs["heterogeneity"]`` holds
    the scores of :func:`heterogeneity_score` (``s_tv`` is the size-weighted mean of ``tv(s)``):
    ``"s_tv"``, ``"y_tv"`` and ``"attribute_eta2"`` (those whose column was given);
    ``df.attrs["global"]`` the pooled proportions and mean.
    """
    s = _silo_ids(silo_ids)
    n = s.shape[0]
    if n == 0:
        raise ValueError("silo_ids: is empty")
    n_silos = int(s.max()) + 1
    size = np.bincount(s, minlength=n_silos)
    df = pd.DataFrame({"size": size}, index=pd.RangeIndex(n_silos, name="silo"))
    scores: dict[str, float] = {}
    pooled: dict[str, float] = {}

    def proportions(name: str, prefix: str, col: Any) -> None:
        x = _one_d(name, col)
        if x.shape[0] != n:
            raise ValueError(f"{name}: needs one entry per record ({n}), got {x.shape[0]}")
        categories, codes = _codes(name, x)
        table = np.zeros((n_silos, categories.shape[0]))
        np.add.at(table, (s, codes), 1.0)
        with np.errstate(invalid="ignore", divide="ignore"):
            table /= size[:, None]
        share = np.bincount(codes, minlength=categories.shape[0]) / n
        for j, c in enumerate(categories):
            key = f"p({prefix}={c})"
            df[key] = table[:, j]
            pooled[key] = float(share[j])
        df[f"tv({prefix})"] = 0.5 * np.abs(table - share).sum(axis=1)
        scores[f"{prefix}_tv"] = float(_core.partition_heterogeneity_tv(s, codes))

    if sensitive_features is not None:
        proportions("sensitive_features", "s", sensitive_features)
    if y is not None:
        proportions("y", "y", y)
    if attribute is not None:
        a = _numeric("attribute", attribute)
        if a.shape[0] != n:
            raise ValueError(f"attribute: needs one entry per record ({n}), got {a.shape[0]}")
        if not np.isfinite(a).all():
            raise ValueError("attribute: must be finite")
        with np.errstate(invalid="ignore", divide="ignore"):
            df["attribute_mean"] = np.bincount(s, weights=a, minlength=n_silos) / size
        pooled["attribute_mean"] = float(a.mean())
        scores["attribute_eta2"] = float(_core.partition_heterogeneity_eta2(s, a))
    df.attrs["heterogeneity"] = scores
    df.attrs["global"] = pooled
    return df
