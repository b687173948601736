//! Conversions and checks shared by the bindings: NumPy arrays to the core's types, and every
//! shape and index check that more than one binding makes (each lives here once). Names and
//! values of the configuration types are parsed and checked by their core constructors.

use numpy::{IntoPyArray, PyReadonlyArray1, PyReadonlyArray2};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use super::errors::BindResult;
use std::sync::Arc;

use crate::features::{Csr, Features, RowMap, SharedMatrix, SharedRows, SPARSE_BELOW_DENSITY};
use crate::psi::{BatchGradients, Code, Dims, Fairness, Point, PsiInputs, MAX_CODES};
use crate::round::Silo;

pub(super) fn check_denom(denom: f64) -> BindResult<()> {
    // A NaN denominator is refused too.
    #[allow(clippy::neg_cmp_op_on_partial_ord)]
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

/// A 1-D array of codes or row indices as the bindings take it: int64, or int32 (what
/// `Federation.from_arrays` makes below 2³¹ records, half the memory).
pub(super) enum IndexArray<'py> {
    I64(PyReadonlyArray1<'py, i64>),
    I32(PyReadonlyArray1<'py, i32>),
}

impl<'py> FromPyObject<'py> for IndexArray<'py> {
    fn extract_bound(ob: &Bound<'py, PyAny>) -> PyResult<Self> {
        if let Ok(a) = ob.extract::<PyReadonlyArray1<'py, i64>>() {
            return Ok(IndexArray::I64(a));
        }
        if let Ok(a) = ob.extract::<PyReadonlyArray1<'py, i32>>() {
            return Ok(IndexArray::I32(a));
        }
        Err(pyo3::exceptions::PyTypeError::new_err(
            "expected a 1-D int64 or int32 NumPy array of indices (numpy.asarray(v, dtype=numpy.int64))",
        ))
    }
}

/// The contiguous data of an [`IndexArray`].
#[derive(Clone, Copy)]
pub(super) enum Indices<'a> {
    I64(&'a [i64]),
    I32(&'a [i32]),
}

impl IndexArray<'_> {
    /// The array's data; `name` names it in the error when it is not contiguous.
    pub(super) fn indices(&self, name: &str) -> BindResult<Indices<'_>> {
        let err = |_| format!("{name}: each array must be contiguous (numpy.ascontiguousarray)");
        Ok(match self {
            IndexArray::I64(a) => Indices::I64(a.as_slice().map_err(err)?),
            IndexArray::I32(a) => Indices::I32(a.as_slice().map_err(err)?),
        })
    }
}

impl Indices<'_> {
    pub(super) fn len(&self) -> usize {
        match self {
            Indices::I64(v) => v.len(),
            Indices::I32(v) => v.len(),
        }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every entry as an index into `0..hi`, converted by `to` (`what` names it in the error).
    pub(super) fn map_in<T>(&self, hi: usize, what: &str, to: impl Fn(usize) -> T) -> BindResult<Vec<T>> {
        match self {
            Indices::I64(v) => v.iter().map(|&i| index_in(i, hi, what).map(&to)).collect(),
            Indices::I32(v) => v.iter().map(|&i| index_in(i as i64, hi, what).map(&to)).collect(),
        }
    }
}

/// Label and group codes below `l` and `k`, as the core stores them ([`Code`]).
pub(super) fn codes_in(v: Indices<'_>, hi: usize, what: &str) -> BindResult<Vec<Code>> {
    v.map_in(hi, what, |i| i as Code)
}

/// Problems have at most [`MAX_CODES`] classes and groups (their codes are [`Code`]).
pub(super) fn check_code_counts(k: usize, l: usize) -> BindResult<()> {
    if k > MAX_CODES || l > MAX_CODES {
        return Err(format!("at most {MAX_CODES} groups and {MAX_CODES} classes are supported; got {k} groups and {l} classes").into());
    }
    Ok(())
}

/// Copies the model state `(theta, W, inv_sqrt_ps)` out of its (contiguous) arrays.
pub(super) fn state_vecs(
    theta: &PyReadonlyArray1<'_, f64>,
    w: &PyReadonlyArray1<'_, f64>,
    inv_sqrt_ps: &PyReadonlyArray1<'_, f64>,
) -> PyResult<(Vec<f64>, Vec<f64>, Vec<f64>)> {
    Ok((theta.as_slice()?.to_vec(), w.as_slice()?.to_vec(), inv_sqrt_ps.as_slice()?.to_vec()))
}

/// The point `(θ, W)` of a call, with its shapes and the ψ-term's tables.
pub(super) fn point<'a>(dims: Dims, fairness: Fairness, theta: &'a [f64], w: &'a [f64], inv_sqrt_ps: &'a [f64]) -> Point<'a> {
    Point { dims, theta, psi: PsiInputs { fairness, w, inv_sqrt_ps } }
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
pub(super) fn silo_from(x: PyReadonlyArray2<f64>, y: IndexArray<'_>, s: IndexArray<'_>, k: usize, l: usize) -> BindResult<Silo> {
    check_code_counts(k, l)?;
    let xa = x.as_array();
    let (n, d) = xa.dim();
    let (ya, sa) = (y.indices("y")?, s.indices("s")?);
    if ya.len() != n || sa.len() != n {
        return Err(format!("X has {n} rows but y has {} and s has {}", ya.len(), sa.len()).into());
    }
    let xv: Vec<f64> = xa.iter().copied().collect();
    if xv.iter().any(|v| !v.is_finite()) {
        return Err("X contains NaN or inf".into());
    }
    Ok(Silo { x: Features::auto(xv, d), y: codes_in(ya, l, "label")?, s: codes_in(sa, k, "group")? })
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

/// Rows per block of the streaming scan: 64 words of a row bitmap.
const SCAN_BLOCK: usize = 4096;

/// The rows of `matrix` marked in `member` (a bitmap, bit `i` of word `i / 64`) scanned front to
/// back in parallel blocks (streaming, unlike a gather of each silo's rows, which are
/// scattered): a bitmap of the member rows that hold NaN or inf, and the non-zeros of the finite
/// member rows. Two bits per row of memory, where a count per row took 32.
fn scan_member_rows(matrix: &SharedMatrix, member: &[u64]) -> (Vec<u64>, usize) {
    use rayon::prelude::*;
    let n = matrix.n_rows();
    let mut bad = vec![0u64; member.len()];
    let nnz = bad
        .par_chunks_mut(SCAN_BLOCK / 64)
        .zip(member.par_chunks(SCAN_BLOCK / 64))
        .enumerate()
        .map(|(b, (bad, member))| {
            let mut nnz = 0usize;
            for (w, (bad, &m)) in bad.iter_mut().zip(member).enumerate() {
                let mut bits = m;
                while bits != 0 {
                    let t = bits.trailing_zeros() as usize;
                    bits &= bits - 1;
                    let i = b * SCAN_BLOCK + w * 64 + t;
                    debug_assert!(i < n);
                    match matrix_row_nnz(matrix, i) {
                        Some(c) => nnz += c,
                        None => *bad |= 1 << t,
                    }
                }
            }
            nnz
        })
        .sum();
    (bad, nnz)
}

/// Silos as row subsets of one dense matrix `x` (`n_rows × d`, float64 or float32, row-major),
/// read in place when the matrix is dense enough, otherwise copied to CSR per silo. `rows[j]`
/// lists the rows of silo `j`, `y[j]`, `s[j]` their labels and groups. Checks every silo's rows
/// (in range, finite features, codes in range) in parallel over silos. When the silos hold at
/// least half the matrix's rows, the features are checked in one streaming pass over the
/// member rows ([`scan_member_rows`]) instead of row by row in each silo's order.
pub(super) fn silos_from_matrix(
    matrix: Arc<SharedMatrix>,
    y: &[Indices<'_>],
    s: &[Indices<'_>],
    rows: &[Indices<'_>],
    k: usize,
    l: usize,
) -> BindResult<Vec<Silo>> {
    use rayon::prelude::*;
    use std::sync::atomic::{AtomicU64, Ordering};
    check_code_counts(k, l)?;
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
    // Row indices, labels and groups, checked and narrowed per silo (the rows become 32-bit
    // indices as they are checked: no wider copy of the row lists).
    /// A silo's checked rows, labels and groups.
    type Checked = (Vec<u32>, Vec<Code>, Vec<Code>);
    let checked: Vec<BindResult<Checked>> = rows
        .par_iter()
        .enumerate()
        .map(|(j, r)| {
            if r.is_empty() {
                return Err(format!("silo {j} has no records").into());
            }
            let at = |e: super::errors::BindingError| format!("silo {j}: {e}");
            let rs = r.map_in(n, "row", |i| i as u32).map_err(at)?;
            Ok((rs, codes_in(y[j], l, "label").map_err(at)?, codes_in(s[j], k, "group").map_err(at)?))
        })
        .collect();
    let mut parts = Vec::with_capacity(checked.len());
    for c in checked {
        parts.push(c?);
    }
    // Finite features, and the non-zeros that decide between CSR and reading in place.
    let (nonfinite, nnz): (Vec<Option<usize>>, usize) = if 2 * total >= n {
        let member: Vec<AtomicU64> = (0..n.div_ceil(64)).map(|_| AtomicU64::new(0)).collect();
        parts.par_iter().for_each(|(rs, _, _)| {
            for &i in rs {
                member[i as usize / 64].fetch_or(1 << (i % 64), Ordering::Relaxed);
            }
        });
        let member: Vec<u64> = member.into_iter().map(AtomicU64::into_inner).collect();
        let (bad, nnz) = scan_member_rows(&matrix, &member);
        let first_bad = parts
            .par_iter()
            .map(|(rs, _, _)| rs.iter().find(|&&i| bad[i as usize / 64] >> (i % 64) & 1 == 1).map(|&i| i as usize))
            .collect();
        (first_bad, nnz)
    } else {
        let per_silo: Vec<(Option<usize>, usize)> = parts
            .par_iter()
            .map(|(rs, _, _)| {
                let mut nnz = 0;
                for &i in rs {
                    match matrix_row_nnz(&matrix, i as usize) {
                        Some(c) => nnz += c,
                        None => return (Some(i as usize), nnz),
                    }
                }
                (None, nnz)
            })
            .collect();
        (per_silo.iter().map(|p| p.0).collect(), per_silo.iter().map(|p| p.1).sum())
    };
    if let Some((j, i)) = nonfinite.iter().enumerate().find_map(|(j, b)| b.map(|i| (j, i))) {
        return Err(format!("silo {j}: X contains NaN or inf (row {i})").into());
    }
    let sparse = d > 0 && (nnz as f64) < SPARSE_BELOW_DENSITY * (total * d) as f64;
    Ok(parts
        .into_par_iter()
        .map(|(r, y, s)| {
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
    d.set_item("clip_theta", g.clip_theta)?;
    Ok(d)
}
