"""Pure-NumPy reference of the paper's partitioner (Gupta et al. 2024, App. E.2.3, Algorithm 3).

The one allowed duplicate of the math in ``rust/src/partition.rs``: the bench times it against the
Rust implementation, and the tests check that both give the same distribution of silo sizes and
heterogeneity. It uses NumPy's own random generator, so its partitions differ from Rust's draw by
draw while following the same algorithm.
"""

from __future__ import annotations

import numpy as np


def heterogeneous_numpy(values: np.ndarray, n_silos: int, heterogeneity: float, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    n = values.shape[0]
    sizes = np.full(n_silos, n // n_silos, dtype=np.int64)
    sizes[: n % n_silos] += 1
    starts = np.concatenate(([0], np.cumsum(sizes)))
    taken = np.floor(sizes * heterogeneity).astype(np.int64)
    order = np.argsort(values, kind="stable")  # ties by index
    out = np.empty(n, dtype=np.int64)
    in_pool = np.ones(n, dtype=bool)  # by position in `order`
    for k in range(n_silos):
        pick = starts[k] + rng.choice(sizes[k], size=taken[k], replace=False)
        out[order[pick]] = k
        in_pool[pick] = False
    pool = rng.permutation(order[in_pool])
    out[pool] = np.repeat(np.arange(n_silos), sizes - taken)
    return out
