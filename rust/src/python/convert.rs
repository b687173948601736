//! Conversions and checks shared by the bindings: NumPy arrays to the core's types, and every
//! shape and index check that more than one binding makes (each lives here once). Names and
//! values of the configuration types are parsed and checked by their core constructors.

use numpy::{IntoPyArray, PyReadonlyArray1, PyReadonlyArray2};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use super::errors::BindResult;
use std::sync::Arc;

use crate::features::{Csr, Features, RowMap, SharedMatrix, SharedRows, SPARSE_BELOW_DENSITY};
use crate::psi::{BatchGradients, Dims, Fairness};
use crate::round::Silo;

pub(super) fn check_denom(denom: f64) -> BindResult<()> {
    if !(denom > 0.0) {
        return Err("denom must be > 0".into());
    }
    Ok(())
}

pub(super) fn check_theta_len(len: usize, want: usize) -> BindResult<()> {
    if len != want {
        return Err(format!("theta has length {len}, expected (d+1)(l-1) = {want}").into());
    }
    Ok(())
}

/// Every `1/√p` entry must be finite and > 0.
pub(super) fn check_inv_sqrt_ps(inv: &[f64]) -> BindResult<()> {
    if inv.iter().any(|v| !(v.is_finite() && *v > 0.0)) {
        return Err("inv_sqrt_ps must be finite and > 0 (every group needs records)".into());
    }
    Ok(())
}

/// `v` as an index into `0..hi`.
pub(super) fn index_in(v: i64, hi: usize, what: &str) -> BindResult<usize> {
    if v < 0 || v as usize >= hi {
        Err(format!("{what} index {v} out of range 0..{hi}").into())
    } else {
        Ok(v as usize)
    }
}

/// Copies the model state `(theta, W, inv_sqrt_ps)` out of its (contiguous) arrays.
pub(super) fn state_vecs(
    theta: &PyReadonlyArray1<'_, f64>,
    w: &PyReadonlyArray1<'_, f64>,
    inv_sqrt_ps: &PyReadonlyArray1<'_, f64>,
) -> PyResult<(Vec<f64>, Vec<f64>, Vec<f64>)> {
    Ok((theta.as_slice()?.to_vec(), w.as_slice()?.to_vec(), inv_sqrt_ps.as_slice()?.to_vec()))
}

/// Checks the shapes of the model state against the problem dimensions.
pub(super) fn check_state(dims: Dims, fairness: Fairness, theta: &[f64], w: &[f64], inv: &[f64]) -> BindResult<()> {
    if dims.k < 2 || dims.l < 2 {
        return Err(format!("need at least 2 groups and 2 classes, got k={} l={}", dims.k, dims.l).into());
    }
    check_theta_len(theta.len(), dims.theta_len())?;
    if w.len() != dims.w_len(fairness) {
        return Err(format!("W has {} entries, expected {}", w.len(), dims.w_len(fairness)).into());
    }
    let want = fairness.n_blocks(dims.l) * dims.k;
    if inv.len() != want {
        return Err(format!("inv_sqrt_ps has length {}, expected {want}", inv.len()).into());
    }
    check_inv_sqrt_ps(inv)?;
    if theta.iter().chain(w).any(|v| !v.is_finite()) {
        return Err("theta and W must be finite".into());
    }
    Ok(())
}

/// Copies one silo's arrays, checking shapes and index ranges; features are stored dense or
/// CSR, whichever suits their density.
pub(super) fn silo_from(
    x: PyReadonlyArray2<f64>,
    y: PyReadonlyArray1<i64>,
    s: PyReadonlyArray1<i64>,
    k: usize,
    l: usize,
) -> BindResult<Silo> {
    let xa = x.as_array();
    let (n, d) = xa.dim();
    let ya = y.as_array();
    let sa = s.as_array();
    if ya.len() != n || sa.len() != n {
        return Err(format!("X has {n} rows but y has {} and s has {}", ya.len(), sa.len()).into());
    }
    let xv: Vec<f64> = xa.iter().copied().collect();
    if xv.iter().any(|v| !v.is_finite()) {
        return Err("X contains NaN or inf".into());
    }
    let conv = |a: numpy::ndarray::ArrayView1<i64>, hi: usize, what: &str| -> BindResult<Vec<u32>> {
        a.iter().map(|&v| index_in(v, hi, what).map(|i| i as u32)).collect()
    };
    Ok(Silo { x: Features::auto(xv, d), y: conv(ya, l, "label")?, s: conv(sa, k, "group")? })
}

/// Non-zeros of a row, or None if it holds NaN or inf.
fn finite_nnz<T: Copy + Into<f64>>(row: &[T]) -> Option<usize> {
    let (mut nnz, mut finite) = (0usize, true);
    for &v in row {
        let v: f64 = v.into();
        finite &= v.is_finite();
        nnz += (v != 0.0) as usize;
    }
    finite.then_some(nnz)
}

/// Non-zeros of row `i` of `matrix`, or None if it holds NaN or inf.
fn matrix_row_nnz(matrix: &SharedMatrix, i: usize) -> Option<usize> {
    let d = matrix.d();
    match (matrix.as_f64(), matrix.as_f32()) {
        (Some(x), _) => finite_nnz(&x[i * d..(i + 1) * d]),
        (None, Some(x)) => finite_nnz(&x[i * d..(i + 1) * d]),
        (None, None) => None,
    }
}

/// Per row of `matrix`: its number of non-zeros, or `u32::MAX` if it holds NaN or inf. Reads the
/// matrix front to back in parallel blocks of rows (streaming, unlike a gather of each silo's
/// rows, which are scattered).
fn row_counts(matrix: &SharedMatrix) -> Vec<u32> {
    use rayon::prelude::*;
    const BLOCK: usize = 4096;
    let mut counts = vec![0u32; matrix.n_rows()];
    counts.par_chunks_mut(BLOCK).enumerate().for_each(|(b, out)| {
        for (k, o) in out.iter_mut().enumerate() {
            *o = matrix_row_nnz(matrix, b * BLOCK + k).map_or(u32::MAX, |v| v.min(u32::MAX as usize - 1) as u32);
        }
    });
    counts
}

/// Silos as row subsets of one dense matrix `x` (`n_rows × d`, float64 or float32, row-major),
/// read in place when the matrix is dense enough, otherwise copied to CSR per silo. `rows[j]`
/// lists the rows of silo `j`, `y[j]`, `s[j]` their labels and groups. Checks every silo's rows
/// (in range, finite features, codes in range) in parallel over silos. When the silos hold at
/// least half the matrix's rows, the features are checked in one streaming pass over the whole
/// matrix ([`row_counts`]) instead of row by row in each silo's order.
#[allow(clippy::too_many_arguments)]
pub(super) fn silos_from_matrix(
    matrix: Arc<SharedMatrix>,
    y: &[&[i64]],
    s: &[&[i64]],
    rows: &[&[i64]],
    k: usize,
    l: usize,
) -> BindResult<Vec<Silo>> {
    use rayon::prelude::*;
    let (n, d) = (matrix.n_rows(), matrix.d());
    if n > u32::MAX as usize {
        return Err(format!("x has {n} rows; silos of a shared matrix support at most {} rows", u32::MAX).into());
    }
    if y.len() != rows.len() || s.len() != rows.len() {
        return Err(format!("rows, y and s must list the same silos; got {}, {} and {}", rows.len(), y.len(), s.len()).into());
    }
    for (j, r) in rows.iter().enumerate() {
        if y[j].len() != r.len() || s[j].len() != r.len() {
            return Err(format!("silo {j} has {} rows but {} labels and {} groups", r.len(), y[j].len(), s[j].len()).into());
        }
    }
    let total: usize = rows.iter().map(|r| r.len()).sum();
    let counts = (2 * total >= n).then(|| row_counts(&matrix));
    // One pass per silo: index ranges, codes, finiteness and the number of non-zeros; the rows
    // become 32-bit indices as they are checked (no wider copy of the row lists).
    /// A silo's checked rows, labels and groups, and its number of non-zeros.
    type Checked = (Vec<u32>, Vec<u32>, Vec<u32>, usize);
    let checked: Vec<BindResult<Checked>> = rows
        .par_iter()
        .enumerate()
        .map(|(j, r)| {
            if r.is_empty() {
                return Err(format!("silo {j} has no records").into());
            }
            let mut nnz = 0usize;
            let (mut ys, mut ss) = (Vec::with_capacity(r.len()), Vec::with_capacity(r.len()));
            let mut rs = Vec::with_capacity(r.len());
            for (&i, (&yi, &si)) in r.iter().zip(y[j].iter().zip(s[j])) {
                let i = index_in(i, n, "row").map_err(|e| format!("silo {j}: {e}"))?;
                rs.push(i as u32);
                let count = match &counts {
                    Some(c) => (c[i] != u32::MAX).then_some(c[i] as usize),
                    None => matrix_row_nnz(&matrix, i),
                };
                nnz += count.ok_or_else(|| format!("silo {j}: X contains NaN or inf (row {i})"))?;
                ys.push(index_in(yi, l, "label").map_err(|e| format!("silo {j}: {e}"))? as u32);
                ss.push(index_in(si, k, "group").map_err(|e| format!("silo {j}: {e}"))? as u32);
            }
            Ok((rs, ys, ss, nnz))
        })
        .collect();
    let mut parts = Vec::with_capacity(checked.len());
    for c in checked {
        parts.push(c?);
    }
    let nnz: usize = parts.iter().map(|p| p.3).sum();
    let sparse = d > 0 && (nnz as f64) < SPARSE_BELOW_DENSITY * (total * d) as f64;
    Ok(parts
        .into_par_iter()
        .map(|(r, y, s, _)| {
            let x = if sparse {
                // Sparse data are smaller as CSR than in place, and the kernels visit only the
                // non-zeros.
                let row = |i: u32| i as usize * d..(i as usize + 1) * d;
                let dense: Vec<f64> = match (matrix.as_f64(), matrix.as_f32()) {
                    (Some(x), _) => r.iter().flat_map(|&i| x[row(i)].iter().copied()).collect(),
                    (_, Some(x)) => r.iter().flat_map(|&i| x[row(i)].iter().map(|&v| v as f64)).collect(),
                    _ => Vec::new(),
                };
                Features::Sparse(Csr::from_dense(&dense, d))
            } else {
                Features::Shared(SharedRows { matrix: matrix.clone(), rows: RowMap::from_list(r) })
            };
            Silo { x, y, s }
        })
        .collect())
}

/// A batch's gradient parts as the dict the Python layer reads.
pub(super) fn gradients_dict<'py>(py: Python<'py>, g: BatchGradients) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("loss_grad", g.loss_grad.into_pyarray(py))?;
    d.set_item("psi_theta_sfree", g.psi_theta_sfree.into_pyarray(py))?;
    d.set_item("psi_theta", g.psi_theta.into_pyarray(py))?;
    d.set_item("psi_w_sfree", g.psi_w_sfree.into_pyarray(py))?;
    d.set_item("psi_w", g.psi_w.into_pyarray(py))?;
    d.set_item("loss", g.loss)?;
    d.set_item("psi", g.psi)?;
    d.set_item("n_clipped", g.n_clipped)?;
    Ok(d)
}
