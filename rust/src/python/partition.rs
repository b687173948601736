//! Partitioners and heterogeneity measures (`crate::partition`).
//!
//! Arrays come in zero-copy as contiguous read-only NumPy views (the Python layer makes them
//! contiguous); the work runs without the GIL; silo ids go back as an int64 array that owns the
//! Rust vector (no copy). A rejected argument becomes `ValueError("<argument>: <why>")`.

use numpy::{PyArray1, PyReadonlyArray1};
use pyo3::prelude::*;

use super::errors::BindResult;
use crate::partition;

fn slice<'a, T: numpy::Element>(name: &str, a: &'a PyReadonlyArray1<'_, T>) -> BindResult<&'a [T]> {
    a.as_slice().map_err(|_| format!("{name}: must be a contiguous 1-D array").into())
}

/// The optional `sizes` array as a slice.
fn sizes_slice<'a>(sizes: &'a Option<PyReadonlyArray1<'_, i64>>) -> BindResult<Option<&'a [i64]>> {
    sizes.as_ref().map(|a| slice("sizes", a)).transpose()
}

/// Algorithm 3 of Gupta et al. 2024: silo id per record, given the partition attribute `values`.
#[pyfunction]
#[pyo3(signature = (values, n_silos, heterogeneity, seed, sizes=None))]
pub(super) fn partition_heterogeneous<'py>(
    py: Python<'py>,
    values: PyReadonlyArray1<'py, f64>,
    n_silos: usize,
    heterogeneity: f64,
    seed: u64,
    sizes: Option<PyReadonlyArray1<'py, i64>>,
) -> PyResult<Bound<'py, PyArray1<i64>>> {
    let v = slice("values", &values)?;
    let s = sizes_slice(&sizes)?;
    let ids = py.allow_threads(|| partition::heterogeneous(v, n_silos, heterogeneity, s, seed))?;
    Ok(PyArray1::from_vec(py, ids))
}

/// Dirichlet(alpha) skew of category codes `groups` (in [0, n)); exact `sizes` if given.
#[pyfunction]
#[pyo3(signature = (groups, n_silos, alpha, seed, sizes=None))]
pub(super) fn partition_dirichlet<'py>(
    py: Python<'py>,
    groups: PyReadonlyArray1<'py, i64>,
    n_silos: usize,
    alpha: f64,
    seed: u64,
    sizes: Option<PyReadonlyArray1<'py, i64>>,
) -> PyResult<Bound<'py, PyArray1<i64>>> {
    let g = slice("groups", &groups)?;
    let s = sizes_slice(&sizes)?;
    let ids = py.allow_threads(|| partition::dirichlet(g, n_silos, alpha, s, seed))?;
    Ok(PyArray1::from_vec(py, ids))
}

/// Zipf silo sizes summing exactly to `n`.
#[pyfunction]
pub(super) fn partition_power_law_sizes<'py>(
    py: Python<'py>,
    n: usize,
    n_silos: usize,
    exponent: f64,
    min_size: usize,
) -> PyResult<Bound<'py, PyArray1<i64>>> {
    let sizes = partition::power_law_sizes(n, n_silos, exponent, min_size)?;
    Ok(PyArray1::from_vec(py, sizes.into_iter().map(|s| s as i64).collect()))
}

/// Size-weighted mean total-variation distance of the silos' category mix to the pooled one.
#[pyfunction]
pub(super) fn partition_heterogeneity_tv(
    py: Python<'_>,
    silo_ids: PyReadonlyArray1<'_, i64>,
    groups: PyReadonlyArray1<'_, i64>,
) -> PyResult<f64> {
    let (s, g) = (slice("silo_ids", &silo_ids)?, slice("groups", &groups)?);
    Ok(py.allow_threads(|| partition::heterogeneity_tv(s, g))?)
}

/// Correlation ratio (between-silo share of the variance) of `values`.
#[pyfunction]
pub(super) fn partition_heterogeneity_eta2(
    py: Python<'_>,
    silo_ids: PyReadonlyArray1<'_, i64>,
    values: PyReadonlyArray1<'_, f64>,
) -> PyResult<f64> {
    let (s, v) = (slice("silo_ids", &silo_ids)?, slice("values", &values)?);
    Ok(py.allow_threads(|| partition::heterogeneity_eta2(s, v))?)
}

/// The order of the records (int32) and the silos' start offsets (int64).
type OrderArrays<'py> = (Bound<'py, PyArray1<i32>>, Bound<'py, PyArray1<i64>>);

/// Records ordered by silo: a stable counting sort of `codes` (each in `0..n_codes`, fewer than
/// 2³¹ records), as int32 record indices, and the `n_codes + 1` start offsets of the silos. No
/// 64-bit array of the records' length is made (`numpy.argsort` makes one).
#[pyfunction]
pub(super) fn silo_order<'py>(py: Python<'py>, codes: PyReadonlyArray1<'py, i32>, n_codes: usize) -> PyResult<OrderArrays<'py>> {
    use rayon::prelude::*;
    let c = slice("codes", &codes)?;
    let (order, starts) = py.allow_threads(|| -> BindResult<(Vec<i32>, Vec<i64>)> {
        if c.len() > i32::MAX as usize {
            return Err(format!("codes: {} records; silo_order takes fewer than 2^31", c.len()).into());
        }
        if let Some(&bad) = c.par_iter().find_any(|&&v| v < 0 || v as usize >= n_codes) {
            return Err(format!("codes: {bad} is outside 0..{n_codes}").into());
        }
        // SAFETY: i32 and u32 have the same size and alignment, and every code is ≥ 0 (checked),
        // so each reads as the same number.
        let codes = unsafe { std::slice::from_raw_parts(c.as_ptr() as *const u32, c.len()) };
        let (order, starts) = partition::group_indices(codes, n_codes);
        // Indices below 2³¹ (the codes are an int32 array): each fits an i32. Collected in place.
        Ok((order.into_iter().map(|i| i as i32).collect(), starts.into_iter().map(|s| s as i64).collect()))
    })?;
    Ok((PyArray1::from_vec(py, order), PyArray1::from_vec(py, starts)))
}
