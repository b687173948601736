//! Privacy accounting (`crate::accounting`). Thin wrappers: convert types, release the GIL around
//! order sweeps and bisection; an `AccountingError` becomes `ValueError("<argument>: <message>")`
//! (see `errors`).

use pyo3::prelude::*;

use crate::accounting::{self as acc, Binomial, Event, Held, Mixture, Scheme};

use super::errors::value_error;

/// A ledger's mechanisms as Python passes them: `(sampling, q, z, count)` each.
type Mechanisms = Vec<(String, f64, f64, u64)>;

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

/// Registers every accounting export on the module.
pub(super) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(default_orders, m)?)?;
    m.add_function(wrap_pyfunction!(rdp_gaussian, m)?)?;
    m.add_function(wrap_pyfunction!(rdp_poisson, m)?)?;
    m.add_function(wrap_pyfunction!(rdp_without_replacement, m)?)?;
    m.add_function(wrap_pyfunction!(rdp_poisson_replace_one, m)?)?;
    m.add_function(wrap_pyfunction!(rdp_public_batch, m)?)?;
    m.add_function(wrap_pyfunction!(rdp_curve, m)?)?;
    m.add_function(wrap_pyfunction!(rdp_composed, m)?)?;
    m.add_function(wrap_pyfunction!(epsilon_from_rdp, m)?)?;
    m.add_function(wrap_pyfunction!(delta_from_rdp, m)?)?;
    m.add_function(wrap_pyfunction!(epsilon_for, m)?)?;
    m.add_function(wrap_pyfunction!(delta_for, m)?)?;
    m.add_function(wrap_pyfunction!(noise_multiplier_for, m)?)?;
    m.add_function(wrap_pyfunction!(gaussian_delta, m)?)?;
    m.add_function(wrap_pyfunction!(gaussian_epsilon, m)?)?;
    m.add_function(wrap_pyfunction!(gaussian_mu, m)?)?;
    m.add_function(wrap_pyfunction!(gdp_compose, m)?)?;
    m.add_function(wrap_pyfunction!(shuffle_rounds_per_epoch, m)?)?;
    m.add_function(wrap_pyfunction!(shuffle_releases, m)?)?;
    m.add_function(wrap_pyfunction!(exact_epsilon_for, m)?)?;
    m.add_function(wrap_pyfunction!(exact_delta_for, m)?)?;
    m.add_function(wrap_pyfunction!(exact_noise_multiplier_for, m)?)?;
    m.add_function(wrap_pyfunction!(mixture_delta, m)?)?;
    m.add_function(wrap_pyfunction!(mixture_epsilon, m)?)?;
    m.add_function(wrap_pyfunction!(ledger_epsilons, m)?)?;
    m.add_function(wrap_pyfunction!(pld_epsilon_for, m)?)?;
    m.add_function(wrap_pyfunction!(pld_delta_for, m)?)?;
    m.add_function(wrap_pyfunction!(pld_noise_multiplier_for, m)?)?;
    m.add("PLD_GRID", acc::PLD_GRID)?;
    m.add("PLD_LEDGER_GRID", acc::PLD_LEDGER_GRID)?;
    m.add_function(wrap_pyfunction!(ledger_admits, m)?)?;
    m.add_function(wrap_pyfunction!(ledgers_admit, m)?)?;
    m.add_function(wrap_pyfunction!(ledger_noise_multiplier_after, m)?)?;
    m.add("CALIBRATION_TOL", acc::CALIBRATION_TOL)?;
    m.add("Z_MIN", acc::Z_MIN)?;
    m.add("Z_MAX", acc::Z_MAX)?;
    Ok(())
}

/// δ(ε; μ) of a μ-GDP mechanism (Balle, Wang 2018).
#[pyfunction]
pub(super) fn gaussian_delta(epsilon: f64, mu: f64) -> PyResult<f64> {
    Ok(acc::gaussian_delta(epsilon, mu)?)
}

/// Smallest ε at which a μ-GDP mechanism is (ε, δ)-DP.
#[pyfunction]
pub(super) fn gaussian_epsilon(delta: f64, mu: f64) -> PyResult<f64> {
    Ok(acc::gaussian_epsilon(delta, mu)?)
}

/// Largest μ such that μ-GDP implies (ε, δ)-DP.
#[pyfunction]
pub(super) fn gaussian_mu(epsilon: f64, delta: f64) -> PyResult<f64> {
    Ok(acc::gaussian_mu(epsilon, delta)?)
}

/// μ of composed μ_i-GDP mechanisms, sqrt(Σ μ_i²).
#[pyfunction]
pub(super) fn gdp_compose(mus: Vec<f64>) -> PyResult<f64> {
    Ok(acc::gdp_compose(&mus)?)
}

/// Rounds per epoch b = ceil(1/q) of shuffled epochs (rounded so that b is never too large).
#[pyfunction]
pub(super) fn shuffle_rounds_per_epoch(sample_rate: f64) -> PyResult<u64> {
    if !(sample_rate.is_finite() && sample_rate > 0.0 && sample_rate <= 1.0) {
        return Err(acc::AccountingError::SampleRate(sample_rate).into());
    }
    Ok(acc::shuffle_rounds_per_epoch(sample_rate))
}

/// Gaussian releases per record of `steps` shuffled rounds from an epoch's start, ceil(steps/b).
#[pyfunction]
pub(super) fn shuffle_releases(sample_rate: f64, steps: u64) -> PyResult<u64> {
    shuffle_rounds_per_epoch(sample_rate)?;
    Ok(acc::shuffle_releases(sample_rate, steps))
}

/// Exact ε (full batch, shuffle, public-batch binomial mixture).
#[pyfunction]
pub(super) fn exact_epsilon_for(
    py: Python<'_>,
    noise_multiplier: f64,
    sample_rate: f64,
    steps: u64,
    delta: f64,
    sampling: &str,
) -> PyResult<f64> {
    let s = Scheme::parse(sampling)?;
    Ok(py.allow_threads(|| acc::exact_epsilon_for(noise_multiplier, sample_rate, steps, delta, s))?)
}

/// Exact δ at ε (full batch, shuffle, public-batch binomial mixture).
#[pyfunction]
pub(super) fn exact_delta_for(
    noise_multiplier: f64,
    sample_rate: f64,
    steps: u64,
    epsilon: f64,
    sampling: &str,
) -> PyResult<f64> {
    let s = Scheme::parse(sampling)?;
    Ok(acc::exact_delta_for(noise_multiplier, sample_rate, steps, epsilon, s)?)
}

/// Smallest noise multiplier meeting (ε, δ) under the exact accountant.
#[pyfunction]
pub(super) fn exact_noise_multiplier_for(
    py: Python<'_>,
    epsilon: f64,
    delta: f64,
    sample_rate: f64,
    steps: u64,
    sampling: &str,
) -> PyResult<f64> {
    let s = Scheme::parse(sampling)?;
    Ok(py.allow_threads(|| acc::exact_noise_multiplier_for(epsilon, delta, sample_rate, steps, s))?)
}

fn mixture(fixed_mu2: f64, binomials: Vec<(u64, f64, f64)>) -> Mixture {
    Mixture { fixed_mu2, binomials: binomials.into_iter().map(|(trials, q, z)| Binomial { trials, q, z }).collect() }
}

/// δ(ε) of μ² = fixed_mu2 + Σ_j K_j / z_j², K_j ~ Bin(trials_j, q_j); binomials as (trials, q, z).
#[pyfunction]
pub(super) fn mixture_delta(epsilon: f64, fixed_mu2: f64, binomials: Vec<(u64, f64, f64)>) -> PyResult<f64> {
    Ok(acc::mixture_delta(epsilon, &mixture(fixed_mu2, binomials))?)
}

/// Smallest ε at δ of the same mixture.
#[pyfunction]
pub(super) fn mixture_epsilon(py: Python<'_>, delta: f64, fixed_mu2: f64, binomials: Vec<(u64, f64, f64)>) -> PyResult<f64> {
    let m = mixture(fixed_mu2, binomials);
    Ok(py.allow_threads(|| acc::mixture_epsilon(delta, &m))?)
}

fn held(items: Mechanisms) -> acc::Result<Vec<Held>> {
    items
        .into_iter()
        .map(|(s, q, z, count)| Ok(Held { scheme: Scheme::parse(&s)?, q, z, count }))
        .collect()
}

/// (ε by RDP, ε by the exact account or inf, ε by the PLD currency or inf) of a ledger's
/// mechanisms (sampling, q, z, count); count = steps, or Gaussian releases (epochs touched) for
/// "shuffle". The PLD is computed only when some mechanism hides its batch.
#[pyfunction]
pub(super) fn ledger_epsilons(py: Python<'_>, mechanisms: Mechanisms, delta: f64) -> PyResult<(f64, f64, f64)> {
    let h = held(mechanisms)?;
    Ok(py.allow_threads(|| -> acc::Result<(f64, f64, f64)> {
        Ok((acc::ledger_rdp_epsilon(&h, delta)?, acc::ledger_exact_epsilon(&h, delta)?,
            acc::ledger_pld_epsilon(&h, delta)?))
    })?)
}

/// Whether a ledger's mechanisms are (budget, δ)-DP by RDP or by the exact account.
#[pyfunction]
pub(super) fn ledger_admits(mechanisms: Mechanisms, delta: f64, budget: f64) -> PyResult<bool> {
    Ok(acc::ledger_admits(&held(mechanisms)?, delta, budget)?)
}

/// [`ledger_admits`] for many ledgers in one call: `entries[i] = (mechanisms, δ, budget)`.
#[pyfunction]
pub(super) fn ledgers_admit(py: Python<'_>, entries: Vec<(Mechanisms, f64, f64)>) -> PyResult<Vec<bool>> {
    let e = entries
        .into_iter()
        .map(|(items, delta, budget)| Ok((held(items)?, delta, budget)))
        .collect::<acc::Result<Vec<_>>>()?;
    Ok(py.allow_threads(|| acc::ledgers_admit(&e))?)
}

/// Smallest z (to 0.5%) such that a ledger's mechanisms plus `steps` rounds of `sampling` at
/// `sample_rate` and z meet ε at δ; `accountant` "best" (min of RDP and exact), "rdp", or "pld"
/// (the PLD currency, hidden-batch schemes only; `ledger_pld_noise_multiplier_after`). `None`
/// when no z up to `AFTER_Z_MAX` does.
#[pyfunction]
#[pyo3(signature = (mechanisms, delta, epsilon, sampling, sample_rate, steps, accountant="best"))]
// One parameter per argument of the Python signature above: positional arguments, or the
// settings of a constructor or kernel entry point, which stay in the signature Python shows
// (help, inspect). The per-round bindings read their keywords into structs (kwargs.rs).
#[allow(clippy::too_many_arguments)]
pub(super) fn ledger_noise_multiplier_after(
    py: Python<'_>,
    mechanisms: Mechanisms,
    delta: f64,
    epsilon: f64,
    sampling: &str,
    sample_rate: f64,
    steps: u64,
    accountant: &str,
) -> PyResult<Option<f64>> {
    let h = held(mechanisms)?;
    let s = Scheme::parse(sampling)?;
    let exact = match accountant {
        "best" => true,
        "rdp" => false,
        "pld" => {
            return Ok(py.allow_threads(|| {
                acc::ledger_pld_noise_multiplier_after(&h, delta, epsilon, s, sample_rate, steps)
            })?)
        }
        other => return Err(value_error(format!("accountant: must be 'best', 'rdp' or 'pld'; got {other:?}"))),
    };
    Ok(py.allow_threads(|| acc::ledger_noise_multiplier_after(&h, delta, epsilon, s, sample_rate, steps, exact))?)
}

/// ε of a hidden-batch scheme by the PLD accountant (connect-the-dots, FFT composition).
#[pyfunction]
pub(super) fn pld_epsilon_for(
    py: Python<'_>,
    noise_multiplier: f64,
    sample_rate: f64,
    steps: u64,
    delta: f64,
    sampling: &str,
) -> PyResult<f64> {
    let s = Scheme::parse(sampling)?;
    Ok(py.allow_threads(|| acc::pld_epsilon_for(noise_multiplier, sample_rate, steps, delta, s))?)
}

/// δ at ε of a hidden-batch scheme by the PLD accountant.
#[pyfunction]
pub(super) fn pld_delta_for(
    py: Python<'_>,
    noise_multiplier: f64,
    sample_rate: f64,
    steps: u64,
    epsilon: f64,
    sampling: &str,
) -> PyResult<f64> {
    let s = Scheme::parse(sampling)?;
    Ok(py.allow_threads(|| acc::pld_delta_for(noise_multiplier, sample_rate, steps, epsilon, s))?)
}

/// Smallest noise multiplier the PLD accountant certifies for (ε, δ) (slow: FFT per evaluation).
#[pyfunction]
pub(super) fn pld_noise_multiplier_for(
    py: Python<'_>,
    epsilon: f64,
    delta: f64,
    sample_rate: f64,
    steps: u64,
    sampling: &str,
) -> PyResult<f64> {
    let s = Scheme::parse(sampling)?;
    Ok(py.allow_threads(|| acc::pld_noise_multiplier_for(epsilon, delta, sample_rate, steps, s))?)
}
