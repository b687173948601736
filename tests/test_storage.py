"""One owner of the feature matrix: a Federation's silos are rows of it, and Rust reads it in place."""

from __future__ import annotations

import numpy as np
import pytest

import pfair
from pfair import _core


def _arrays(n=600, d=6, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    y = (X[:, 0] + rng.normal(size=n) > 0).astype(int)
    s = rng.integers(0, 2, size=n)
    return X, y, s


def test_silos_hold_rows_of_one_matrix_without_copies():
    X, y, s = _arrays()
    ids = np.repeat([0, 1, 2], 200)  # consecutive silos: views
    fed = pfair.Federation.from_arrays(X, y, sensitive_features=s, silos=ids)
    assert fed.shared_matrix() is not None
    for j, silo in enumerate(fed.silos):
        assert np.shares_memory(silo.X, X)
        np.testing.assert_array_equal(silo.X, X[200 * j : 200 * (j + 1)])
    mixed = pfair.Federation.from_arrays(X, y, sensitive_features=s, silos=np.arange(600) % 4)
    assert mixed.shared_matrix() is X
    for j, silo in enumerate(mixed.silos):
        np.testing.assert_array_equal(silo.X, X[np.arange(600) % 4 == j])
        assert silo.n_features == 6
    Xp, yp, sp = mixed.pooled()
    np.testing.assert_array_equal(Xp, X[mixed.row_order_])
    np.testing.assert_array_equal(yp, y[mixed.row_order_])


@pytest.mark.parametrize("ids", [np.repeat([0, 1, 2], 200), np.arange(600) % 3])
def test_rust_reads_the_shared_matrix_and_trains_as_on_copies(ids):
    X, y, s = _arrays()
    fed = pfair.Federation.from_arrays(X, y, sensitive_features=s, silos=ids)
    shared = fed.silo_set()
    copied = _core.SiloSet([(silo.X, silo.y, silo.s) for silo in fed.silos], n_groups=2, n_classes=2)
    assert all(shared.is_shared(j) for j in range(3)) and not copied.is_shared(0)
    cfg = _core.SiloConfig(batch_size=32, clip_theta=1.0, sigma_theta=0.1, sigma_w=0.1)
    keys = [_core.NoiseKey.seeded(j) for j in range(3)]
    kw = dict(batch_keys=keys, noise_keys=keys, lam=1.0, lr_theta=0.3, lr_w=0.3, w_radius=2.0, start=0, n_rounds=25)
    a = shared.run_rounds(np.zeros(7), np.zeros(4), np.ones(2), [cfg] * 3, [1 / 3] * 3, **kw)
    b = copied.run_rounds(np.zeros(7), np.zeros(4), np.ones(2), [cfg] * 3, [1 / 3] * 3, **kw)
    np.testing.assert_array_equal(a["theta"], b["theta"])
    np.testing.assert_array_equal(a["w"], b["w"])
    assert np.linalg.norm(a["theta"]) > 0.05


def by_silo(v, rows):
    """Per-silo codes of the given rows (a row out of range gets the last record's, so that the
    binding itself reports the row)."""
    return [np.asarray(v)[np.minimum(r, len(v) - 1)] for r in rows]


def test_float32_matrix_and_bad_inputs():
    X, y, s = _arrays(n=300)

    def build(x, rows):
        return _core.SiloSet.from_matrix(x, by_silo(y, rows), by_silo(s, rows), rows, n_groups=2, n_classes=2)
    rows = [np.arange(0, 150), np.arange(150, 300)]
    f64 = build(X.astype(np.float32).astype(np.float64), rows)
    f32 = build(X.astype(np.float32), rows)
    cfg = _core.SiloConfig(batch_size=16, clip_theta=1.0)
    keys = [_core.NoiseKey.seeded(1)] * 2
    kw = dict(batch_keys=keys, noise_keys=keys, lam=1.0, lr_theta=0.3, lr_w=0.3, w_radius=2.0, start=0, n_rounds=10)
    a = f64.run_rounds(np.zeros(7), np.zeros(4), np.ones(2), [cfg] * 2, [0.5, 0.5], **kw)
    b = f32.run_rounds(np.zeros(7), np.zeros(4), np.ones(2), [cfg] * 2, [0.5, 0.5], **kw)
    np.testing.assert_array_equal(a["theta"], b["theta"])
    bad = X.copy()
    bad[170, 2] = np.inf
    with pytest.raises(ValueError, match=r"silo 1: X contains NaN or inf \(row 170\)"):
        build(bad, rows)
    # Silos over fewer than half the rows are checked row by row, not in one pass over the matrix:
    # the same error, and a non-finite row outside every silo is not read.
    few = [np.arange(0, 50), np.arange(160, 200)]
    with pytest.raises(ValueError, match=r"silo 1: X contains NaN or inf \(row 170\)"):
        build(bad, few)
    outside = X.copy()
    outside[250, 0] = np.nan
    assert build(outside, few).sizes == [50, 40]
    assert build(outside, [np.arange(0, 200)]).sizes == [200]
    with pytest.raises(ValueError, match=r"silo 0: X contains NaN or inf \(row 250\)"):
        build(outside, [np.arange(100, 300)])
    with pytest.raises(ValueError, match="silo 0: row index 300 out of range"):
        build(X, [np.array([0, 300])])
    with pytest.raises(ValueError, match="C-contiguous"):
        build(np.asfortranarray(X), rows)
    with pytest.raises(ValueError, match="float64 or float32"):
        build(X.astype(int), rows)
    with pytest.raises(ValueError, match="silo 0 has 150 rows but 149 labels and 150 groups"):
        _core.SiloSet.from_matrix(X, [y[1:150], y[150:]], by_silo(s, rows), rows, n_groups=2, n_classes=2)
    strided = [np.arange(0, 300)[::2]]
    with pytest.raises(ValueError, match="rows: each array must be contiguous"):
        _core.SiloSet.from_matrix(X, by_silo(y, strided), by_silo(s, strided), strided, n_groups=2, n_classes=2)
    with pytest.raises(ValueError, match="rows, y and s must list the same silos; got 2, 1 and 2"):
        _core.SiloSet.from_matrix(X, [y[:150]], by_silo(s, rows), rows, n_groups=2, n_classes=2)
    with pytest.raises(ValueError, match="silo 1 has no records"):
        build(X, [rows[0], np.array([], dtype=np.int64)])


def test_codes_and_rows_are_int32_and_the_core_takes_both_widths():
    """At 10⁸ records an int64 code array is 0.8 GB. A Federation keeps labels, groups and the row
    order as int32 (the silos hold views of them), hands them to Rust without a wider copy, and
    Rust keeps codes in 16 bits. int64 inputs train exactly as int32 ones; other types are
    refused by the core with the fix, and converted by Federation.silo_set."""
    X, y, s = _arrays()
    fed = pfair.Federation.from_arrays(X, y.astype(np.int8), sensitive_features=s, silos=np.arange(600) % 3)
    assert fed.row_order_.dtype == np.int32
    for silo in fed.silos:
        assert silo.y.dtype == silo.s.dtype == silo._rows.dtype == np.int32
        assert np.shares_memory(silo._rows, fed.row_order_)
    rows = [silo._rows for silo in fed.silos]
    wide = _core.SiloSet.from_matrix(X, [si.y.astype(np.int64) for si in fed.silos],
                                     [si.s.astype(np.int64) for si in fed.silos], [r.astype(np.int64) for r in rows],
                                     n_groups=2, n_classes=2)
    cfg = _core.SiloConfig(batch_size=32, clip_theta=1.0, sigma_theta=0.1, sigma_w=0.1)
    keys = [_core.NoiseKey.seeded(j) for j in range(3)]
    kw = dict(batch_keys=keys, noise_keys=keys, lam=1.0, lr_theta=0.3, lr_w=0.3, w_radius=2.0, start=0, n_rounds=20)
    a = fed.silo_set().run_rounds(np.zeros(7), np.zeros(4), np.ones(2), [cfg] * 3, [1 / 3] * 3, **kw)
    b = wide.run_rounds(np.zeros(7), np.zeros(4), np.ones(2), [cfg] * 3, [1 / 3] * 3, **kw)
    np.testing.assert_array_equal(a["theta"], b["theta"])
    assert np.linalg.norm(a["theta"]) > 0.05
    with pytest.raises(TypeError, match="int64 or int32 NumPy array"):
        _core.SiloSet.from_matrix(X, [y.astype(np.int16)], [s], [np.arange(600)], n_groups=2, n_classes=2)
    own = pfair.Federation([pfair.federation.Silo(X, y.astype(np.uint8), s.astype(np.int16))], classes=[0, 1],
                           groups=[0, 1])
    assert own.silo_set().sizes == [600]
    with pytest.raises(ValueError, match="at most 65536 groups and 65536 classes are supported; got 2 groups and 70000"):
        _core.SiloSet([(X, y, s)], n_groups=2, n_classes=70_000)
    with pytest.raises(ValueError, match="at most 65536 groups"):
        _core.SiloSet.from_matrix(X, [y], [s], [np.arange(600)], n_groups=70_000, n_classes=2)


@pytest.mark.parametrize("n, silos", [(1, 1), (1000, 7), (300_000, 1000)])
def test_silo_order_is_a_stable_sort_in_int32(n, silos):
    """Federation.from_arrays orders the records by silo with a counting sort in Rust: the same as
    numpy's stable argsort, but int32 and without its int64 array of the records' length."""
    from pfair.federation import silo_order

    codes = np.random.default_rng(n).integers(0, silos, n).astype(np.int32)
    order, starts = silo_order(codes, silos)
    assert order.dtype == np.int32
    np.testing.assert_array_equal(order, np.argsort(codes, kind="stable"))
    np.testing.assert_array_equal(starts, np.concatenate([[0], np.cumsum(np.bincount(codes, minlength=silos))]))
    wide_order, wide_starts = silo_order(codes.astype(np.int64), silos)  # the argsort path
    np.testing.assert_array_equal(wide_order, order)
    np.testing.assert_array_equal(wide_starts, starts)
    with pytest.raises(ValueError, match=rf"codes: {silos} is outside 0..{silos}"):
        _core.silo_order(np.append(codes, silos).astype(np.int32), silos)
    with pytest.raises(ValueError, match="codes: -1 is outside"):
        _core.silo_order(np.append(codes, -1).astype(np.int32), silos)
