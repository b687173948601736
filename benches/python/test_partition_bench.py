"""Paper's partitioner (Gupta et al. 2024, Algorithm 3) on 10^7 rows into 1,000 silos: Rust vs pure NumPy.

Run with ``pytest benches/python --benchmark-enable``. Both run in the same session on the same
data; the NumPy reference is ``tests/partition_reference.py``.
"""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

import pfair.partition as partition

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tests"))
from partition_reference import heterogeneous_numpy  # noqa: E402

N, SILOS, H = 10_000_000, 1_000, 0.5


@pytest.fixture(scope="module")
def ages() -> np.ndarray:
    return np.floor(np.random.default_rng(0).uniform(17, 90, N))


def _check(ids: np.ndarray) -> None:
    assert ids.shape == (N,)
    assert (np.bincount(ids, minlength=SILOS) == N // SILOS).all()


def test_heterogeneous_rust(benchmark, ages):
    ids = benchmark.pedantic(partition.heterogeneous, args=(ages, SILOS), kwargs={"heterogeneity": H, "seed": 1}, rounds=5, iterations=1)
    _check(ids)


def test_heterogeneous_numpy(benchmark, ages):
    ids = benchmark.pedantic(heterogeneous_numpy, args=(ages, SILOS, H, 1), rounds=3, iterations=1)
    _check(ids)
