//! ψ kernels and prediction, sensitivities and noise (`crate::psi`, `crate::sensitivity`,
//! `crate::noise`).

use numpy::{IntoPyArray, PyArray1, PyArray2, PyReadonlyArray1, PyReadonlyArray2};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use super::convert::{
    check_denom, check_inv_sqrt_ps, check_state, check_theta_len, gradients_dict, index_in, point, silo_from, state_vecs,
    IndexArray,
};
use super::errors::value_error;
use crate::features::Dense;
use crate::psi::{self, Dims, Fairness, Protect, Records};
use crate::sensitivity;

/// Runs `compute(x, n, d, theta)` on the rows of a prediction's `x` after checking `n_classes`
/// and θ's length. A C-contiguous `x` is read in place with the GIL held, so that no Python code
/// can write to it meanwhile (a copy of a 10⁷ × 100 matrix would be 8 GB); other layouts are
/// copied first and computed without the GIL.
fn on_rows<'py, T: Send>(
    py: Python<'py>,
    x: &PyReadonlyArray2<'py, f64>,
    theta: &PyReadonlyArray1<'py, f64>,
    n_classes: usize,
    compute: impl Fn(&[f64], usize, usize, &[f64]) -> T + Sync,
) -> PyResult<T> {
    let xa = x.as_array();
    let (n, d) = xa.dim();
    if n_classes < 2 {
        return Err(value_error("n_classes must be >= 2"));
    }
    let th = theta.as_slice()?.to_vec();
    check_theta_len(th.len(), (d + 1) * (n_classes - 1))?;
    Ok(match x.as_slice() {
        Ok(xv) => compute(xv, n, d, &th),
        Err(_) => {
            let xv: Vec<f64> = xa.iter().copied().collect();
            py.allow_threads(|| compute(&xv, n, d, &th))
        }
    })
}

/// Class probabilities `F(x)` of the linear-softmax model, `n × l`, in parallel blocks of rows
/// (`x` read as [`on_rows`] reads it).
#[pyfunction]
pub(super) fn predict_proba<'py>(
    py: Python<'py>,
    x: PyReadonlyArray2<'py, f64>,
    theta: PyReadonlyArray1<'py, f64>,
    n_classes: usize,
) -> PyResult<Bound<'py, PyArray2<f64>>> {
    let l = n_classes;
    let (out, n) = on_rows(py, &x, &theta, l, |xv, n, d, th| {
        let mut out = vec![0.0; n * l];
        if d == 0 {
            let mut p = vec![0.0; l];
            psi::predict_proba_row(&[], th, l, &mut p);
            for row in out.chunks_exact_mut(l) {
                row.copy_from_slice(&p);
            }
        } else {
            psi::predict_proba(xv, d, th, l, &mut out);
        }
        (out, n)
    })?;
    Ok(numpy::ndarray::Array2::from_shape_vec((n, l), out).map_err(|e| value_error(e.to_string()))?.into_pyarray(py))
}

/// How many rows of `x` each class is predicted for (the class of the largest logit, ties to the
/// lower class), length `n_classes`: the counts of `argmax(predict_proba(x), axis=1)` without the
/// softmax and the `n × l` array (`x` read as [`on_rows`] reads it).
#[pyfunction]
pub(super) fn predict_counts<'py>(
    py: Python<'py>,
    x: PyReadonlyArray2<'py, f64>,
    theta: PyReadonlyArray1<'py, f64>,
    n_classes: usize,
) -> PyResult<Bound<'py, PyArray1<i64>>> {
    let l = n_classes;
    let counts = on_rows(py, &x, &theta, l, |xv, n, d, th| {
        if d == 0 {
            let mut counts = vec![0u64; l];
            counts[psi::predict_class_row(&[], th, l, &mut vec![0.0; l])] = n as u64;
            counts
        } else {
            psi::predict_counts(xv, d, th, l)
        }
    })?;
    Ok(counts.into_iter().map(|c| c as i64).collect::<Vec<i64>>().into_pyarray(py))
}

/// Gradient parts of one batch (no noise), divided by `denom`. For tests and analysis.
#[pyfunction]
#[pyo3(signature = (x, y, s, theta, w, inv_sqrt_ps, *, n_groups, n_classes, batch, denom,
                    fairness="demographic_parity", positive=1, protect="attribute",
                    clip_loss=f64::INFINITY, clip_theta=f64::INFINITY, clip_w=f64::INFINITY))]
// One parameter per argument of the Python signature above: positional arguments, or the
// settings of a constructor or kernel entry point, which stay in the signature Python shows
// (help, inspect). The per-round bindings read their keywords into structs (kwargs.rs).
#[allow(clippy::too_many_arguments)]
pub(super) fn batch_gradients<'py>(
    py: Python<'py>,
    x: PyReadonlyArray2<'py, f64>,
    y: IndexArray<'py>,
    s: IndexArray<'py>,
    theta: PyReadonlyArray1<'py, f64>,
    w: PyReadonlyArray1<'py, f64>,
    inv_sqrt_ps: PyReadonlyArray1<'py, f64>,
    n_groups: usize,
    n_classes: usize,
    batch: PyReadonlyArray1<'py, i64>,
    denom: f64,
    fairness: &str,
    positive: u32,
    protect: &str,
    clip_loss: f64,
    clip_theta: f64,
    clip_w: f64,
) -> PyResult<Bound<'py, PyDict>> {
    let fairness = Fairness::parse(fairness, positive)?;
    let protect = Protect::parse(protect, clip_loss, clip_theta, clip_w)?;
    let d = x.as_array().dim().1;
    let dims = Dims { d, k: n_groups, l: n_classes };
    let (th, wv, inv) = state_vecs(&theta, &w, &inv_sqrt_ps)?;
    check_state(dims, fairness, &th, &wv, &inv)?;
    let xv: Vec<f64> = x.as_array().iter().copied().collect();
    let silo = silo_from(x, y, s, n_groups, n_classes)?;
    let n = silo.len();
    let idx: Vec<usize> = batch.as_array().iter().map(|&i| index_in(i, n, "batch")).collect::<Result<_, _>>()?;
    check_denom(denom)?;
    let g = py.allow_threads(|| {
        let rows = Dense { x: &xv, d };
        let data = Records { rows: &rows, y: &silo.y, s: &silo.s };
        psi::batch_gradients(data, point(dims, fairness, &th, &wv, &inv), &idx, denom, protect)
    });
    gradients_dict(py, g)
}

/// Sensitivities `(loss, theta, w)` of the noised message parts: `relation="replace_one"` gives
/// the replace-one sensitivities, `"add_remove"` the largest contribution of one record;
/// `w_rows=True` (attribute mode): `w` per unit of `p^{-1/2}` for noise scaled row by row.
#[pyfunction]
#[pyo3(signature = (inv_sqrt_ps, *, n_groups, denom, fairness="demographic_parity", positive=1,
                    protect="attribute", clip_loss=f64::INFINITY, clip_theta=1.0, clip_w=f64::INFINITY,
                    relation="replace_one", w_rows=false))]
// One parameter per argument of the Python signature above: positional arguments, or the
// settings of a constructor or kernel entry point, which stay in the signature Python shows
// (help, inspect). The per-round bindings read their keywords into structs (kwargs.rs).
#[allow(clippy::too_many_arguments)]
pub(super) fn sensitivities(
    inv_sqrt_ps: PyReadonlyArray1<'_, f64>,
    n_groups: usize,
    denom: f64,
    fairness: &str,
    positive: u32,
    protect: &str,
    clip_loss: f64,
    clip_theta: f64,
    clip_w: f64,
    relation: &str,
    w_rows: bool,
) -> PyResult<(f64, f64, f64)> {
    let fairness = Fairness::parse(fairness, positive)?;
    let protect = Protect::parse(protect, clip_loss, clip_theta, clip_w)?;
    let inv = inv_sqrt_ps.as_slice()?;
    if n_groups < 2 || inv.len() % n_groups != 0 || inv.is_empty() {
        return Err(value_error("inv_sqrt_ps must hold blocks × n_groups entries with n_groups >= 2"));
    }
    check_inv_sqrt_ps(inv)?;
    check_denom(denom)?;
    let s = match relation {
        "replace_one" => sensitivity::sensitivities(protect, fairness, n_groups, inv, denom, w_rows),
        "add_remove" => sensitivity::contribution_bounds(protect, inv, denom, w_rows),
        other => return Err(value_error(format!("relation={other:?} is unknown; use 'replace_one' or 'add_remove'"))),
    };
    Ok((s.loss, s.theta, s.w))
}

/// Noise stds `σ_p = z √P Δ_p` for sensitivities `parts` and effective multiplier `z`.
#[pyfunction]
pub(super) fn noise_stds(parts: Vec<f64>, noise_multiplier: f64) -> PyResult<Vec<f64>> {
    // A NaN multiplier is refused too.
    #[allow(clippy::neg_cmp_op_on_partial_ord)]
    if !(noise_multiplier >= 0.0) {
        return Err(value_error("noise_multiplier must be >= 0"));
    }
    Ok(sensitivity::noise_stds(&parts, noise_multiplier))
}

/// Effective noise multiplier `(Σ_p (Δ_p/σ_p)²)^{-1/2}` of jointly released parts.
#[pyfunction]
pub(super) fn effective_noise_multiplier(parts: Vec<f64>, stds: Vec<f64>) -> PyResult<f64> {
    if parts.len() != stds.len() {
        return Err(value_error("parts and stds must have the same length"));
    }
    Ok(sensitivity::effective_noise_multiplier(&parts, &stds))
}
