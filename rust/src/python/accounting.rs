//! Privacy accounting (`crate::accounting`). Thin wrappers: convert types, release the GIL around
//! order sweeps and bisection; an `AccountingError` becomes `ValueError("<argument>: <message>")`
//! (see `errors`).

use pyo3::prelude::*;

use crate::accounting::{self as acc, Event, Scheme};

fn orders_or_default(orders: Option<Vec<f64>>) -> Vec<f64> {
    orders.unwrap_or_else(acc::default_orders)
}

/// The default RDP orders.
#[pyfunction]
pub(super) fn default_orders() -> Vec<f64> {
    acc::default_orders()
}

/// Per-step RDP of the Gaussian mechanism, α/(2z²).
#[pyfunction]
pub(super) fn rdp_gaussian(noise_multiplier: f64, order: f64) -> PyResult<f64> {
    Ok(acc::rdp_gaussian(noise_multiplier, order)?)
}

/// Per-step RDP, Poisson sampling, add/remove adjacency (MTZ 2019).
#[pyfunction]
pub(super) fn rdp_poisson(sample_rate: f64, noise_multiplier: f64, order: f64) -> PyResult<f64> {
    Ok(acc::rdp_poisson(sample_rate, noise_multiplier, order)?)
}

/// Per-step RDP, fixed-size sampling without replacement, replace-one (WBK 2019).
#[pyfunction]
pub(super) fn rdp_without_replacement(sample_rate: f64, noise_multiplier: f64, order: f64) -> PyResult<f64> {
    Ok(acc::rdp_without_replacement(sample_rate, noise_multiplier, order)?)
}

/// Per-step RDP, Poisson sampling, replace-one adjacency; z against add/remove sensitivity.
#[pyfunction]
pub(super) fn rdp_poisson_replace_one(sample_rate: f64, noise_multiplier: f64, order: f64) -> PyResult<f64> {
    Ok(acc::rdp_poisson_replace_one(sample_rate, noise_multiplier, order)?)
}

/// Per-step RDP of a Gaussian on a batch whose membership is public, replace-one.
#[pyfunction]
pub(super) fn rdp_public_batch(sample_rate: f64, noise_multiplier: f64, order: f64) -> PyResult<f64> {
    Ok(acc::rdp_public_batch(sample_rate, noise_multiplier, order)?)
}

/// Total RDP of `steps` steps of one scheme, per order.
#[pyfunction]
#[pyo3(signature = (sampling, sample_rate, noise_multiplier, steps, orders=None))]
pub(super) fn rdp_curve(
    py: Python<'_>,
    sampling: &str,
    sample_rate: f64,
    noise_multiplier: f64,
    steps: u64,
    orders: Option<Vec<f64>>,
) -> PyResult<Vec<f64>> {
    let e = Event { scheme: Scheme::parse(sampling)?, q: sample_rate, z: noise_multiplier, steps };
    let o = orders_or_default(orders);
    Ok(py.allow_threads(|| acc::rdp_curve(&e, &o))?)
}

/// Total RDP of heterogeneous events `(sampling, sample_rate, noise_multiplier, steps)`.
#[pyfunction]
#[pyo3(signature = (events, orders=None))]
pub(super) fn rdp_composed(
    py: Python<'_>,
    events: Vec<(String, f64, f64, u64)>,
    orders: Option<Vec<f64>>,
) -> PyResult<Vec<f64>> {
    let evs = events
        .iter()
        .map(|(s, q, z, t)| Ok(Event { scheme: Scheme::parse(s)?, q: *q, z: *z, steps: *t }))
        .collect::<acc::Result<Vec<Event>>>()?;
    let o = orders_or_default(orders);
    Ok(py.allow_threads(|| acc::rdp_composed(&evs, &o))?)
}

/// (ε, optimal order) from an RDP curve (Balle et al. 2020).
#[pyfunction]
pub(super) fn epsilon_from_rdp(orders: Vec<f64>, rdp: Vec<f64>, delta: f64) -> PyResult<(f64, f64)> {
    Ok(acc::epsilon_from_rdp(&orders, &rdp, delta)?)
}

/// (δ, optimal order) from an RDP curve (Balle et al. 2020).
#[pyfunction]
pub(super) fn delta_from_rdp(orders: Vec<f64>, rdp: Vec<f64>, epsilon: f64) -> PyResult<(f64, f64)> {
    Ok(acc::delta_from_rdp(&orders, &rdp, epsilon)?)
}

/// (ε, optimal order) of `steps` steps of one scheme.
#[pyfunction]
#[pyo3(signature = (noise_multiplier, sample_rate, steps, delta, sampling, orders=None))]
pub(super) fn epsilon_for(
    py: Python<'_>,
    noise_multiplier: f64,
    sample_rate: f64,
    steps: u64,
    delta: f64,
    sampling: &str,
    orders: Option<Vec<f64>>,
) -> PyResult<(f64, f64)> {
    let s = Scheme::parse(sampling)?;
    let o = orders_or_default(orders);
    Ok(py.allow_threads(|| acc::epsilon_for(noise_multiplier, sample_rate, steps, delta, s, &o))?)
}

/// (δ, optimal order) of `steps` steps of one scheme.
#[pyfunction]
#[pyo3(signature = (noise_multiplier, sample_rate, steps, epsilon, sampling, orders=None))]
pub(super) fn delta_for(
    py: Python<'_>,
    noise_multiplier: f64,
    sample_rate: f64,
    steps: u64,
    epsilon: f64,
    sampling: &str,
    orders: Option<Vec<f64>>,
) -> PyResult<(f64, f64)> {
    let s = Scheme::parse(sampling)?;
    let o = orders_or_default(orders);
    Ok(py.allow_threads(|| acc::delta_for(noise_multiplier, sample_rate, steps, epsilon, s, &o))?)
}

/// Smallest-found noise multiplier meeting (ε, δ) (bisection; ε ≤ target, within 2%).
#[pyfunction]
pub(super) fn noise_multiplier_for(
    py: Python<'_>,
    epsilon: f64,
    delta: f64,
    sample_rate: f64,
    steps: u64,
    sampling: &str,
) -> PyResult<f64> {
    let s = Scheme::parse(sampling)?;
    Ok(py.allow_threads(|| acc::noise_multiplier_for(epsilon, delta, sample_rate, steps, s))?)
}
