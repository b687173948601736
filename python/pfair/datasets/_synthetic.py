"""`make_synthetic`: records with a tunable dependence between s, x and y, for scale tests."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ._base import Dataset

_CHUNK = 1 << 15  # rows generated per step


def make_synthetic(
    n: int,
    d: int,
    k: int = 2,
    l: int = 2,  # noqa: E741 (l is the number of classes throughout pfair)
    silos: int = 1,
    *,
    dependence: float = 0.5,
    seed: int = 0,
    test_size: float = 0.25,
) -> Dataset:
    """Draw n i.i.d. records (x, y, s) with x in R^d, s in 0..k-1, y in 0..l-1.

    Generative model (all parameters drawn from ``numpy.random.default_rng(seed)``):

        s ~ Categorical(p),  p_r ∝ r + 1            (group k-1 largest, group 0 smallest)
        g_r = -1 + 2 r / (k - 1)                   (group score in [-1, 1])
        x = dependence · g_s · v + ε,  ε ~ N(0, I_d), v a random unit vector
        y = argmax_u ( (x W)_u + dependence · g_s · c_u + G_u ),  G_u i.i.d. Gumbel(0, 1)

    with W ∈ R^{d×l} random (entries N(0, 4/d)) and c_u = -1 + 2u/(l-1): y is drawn from the
    softmax of the logits.  ``dependence = 0`` makes s independent of (x, y); a larger value shifts
    the group means of x along v and tilts the groups towards high (s = k-1) or low (s = 0) classes,
    so |corr(s, y)| and |corr(s, x·v)| grow with it.

    The first ``n - round(test_size · n)`` rows are the training split, the rest the test split (the
    rows are i.i.d., so this is a plain random split).  Within each split, silo ``j`` holds the
    ``j``-th of ``silos`` blocks of consecutive records (equal sizes up to one record; i.i.d. rows,
    so any assignment is a random one, and consecutive records make each silo an index range of
    ``X``, which makes large fits faster: ``docs/performance.md``).  The silo ids are in
    ``attrs_train["silo"]`` / ``attrs_test["silo"]``, with the raw group in
    ``attrs_*["s"]``.  X is float64 and NOT re-standardised (each column is already close to
    N(0, 1)).  Memory: 8·n·d bytes for X plus 8·n each for y, s and the silo ids, about 1 GB
    for 10^7 × 10; generation is chunked, so no other O(n·d) temporary is made.
    """
    n, d, k, l, silos = int(n), int(d), int(k), int(l), int(silos)  # noqa: E741
    if n < 2:
        raise ValueError(f"n must be >= 2, got {n}")
    if d < 1:
        raise ValueError(f"d must be >= 1, got {d}")
    if k < 2:
        raise ValueError(f"k must be >= 2 (number of sensitive groups), got {k}")
    if l < 2:
        raise ValueError(f"l must be >= 2 (number of classes), got {l}")
    if silos < 1:
        raise ValueError(f"silos must be >= 1, got {silos}")
    if not dependence >= 0:
        raise ValueError(f"dependence must be >= 0, got {dependence!r}")
    if not 0.0 < test_size < 1.0:
        raise ValueError(f"test_size must be in (0, 1), got {test_size!r}")

    rng = np.random.default_rng(seed)
    # Model parameters first, so they depend on the seed only (not on n).
    p = np.arange(1, k + 1, dtype=np.float64)
    p /= p.sum()
    v = rng.standard_normal(d)
    v /= np.linalg.norm(v)
    W = rng.standard_normal((d, l)) * (2.0 / np.sqrt(d))
    group_score = np.linspace(-1.0, 1.0, k)
    class_score = np.linspace(-1.0, 1.0, l)

    # s by inverse-CDF sampling; then x and y chunk by chunk so the temporaries (the shifted means,
    # the logits, the noise) stay small and in cache.  Deterministic for a seed: the chunk size
    # is a constant.
    s = np.searchsorted(np.cumsum(p)[:-1], rng.random(n), side="right").astype(np.int64)
    shift = dependence * group_score[:, None] * v[None, :]  # (k, d): E[x | s = r]
    tilt = dependence * group_score[:, None] * class_score[None, :]  # (k, l): direct effect s -> y
    w_diff = W[:, 1] - W[:, 0]
    tilt_diff = tilt[:, 1] - tilt[:, 0]
    X = np.empty((n, d), dtype=np.float64)
    y = np.empty(n, dtype=np.int64)
    for a in range(0, n, _CHUNK):
        b = min(a + _CHUNK, n)
        s_c, X_c = s[a:b], X[a:b]
        rng.standard_normal(out=X_c)
        X_c += shift[s_c]
        # Matrix-vector products only: a (chunk, d) @ (d, l) matmul goes through multi-threaded
        # BLAS gemm, which is ~50x slower here for tiny l on a busy machine.
        if l == 2:  # Gumbel-max with two classes: the difference of two Gumbels is logistic
            margin = X_c @ w_diff
            margin += tilt_diff[s_c]
            margin += rng.logistic(size=b - a)
            y[a:b] = margin > 0
        else:
            z = rng.gumbel(size=(l, b - a))
            z += tilt.T[:, s_c]
            for u in range(l):
                z[u] += X_c @ W[:, u]
            y[a:b] = z.argmax(axis=0)

    n_test = int(round(test_size * n))
    n_train = n - n_test
    if n_test == 0 or n_train == 0:
        raise ValueError(f"test_size={test_size} leaves an empty split for n={n}")
    group_names = [f"group_{r}" for r in range(k)]
    for split, part in (("train", s[:n_train]), ("test", s[n_train:])):
        empty = np.flatnonzero(np.bincount(part, minlength=k) == 0)
        if empty.size:
            raise ValueError(
                f"n: groups {[group_names[r] for r in empty]} have no records in the {split} "
                f"split; increase n (n={n}, k={k})"
            )
    silo = np.concatenate([np.arange(m, dtype=np.int64) * silos // m for m in (n_train, n_test)])
    return Dataset(
        name="synthetic",
        X_train=X[:n_train],
        y_train=y[:n_train],
        s_train=s[:n_train],
        X_test=X[n_train:],
        y_test=y[n_train:],
        s_test=s[n_train:],
        feature_names=[f"x{j}" for j in range(d)],
        label_names=[f"class_{u}" for u in range(l)],
        sensitive_name="s",
        group_names=group_names,
        attrs_train=pd.DataFrame({"silo": silo[:n_train], "s": s[:n_train]}),
        attrs_test=pd.DataFrame({"silo": silo[n_train:], "s": s[n_train:]}),
        train_index=np.arange(n_train, dtype=np.int64),
        test_index=np.arange(n_train, n, dtype=np.int64),
    )
