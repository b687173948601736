"""``make_synthetic`` at scale: 10^7 records × 10 features, 1,000 silos (a scale run).

Run with ``pytest benches/python --benchmark-enable``; the figure is in docs/results.md.
"""

from __future__ import annotations

import numpy as np

from pfair.datasets import make_synthetic

N, D, SILOS = 10_000_000, 10, 1_000


def test_make_synthetic_ten_million_rows(benchmark):
    ds = benchmark.pedantic(lambda: make_synthetic(N, D, k=2, l=2, silos=SILOS, dependence=0.5, seed=0),
                            rounds=1, iterations=1)
    assert ds.X_train.shape[0] + ds.X_test.shape[0] == N and ds.X_train.shape[1] == D
    assert np.unique(ds.attrs_train["silo"]).shape[0] == SILOS
    assert ds.X_train.dtype == np.float64 and np.isfinite(ds.X_train[:1000]).all()
